"""estimate --config on axolotl configs: what configs.from_axolotl reads, checked against
axolotl's own defaults (src/axolotl/utils/schemas at 067b021c8: sequence_len 512, micro_batch_size
1, optimizer adamw_torch_fused, lora_dropout 0.0, bf16 "auto") and against the benchmark case taken
from axolotl PR #708 (bench/published_memory/cases.yaml), which states its settings by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.configs import read
from ftrecipes.memory.inputs import setup_from_deepspeed

# The settings of axolotl-ai-cloud/axolotl examples/mistral/qlora.yml (at 013495e, the file PR #708
# changed), trimmed to the keys the estimate reads, with the PR's micro batch of 4 before the fix.
MISTRAL_QLORA = """base_model: mistralai/Mistral-7B-v0.1
load_in_8bit: false
load_in_4bit: true
sequence_len: 8192
sample_packing: true
pad_to_sequence_len: true
adapter: qlora
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
gradient_accumulation_steps: 4
micro_batch_size: 4
optimizer: adamw_bnb_8bit
bf16: auto
gradient_checkpointing: true
flash_attention: true
"""


def _settings(path):
    """configs.read's Setup fields, less the hand-offs to the CLI (keys starting with _)."""
    ds, got = read([path])
    return ds, {k: v for k, v in got.items() if not k.startswith("_")}


