"""Smoke: QwenLM/Qwen finetune.py LoRA under ZeRO-2, launched by the recipe's own launch.sh (torchrun).

The rendered launch.sh runs as the README says (`QWEN_DIR=... bash launch.sh`), including its
low_cpu_mem_usage guard, with tests/frameworks/qwen_finetune.py as `finetune.py` (a stand-in
with the script's argument dataclasses and the fixed loading; see its docstring).

Overrides (recipe.yaml `smoke:`): tiny random model in a folder named "...chat..." (so no
embedding layers are trained), its Qwen2 names for the recipe's LoRA targets, generated
conversations, gpus_per_node=2, seq_len 64, max_steps 3, a free master port. CPU necessity:
`--use_cpu true` appended to the torchrun command by a `torchrun` wrapper first on PATH
(TrainingArguments refuses bf16 without a GPU). ZeRO-2, bf16, no offload, LoRA r/alpha/dropout,
gradient checkpointing, batch numbers and every other flag stay as rendered.

Why not QwenLM/Qwen's own finetune.py under a transformers 4.x venv (the recipe's
transformers_version=4.32.0 variant; its flags are checked by transformers 4.32.0's
HfArgumentParser in test_framework_truth.py): the script (QwenLM/Qwen finetune.py, commit
204c2c59f49cfa7461e8e02d5ad2f6b3d082f08c) sets `tokenizer.pad_token_id = tokenizer.eod_id` and
builds its labels from `tokenizer.im_start_id`/`im_end_id`, attributes of Qwen v1's own
tokenizer class (tokenization_qwen.py with its qwen.tiktoken vocabulary), which is remote code
published only with the model on the Hugging Face Hub, not in the GitHub repository; this
project builds models from configs and reaches no model hub. Running it unmodified would take a
tokenizer we write ourselves plus a second full training venv (transformers 4.32 with the
accelerate/peft of its time), so the stand-in stays and this variant is covered by the parser
check only.
"""

import json
import os
import shutil
import subprocess

import pytest

from ftrecipes import devenv
from truth_jobs import run_truth
from smoke_harness import FRAMEWORKS, assert_engine, free_port, launch, make_assets, read_probe, render_into

pytestmark = pytest.mark.smoke
NAME = "qwen7b-lora-zero2-a100x2"
# Qwen v1's c_attn (fused q/k/v), attn.c_proj, w1/w2 and mlp.c_proj are these modules in Qwen2.
STANDIN_LORA_TARGET = "q_proj,k_proj,v_proj,o_proj,up_proj,gate_proj,down_proj"


