"""Proof that a stack venv can train: tiny model, ZeRO-2, optimizer offloaded to CPU
(DeepSpeedCPUAdam), bf16, 2 processes on CPU via the gloo fallback.

    torchrun --nproc_per_node 2 tests/frameworks/ds_zero2_tiny.py [--steps 4] [--workdir DIR]

Run inside a stack venv with `ftrecipes.devenv.run_env(stack)` as the environment (venv bin/
first on PATH, DS_ACCELERATOR=cpu, TORCH_EXTENSIONS_DIR with the pre-built ops). Prints one
"step N loss X" line per step from rank 0 and "OK finite losses" at the end; exits non-zero if a
loss is not finite.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    args = ap.parse_args()

    import torch.distributed as dist
    import deepspeed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny

    t0 = time.time()
    deepspeed.init_distributed()  # gloo on CPU without oneCCL
    rank, world = dist.get_rank(), dist.get_world_size()
    workdir = Path(args.workdir or os.path.join(tempfile.gettempdir(), f"ftr-ds-tiny-{os.getuid()}"))
    model_dir = workdir / "model"
    if rank == 0 and not (model_dir / "config.json").exists():
        tiny.make_tiny_model(model_dir)
    dist.barrier()

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    texts = [tok.apply_chat_template(
        [{"role": "user", "content": f"what is {a} plus {b}?"},
         {"role": "assistant", "content": f"{a} plus {b} equals {a + b}."}], tokenize=False)
        for a in range(4) for b in range(4)]

    micro, accum = 2, 1
    cfg = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "train_batch_size": micro * accum * world,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "zero_optimization": {"stage": args.stage,
                              "offload_optimizer": {"device": "cpu", "pin_memory": False}},
        "steps_per_print": 1000,
        "wall_clock_breakdown": False,
    }
    if args.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif args.dtype == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=cfg)
    t_init = time.time() - t0
    losses = []
    for step in range(args.steps):
        i = (step * world + rank) * micro
        batch = tok([texts[(i + k) % len(texts)] for k in range(micro)], return_tensors="pt",
                    padding=True)
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        out = engine(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     labels=labels)
        engine.backward(out.loss)
        engine.step()
        loss = out.loss.detach().float()
        dist.all_reduce(loss)
        loss = loss.item() / world
        losses.append(loss)
        if rank == 0:
            print(f"step {step} loss {loss:.4f}", flush=True)
    ok = all(math.isfinite(x) for x in losses)
    if rank == 0:
        opt = type(engine.optimizer.optimizer).__name__ if hasattr(engine.optimizer, "optimizer") \
            else type(engine.optimizer).__name__
        print(f"world={world} stage={args.stage} dtype={args.dtype} offload=cpu optimizer={opt} "
              f"backend={dist.get_backend()} init={t_init:.1f}s total={time.time() - t0:.1f}s",
              flush=True)
        print("OK finite losses" if ok else "FAIL non-finite loss", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
