"""ftrecipes.devenv without building anything (no torch needed)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftrecipes import devenv

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("stack", devenv.STACKS)
def test_requirements_fully_pinned(stack):
    lines = [ln.strip() for ln in devenv.requirements_path(stack).read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines
    for ln in lines:
        assert "==" in ln and not any(c in ln for c in "<>~; "), ln
    names = [ln.split("==")[0].lower().replace("_", "-") for ln in lines]
    assert len(names) == len(set(names))
    assert "torch==2.13.0" in lines
    assert "torchvision" not in names


def test_env_dir_and_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("FTRECIPES_ENVS", str(tmp_path))
    for s in devenv.STACKS:
        d = devenv.env_dir(s)
        assert d.parent == tmp_path and d.name == f"{s}-{devenv.env_hash(s)}"
        assert devenv.env_python(s) == d / "bin" / "python"
        assert not devenv.is_complete(s)
    assert len({devenv.env_hash(s) for s in devenv.STACKS}) == 3
    with pytest.raises(ValueError):
        devenv.env_dir("nope")


def test_run_env(tmp_path, monkeypatch):
    monkeypatch.setenv("FTRECIPES_ENVS", str(tmp_path))
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/x"}
    env = devenv.run_env("trl", base=base)
    assert env["PATH"].split(os.pathsep)[0] == str(devenv.env_dir("trl") / "bin")
    assert env["TORCH_EXTENSIONS_DIR"] == str(devenv.env_dir("trl") / "torch_extensions")
    assert env["DS_ACCELERATOR"] == "cpu"
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        assert env[k] == "1"
    assert "FTRECIPES_CPU_SHIM" not in env and env["PYTHONPATH"] == "/x"
    # an older release JIT-builds its ops apart from the stack's (torch names the folder by op only)
    release = devenv.release_dir("llamafactory", "0.16.7", package="deepspeed")
    renv = devenv.run_env("llamafactory", base=base, release=release)
    assert renv["TORCH_EXTENSIONS_DIR"] == str(release / "torch_extensions")
    assert renv["PYTHONPATH"].split(os.pathsep)[0] == str(release)
    orl = devenv.run_env("openrlhf", base=base)
    shim = str(REPO / "tests" / "shims" / "openrlhf")
    assert orl["PYTHONPATH"].split(os.pathsep) == [shim, "/x"]
    assert orl["FTRECIPES_CPU_SHIM"] == "1"
    assert (Path(shim) / "flash_attn_2_cuda.py").is_file()
    assert "FTRECIPES_CPU_SHIM" not in devenv.run_env("openrlhf", base=base, cpu_shim=False)


def test_cli_path_does_not_install(tmp_path):
    env = dict(os.environ, FTRECIPES_ENVS=str(tmp_path), PYTHONPATH=str(REPO / "tools"))
    r = subprocess.run([sys.executable, "-m", "ftrecipes.devenv", "path", "trl"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1  # not built
    assert r.stdout.strip().startswith(str(tmp_path / "trl-"))
    assert not any(tmp_path.iterdir())


def test_sitecustomize_inert_without_flag(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FTRECIPES_CPU_SHIM"}
    env["PYTHONPATH"] = str(REPO / "tests" / "shims" / "openrlhf")
    code = "import sys; print(any(type(f).__name__ == '_PatchOnOpenRLHFImport' for f in sys.meta_path))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
    env["FTRECIPES_CPU_SHIM"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("stack", devenv.STACKS)
def test_deepspeed_comes_from_its_own_step(stack):
    """The main pip run leaves DeepSpeed out; the wheel step installs the stack's pin."""
    pin = devenv._deepspeed_pin(stack)
    assert pin.startswith("deepspeed==") and pin in devenv.requirements_path(stack).read_text().splitlines()
