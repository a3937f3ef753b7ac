"""How much of a LoRA model's frozen base (or, with --full 1, of a fully trained model) ZeRO-3
holds gathered during backward.

    torchrun --nproc_per_node 2 tests/frameworks/zero3_recompute_pins.py --reentrant 1

Two ranks on CPU (gloo), DeepSpeed ZeRO-3 in bf16, a Qwen2 with Qwen2.5-7B's depth (28 layers)
and every width divided by 32, built under zero.Init, LoRA on every linear layer, gradient
checkpointing with the given use_reentrant. The live-parameter and reuse-distance limits are the
"1e9" of LLaMA-Factory's and ms-swift's ds_z3 configs scaled by this model's size over
Qwen2.5-7B's, and the "auto" buckets come from the hidden size as the HF Trainer fills them, so
DeepSpeed's release policy sees the proportions it would see on the real model.

The coordinator is watched, not changed: after every fetch and release it sums the elements of
the watched parameters (frozen ones, or every one with --full 1; never persistent ones) whose full
data is materialised (ds_status not NOT_AVAILABLE). Rank 0 prints one JSON line: the peak fraction
per step, the fraction still gathered when backward returns, and what the decoder layers and the
LM head are of the watched total (what memory.deepspeed_transients.recompute_pinned assumes).
"""
from __future__ import annotations

import argparse
import json

REAL_TOTAL = 7_615_616_512  # Qwen2.5-7B's parameters


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reentrant", type=int, choices=(0, 1), required=True)
    ap.add_argument("--steps", type=int, default=2)
    # LLaMA-Factory's use_unsloth_gc: its own offloading autograd Function recomputes the layer
    # inside backward whatever use_reentrant says (llamafactory must be importable)
    ap.add_argument("--unsloth-gc", type=int, choices=(0, 1), default=0)
    # full fine-tuning: no adapters, every parameter trained and watched
    ap.add_argument("--full", type=int, choices=(0, 1), default=0)
    a = ap.parse_args()

    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator as Coord
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    hidden = 3584 // 32
    cfg = Qwen2Config(hidden_size=hidden, intermediate_size=18944 // 32, num_hidden_layers=28, num_attention_heads=28,
                      num_key_value_heads=4, vocab_size=152064 // 32, tie_word_embeddings=False,
                      max_position_embeddings=4096)
    zero = {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
            "reduce_bucket_size": hidden * hidden, "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
            "stage3_param_persistence_threshold": 10 * hidden}
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": world,
          "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True, "zero_optimization": zero}
    with deepspeed.zero.Init(config_dict_or_path=ds, dtype=torch.bfloat16):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    total = sum(p.ds_numel for p in model.parameters())
    zero["stage3_max_live_parameters"] = zero["stage3_max_reuse_distance"] = int(1e9 * total / REAL_TOTAL)
    model.enable_input_require_grads()
    if not a.full:
        model = get_peft_model(model, LoraConfig(r=1, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear"))
    if a.unsloth_gc:
        _llamafactory_unsloth_gc(model, torch)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": bool(a.reentrant)})
    model.config.use_cache = False
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)

    watched = [(n, p) for n, p in engine.module.named_parameters()
               if (a.full or not p.requires_grad) and not p.ds_persist]
    watched_total = sum(p.ds_numel for _, p in watched)
    layers = sum(p.ds_numel for n, p in watched if ".layers." in n)
    head = sum(p.ds_numel for n, p in watched if "lm_head" in n)
    peak = [0]

    def gathered():
        return sum(p.ds_numel for _, p in watched if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)

    def watch(method):
        def wrapped(self, *args, **kwargs):
            out = method(self, *args, **kwargs)
            peak[0] = max(peak[0], gathered())
            return out
        return wrapped

    Coord.fetch_sub_module = watch(Coord.fetch_sub_module)
    Coord.release_sub_module = watch(Coord.release_sub_module)
    gen = torch.Generator().manual_seed(rank)
    peaks, ends, losses = [], [], []
    for _ in range(a.steps):
        ids = torch.randint(0, cfg.vocab_size, (1, 64), generator=gen)
        peak[0] = 0
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        ends.append(gathered() / watched_total)
        engine.step()
        peaks.append(peak[0] / watched_total)
        losses.append(float(loss))
    if rank == 0:
        print(json.dumps({"deepspeed": deepspeed.__version__.strip(), "reentrant": bool(a.reentrant),
                          "unsloth_gc": bool(a.unsloth_gc), "full": bool(a.full), "peaks": peaks,
                          "end_of_backward": ends, "losses": losses, "layers": layers / watched_total,
                          "head": head / watched_total}))
    return 0


def _llamafactory_unsloth_gc(model, torch) -> None:
    """LLaMA-Factory's own path for use_unsloth_gc (model_utils/checkpointing.py,
    _gradient_checkpointing_enable), run unchanged on the PEFT model's base. Its backward moves
    the saved hidden states to "cuda" by name; this process has no GPU, so that one device name
    is read as the CPU."""
    from llamafactory.model.model_utils.checkpointing import _gradient_checkpointing_enable

    to = torch.Tensor.to

    def cpu_for_cuda(self, *args, **kwargs):
        args = tuple("cpu" if a == "cuda" else a for a in args)
        return to(self, *args, **kwargs)

    torch.Tensor.to = cpu_for_cuda
    _gradient_checkpointing_enable(model.get_base_model(), use_unsloth_gc=True)


if __name__ == "__main__":
    raise SystemExit(main())
