"""An installed wheel (not the checkout) still finds its recipes and schemas."""

import json
import os
import subprocess
import sys

from conftest import ROOT


def test_wheel_install_outside_repo(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", str(wheels), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    [wheel] = list(wheels.glob("ftrecipes-*.whl"))
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target", str(site), str(wheel)],
        check=True, capture_output=True, text=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([str(site / "bin" / "render"), "qwen7b-lora-h100x8"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["zero_optimization"]["stage"] == 3
    expected = (ROOT / "recipes" / "qwen7b-lora-h100x8" / "rendered" / "ds.json").read_text()
    assert proc.stdout == expected
    proc = subprocess.run([str(site / "bin" / "ftrecipes"), "list", "--json"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = {i["name"] for i in json.loads(proc.stdout)}
    assert names == {p.name for p in (ROOT / "recipes").iterdir() if (p / "recipe.yaml").is_file()}
    check = "import ftrecipes.paths as p; print(p.recipes_dir())"
    proc = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert str(site) in proc.stdout