def torchrun_shim(bin_dir, real_torchrun, extra):
    """A `torchrun` that appends CPU-only training flags to the recipe's command (test only)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "torchrun"
    shim.write_text('#!/bin/sh\n# ftrecipes smoke test: the recipe command plus CPU necessities only.\n'
                    f'exec "{real_torchrun}" "$@" {" ".join(extra)}\n')
    shim.chmod(0o755)
    return bin_dir


def qwen_conversations(sft_jsonl, path):
    """finetune.py's data format: [{"id", "conversations": [{"from": "user"|"assistant", "value"}]}]."""
    rows = []
    for i, line in enumerate(open(sft_jsonl, encoding="utf-8")):
        msgs = json.loads(line)["messages"]
        rows.append({"id": f"tiny_{i}", "conversations": [{"from": m["role"], "value": m["content"]} for m in msgs]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def test_lora_zero2_trains_through_launch_sh(tmp_path):
    assets = make_assets("trl", tmp_path / "tiny-chat")
    assert "chat" in assets["model"].lower()
    data = qwen_conversations(assets["sft"], tmp_path / "data" / "train.json")
    run, out = tmp_path / "run", tmp_path / "out"
    sets = [
        f"model={assets['model']}", f"dataset={data}", "gpus_per_node=2", "seq_len=64", "max_steps=3",
        "logging_steps=1", f"lora_target={STANDIN_LORA_TARGET}", f"output_dir={out}", f"master_port={free_port()}",
    ]
    render_into(NAME, sets, run)
    shutil.copy(FRAMEWORKS / "qwen_finetune.py", run / "finetune.py")
    env = devenv.run_env("trl")
    shim = torchrun_shim(tmp_path / "bin", shutil.which("torchrun", path=env["PATH"]), ["--use_cpu", "true"])
    launch("trl", ["bash", str(run / "launch.sh")], cwd=tmp_path, probe_dir=tmp_path / "probe", label=NAME,
           extra_env={"QWEN_DIR": str(run), "PATH": f"{shim}:{env['PATH']}"})

    ds = json.loads((run / "ds.json").read_text())
    assert ds["zero_optimization"]["stage"] == 2 and ds["bf16"]["enabled"] and "offload_optimizer" not in ds["zero_optimization"]
    records = assert_engine(read_probe(tmp_path / "probe"), ds, world_size=2, lora=True, gradient_checkpointing=True)
    for recs in records.values():
        engine = next(r for r in recs if r["event"] == "engine")
        assert engine["basic_optimizer"] == "AdamW", engine  # finetune.py's adamw_torch: ds.json has no optimizer section
        assert engine["param_dtype"] == "torch.bfloat16", engine
        # ZeRO-2: the engine casts every parameter, PEFT's fp32 adapters included, to bf16 (the
        # memory model's adapters_in_fp32 is False under DeepSpeed)
        assert engine["trainable_dtypes"] == ["torch.bfloat16"], engine
    # The fixed loading ran: low_cpu_mem_usage (ZeRO-2), no device_map, bf16 weights.
    for rank in (0, 1):
        load = json.loads((out / f"load_rank{rank}.json").read_text())
        assert load == {"zero3": False, "low_cpu_mem_usage": True, "device_map": None,
                        "partitioned_at_load": False, "dtype": "torch.bfloat16"}, load
    assert (out / "adapter_model.safetensors").exists()  # LoRA weights saved as finetune.py does


def test_launch_sh_refuses_a_finetune_py_without_the_loading_fix(tmp_path):
    """The guard: a pre-#964 finetune.py (no low_cpu_mem_usage) never reaches torchrun."""
    run = tmp_path / "run"
    render_into(NAME, [], run)
    old = (FRAMEWORKS / "qwen_finetune.py").read_text().replace("low_cpu_mem_usage", "lcmu")
    (run / "finetune.py").write_text(old)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text("#!/bin/sh\necho torchrun reached >&2\nexit 99\n")
    (bin_dir / "torchrun").chmod(0o755)
    proc = subprocess.run(["bash", str(run / "launch.sh")], env={**os.environ, "QWEN_DIR": str(run), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "low_cpu_mem_usage" in proc.stderr and "torchrun reached" not in proc.stderr, proc.stderr


@pytest.mark.framework
def test_truth_check_rejects_bad_launch_flags(tmp_path):
    """The hf-script truth check can fail: unknown flag, a ds.json mismatch, a wrong process count."""
    from truth_jobs import jobs_for

    _, jobs = jobs_for(NAME, [], tmp_path / "render")
    [base] = [job for _, job in jobs if job["check"] == "hf-script"]
    nproc = base["argv"].index("--nproc_per_node") + 1
    cases = {
        "defaults": base["argv"],
        "Some specified arguments are not used": base["argv"] + ["--evaluation_strategy", "no"],
        "gradient_clipping=1.0 vs hf max_grad_norm=0.5": base["argv"] + ["--max_grad_norm", "0.5"],
        "torchrun starts 4 processes": base["argv"][:nproc] + ["4"] + base["argv"][nproc + 1:],
    }
    results = dict(zip(cases, run_truth("trl", [{**base, "argv": argv} for argv in cases.values()], tmp_path, timeout=600)))
    assert results.pop("defaults")["ok"]
    for expected, res in results.items():
        assert not res["ok"] and expected in res["error"], (expected, res)
