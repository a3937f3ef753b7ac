"""`ftrecipes plan`: the fastest training setup that fits, searched over what the memory model
expresses and ranked by the step-time model (memory/steptime.py). Base install only.

Every candidate is a memory.Setup; one the memory model calls `oom` (GPU, or host when
--host-ram is given) is never proposed. Candidates that only differ in settings the step-time
model does not see (attention kernel, fused loss) collapse into the one with most headroom.
`tight` candidates are shown only when nothing `fits`.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, replace

from .errors import UserError, clip, one_line, printable, refuse_dash
from .memory import catalog
from .memory.estimate import Result, Setup, estimate
from .memory.steptime import StepTime, step_time
from .memory.trl_head import loss_path, release

METHODS = ("sft", "lora", "qlora", "dpo", "grpo")
# Distributed back ends each trainer can drive. TRL/accelerate: DeepSpeed, FSDP2, DDP; LLaMA-Factory
# launches DeepSpeed or FSDP2 through accelerate (llama8b-lora-fsdp2-4090x2); OpenRLHF trains with
# DeepSpeed only.
BACKENDS = {
    "trl": ("deepspeed", "fsdp2", "ddp"), "accelerate": ("deepspeed", "fsdp2", "ddp"),
    "llamafactory": ("deepspeed", "fsdp2", "ddp"), "openrlhf": ("deepspeed",),
}
# OpenRLHF builds its training DeepSpeed config with offload=False (openrlhf 0.11.2,
# utils/deepspeed/deepspeed.py get_ds_train_config; the CLI has --ds.adam_offload only), so its
# launch cannot render ZeRO-3 parameter offload.
NO_PARAM_OFFLOAD = frozenset({"openrlhf"})
# The trainer that runs each --framework: `plan -o` writes "accelerate" (the HF Trainer under
# accelerate) as TRL's scripts (plan_out.WRITERS), whose trainers build TRL's LM head
TRAINERS = {"accelerate": "trl"}
# Liger's fused linear + cross-entropy: TRL (use_liger_kernel) and LLaMA-Factory (enable_liger_kernel)
LIGER = ("trl", "llamafactory", "accelerate")
# Model types Liger patches (linkedin/Liger-Kernel, src/liger_kernel/transformers/monkey_patch.py,
# MODEL_TYPE_TO_APPLY_LIGER_FN at 00218a06; the catalog's types only): for any other type, Qwen v1's
# remote code ("qwen") say, use_liger_kernel logs "no Liger kernels supported" and changes nothing.
# Liger matches the loaded model's config.model_type, which for a VLM is the outer one (MiniCPM-V:
# "minicpmv", not in the table); the catalog keeps only the text model's, so VLMs get no Liger here.
LIGER_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma3_text"})
# ...and only for supervised losses: LLaMA-Factory 0.9.5 turns the fused cross-entropy off for every
# stage but pt/sft (model/loader.py, require_logits; model_utils/liger_kernel.py); TRL from 1.15 on
# refuses Liger's fused cross-entropy in SFT, DPO and GRPO for its own fused LM head (candidates).
LIGER_METHODS = ("sft", "lora", "qlora")
FLASH_GENERATIONS = ("ampere", "ada", "hopper", "blackwell")  # flash-attn 2 needs sm80+
MAX_MICRO = 64


@dataclass
class Candidate:
    setup: Setup
    memory: Result
    speed: StepTime

    @property
    def headroom(self) -> float:
        return 1 - self.memory.gpu_card_bytes / self.memory.gpu_bytes


_MAX_GPUS = 2**31 - 1  # the largest count the CLI's count flags take


def parse_gpus(text: str) -> tuple[int, str]:
    """'8xA100-80GB' -> (8, 'A100-80GB'); a bare name means one GPU."""
    m = re.fullmatch(r"\s*(?:(\d+)\s*[xX*]\s*)?(.+?)\s*", text or "")
    if not m:
        raise UserError(f"--gpus {text!r}: expected COUNTxGPU, e.g. 8xA100-80GB")
    digits = m.group(1) or "1"
    # bounded before int(): 5,000 digits were a ValueError traceback (Python's int/str limit)
    count = int(digits) if len(digits) <= 10 else _MAX_GPUS + 1
    try:
        name = catalog.gpu(m.group(2)).name
    except KeyError as e:
        raise UserError(f"--gpus: {e.args[0]}") from None
    if not 1 <= count <= _MAX_GPUS:
        raise UserError(f"--gpus {clip(text)!r}: need from 1 to {_MAX_GPUS} GPUs per node")
    return count, name


def _backends(framework: str, full: bool, n: int):
    """(label fields) for each sharding / offload choice the trainer supports."""
    out = []
    for b in BACKENDS[framework]:
        if b == "deepspeed":
            # on one GPU ZeRO partitions nothing: plain DeepSpeed, or ZeRO-Offload (stage 2) /
            # ZeRO-Infinity (stage 3) for what they move to the CPU
            for stage in (range(4) if n > 1 else (0,)):
                out.append(dict(framework="deepspeed", zero_stage=stage))
            for stage in ((1, 2, 3) if n > 1 else (2,)):
                out.append(dict(framework="deepspeed", zero_stage=stage, offload_optimizer="cpu"))
            if framework not in NO_PARAM_OFFLOAD:
                out.append(dict(framework="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_param="cpu"))
        elif b in ("fsdp", "fsdp2") and n > 1:
            out.append(dict(framework=b))
            out.append(dict(framework=b, fsdp_offload=True))
        elif b == "ddp":
            out.append(dict(framework="ddp" if n > 1 else "torch"))
    if not full:  # parameters frozen: offloading their optimizer buys nothing
        out = [o for o in out if o.get("offload_optimizer", "none") == "none" or o.get("offload_param")]
    return out


# The dropout a planned LoRA config is written with (plan_out renders s.lora_dropout), so the
# plan's estimate counts the masks that dropout keeps.
PLAN_LORA_DROPOUT = 0.05


def _method_fields(method: str, lora_rank: int, adapter: str = "none") -> dict:
    """Setup fields of a method; `adapter` trains DPO/GRPO through LoRA or QLoRA too."""
    if method in ("lora", "qlora"):
        method, adapter = "sft", method
    if adapter not in ("lora", "qlora"):
        return dict(method=method)
    lora = dict(method=method, lora_rank=lora_rank, lora_target="all", lora_dropout=PLAN_LORA_DROPOUT)
    return dict(lora, quantization="4bit") if adapter == "qlora" else lora


# vLLM engines: gpu_memory_utilization tried for colocate mode (TRL's default 0.3 first) and the
# server's (trl vllm-serve's default). An engine must hold the bf16 weights and the KV cache of one
# sequence of the full length: vLLM refuses to start when max_model_len does not fit its KV cache.
# ENGINE_OVERHEAD stands for what else its reservation holds (profiling activations, CUDA graphs):
# an assumption, not measured.
COLOCATE_UTILIZATIONS = (0.3, 0.4, 0.5, 0.6)
SERVER_UTILIZATION = 0.9
ENGINE_OVERHEAD = 1.0 * 1024 ** 3


def _engine_fits(base: Setup, util: float) -> bool:
    m = base.shape()
    weights = 2 * m.param_count()
    kv = 2 * m.num_hidden_layers * m.kv_dim * 2 * base.seq_len  # K and V in bf16, one full sequence
    return util * catalog.gpu(base.gpu).memory_bytes >= weights + kv + ENGINE_OVERHEAD


def _generation_modes(method: str, base: Setup, global_batch: int):
    if method != "grpo":
        return [dict()]
    util = next((u for u in COLOCATE_UTILIZATIONS if _engine_fits(base, u)), None)
    modes = [dict(vllm_mode="colocate", vllm_gpu_memory_utilization=util)] if util else []
    if not _engine_fits(base, SERVER_UTILIZATION):  # one GPU per server replica cannot hold the model
        return modes
    # `trl vllm-serve` on GPUs of its own, training on the rest, where the batch splits over the
    # trainers. One node: any split (qwen7b-lora-h100x8 serves on 4 of 8, data parallel). Several
    # nodes: the server takes a whole node, so every training node starts the same number of
    # processes (one torchrun/accelerate process count per node).
    per_node = base.gpus_per_node or base.gpus
    for k in (range(1, per_node) if base.nodes == 1 else (per_node,)):
        train = base.gpus - k
        if train >= 1 and global_batch % train == 0:
            modes.append(dict(vllm_mode="server", vllm_gpus=k, gpus=train, vllm_gpu_memory_utilization=SERVER_UTILIZATION))
    return modes


def _micro_batches(per_gpu: int):
    return [m for m in range(1, min(per_gpu, MAX_MICRO) + 1) if per_gpu % m == 0]


def candidates(base: Setup, method: str, framework: str, global_batch: int, lora_rank: int = 16,
               adapter: str = "none"):
    """Every Setup the search considers (not yet estimated)."""
    gpu = catalog.gpu(base.gpu)
    attns = ["flash_attention_2", "sdpa"] if gpu.generation in FLASH_GENERATIONS else ["sdpa"]
    shape = base.shape()
    liger = (framework in LIGER and method in LIGER_METHODS and shape.vision is None
             and shape.model_type in LIGER_MODEL_TYPES)
    mf = _method_fields(method, lora_rank, adapter)
    trainer = TRAINERS.get(framework, framework)
    # TRL from 1.15 on turns Liger's fused cross-entropy off for its own fused LM head (trl_head)
    liger = liger and loss_path(trainer, mf["method"], release(base), "liger")[0] == "liger"
    kernels = ["none", "liger"] if liger else ["none"]
    full = not mf.get("lora_rank")
    optimizers = ["adamw", "adamw_8bit"] if full and framework != "openrlhf" else ["adamw"]
    for gen in _generation_modes(method, base, global_batch):
        n = gen.get("gpus", base.gpus)
        if global_batch % n:
            continue
        per_gpu = global_batch // n
        for be in _backends(framework, full, n):
            if framework == "llamafactory" and be["framework"] == "fsdp2" and not full and base.precision == "bf16":
                # LLaMA-Factory LoRA under FSDP2 trains in pure bf16 (llama8b-lora-fsdp2-4090x2):
                # mixed precision makes accelerate <= 1.11 upcast the whole model, frozen base included
                be = dict(be, master_weights=False)
            for opt in optimizers:
                # bitsandbytes 8-bit states are not ZeRO/FSDP-partitioned or CPU-offloaded here
                if opt != "adamw" and be["framework"] not in ("ddp", "torch"):
                    continue
                for ckpt in (False, True):
                    for attn in attns:
                        for kernel in kernels:
                            for micro in _micro_batches(per_gpu):
                                yield replace(base, **mf, **be, **gen, optimizer=opt, gradient_checkpointing=ckpt,
                                              attn_implementation=attn, loss_kernel=kernel, micro_batch=micro,
                                              # the trainers' Liger switch patches the layers' kernels too
                                              layer_kernels="liger" if kernel == "liger" else base.layer_kernels,
                                              grad_accum=per_gpu // micro, trainer=trainer)


def _speed_key(s: Setup) -> tuple:
    return (s.framework, s.zero_stage, s.offload_optimizer, s.offload_param, s.fsdp_offload, s.optimizer,
            s.gradient_checkpointing, s.micro_batch, s.vllm_mode, s.gpus)


def lint_flags(s: Setup) -> str | None:
    """The lint rule the files of `s` would break, or None, decided on the Setup with the rule's
    own predicate (so plan and lint cannot disagree): plan proposes nothing lint rejects."""
    from .rules.lossscale import static_loss_scale

    if s.framework == "deepspeed" and static_loss_scale(s.trainer, "lora" if s.lora_rank else "full",
                                                        s.precision, s.zero_stage):
        return "fp16-static-loss-scale"
    return None


def search(base: Setup, method: str, framework: str, global_batch: int, lora_rank: int = 16,
           adapter: str = "none", only=None, passed: dict | None = None) -> list[Candidate]:
    """Candidates that do not run out of memory, fastest first (`fits` before `tight`).
    only: a predicate on Setup; others are not considered (plan -o: what recipe files express).
    passed: filled with {lint rule: setups left out because their files would break it}, and
    {"will not run": setups left out because estimate names an error they fail with}."""
    best: dict = {}
    oom: set = set()
    for s in candidates(base, method, framework, global_batch, lora_rank, adapter):
        if only is not None and not only(s):
            continue
        flagged = lint_flags(s)
        if flagged:
            if passed is not None:
                passed[flagged] = passed.get(flagged, 0) + 1
            continue
        key = _speed_key(s)
        # micro batches come smallest first and memory grows with them: once one runs out of
        # memory, the larger ones of the same setting are not estimated (the search's main pruning)
        same_but_micro = replace(s, micro_batch=0, grad_accum=0)
        sig = repr(same_but_micro)
        if sig in oom:
            continue
        r = estimate(s)
        if r.errors:
            # a setting the run fails with whatever memory it has (estimate's "will not run")
            if passed is not None:
                passed["will not run"] = passed.get("will not run", 0) + 1
            continue
        if r.verdict == "oom" or r.host_verdict == "oom":
            oom.add(sig)
            continue
        prev = best.get(key)
        if prev is not None and prev.memory.gpu_card_bytes <= r.gpu_card_bytes:
            continue
        best[key] = Candidate(s, r, prev.speed if prev else step_time(s))
    ranked = sorted(best.values(), key=lambda c: (c.memory.verdict != "fits", -c.speed.tokens_per_s,
                                                  _complexity(c.setup), -c.headroom))
    if any(c.memory.verdict == "fits" for c in ranked):
        ranked = [c for c in ranked if c.memory.verdict == "fits"]
    return ranked


def _complexity(s: Setup) -> tuple:
    """Ties in speed go to the setup with fewer moving parts: offload needs host RAM and CPU
    time, 8-bit optimizers change the numerics, and each sharding level adds collectives whose
    latency the bandwidth model does not see."""
    offload = 2 * (s.offload_param != "none") + (s.offload_optimizer != "none") + s.fsdp_offload
    shard = 3 if s.framework in ("fsdp", "fsdp2") else s.zero_stage if s.framework == "deepspeed" else 0
    return (offload, s.optimizer != "adamw", shard)


def describe(s: Setup) -> str:
    if s.framework == "deepspeed":
        parts = [f"ZeRO-{s.zero_stage}"]
        if s.offload_optimizer != "none":
            parts.append("offload optimizer")
        if s.offload_param != "none":
            parts.append("offload params")
    elif s.framework in ("fsdp", "fsdp2"):
        parts = [s.framework.upper()] + (["CPU offload"] if s.fsdp_offload else [])
    else:
        parts = ["DDP" if s.framework == "ddp" else "single GPU"]
    parts.append(f"micro {s.micro_batch} x accum {s.grad_accum}")
    parts.append("checkpointing" if s.gradient_checkpointing else "no checkpointing")
    parts.append(s.attn_implementation)
    if s.loss_kernel != "none":
        parts.append(f"{s.loss_kernel} loss")
    if s.optimizer != "adamw":
        parts.append(s.optimizer)
    if s.lora_rank:
        parts.append(("QLoRA" if s.quantization == "4bit" else "LoRA") + f" r{s.lora_rank}")
    if s.vllm_mode == "server":
        parts.append(f"vLLM server on {s.vllm_gpus} GPU")
    elif s.vllm_mode == "colocate":
        parts.append(f"vLLM colocate at {s.vllm_gpu_memory_utilization or 0.3:g} of each GPU")
    parts.append(s.precision)
    return ", ".join(parts)


_WATCHED = ("framework", "zero_stage", "offload_optimizer", "offload_param", "fsdp_offload", "optimizer",
            "gradient_checkpointing", "micro_batch", "grad_accum", "vllm_mode", "gpus")


def why(a: Candidate, b: Candidate) -> str:
    """One line: how `a` differs from the runner-up `b` and where its time goes instead."""
    gain = a.speed.tokens_per_s / b.speed.tokens_per_s - 1
    both_ds = a.setup.framework == b.setup.framework == "deepspeed"
    diffs = [f"{k} {getattr(a.setup, k)} vs {getattr(b.setup, k)}" for k in _WATCHED
             if getattr(a.setup, k) != getattr(b.setup, k) and (both_ds or k != "zero_stage")]
    differs = "; ".join(diffs) or "same speed settings"
    if abs(gain) < 0.005:
        ca, cb = _complexity(a.setup), _complexity(b.setup)
        reason = next((r for r, x, y in zip(("fewer offloads", "the stock optimizer", "less sharding"), ca, cb)
                       if x != y), f"more memory headroom ({a.headroom:.0%} vs {b.headroom:.0%})")
        return f"same predicted speed as the next ({differs}); ranked first for {reason}"
    parts = set(a.speed.parts) | set(b.speed.parts)
    part = max(parts, key=lambda p: b.speed.parts.get(p, 0) - a.speed.parts.get(p, 0))
    return (f"{gain:+.0%} tokens/s over the next ({differs}): "
            f"{part} {a.speed.parts.get(part, 0):.2f}s vs {b.speed.parts.get(part, 0):.2f}s per step")


def to_json(ranked: list, top: int, unwritten=None, passed: dict | None = None) -> dict:
    """unwritten: Setup -> why `plan -o` would not write it (None: it would)."""
    out = []
    for i, c in enumerate(ranked[:top]):
        d = {"rank": i + 1, "summary": describe(c.setup), **c.speed.to_json(),
             "verdict": c.memory.verdict, "gpu_card_bytes": round(c.memory.gpu_card_bytes),
             "gpu_bytes": c.memory.gpu_bytes, "headroom": round(c.headroom, 4),
             "host_peak_bytes": round(c.memory.host_peak_bytes), "setup": asdict(c.setup)}
        if i + 1 < len(ranked):
            d["why"] = why(c, ranked[i + 1])
        if unwritten is not None:
            d["not_written"] = unwritten(c.setup)
        out.append(d)
    passed = dict(passed or {})
    return {"candidates": out, "searched_fitting": len(ranked), "left_out_will_not_run": passed.pop("will not run", 0),
            "left_out_for_lint": passed}


def render_text(ranked: list, top: int, unwritten=None, passed: dict | None = None) -> str:
    gib = 1024 ** 3
    lines = []
    for i, c in enumerate(ranked[:top]):
        lines.append(f"#{i + 1} {c.speed.tokens_per_s:,.0f} tokens/s, {c.speed.seconds:.2f} s/step, "
                     f"MFU {c.speed.mfu:.0%}  | {describe(c.setup)}")
        lines.append(f"    memory {c.memory.gpu_card_bytes / gib:.1f} of {c.memory.gpu_bytes / gib:.1f} GiB per GPU "
                     f"({c.headroom:.0%} headroom, {c.memory.verdict}); host {c.memory.host_peak_bytes / gib:.0f} GiB")
        if i + 1 < len(ranked):
            lines.append(f"    why: {why(c, ranked[i + 1])}")
        reason = unwritten(c.setup) if unwritten is not None else None
        if reason:
            lines.append(f"    plan -o: not written yet ({reason})")
    flagged = {rule: n for rule, n in (passed or {}).items() if rule != "will not run"}
    if flagged:
        lines.append("left out because `ftrecipes lint` would flag their files: "
                     + ", ".join(f"{n} setups ({rule})" for rule, n in sorted(flagged.items())))
    if (passed or {}).get("will not run"):
        lines.append(f"left out because they would fail whatever memory they have (`estimate` says "
                     f"will not run): {passed['will not run']} setups")
    return "\n".join(lines)


def _base(a) -> Setup:
    count, gpu_name = parse_gpus(a.gpus)
    try:
        catalog.model(a.model)
    except KeyError as e:
        raise UserError(f"--model: {e.args[0]}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"--model {a.model!r}: cannot read it as a config.json ({e})") from None
    for flag, v in (("--seq-len", a.seq_len), ("--global-batch", a.global_batch), ("--nodes", a.nodes),
                    ("--top", a.top), ("--lora-rank", a.lora_rank)):
        if v < 1:
            raise UserError(f"{flag} {v}: must be at least 1")
    gpus = count * a.nodes
    if a.global_batch % gpus:
        raise UserError(f"--global-batch {a.global_batch} is not a multiple of the {gpus} data-parallel GPUs")
    gpu = catalog.gpu(gpu_name)
    host = int(a.host_ram * 1024 ** 3) if a.host_ram else None
    if a.image_slices < 0:
        raise UserError(f"--image-slices {a.image_slices}: must be 0 or more")
    # the trainers plan writes for run today's transformers, whose default optim with torch >= 2.8
    # is adamw_torch_fused (no update temporaries), as `estimate --config` reads a file without optim
    return Setup(model=a.model, gpu=gpu_name, gpus=gpus, gpus_per_node=count, nodes=a.nodes, seq_len=a.seq_len,
                 precision="bf16" if gpu.bf16 else "fp16", host_ram_bytes=host, image_slices=a.image_slices,
                 adam_impl="fused")


def main(a) -> int:
    if a.output is not None:  # `-o ''` was taken as no -o: the plan printed, nothing written, exit 0
        from . import plan_out

        if not a.output:
            raise UserError("-o: an empty folder name")
        refuse_dash(a.output, "standard output", "folder")
        problem = plan_out.unsupported(a)
        if problem:
            raise UserError(problem)
    elif a.name or a.force:
        raise UserError("--name and --force go with -o DIR")
    base = _base(a)
    passed: dict = {}
    ranked = search(base, a.method, a.framework, a.global_batch, a.lora_rank, a.adapter, passed=passed)
    if not ranked:
        print(one_line(f"plan: nothing fits {a.model} ({a.method}) on {a.gpus} x {a.nodes} node(s) at seq_len {a.seq_len}; "
                       "try `ftrecipes estimate` for the closest setup and its remedies"), file=sys.stderr)
        return 3
    if a.output is not None:
        from . import plan_out

        shown = search(base, a.method, a.framework, a.global_batch, a.lora_rank, a.adapter, only=lambda s: plan_out.expressible(s, a.framework))
        return plan_out.write(shown, ranked[0], a)
    from . import plan_out

    def unwritten(s):
        return plan_out.not_written(s, a)

    print(json.dumps(to_json(ranked, a.top, unwritten, passed), indent=1) if a.json
          else printable(render_text(ranked, a.top, unwritten, passed)))
    return 0


def register(sub) -> None:
    # the bounds estimate's flags have: a NaN host RAM crashed the search, -1 made it find nothing
    from .memory.cli import amount, count

    p = sub.add_parser("plan", help="fastest setup that fits: search sharding, offload, batch and kernels",
                       description="Search ZeRO/FSDP/DDP, offload, checkpointing and micro batch for the fastest "
                                   "setup the memory model does not call oom.")
    p.add_argument("--model", required=True, help="catalog name or a HF config.json")
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--gpus", required=True, help="GPUs per node, e.g. 8xA100-80GB")
    p.add_argument("--nodes", type=count(1), default=1)
    p.add_argument("--seq-len", type=count(1), required=True)
    p.add_argument("--global-batch", type=count(1), required=True, help="sequences (DPO: pairs) per optimizer step")
    p.add_argument("--host-ram", type=amount(0, 1e9), help="host RAM per node, GiB (offload candidates must fit it)")
    p.add_argument("--framework", choices=sorted(BACKENDS), default="trl")
    p.add_argument("--adapter", choices=["none", "lora", "qlora"], default="none",
                   help="train dpo/grpo through LoRA or QLoRA adapters (sft: use --method lora/qlora)")
    p.add_argument("--lora-rank", type=count(1), default=16)
    p.add_argument("--image-slices", type=count(0), default=0,
                   help="vision-language models: image slices per sample through the vision tower")
    p.add_argument("--json", action="store_true")
    p.add_argument("--top", type=count(1), default=5)
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write the fastest candidate the recipe files can express as a recipe folder DIR")
    p.add_argument("--name", help="recipe name; with it the folder is DIR/NAME (default: DIR's own name)")
    p.add_argument("--force", action="store_true", help="replace DIR if it exists")
    p.set_defaults(func=main)
