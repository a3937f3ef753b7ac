"""Parameters, gradients, fp32 master weights and Adam states, placed by ZeRO stage and offload.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(arXiv:1910.02054), sec. 3.1 and Figure 1: mixed-precision Adam keeps 2Ψ (fp16/bf16 params)
+ 2Ψ (grads) + KΨ (fp32 master, momentum, variance; K = 12) bytes. Stage 1 partitions the KΨ
optimizer states over N data-parallel ranks, stage 2 also the gradients, stage 3 also the
parameters. ZeRO-Offload (arXiv:2101.06840) moves the optimizer states (and, for CPU Adam, an fp32
copy of the gradient partition) to host memory; ZeRO-Infinity's offload_param moves the stage-3
parameter partition to host memory.
"""
from __future__ import annotations

from dataclasses import dataclass


def zero_paper_model_states(psi: int, n: int, stage: int, k: int = 12) -> float:
    """Per-GPU model-state bytes exactly as the ZeRO paper's Figure 1 counts them."""
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / n
    if stage == 2:
        return 2 * psi + (2 + k) * psi / n
    if stage == 3:
        return (2 + 2 + k) * psi / n
    raise ValueError(f"ZeRO stage must be 0-3, got {stage}")


@dataclass
class ModelStates:
    # bytes per GPU
    params: float = 0.0
    grads: float = 0.0
    master: float = 0.0      # fp32 master weights
    optimizer: float = 0.0   # Adam momentum + variance
    # bytes in host RAM per training process
    host_params: float = 0.0
    host_grads: float = 0.0
    host_master: float = 0.0
    host_optimizer: float = 0.0

    @property
    def gpu(self) -> float:
        return self.params + self.grads + self.master + self.optimizer

    @property
    def host(self) -> float:
        return self.host_params + self.host_grads + self.host_master + self.host_optimizer


def model_states(total_params: int, trainable: int, n: int, stage: int, p: int, *,
                 offload_optimizer: str = "none", offload_param: str = "none",
                 master_weights: bool = True, trainable_bytes: int | None = None) -> ModelStates:
    """Steady-state model states of one training process.

    total_params includes frozen ones (LoRA base); only `trainable` get grads and optimizer states.
    master_weights=False is plain PyTorch training in the parameter dtype (what trace.py measures):
    AdamW's two states then have the parameter dtype and no fp32 copy exists.
    """
    pt = trainable_bytes or p  # PEFT keeps LoRA adapters in fp32 unless DeepSpeed casts them
    frozen = total_params - trainable
    s = ModelStates()
    # Parameters (frozen LoRA base weights too): only stage 3 partitions them.
    param_bytes = p * frozen + pt * trainable
    if stage >= 3:
        param_bytes /= n
    if stage >= 3 and offload_param in ("cpu", "nvme"):
        if offload_param == "cpu":
            s.host_params = param_bytes
    else:
        s.params = param_bytes
    grads = pt * trainable / (n if stage >= 2 else 1)
    if not master_weights:
        s.grads = grads
        s.optimizer = 2 * pt * trainable / (n if stage >= 1 else 1)
        return s
    master = 4 * trainable / (n if stage >= 1 else 1)
    adam = 8 * trainable / (n if stage >= 1 else 1)
    if offload_optimizer in ("cpu", "nvme"):
        if offload_optimizer == "cpu":
            s.host_master, s.host_optimizer = master, adam
        # CPU Adam updates from an fp32 gradient partition kept in host memory
        s.host_grads = 4 * trainable / (n if stage >= 1 else 1)
        # stage 2 keeps its reduced low-precision gradient partition on GPU before the copy out
        s.grads = grads if stage <= 2 else 0.0
    else:
        s.master, s.optimizer, s.grads = master, adam, grads
    return s
