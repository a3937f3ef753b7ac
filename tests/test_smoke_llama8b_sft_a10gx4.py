"""Smoke: OpenRLHF full SFT, ZeRO-3 + Adam offload in bf16, launched with the recipe's deepspeed command.

Overrides (recipe.yaml `smoke:`): a tiny Llama-shaped model with random weights, a local JSON
lines file with the question/response fields launch.sh names (8 rows: 4 optimizer steps per
rank at global batch 2), gpus_per_node=2 (two CPU processes), seq_len=64, grad_accum=1, a free
master port and a temporary output_dir. CPU necessities: `--ds.attn_implementation sdpa`
appended (argparse keeps the last value; flash-attention has no CPU kernels), DS_ACCELERATOR=cpu
and FTRECIPES_CPU_SHIM=1 (tests/shims/openrlhf: CUDA-only calls of OpenRLHF's strategy
redirected to CPU, a stand-in flash_attn_2_cuda). ZeRO stage, adam_offload, bf16 and gradient
checkpointing render as shipped and are asserted from the running engine, including that
ZeRO-3 really split every parameter across the two processes (each holds about half), and did
so as the model loaded (zero.Init), before deepspeed.initialize.

Not exercised here: the A10G itself (GPU and pinned host memory, the out-of-memory of
OpenRLHF#597 and the fix: the memory model covers that), FlashAttention-2, NCCL over PCIe, and
the speed of DeepSpeedCPUAdam on 8B parameters.
"""

import json

import pytest

from ftrecipes import shellcmd
from smoke_harness import assert_engine, free_port, launch, make_assets, read_probe, render_into
from test_smoke_llama8b_sft_a100x1 import _question_response

pytestmark = pytest.mark.smoke
NAME = "llama8b-sft-a10gx4"
ROWS = 8  # 8 samples / (micro 1 x 2 ranks) = 4 optimizer steps


def test_openrlhf_sft_zero3_adam_offload_trains(tmp_path):
    assets = make_assets("openrlhf", tmp_path / "assets", arch="llama")
    data = _question_response(assets["sft"], tmp_path / "sft_qr.jsonl", ROWS)
    run = tmp_path / "run"
    sets = [
        f"model={assets['model']}", f"dataset={data}", "gpus_per_node=2", "grad_accum=1", "seq_len=64",
        f"output_dir={tmp_path / 'out'}", f"master_port={free_port()}",
    ]
    render_into(NAME, sets, run)
    [train] = [c for c in shellcmd.commands((run / "launch.sh").read_text()) if c.words[:1] == ["deepspeed"]]
    assert "--module" in train.words and "openrlhf.cli.train_sft" in train.words
    assert train.words[train.words.index("--ds.zero_stage") + 1] == "3" and "--ds.adam_offload" in train.words
    argv = train.words + ["--ds.attn_implementation", "sdpa"]
    launch("openrlhf", argv, cwd=run, probe_dir=tmp_path / "probe", label=NAME,
           extra_env={"FTRECIPES_CPU_SHIM": "1"})
    ds = json.loads((run / "ds.json").read_text())
    # What the recipe ships, unchanged by the smoke overrides.
    assert ds["zero_optimization"]["stage"] == 3 and ds["bf16"]["enabled"]
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert ds["zero_optimization"]["offload_param"] == {"device": "none"}
    records = assert_engine(read_probe(tmp_path / "probe"), ds, world_size=2, lora=False, gradient_checkpointing=True)
    for recs in records.values():
        [engine] = [r for r in recs if r["event"] == "engine"][:1]
        assert engine["param_dtype"] == "torch.bfloat16", engine
        assert (engine["micro_batch"], engine["grad_accum"], engine["train_batch"]) == (1, 1, 2), engine
        assert engine["module_class"].endswith("ForCausalLM"), engine
        # ZeRO-3 partitioned every parameter: each rank's shards add up to about half the model
        # (DeepSpeed pads each shard to a multiple of the world size).
        assert engine["zero3_params"] == engine["trainable_params"] > 0, engine
        full, local = engine["zero3_full_numel"], engine["zero3_local_numel"]
        assert full / 2 <= local < full / 2 + engine["zero3_params"] * 2, engine
        # ...and already while the model loaded: OpenRLHF's Actor builds it under HfDeepSpeedConfig
        # for stage 3 (openrlhf/models/actor.py), so from_pretrained runs inside zero.Init and no
        # process holds the whole model in host memory (the host RAM budget counts one copy a node).
        assert engine["partitioned_at_engine_init"] == engine["params_at_engine_init"] == engine["zero3_params"], engine
