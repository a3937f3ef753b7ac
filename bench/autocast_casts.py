"""What autograd keeps of a linear's weight under torch.autocast, measured on the CPU.

The memory model (model_states.expressed_transients) counts, for LoRA over fp32 base weights
under bf16/fp16 autocast outside DeepSpeed/FSDP, one low-precision copy of every frozen linear
weight saved for backward (one layer's under gradient checkpointing). This script checks the
fact it rests on with a small stack of linears: it records every tensor autograd saves
(torch.autograd.graph.saved_tensors_hooks) and counts the weight-shaped ones that are new
allocations (not the parameter's own storage).

Needs torch (any stack environment: PYTHONPATH=tools python -m ftrecipes.devenv run trl --
python bench/autocast_casts.py). Output: bench/autocast_casts.md.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

H, LAYERS = 256, 4


def _run(weight_dtype, frozen, use_checkpoint):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(H, H, bias=False).to(weight_dtype) for _ in range(LAYERS)]
    for layer in layers:
        layer.weight.requires_grad_(not frozen)
    adapter = torch.nn.Parameter(torch.zeros(H, H))  # trainable: every later input needs a gradient
    own = {layer.weight.data_ptr() for layer in layers}
    saved = []

    def pack(t):
        saved.append(t)
        return t

    def block(h, layer):
        return layer(h)

    x = torch.randn(8, H)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x @ adapter
            for layer in layers:
                h = checkpoint(block, h, layer, use_reentrant=False) if use_checkpoint else layer(h)
    copies = {t.data_ptr() for t in saved if tuple(t.shape) == (H, H) and t.data_ptr() not in own
              and t.data_ptr() != adapter.data_ptr()}
    return len(copies)


def main():
    print("# Weight copies autograd keeps under bf16 autocast (CPU, torch", torch.__version__ + ")\n")
    print(f"A stack of {LAYERS} bias-free {H}x{H} linears after one trainable matrix, forward under "
          "torch.autocast('cpu', bfloat16); counted: distinct weight-shaped tensors saved for backward "
          "that are not a parameter's own storage.\n")
    print("| weights | frozen | checkpointed | low-precision copies saved |")
    print("|---|---|---|---:|")
    for dtype in (torch.float32, torch.bfloat16):
        for frozen in (True, False):
            for ckpt in (False, True):
                n = _run(dtype, frozen, ckpt)
                print(f"| {str(dtype).replace('torch.', '')} | {frozen} | {ckpt} | {n} |")


if __name__ == "__main__":
    main()
