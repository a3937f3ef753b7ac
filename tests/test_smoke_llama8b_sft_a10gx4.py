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


import pytest

from test_smoke_llama8b_sft_a100x1 import train_rendered_sft

pytestmark = pytest.mark.smoke
NAME = "llama8b-sft-a10gx4"
ROWS = 8  # 8 samples / (micro 1 x 2 ranks) = 4 optimizer steps


def test_openrlhf_sft_zero3_adam_offload_trains(tmp_path):
    words, ds, records = train_rendered_sft(NAME, tmp_path, ROWS, 64)
    assert words[words.index("--ds.zero_stage") + 1] == "3" and "--ds.adam_offload" in words
    # What the recipe ships, unchanged by the smoke overrides.
    assert ds["zero_optimization"]["stage"] == 3 and ds["bf16"]["enabled"]
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert ds["zero_optimization"]["offload_param"] == {"device": "none"}
    for recs in records.values():
        [engine] = [r for r in recs if r["event"] == "engine"][:1]
        # ZeRO-3 partitioned every parameter: each rank's shards add up to about half the model
        # (DeepSpeed pads each shard to a multiple of the world size).
        assert engine["zero3_params"] == engine["trainable_params"] > 0, engine
        full, local = engine["zero3_full_numel"], engine["zero3_local_numel"]
        assert full / 2 <= local < full / 2 + engine["zero3_params"] * 2, engine
        # ...and already while the model loaded: OpenRLHF's Actor builds it under HfDeepSpeedConfig
        # for stage 3 (openrlhf/models/actor.py), so from_pretrained runs inside zero.Init and no
        # process holds the whole model in host memory (the host RAM budget counts one copy a node).
        assert engine["partitioned_at_engine_init"] == engine["params_at_engine_init"] == engine["zero3_params"], engine
