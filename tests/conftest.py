import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


@pytest.fixture
def run_cli(capsys):
    """Run `ftrecipes ARGS` in-process; return (exit code, stdout, stderr)."""
    from ftrecipes import cli

    def run(*args, prog="ftrecipes"):
        main = cli.main if prog == "ftrecipes" else cli.render_main
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_subprocess(args, **kw):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "tools") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, **kw)
