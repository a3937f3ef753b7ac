"""Cheapest changes that make an estimate fit, each re-estimated (never guessed).

The cost order is a judgement about what a change costs the user, cheapest first:
  0. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the same run, with the free pages between
     live blocks handed back before an OOM (estimate._reserved); nothing else changes;
  0. under FSDP2 with an accelerate release that casts the whole model to fp32: no mixed
     precision with bf16 weights (what llama8b-lora-fsdp2-4090x2 does), or accelerate >= 1.14;
  1. fewer tokens per micro batch with the same global batch (raise grad_accum): same math, a bit
     slower per sample;
  2. gradient checkpointing: ~1/3 more compute (one extra forward per layer, Korthikanti et al.);
  3. a higher ZeRO stage: more communication (stage 3 adds parameter all-gathers);
  4. optimizer offload to CPU: CPU Adam, PCIe traffic, needs host RAM;
  5. parameter offload: every forward/backward streams weights over PCIe;
  6. for GRPO: give the generation server its own GPUs / colocate it;
  7. LoRA instead of full fine-tuning: changes what is trained;
  8. shorter sequences: changes the data;
  9. more GPUs: costs money.
"""
from __future__ import annotations

from dataclasses import replace

from .estimate import Setup, estimate
from .model_states import fsdp_upcast


def _candidates(s: Setup):
    c = []
    if not s.expandable_segments:
        c.append((0, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", replace(s, expandable_segments=True)))
    if fsdp_upcast(s) == "all":
        c.append((0, "mixed_precision no with bf16 weights (LLaMA-Factory: pure_bf16, bf16 false): accelerate "
                     "casts nothing to fp32", replace(s, mixed_precision="no", master_weights=False)))
        c.append((0, "accelerate >= 1.14 (casts trainable parameters only; LLaMA-Factory 0.9.5 allows <= 1.11)",
                  replace(s, accelerate_version="1.14.0")))
    if s.micro_batch > 1:
        # the accumulation is part of the remedy: under FSDP more micro batches per step cost
        # memory of their own (fsdp_accumulated_grads)
        accum = s.grad_accum * s.micro_batch
        c.append((1, f"micro_batch {s.micro_batch} -> 1, grad_accum {s.grad_accum} -> {accum} (same batch)",
                  replace(s, micro_batch=1, grad_accum=accum)))
    if not s.gradient_checkpointing:
        c.append((2, "enable gradient_checkpointing", replace(s, gradient_checkpointing=True)))
    if s.framework == "deepspeed":
        for stage in range(s.zero_stage + 1, 4):
            c.append((3, f"zero_stage {s.zero_stage} -> {stage}", replace(s, zero_stage=stage)))
        if s.offload_optimizer == "none":
            st = max(s.zero_stage, 1)
            c.append((4, "offload_optimizer: cpu" + ("" if st == s.zero_stage else f" (zero_stage {st})"),
                      replace(s, offload_optimizer="cpu", zero_stage=st)))
        if s.offload_param == "none":
            c.append((5, "zero_stage 3 + offload_param: cpu + offload_optimizer: cpu",
                      replace(s, zero_stage=3, offload_param="cpu", offload_optimizer="cpu")))
    if s.method == "grpo" and s.vllm_mode == "server" and s.gpus > 1:
        total = s.gpus_per_node * s.nodes if s.gpus_per_node else s.gpus
        if s.gpus + s.vllm_gpus > total:
            serve = max(1, total // 2)
            c.append((6, f"trl vllm-serve on {serve} GPUs, training on the other {total - serve}",
                      replace(s, vllm_gpus=serve, gpus=total - serve, gpus_per_node=s.gpus_per_node or total)))
            c.append((6, "vllm_mode: colocate (vllm_gpu_memory_utilization 0.3)",
                      replace(s, vllm_mode="colocate", vllm_gpus=0, vllm_gpu_memory_utilization=None)))
    if not s.lora_rank:
        c.append((7, "LoRA (rank 16, all linear layers) instead of full fine-tuning",
                  replace(s, lora_rank=16, lora_target="all")))
    for frac in (2, 4):
        if s.seq_len // frac >= 256:
            c.append((8, f"seq_len {s.seq_len} -> {s.seq_len // frac}", replace(s, seq_len=s.seq_len // frac)))
    for mult in (2, 4):
        c.append((9, f"{s.gpus * mult} GPUs instead of {s.gpus}",
                  replace(s, gpus=s.gpus * mult, gpus_per_node=None if s.gpus_per_node is None else s.gpus_per_node * mult)))
    return c


def remedies(s: Setup, current_peak: float, limit: int = 8, allowed=None) -> list[dict]:
    """Changes that lower the GPU peak, the ones that fit first, each group cheapest first.

    If no single change fits, pairs of the two cheapest kinds are tried too. allowed(setup) ->
    bool, when given, drops changes the caller cannot make (a recipe's values schema refusing
    them); a pair is kept only when both of its changes are allowed together.
    """
    out = []
    singles = []
    # what the card needs (the verdict's figure): a change may lower it without lowering the
    # allocated peak (expandable segments)
    current_needed = estimate(s).gpu_needed_bytes

    def lowers(r):
        return (r.gpu_peak_bytes < current_peak or r.gpu_needed_bytes < current_needed) and not r.errors

    for cost, change, s2 in _candidates(s):
        if allowed is not None and not allowed(s2):
            continue
        try:
            r = estimate(s2)
        except (ValueError, KeyError):
            continue
        # a change the run would fail with (Result.errors) is no remedy, whatever it saves
        if lowers(r):
            singles.append((cost, change, s2, r))
    if not any(r.verdict != "oom" for *_x, r in singles):
        for i, (c1, ch1, s1, _r1) in enumerate(singles):
            for c2, ch2, _s2, _r2 in singles[i + 1:]:
                if c1 == c2:
                    continue
                # apply the second change on top of the first by re-deriving it from s1
                for cc, chx, sx in _candidates(s1):
                    if chx.split(" ")[0] == ch2.split(" ")[0] and cc == c2:
                        if allowed is not None and not allowed(sx):
                            break
                        r = estimate(sx)
                        if lowers(r):
                            singles.append((max(c1, c2) + 0.5, f"{ch1} and {chx}", sx, r))
                        break
    order = {"fits": 0, "tight": 1, "oom": 2}
    singles.sort(key=lambda t: (order[t[3].verdict], t[0], t[3].gpu_peak_bytes))
    seen = set()
    for cost, change, _s2, r in singles:
        if change in seen:
            continue
        seen.add(change)
        out.append({"change": change, "gpu_peak_bytes": round(r.gpu_peak_bytes),
                    "gpu_card_bytes": round(r.gpu_card_bytes), "gpu_needed_bytes": round(r.gpu_needed_bytes),
                    "verdict": r.verdict,
                    "host_peak_bytes": round(r.host_peak_bytes), "cost_rank": cost})
    return out[:limit]
