"""Short-lived GPU buffers DeepSpeed allocates on top of the model states.

Defaults and meanings from the DeepSpeed configuration docs
(https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training):
reduce_bucket_size 5e8 and allgather_bucket_size 5e8 elements; stage3_max_live_parameters 1e9,
stage3_prefetch_bucket_size 5e7 elements.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "contiguous_gradients": True,
}


@dataclass
class Transients:
    backward_buckets: float = 0.0  # gradient reduction buffers during backward
    gathered_params: float = 0.0   # ZeRO-3: full parameters of the layers being computed
    step_grad_cast: float = 0.0    # ZeRO-1/2: fp32 copy of the gradient partition at the step
    step_allgather: float = 0.0    # ZeRO-1/2: bucket that all-gathers updated parameters


def transients(ds: dict, *, stage: int, n: int, p: int, trainable: int, largest_gather: int,
               offload_optimizer: str) -> Transients:
    """largest_gather: elements of the biggest block ZeRO-3 must materialise at once (a decoder
    layer, or the embedding / LM head)."""
    cfg = {**DEFAULTS, **{k: v for k, v in ds.items() if v is not None}}
    t = Transients()
    if stage == 0:
        return t
    reduce_elems = min(cfg["reduce_bucket_size"], trainable)
    if stage in (1, 2):
        # stage_1_and_2.py: with contiguous_gradients an "ipg" buffer of reduce_bucket_size
        # elements collects gradients before each reduce.
        if cfg["contiguous_gradients"]:
            t.backward_buckets = p * reduce_elems
        if offload_optimizer in ("none", None):
            # step(): the gradient partition is cast to fp32 (single_partition_of_fp32_groups[i].grad)
            # before Adam runs; Adam's states are created lazily after it on the first step.
            # This is where Llama-3-8B on one A100-80GB OOMs (OpenRLHF#698).
            t.step_grad_cast = 4 * trainable / n
        t.step_allgather = p * min(cfg["allgather_bucket_size"], trainable) if n > 1 else 0.0
    else:
        # stage3: parameters are fetched per module; at most stage3_max_live_parameters live at
        # once, plus the prefetch bucket for the next modules. The embedding / LM head is one
        # module and must be gathered whole.
        live = max(min(cfg["stage3_max_live_parameters"], 2 * largest_gather), largest_gather)
        t.gathered_params = p * (live + cfg["stage3_prefetch_bucket_size"])
        t.backward_buckets = p * reduce_elems + (4 * reduce_elems if offload_optimizer == "cpu" else 0)
    return t
