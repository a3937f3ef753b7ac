"""Bytes a ZeRO-3 training step allocates beyond what is resident, per phase, on rank 0.

    torchrun --nproc_per_node 2 tests/frameworks/zero3_step_bytes.py --model DIR --ds ds.json \
        --seq 128 --lora-rank 2 --reentrant 1

One or two ranks on CPU (gloo), DeepSpeed ZeRO-3 in bf16 reading the given JSON ("auto" buckets filled
from the hidden size as the HF Trainer fills them), the HF config in DIR built under zero.Init,
LoRA on every linear layer (or full fine-tuning with --lora-rank 0), gradient checkpointing,
torch AdamW (foreach). Warm-up steps give the coordinator its trace; the next PROFILED run under
torch.profiler with profile_memory, which records every CPU allocation and free with its address
and size. The live bytes rebuilt from those events, at their highest inside each phase, are that
phase's allocation beyond the resident tensors: activations, gathered parameters, logits,
gradient buckets and optimizer temporaries, as DeepSpeed's own code makes them. Tensors that
outlive a step are allocated again within the profiled one (their earlier copies were freed
inside it, and a free of a block never seen allocated is not counted); `carried` is what is
still live at the end. One JSON line on rank 0.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

PROFILED = 5  # measured steps, each under its own profiler (3 were once all slow on a loaded 2-core machine)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ds", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--reentrant", type=int, choices=(0, 1), default=1)
    ap.add_argument("--warmup", type=int, default=2)  # steps before the measured ones
    a = ap.parse_args()

    import deepspeed
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import AutoConfig, AutoModelForCausalLM

    deepspeed.init_distributed()
    world = dist.get_world_size()
    cfg = AutoConfig.from_pretrained(a.model)
    cfg._attn_implementation = "sdpa"
    with open(a.ds) as f:
        ds = json.load(f)
    hidden = cfg.hidden_size
    zero = ds["zero_optimization"]
    auto = {"reduce_bucket_size": hidden * hidden, "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
            "stage3_param_persistence_threshold": 10 * hidden}
    zero.update({k: v for k, v in auto.items() if zero.get(k) == "auto"})
    ds.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1, train_batch_size=world,
              bf16={"enabled": True}, fp16={"enabled": False}, steps_per_print=10 ** 9)
    ds.pop("gradient_clipping", None)
    with deepspeed.zero.Init(config_dict_or_path=ds, dtype=torch.bfloat16):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if a.lora_rank:
        from peft import LoraConfig, get_peft_model

        model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=16, lora_dropout=0.05,
                                                 target_modules="all-linear"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": bool(a.reentrant)})
    model.config.use_cache = False
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, foreach=True)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    gen = torch.Generator().manual_seed(dist.get_rank())
    losses, measured = [], []
    for step in range(a.warmup + PROFILED):
        ids = torch.randint(0, cfg.vocab_size, (1, a.seq), generator=gen)
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True) if step >= a.warmup else None
        if prof:
            prof.__enter__()
        with record_function("phase:forward"):
            loss = engine(input_ids=ids, labels=ids).loss
        with record_function("phase:backward"):
            engine.backward(loss)
        with record_function("phase:step"):
            engine.step()
        losses.append(float(loss))
        if prof:
            prof.__exit__(None, None, None)
            if dist.get_rank() == 0:
                measured.append(_phase_peaks(prof))
    if dist.get_rank() == 0:
        # gloo finishes a prefetch's gather on its own thread, so now and then a step holds one
        # more gathered block at a phase's peak than the steps around it (twice in a row, about
        # one run in ten); each phase is the lowest of the profiled steps
        phases = {name: min(m[0][name] for m in measured) for name in measured[0][0]}
        print(json.dumps({"deepspeed": deepspeed.__version__, "losses": losses, "phases": phases,
                          "each_step": [m[0] for m in measured], "carried": measured[-1][1]}))
    return 0


def _phase_peaks(prof) -> tuple[dict, int]:
    """Live bytes at their highest inside each phase, and at the end, rebuilt from the memory
    events. The reporter's own running total (`Total Allocated`) is not used: a block freed on
    one thread (gloo's) is reported freed only after free() returned, so the main thread's next
    allocation at the same address can be reported first, and the total then keeps the old
    block's bytes for the rest of the step. An address the allocator hands out again is free,
    so a new block at a live address ends the old one, and the late free that follows is the
    old block's. The step phase counts only blocks it allocates itself: what backward's gradient
    reduce-scatter leaves for gloo's thread to free (gathered or bucketed pieces of a layer) can
    still be live when the step starts on a loaded machine, in every profiled step (seen on 2
    busy cores: 2-7 MB over 46 MB), while on a GPU those buffers are stream-ordered frees."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    spans = [(e["name"].split(":", 1)[1], e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("phase:")]
    memory = sorted(((e["ts"], e["args"]["Addr"], e["args"]["Bytes"]) for e in events
                     if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0), key=lambda m: m[0])
    step_start = next(t0 for name, t0, _ in spans if name == "step")
    live, late, total, totals = {}, {}, 0, []
    own = 0  # live bytes of blocks allocated inside the step phase
    for ts, addr, size in memory:
        if size > 0:
            if addr in live:
                total -= live[addr][0]
                own -= live[addr][0] if live[addr][1] else 0
                late[addr] = late.get(addr, 0) + 1
            live[addr] = (size, ts >= step_start)
            total += size
            own += size if ts >= step_start else 0
        elif late.get(addr):
            late[addr] -= 1
        elif addr in live:
            size, in_step = live.pop(addr)
            total -= size
            own -= size if in_step else 0
        totals.append((ts, total, own))
    peaks = {name: max((o if name == "step" else v for t, v, o in totals if t0 <= t <= t1), default=0)
             for name, t0, t1 in spans}
    return peaks, total


if __name__ == "__main__":
    raise SystemExit(main())
