"""Host (CPU) RAM of a training node.

Offloaded states live in pinned (page-locked) memory when pin_memory is true: the kernel cannot
swap it out, so the node's free RAM - not RAM + swap - is the limit, and a shortage ends in the
OOM killer (LlamaFactory#6755) rather than slow training.
"""
from __future__ import annotations

GiB = 1024 ** 3

# Measured orders of magnitude, not exact: a CUDA-initialised PyTorch process with transformers
# and DeepSpeed imported holds ~3-5 GiB RSS (CUDA runtime, cuBLAS/cuDNN images, Python heaps).
PROCESS_OVERHEAD = 4 * GiB


def host_bytes(*, states_host_per_process: float, processes_per_node: int, model_load_bytes: float,
               zero3_init: bool, pinned_buffer_bytes: float) -> dict:
    """Host RAM per node by category.

    model_load_bytes: checkpoint weights one process materialises while loading. Under ZeRO-3 with
    zero.Init (HF Trainer/Accelerate) each rank keeps only its shard; otherwise every rank loads the
    full model on CPU before moving it to the GPU (peak during setup, then released).
    """
    offloaded = states_host_per_process * processes_per_node
    load = model_load_bytes / (processes_per_node if zero3_init else 1) * processes_per_node
    return {
        "offloaded_states": offloaded,
        "pinned_buffers": pinned_buffer_bytes * processes_per_node,
        "process_overhead": PROCESS_OVERHEAD * processes_per_node,
        "model_loading": load,
    }
