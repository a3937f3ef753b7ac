"""The estimate's short-lived bytes of a ZeRO-3 step against DeepSpeed's own allocations, on CPU.

    python bench/zero3_cpu_bytes.py > bench/zero3_cpu_bytes.md

tests/frameworks/zero3_step_bytes.py runs real DeepSpeed ZeRO-3 steps on CPU ranks (the
llamafactory stack: DeepSpeed 0.19.8, transformers 5.6) and reports, per phase, the bytes
allocated beyond the resident tensors. `ftrecipes estimate --config` reads the same files (a
LLaMA-Factory YAML, LLaMA-Factory's ds_z3_config.json with its 1e9 limits scaled to this model,
the model's config.json) and splits each phase into resident categories (parameters, gradients,
master weights, optimizer states) and short-lived ones (activations, temporaries); this prints
the short-lived part next to what DeepSpeed allocated.

The model is a Qwen2 with Qwen2.5-7B's widths, vocabulary and sequence length divided by K and
LAYERS decoder layers: the proportions of a 7B step, small enough for a CPU. Nothing of the CUDA
caching allocator (reserve, fragmentation, side streams), NCCL or the CUDA context is in
either figure; the CPU accelerator runs DeepSpeed without side streams.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the tool (catalog) and the tests' harness (its torchrun runner), once
for _path in (ROOT / "tools", ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
K = 16            # Qwen2.5-7B's widths, vocabulary and sequence divided by this
LAYERS = 8
SEQ = 2048 // K
REAL_PARAMS = 7_615_616_512
STACK = "llamafactory"
TRANSFORMERS = "5.6.0"   # the llamafactory stack's release (its tests check DeepSpeed 0.19.8)
# (LoRA rank, reentrant checkpointing, ranks): DeepSpeed 0.19.8 holds the frozen layers through a
# reentrant backward; non-reentrant releases each layer's; full fine-tuning adds gradient
# buckets, the reduce-scatter and the optimizer step; one rank gathers nothing (each partition
# is the whole parameter, used in place)
CASES = [(1, True, 2), (1, False, 2), (0, True, 2), (0, True, 1)]


def write_inputs(tmp: Path, lora_rank: int, reentrant: bool) -> tuple[Path, Path, Path]:
    """config.json, ds.json and a LLaMA-Factory YAML naming both, in tmp."""
    from ftrecipes.memory import catalog

    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584 // K,
              "intermediate_size": 18944 // K, "num_hidden_layers": LAYERS, "num_attention_heads": 28,
              "num_key_value_heads": 4, "vocab_size": 152064 // K, "tie_word_embeddings": False,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16"}
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    total = catalog.model(str(model / "config.json")).param_count()
    # LLaMA-Factory's examples/deepspeed/ds_z3_config.json; its 1e9 live / reuse limits scaled by
    # this model's size, so the release policy sees a 7B model's proportions
    limit = int(1e9 * total / REAL_PARAMS)
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "zero_allow_untested_optimizer": True, "bf16": {"enabled": "auto"},
          "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
                                "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": limit,
                                "stage3_max_reuse_distance": limit}}
    (tmp / "ds.json").write_text(json.dumps(ds))
    method = f"finetuning_type: lora\nlora_target: all\nlora_rank: {lora_rank}\nlora_dropout: 0.05\n" if lora_rank \
        else "finetuning_type: full\n"
    lf = tmp / "train.yaml"
    lf.write_text(f"stage: sft\ndo_train: true\nmodel_name_or_path: {model}\n{method}deepspeed: {tmp / 'ds.json'}\n"
                  f"cutoff_len: {SEQ}\nper_device_train_batch_size: 1\nbf16: true\noptim: adamw_torch\n"
                  f"use_reentrant_gc: {'true' if reentrant else 'false'}\n")
    return model, tmp / "ds.json", lf


def estimated(lf: Path, model: Path, deepspeed: str, ranks: int) -> dict:
    """Short-lived bytes per phase from `ftrecipes estimate --config ... --json`; torch's
    foreach AdamW, which the framework script steps with."""
    argv = [sys.executable, "-m", "ftrecipes", "estimate", "--config", str(lf), "--model", str(model / "config.json"),
            "--gpu", "A100-80GB", "--gpus", str(ranks), "--framework-version", f"deepspeed={deepspeed}",
            "--set", f"transformers_version={TRANSFORMERS}", "--set", "adam_impl=foreach", "--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    return {ph["name"]: ph["by_category"].get("activations", 0) + ph["by_category"].get("temporaries", 0)
            for ph in json.loads(out)["phases"]}


def measured(tmp: Path, model: Path, ds: Path, lora_rank: int, reentrant: bool, ranks: int) -> dict:
    """The framework script's JSON line, run in the stack's venv."""
    from smoke_harness import torchrun

    args = ["--model", str(model), "--ds", str(ds), "--seq", str(SEQ), "--lora-rank", str(lora_rank),
            "--reentrant", str(int(reentrant))]
    proc = torchrun(STACK, "zero3_step_bytes.py", args, tmp, nproc=ranks, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    [run] = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return run


def compare(lora_rank: int, reentrant: bool, ranks: int) -> tuple[dict, dict]:
    """(measured run, estimated short-lived bytes per phase) for one case."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model, ds, lf = write_inputs(tmp, lora_rank, reentrant)
        run = measured(tmp, model, ds, lora_rank, reentrant, ranks)
        return run, estimated(lf, model, run["deepspeed"], ranks)


def main() -> int:
    MiB = 2 ** 20
    print("# ZeRO-3 step bytes: the estimate against DeepSpeed's own allocations on CPU\n")
    print("Output of `python bench/zero3_cpu_bytes.py` (checked by tests/test_memory_zero3_step_bytes.py, 5 %).\n")
    print(__doc__.split("\n\n", 2)[2].strip())
    print(f"\nK = {K}, {LAYERS} layers, {SEQ} tokens. MiB on rank 0; error = (estimate - measured) / measured.\n")
    print("| case | phase | DeepSpeed allocated | estimate | error |\n|---|---|---:|---:|---:|")
    for lora_rank, reentrant, ranks in CASES:
        run, est = compare(lora_rank, reentrant, ranks)
        name = (f"LoRA r{lora_rank}" if lora_rank else "full") + (", reentrant" if reentrant else ", non-reentrant") \
            + f", {ranks} rank{'s' if ranks > 1 else ''}"
        for phase in ("forward", "backward", "step"):
            m = run["phases"][phase]
            print(f"| {name} (DeepSpeed {run['deepspeed']}) | {phase} | {m / MiB:.2f} | {est[phase] / MiB:.2f} | "
                  f"{(est[phase] - m) / m * 100:+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