def _write(tmp_path, text, name="axolotl.yml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_the_pr_708_example_reads_as_the_benchmark_case_states_it(tmp_path):
    _ds, got = _settings(_write(tmp_path, MISTRAL_QLORA))
    case = next(c for c in yaml.safe_load((ROOT / "bench/published_memory/cases.yaml").read_text())
                if c["id"] == "axolotl-708-mistral7b-qlora-packed8k-mb4-4090-oom")
    for key in ("seq_len", "micro_batch", "precision", "gradient_checkpointing", "attn_implementation",
                "quantization", "lora_rank", "lora_dropout", "lora_target", "optimizer", "method"):
        assert got[key] == case["setup"][key], key
    assert got["double_quant"] is True and got["load_dtype"] == "bf16" and got["trainer"] == "axolotl"
    on_4090 = dict(got, gpu="RTX-4090", gpus=1)
    assert estimate(Setup(**on_4090)).verdict == "oom"  # what the PR reports before its change
    assert estimate(Setup(**dict(on_4090, micro_batch=2))).verdict == "fits"  # and after it


def test_axolotls_defaults_where_the_file_is_silent(tmp_path):
    _ds, got = _settings(_write(tmp_path, "base_model: Qwen/Qwen2.5-7B\nadapter: lora\nlora_target_modules:\n"
                                           "  - q_proj\n  - v_proj\n"))
    assert (got["seq_len"], got["micro_batch"], got["lora_rank"], got["lora_dropout"]) == (512, 1, 8, 0.0)
    assert got["lora_target"] == "q_proj,v_proj" and got["gradient_checkpointing"] is False
    assert got["adam_impl"] == "fused" and got["precision"] == "bf16" and "quantization" not in got
    _ds, full = _settings(_write(tmp_path, "base_model: Qwen/Qwen2.5-7B\nfp16: true\nbf16: false\n", "full.yml"))
    assert full["precision"] == full["load_dtype"] == full["mixed_precision"] == "fp16" and "lora_rank" not in full


def test_fsdp_rl_and_offloaded_checkpointing(tmp_path):
    text = ("base_model: meta-llama/Llama-3.1-8B\nrl: dpo\ngradient_checkpointing: offload\nfsdp_version: 2\n"
            "fsdp_config:\n  offload_params: true\n  activation_checkpointing: true\n")
    _ds, got = _settings(_write(tmp_path, text))
    assert (got["framework"], got["fsdp_offload"], got["method"], got["trainer"]) == ("fsdp2", True, "dpo", "trl")
    assert got["gradient_checkpointing"] is True and got["checkpoint_offload"] is True


@pytest.mark.parametrize("line, key", [
    ("adapter: llama-adapter", "adapter"), ("rl: ebft", "rl"), ("tensor_parallel_size: 2", "tensor_parallel_size"),
    ("attn_implementation: flex_attention", "attn_implementation"), ("lora_dropout: 1.5\nadapter: lora", "lora_dropout"),
])
def test_what_the_model_cannot_express_names_file_line_and_key(tmp_path, line, key):
    path = _write(tmp_path, f"base_model: Qwen/Qwen2.5-7B\nsequence_len: 1024\n{line}\n")
    proc = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--config", path],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}:3:1: {key}:" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_inline_deepspeed_mapping_is_the_runs_deepspeed_config(tmp_path):
    """TrainingArguments.deepspeed and axolotl's `deepspeed` take a dict as well as a path: its ZeRO
    settings count, and a value DeepSpeed refuses is named with its dotted key and line."""
    base = "base_model: Qwen/Qwen2.5-7B\nadapter: lora\n"
    ds, got = _settings(_write(tmp_path, base + "deepspeed:\n  zero_optimization:\n    stage: 3\n"))
    assert ds["zero_optimization"]["stage"] == 3 and got["framework"] == "deepspeed"
    three = estimate(Setup(**dict(got, gpus=2, zero_stage=3)))
    assert estimate(setup_from_deepspeed(ds, **got, gpus=2)).gpu_card_bytes == three.gpu_card_bytes
    bad = _write(tmp_path, base + "deepspeed:\n  zero_optimization:\n    stage: 7\n", "bad.yml")
    proc = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--config", bad], capture_output=True, text=True)
    assert proc.returncode == 2 and f"{bad}:5:" in proc.stderr and "deepspeed.zero_optimization.stage" in proc.stderr


@pytest.mark.parametrize("line", ["micro_batch_size: 0", "sequence_len: -1", "lora_r: 4294967296"])
def test_counts_outside_what_a_run_can_have_are_refused(tmp_path, line):
    path = _write(tmp_path, f"base_model: Qwen/Qwen2.5-7B\nadapter: lora\n{line}\n")
    proc = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--config", path],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and f"{path}:3:1:" in proc.stderr and "from 1 to 2147483647" in proc.stderr


def test_bf16_auto_is_fp16_on_a_gpu_without_bf16(tmp_path):
    """axolotl's resolve_dtype (src/axolotl/utils/config/__init__.py at 067b021c8): bf16 "auto"
    becomes bf16 where torch finds bf16 support, else fp16 (weights loaded in fp16); an explicit
    --precision still decides."""
    path = _write(tmp_path, "base_model: Qwen/Qwen2.5-7B\nadapter: lora\n")

    def setup(*flags):
        proc = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--config", path, "--json", *flags],
                              capture_output=True, text=True)
        s = json.loads(proc.stdout)["setup"]
        return s["precision"], s["load_dtype"], s["mixed_precision"]
    assert setup("--gpu", "V100-32GB") == ("fp16", "fp16", "fp16")
    assert setup("--gpu", "H100") == ("bf16", "bf16", "bf16")
    assert setup("--gpu", "V100-32GB", "--precision", "fp32")[0] == "fp32"


def test_torchao_8bit_adamw_counts_as_8bit_adamw(tmp_path):
    """transformers' OptimizerNames.ADAMW_TORCH_8BIT is torchao's AdamW8bit: both moments in 8 bits
    with block scales, the states bitsandbytes' adamw_8bit keeps (axolotl examples name it)."""
    _ds, got = _settings(_write(tmp_path, "base_model: Qwen/Qwen2.5-7B\noptimizer: adamw_torch_8bit\n"))
    assert got["optimizer"] == "adamw_8bit"


def test_axolotls_trainer_runs_the_model_through_accelerates_mixed_precision():
    """AxolotlTrainer is a transformers Trainer, which prepares the model with accelerate: in bf16
    outside DeepSpeed its outputs are copied to fp32 like the other HF-Trainer-based trainers'."""
    from ftrecipes.memory.model_states import accelerate_native_amp

    kw = dict(model="Qwen2.5-7B", lora_rank=16, framework="ddp", precision="bf16")
    assert accelerate_native_amp(Setup(trainer="axolotl", **kw)) and not accelerate_native_amp(Setup(trainer="hf", **kw))
    assert not accelerate_native_amp(Setup(trainer="axolotl", **dict(kw, framework="deepspeed")))
