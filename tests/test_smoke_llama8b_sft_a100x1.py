"""Smoke: OpenRLHF full SFT, ZeRO-2 + Adam offload in bf16, launched with the recipe's deepspeed command.

Overrides (recipe.yaml `smoke:`): a tiny Llama-shaped model with random weights, a local JSON
lines file with the question/response fields launch.sh names (8 rows: 4 optimizer steps per
rank at global batch 2), gpus_per_node=2 (two CPU processes), seq_len=128, grad_accum=1, a free
master port and a temporary output_dir. CPU necessities: `--ds.attn_implementation sdpa`
appended (argparse keeps the last value; flash-attention has no CPU kernels), DS_ACCELERATOR=cpu
and FTRECIPES_CPU_SHIM=1 (tests/shims/openrlhf: CUDA-only calls of OpenRLHF's strategy
redirected to CPU, a stand-in flash_attn_2_cuda). ZeRO stage, adam_offload, bf16 and gradient
checkpointing render as shipped and are asserted from the running engine.
"""

import json

import pytest

from ftrecipes import shellcmd
from smoke_harness import assert_engine, free_port, launch, make_assets, read_probe, render_into

pytestmark = pytest.mark.smoke
NAME = "llama8b-sft-a100x1"
ROWS = 8  # 8 samples / (micro 1 x 2 ranks) = 4 optimizer steps


def _question_response(sft_jsonl, out, rows):
    """tiny.py's SFT rows ({"messages": [user, assistant]}) as the OpenOrca-style keys launch.sh reads."""
    lines = []
    for line in open(sft_jsonl, encoding="utf-8").read().splitlines()[:rows]:
        user, assistant = json.loads(line)["messages"]
        lines.append(json.dumps({"question": user["content"], "response": assistant["content"]}))
    out.write_text("\n".join(lines) + "\n")
    return out


def train_rendered_sft(name, tmp_path, rows, seq_len):
    """Render recipe `name` for 2 CPU processes and a tiny Llama, run its deepspeed launch line
    (OpenRLHF train_sft) with sdpa attention, and return (launch words, ds.json, probe records
    checked by assert_engine). Shared by the OpenRLHF recipes' smoke tests."""
    assets = make_assets("openrlhf", tmp_path / "assets", arch="llama")
    data = _question_response(assets["sft"], tmp_path / "sft_qr.jsonl", rows)
    run = tmp_path / "run"
    sets = [
        f"model={assets['model']}", f"dataset={data}", "gpus_per_node=2", "grad_accum=1", f"seq_len={seq_len}",
        f"output_dir={tmp_path / 'out'}", f"master_port={free_port()}",
    ]
    render_into(name, sets, run)
    [train] = [c for c in shellcmd.commands((run / "launch.sh").read_text()) if c.words[:1] == ["deepspeed"]]
    assert "--module" in train.words and "openrlhf.cli.train_sft" in train.words
    argv = train.words + ["--ds.attn_implementation", "sdpa"]
    launch("openrlhf", argv, cwd=run, probe_dir=tmp_path / "probe", label=name,
           extra_env={"FTRECIPES_CPU_SHIM": "1"})
    ds = json.loads((run / "ds.json").read_text())
    records = assert_engine(read_probe(tmp_path / "probe"), ds, world_size=2, lora=False, gradient_checkpointing=True)
    for recs in records.values():
        [engine] = [r for r in recs if r["event"] == "engine"][:1]
        assert engine["param_dtype"] == "torch.bfloat16", engine
        assert (engine["micro_batch"], engine["grad_accum"], engine["train_batch"]) == (1, 1, 2), engine
        assert engine["module_class"].endswith("ForCausalLM"), engine
    return train.words, ds, records


def test_openrlhf_sft_zero2_adam_offload_trains(tmp_path):
    _words, ds, _records = train_rendered_sft(NAME, tmp_path, ROWS, 128)
    # What the recipe ships, unchanged by the smoke overrides.
    assert ds["zero_optimization"]["stage"] == 2 and ds["bf16"]["enabled"]
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
