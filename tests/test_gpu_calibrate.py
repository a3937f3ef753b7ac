"""bench/gpu_calibrate.py's CPU self-test: the code that calibrates the memory model on a GPU
(model build from a config, DeepSpeed ZeRO-2/ZeRO-3 + offload and PEFT LoRA/DPO steps, a
Trainer-like fp16 autocast step with a GradScaler and reentrant checkpointing, the per-phase
meter, the estimate beside it, the report) runs end to end on a tiny Llama config.
It proves the plumbing, not the memory figures (those need a GPU: see the script's docstring)."""

import subprocess

import pytest

from conftest import ROOT
from ftrecipes import devenv

pytestmark = pytest.mark.framework


def test_gpu_calibration_self_test_runs_every_engine_on_cpu():
    if not devenv.is_complete("trl"):
        pytest.skip("the trl stack venv is not built (python -m ftrecipes.devenv ensure trl)")
    cases = "pm4-zero2,zero3-offload,dpo-lora-r16,qlora-r16,llamafactory-4026-rank"
    proc = subprocess.run(
        [str(devenv.env_python("trl")), str(ROOT / "bench" / "gpu_calibrate.py"), "--self-test", "--cases", cases],
        env=devenv.run_env("trl"), capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("pm4-zero2", "zero3-offload", "dpo-lora-r16", "llamafactory-4026-rank"):
        # every phase of both steps was measured, then the estimate's verdict printed
        rows = [line for line in proc.stdout.splitlines() if line.startswith(f"| {name} |")]
        assert {r.split("|")[2].strip() for r in rows} >= {"setup", "forward", "backward", "step", "step (step 2)"}
        assert any("estimate: fits" in r for r in rows)
    assert "| qlora-r16 | - | skipped: " in proc.stdout  # bitsandbytes 4-bit runs on a GPU only
