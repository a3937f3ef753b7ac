"""Count FSDP2 all-gathers in one training step, with and without transformers' checkpointing.

Run under torchrun (2 processes, gloo): a tiny Llama, fully_shard on each decoder layer and the
root (as accelerate's TRANSFORMER_BASED_WRAP does), optionally the Trainer's checkpointing
(gradient_checkpointing_enable, non-reentrant), one step each. Counts FSDPParamGroup.unshard calls that start
an all-gather, in forward and in backward, and prints them as JSON on rank 0. Under FSDP1 the
Trainer's checkpointing added an all-gather per layer in backward (pytorch#105635); this shows
what torch's FSDP2 does.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    dist.init_process_group("gloo")
    for mode in ("none", "trainer-checkpointing"):
        step(mode)
    dist.destroy_process_group()


def step(mode):
    count = {"n": 0}
    unshard = pg.FSDPParamGroup.unshard

    def counted(self, async_op=False):
        if not self.is_unsharded and self._all_gather_result is None:
            count["n"] += 1
        return unshard(self, async_op)

    pg.FSDPParamGroup.unshard = counted
    try:
        _run(mode, count)
    finally:
        pg.FSDPParamGroup.unshard = unshard


def _run(mode, count):
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256)
    model = LlamaForCausalLM(cfg)
    if mode == "trainer-checkpointing":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ids = torch.randint(0, cfg.vocab_size, (2, 32))
    out = model(input_ids=ids, labels=ids)
    forward = count["n"]
    out.loss.backward()
    if dist.get_rank() == 0:
        print(json.dumps({"mode": mode, "layers": cfg.num_hidden_layers, "forward": forward,
                          "backward": count["n"] - forward,
                          "checkpointing": any(getattr(m, "gradient_checkpointing", False) for m in model.modules())}))


if __name__ == "__main__":
    main()
    # Leave without the interpreter's teardown: gloo's threads can abort there ("terminate called
    # without an active exception", seen when runs overlap) after the counts are printed.
    sys.stdout.flush()
    os._exit(0)
