"""Seconds per optimizer step, tokens/s and MFU for a Setup (base install: no torch).

Compute: FLOPs per token from the architecture over the GPU's dense bf16/fp16 peak times one
achieved fraction (ACHIEVED, fitted by bench/throughput.py on its train split). Counting follows
the MFU convention of PaLM (Chowdhery et al. 2022, appendix B) and MosaicML's llm-foundry
benchmarks: a forward pass costs 2 FLOPs per weight per token plus 4·layers·d_attn·seq for
attention (QK^T and AV, causal mask not discounted); backward costs twice the forward.
"Hardware" FLOPs add what the run really does besides: recomputation under gradient
checkpointing (one more forward, Korthikanti et al. 2022), a DPO reference forward, and for
frozen weights (LoRA/QLoRA) no weight-gradient GEMM, so their backward is one forward, not two.

Communication per GPU, ring collectives of M bytes moving (n-1)/n·M per reduce-scatter or
all-gather: DDP all-reduces gradients (2x); ZeRO-1/2 reduce-scatter gradients and all-gather
updated parameters (2x, Rajbhandari et al. 2020 §7); ZeRO-3/FSDP add one all-gather in
backward (3x). Assumptions, stated: bucketing and prefetch overlap collectives with compute
fully, so a step takes the longer of the two; offload traffic over PCIe, CPU Adam and the
dequantisation of 4-bit weights are on the critical path (not overlapped), which is
conservative for DeepSpeed's overlapped gradient offload.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import catalog
from .estimate import Setup, _counts

# Fraction of the datasheet peak that training reaches, by GPU generation, and for generations
# the benchmark has no train case of; fitted by bench/throughput.py on its train split (it prints
# these values; they are copied here).
ACHIEVED = {"ampere": 0.56, "hopper": 0.43}
ACHIEVED_DEFAULT = 0.43


def achieved_fraction(gpu: catalog.GPU) -> float:
    return ACHIEVED.get(gpu.generation, ACHIEVED_DEFAULT)
# NCCL bus bandwidth reaches ~70-80 % of the link rate in nccl-tests all_reduce_perf; we use 0.7.
LINK_EFFICIENCY = 0.7
# Decode reads weights and KV cache once per generated token; vLLM reaches ~60 % of HBM
# bandwidth in decode (assumption, not fitted: no GRPO case in the benchmark).
DECODE_BW_EFFICIENCY = 0.6
# Adam updates per second on one node's CPUs. ZeRO-Offload (Ren et al., USENIX ATC 2021,
# arXiv 2101.06840, table on CPU-Adam) reports ~0.2 s per 1B parameters for DeepSpeed's
# vectorised CPU Adam and ~6x that for torch's CPU Adam (recalled, to be re-checked).
CPU_ADAM_PARAMS_PER_S = {"deepspeed": 4.5e9, "torch": 0.75e9}


@dataclass(frozen=True)
class Shape:
    """What the FLOP count needs: weights used in matmuls, layers and attention width."""

    matmul_params: int
    layers: int
    attn_dim: int           # heads x head_dim (width of Q and of the attention output)
    kv_dim: int = 0
    head_params: int = 0    # the LM head's share of matmul_params (never recomputed)

    @classmethod
    def of(cls, m: catalog.ModelShape) -> "Shape":
        # the input embedding is a lookup (no FLOPs); the LM head is a matmul, tied or not
        mm = m.num_hidden_layers * m.layer_params() + m.vocab_size * m.hidden_size
        return cls(mm, m.num_hidden_layers, m.num_attention_heads * m.head_dim, m.kv_dim,
                   m.vocab_size * m.hidden_size)


def forward_flops_per_token(sh: Shape, seq_len: int) -> tuple[float, float]:
    """(weight FLOPs, attention FLOPs) of one forward pass, per token."""
    return 2.0 * sh.matmul_params, 4.0 * sh.layers * sh.attn_dim * seq_len


def model_flops_per_token(sh: Shape, seq_len: int) -> float:
    """Training FLOPs per token as MFU counts them: 3 forwards (6N plus attention)."""
    w, a = forward_flops_per_token(sh, seq_len)
    return 3.0 * (w + a)


def hardware_flops_per_token(sh: Shape, seq_len: int, *, frozen: bool, trainable: int = 0,
                             checkpointing: bool = False, reference_forward: bool = False) -> float:
    """FLOPs the GPU really executes per trained token."""
    w, a = forward_flops_per_token(sh, seq_len)
    fwd = w + a
    # frozen base weights: backward computes input gradients only (one GEMM, not two)
    bwd = (w if frozen else 2 * w) + 2 * a
    total = fwd + bwd + (6.0 * trainable if frozen else 0.0)
    if checkpointing:  # HF / DeepSpeed checkpoint the decoder layers; the LM head runs once
        total += fwd - 2.0 * sh.head_params
    if reference_forward:
        total += fwd
    return total


@dataclass
class StepTime:
    seconds: float
    tokens_per_s: float          # trained tokens per second, whole job
    mfu: float
    parts: dict = field(default_factory=dict)   # seconds by component
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"seconds_per_step": round(self.seconds, 4), "tokens_per_s": round(self.tokens_per_s, 1),
                "mfu": round(self.mfu, 4), "parts": {k: round(v, 4) for k, v in self.parts.items()},
                "notes": self.notes}


def _link_gbps(s: Setup, gpu: catalog.GPU, perf: catalog.GPUPerf) -> float:
    if s.nodes > 1:  # a ring across nodes runs at its slowest hop: the node's NICs together
        return min(perf.link_gbps, catalog.INTER_NODE_GBPS.get(gpu.generation, catalog.INTER_NODE_DEFAULT_GBPS))
    return perf.link_gbps


def comm_bytes_per_gpu(s: Setup, params: int, trainable: int, elem: int = 2) -> float:
    """Bytes one GPU sends per optimizer step for gradient / parameter collectives."""
    n = s.gpus
    if n <= 1:
        return 0.0
    ring = (n - 1) / n
    micro_steps = s.grad_accum
    sharded = (s.framework == "deepspeed" and s.zero_stage >= 3) or s.framework in ("fsdp", "fsdp2")
    if s.framework == "ddp" or (s.framework == "deepspeed" and s.zero_stage <= 1):
        # all-reduce (or reduce-scatter + all-gather) once per step, at the accumulation boundary
        return 2 * ring * trainable * elem
    grads = ring * trainable * elem * micro_steps  # ZeRO-2/3, FSDP reduce-scatter every micro step
    if not sharded:
        return grads + ring * trainable * elem     # ZeRO-2: all-gather updated parameters
    # ZeRO-3 / FSDP: all-gather every weight (frozen ones too) in forward and again in backward
    gathers = 2 + (1 if s.gradient_checkpointing else 0)
    return grads + gathers * ring * params * elem * micro_steps


def _sequences_per_micro(s: Setup) -> int:
    return 2 * s.micro_batch if s.method == "dpo" else s.micro_batch  # DPO: chosen + rejected


def _generation_seconds(s: Setup, m: catalog.ModelShape, params: int, perf: catalog.GPUPerf,
                        prompts_per_gpu: int, completion: int, eff: float) -> float:
    """GRPO rollout time: prefill compute-bound, decode bandwidth-bound per token."""
    engines = s.vllm_gpus if s.vllm_mode == "server" and s.vllm_gpus else s.gpus
    batch = max(1, prompts_per_gpu * s.gpus // engines)
    prompt = max(1, s.seq_len - completion)
    peak = perf.peak_tflops * 1e12 * eff
    prefill = 2.0 * params * prompt * batch / peak
    kv_per_token = 2 * m.num_hidden_layers * m.kv_dim * 2  # K and V, 2 bytes each
    mean_ctx = prompt + completion / 2
    bytes_per_step = 2 * params + kv_per_token * mean_ctx * batch
    decode_step = max(bytes_per_step / (perf.hbm_gbps * 1e9 * DECODE_BW_EFFICIENCY),
                      2.0 * params * batch / peak)
    return prefill + completion * decode_step


def step_time(s: Setup, completion_len: int | None = None, *, achieved: float | None = None,
              shape: catalog.ModelShape | None = None, counts: tuple[int, int] | None = None) -> StepTime:
    """Predict one optimizer step of `s`; GRPO adds generating its completions.

    `shape`/`counts` (total, trainable) stand in for the catalog model when a benchmark case
    describes an architecture the catalog does not hold; `achieved` overrides the fitted fraction.
    """
    m = shape or s.shape()
    if m is None:
        raise ValueError("the step-time model needs a model shape (--model), not only --params")
    gpu = catalog.gpu(s.gpu)
    perf = catalog.gpu_perf(s.gpu)
    params, trainable = counts or _counts(s)[1:]
    eff = achieved_fraction(gpu) if achieved is None else achieved
    sh = Shape.of(m)
    frozen = bool(s.lora_rank)
    ref = s.method == "dpo" and s.dpo_reference != "precomputed"
    hw = hardware_flops_per_token(sh, s.seq_len, frozen=frozen, trainable=trainable if frozen else 0,
                                  checkpointing=s.gradient_checkpointing, reference_forward=ref)
    peak = perf.peak_tflops * 1e12 * (0.5 if s.precision == "fp32" else 1.0)  # fp32 runs as TF32
    seqs = _sequences_per_micro(s) * s.grad_accum
    tokens = seqs * s.seq_len                   # per GPU per step
    parts = {"compute": hw * tokens / (peak * eff)}
    notes = []
    if s.quantization in ("4bit", "8bit"):
        # every use of a frozen weight first writes a bf16 copy from the packed one (bitsandbytes)
        passes = (2 + s.gradient_checkpointing + ref) * s.grad_accum  # fwd, bwd, recompute, reference
        packed = 0.5 if s.quantization == "4bit" else 1.0
        parts["dequant"] = passes * sh.matmul_params * (2 + packed) / (perf.hbm_gbps * 1e9)
    link = _link_gbps(s, gpu, perf) * 1e9 * LINK_EFFICIENCY
    parts["comm"] = comm_bytes_per_gpu(s, params, trainable) / link
    pcie = perf.pcie_gbps * 1e9 * LINK_EFFICIENCY
    shard = trainable / max(1, s.gpus)
    offload_opt = s.offload_optimizer != "none" or s.fsdp_offload
    if offload_opt:
        parts["offload_pcie"] = 2 * shard * 2 / pcie          # gradients down, parameters back up
        per_node = max(1, s.gpus // max(1, s.nodes))
        rate = CPU_ADAM_PARAMS_PER_S["deepspeed" if s.framework == "deepspeed" else "torch"]
        parts["cpu_adam"] = shard * per_node / rate
    if s.offload_param != "none" or s.fsdp_offload:
        parts["offload_pcie"] = parts.get("offload_pcie", 0.0) + 2 * 2 * params / max(1, s.gpus) * s.grad_accum / pcie
    if s.method == "grpo":
        completion = completion_len or s.seq_len // 2
        parts["generation"] = _generation_seconds(s, m, params, perf, seqs, completion, eff)
        notes.append(f"GRPO: {completion} completion tokens per sequence, decode bandwidth-bound")
    serial = ("offload_pcie", "dequant", "cpu_adam", "generation")
    seconds = max(parts["compute"], parts["comm"]) + sum(parts.get(k, 0.0) for k in serial)
    total_tokens = tokens * s.gpus
    # MFU counts the FLOPs the method needs (PaLM's 6N + attention for full training; frozen
    # weights skip weight gradients; DPO's reference forward), never recomputation
    needed = hardware_flops_per_token(sh, s.seq_len, frozen=frozen, trainable=trainable if frozen else 0,
                                      reference_forward=ref)
    mfu = needed * total_tokens / (seconds * peak * s.gpus)
    return StepTime(seconds, total_tokens / seconds, mfu, parts, notes)
