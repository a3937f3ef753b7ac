import functools
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


def run_subprocess(args, env=None, **kw):
    env = dict(env if env is not None else os.environ)
    env["PYTHONPATH"] = str(ROOT / "tools") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, **kw)


def pytest_addoption(parser):
    parser.addoption("--recipe", action="append", default=[], help="only tests of this recipe (repeatable)")


def pytest_collection_modifyitems(config, items):
    wanted = config.getoption("--recipe")
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        module_recipe = getattr(item.module, "NAME", None)
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec else ()
        hit = module_recipe in wanted or any(p in wanted for p in params if isinstance(p, str))
        (keep if hit else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is in the test extra; without it tests run one at a time
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:

    class _StacksApart(LoadScopeScheduling):
        """How tools/run-tests (`-n 2 --dist loadscope`) shares the tests between two workers.

        Every module that runs a framework stack (a smoke or framework test) goes to one group,
        which one worker runs one test at a time, as a serial run would: a smoke training already
        keeps both cores busy with its two processes, and two at once would each take twice as
        long. Every other module is a group of its own, so a module-scoped fixture (the
        hostile-input slice, the corpus) is built once, not once per worker. (xdist's own
        `loadgroup` marks do not reach the test ids under pytest 9.)
        """

        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return "framework-stacks" if _runs_a_stack(module) else module

    class _Scheduler:
        def pytest_xdist_make_scheduler(self, config, log):
            if config.getvalue("dist") == "loadscope":
                return _StacksApart(config, log)
            return None


def pytest_configure(config):
    # Only where xdist runs (`-p no:xdist` leaves its hooks unknown to pytest).
    if LoadScopeScheduling is not None and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Scheduler(), "ftrecipes-scheduler")


@functools.lru_cache(maxsize=None)
def _runs_a_stack(module):
    # The scheduler sees test ids, not marks: a module that marks any test smoke or framework.
    try:
        text = (ROOT / module).read_text()
    except OSError:
        return False
    return "pytest.mark.smoke" in text or "pytest.mark.framework" in text


_SESSION_START = []


def pytest_sessionstart(session):
    import time

    _SESSION_START.append(time.time())


def pytest_terminal_summary(terminalreporter):
    """Smoke wall times and the run's total, printed before pytest's closing line."""
    import json
    import time

    path = ROOT / ".smoke-timings.jsonl"
    started = os.environ.get("FTRECIPES_RUN_STARTED")
    if not path.is_file() and not started:
        return
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.is_file() else []
    rows = [r for r in rows if r.get("at", 0) >= _SESSION_START[0] - 1]
    if not rows and not started:
        return
    tr = terminalreporter
    tr.section("timings")
    for r in rows:
        if "test" in r:
            tr.write_line(f"smoke {r['test']:32} {r['seconds']:7.1f} s  {'ok' if r['returncode'] == 0 else 'FAILED'}")
    if os.environ.get("FTRECIPES_SETUP_SECONDS"):
        tr.write_line(f"set-up (venvs, op builds)              {float(os.environ['FTRECIPES_SETUP_SECONDS']):7.1f} s")
    if started:
        tr.write_line(f"run total so far                       {time.time() - float(started):7.1f} s")
