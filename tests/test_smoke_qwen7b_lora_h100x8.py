"""Smoke: TRL GRPO + LoRA under ZeRO-3, launched with the recipe's accelerate command.

Overrides (recipe.yaml `smoke:`): tiny local model and prompts, gpus_per_node=3 with
vllm_gpus=1 (two training processes), short sequences, 3 steps; CPU necessities:
use_cpu, use_vllm=false (no vLLM server on CPU; generation runs in the trainer),
sdpa attention, a tiny length reward instead of the math rewards.
"""

import json

import pytest

from ftrecipes import shellcmd
from smoke_harness import assert_engine, dataset_dir, free_port, launch, make_assets, read_probe, render_into

pytestmark = pytest.mark.smoke
NAME = "qwen7b-lora-h100x8"

REWARD = '''
def length_reward(completions, **kwargs):
    """Tiny deterministic reward: longer completions score higher."""
    return [min(len(str(c)), 64) / 64.0 for c in completions]
'''


def test_grpo_lora_zero3_trains(tmp_path):
    assets = make_assets("trl", tmp_path / "assets")
    data = dataset_dir(assets, "prompts", tmp_path)
    run = tmp_path / "run"
    sets = [
        f"model={assets['model']}", f"dataset={data}", "gpus_per_node=3", "vllm_gpus=1",
        "seq_len=64", "max_completion_length=16", "max_steps=3", "logging_steps=1",
        f"output_dir={tmp_path / 'out'}", f"master_port={free_port()}",
    ]
    render_into(NAME, sets, run)
    (run / "tiny_reward.py").write_text(REWARD)
    [train] = [c for c in shellcmd.commands((run / "launch.sh").read_text()) if c.words[:2] == ["accelerate", "launch"]]
    argv = train.words + [
        "--use_cpu", "true", "--use_vllm", "false", "--attn_implementation", "sdpa",
        "--reward_funcs", "tiny_reward.length_reward", "--save_strategy", "no",
    ]
    launch("trl", argv, cwd=run, probe_dir=tmp_path / "probe", label=NAME, extra_env={"FTRECIPES_CPU_DS_COMM": "1"})
    ds = json.loads((run / "ds.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3 and ds["bf16"]["enabled"]
    records = assert_engine(read_probe(tmp_path / "probe"), ds, world_size=2, lora=True, gradient_checkpointing=True)
    # The memory model's adapters_in_fp32 counts bf16 adapters under DeepSpeed. Under ZeRO-3 the
    # engine does not cast a model built under zero.Init (engine._configure_distributed_model), so
    # that holds here only because TRL's GRPOTrainer passes autocast_adapter_dtype=False to
    # get_peft_model for ZeRO-3 (trl/trainer/grpo_trainer.py, trl#6089, DeepSpeed#8072).
    for recs in records.values():
        e = next(r for r in recs if r["event"] == "engine")
        assert e["trainable_dtypes"] == ["torch.bfloat16"], e
