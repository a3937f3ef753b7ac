"""`ftrecipes plan` asked the question a recipe answers: the recipe's model, method, GPUs,
sequence length, global batch and host RAM, with every setting the search varies left open.

regen writes the answer into the recipe README's `plan` section (between
`<!-- ftrecipes:plan:begin -->` and `<!-- ftrecipes:plan:end -->`), and tests/test_recipes.py
holds every recipe to it: plan's first candidate is the recipe's own setup or one that the
memory and step-time models rate at least as fast, never `oom` and never one lint flags.
Nothing here knows a recipe by name: the request is read from recipe.yaml and its estimate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import plan, recipe_memory
from .memory.estimate import Result, Setup
from .memory.steptime import StepTime, step_time

GIB = 1024 ** 3
# recipe.yaml framework names that plan spells otherwise: an HF Trainer script (finetune.py)
# launched by torchrun is plan's "accelerate" (HF Trainer with DeepSpeed, FSDP or DDP)
FRAMEWORKS = {"hf-trainer": "accelerate"}
SAME_SPEED = 0.005  # within half a percent the step-time model does not tell two setups apart


@dataclass
class Comparison:
    flags: list            # the `ftrecipes plan` command line that asks the recipe's question
    setup: Setup           # the recipe's own setup, as its memory table estimates it
    memory: Result
    speed: StepTime
    ranked: list           # plan's candidates, fastest first
    passed: dict = field(default_factory=dict)  # {lint rule: candidates left out for it}

    @property
    def top(self):
        return self.ranked[0] if self.ranked else None

    @property
    def gain(self) -> float:
        return self.top.speed.tokens_per_s / self.speed.tokens_per_s - 1 if self.top else 0.0


def _method(s: Setup) -> tuple[str, str]:
    """(--method, --adapter) of a recipe's setup."""
    adapter = ("qlora" if s.quantization == "4bit" else "lora") if s.lora_rank else "none"
    if s.method == "sft" and adapter != "none":
        return adapter, "none"
    return s.method, adapter


def compare(r) -> Comparison:
    result = recipe_memory.estimate(r)
    s = result.setup
    name = r.meta["framework"]["name"]
    framework = FRAMEWORKS.get(name, name)
    method, adapter = _method(s)
    per_node = s.gpus_per_node or s.gpus
    # training processes x micro batch x accumulation: a vLLM server's GPUs do not train
    global_batch = s.micro_batch * s.grad_accum * s.gpus
    base = Setup(model=s.model, gpu=s.gpu, gpus=per_node * s.nodes, gpus_per_node=per_node, nodes=s.nodes,
                 seq_len=s.seq_len, precision=s.precision, host_ram_bytes=s.host_ram_bytes,
                 image_slices=s.image_slices)
    passed: dict = {}
    ranked = plan.search(base, method, framework, global_batch, s.lora_rank or 16, adapter, passed=passed)
    flags = ["--model", s.model, "--method", method, "--gpus", f"{per_node}x{s.gpu}", "--seq-len", str(s.seq_len),
             "--global-batch", str(global_batch), "--framework", framework]
    if s.nodes > 1:
        flags += ["--nodes", str(s.nodes)]
    if adapter != "none":
        flags += ["--adapter", adapter]
    if s.lora_rank and s.lora_rank != 16:
        flags += ["--lora-rank", str(s.lora_rank)]
    if s.host_ram_bytes:
        flags += ["--host-ram", f"{s.host_ram_bytes / GIB:g}"]
    if s.image_slices:
        flags += ["--image-slices", str(s.image_slices)]
    return Comparison(flags, s, result, step_time(s), ranked, passed)


def markdown(c: Comparison) -> str:
    """The README's plan section: what plan proposes for the recipe's question, with figures."""
    cmd = "ftrecipes plan " + " ".join(c.flags)
    mine = (f"this recipe's setup ({plan.describe(c.setup)}) is predicted at {c.speed.tokens_per_s:,.0f} tokens/s "
            f"and needs {c.memory.gpu_card_bytes / GIB:.1f} of {c.memory.gpu_bytes / GIB:.1f} GiB per GPU "
            f"({c.memory.verdict})")
    lines = [f"`{cmd}`", ""]
    if c.top is None:
        lines.append(f"finds nothing that fits; {mine}.")
        return "\n".join(lines) + "\n"
    t = c.top
    lines.append(f"proposes **{plan.describe(t.setup)}**: {t.speed.tokens_per_s:,.0f} tokens/s "
                 f"({t.speed.seconds:.2f} s per step, MFU {t.speed.mfu:.0%}), {t.memory.gpu_card_bytes / GIB:.1f} "
                 f"of {t.memory.gpu_bytes / GIB:.1f} GiB per GPU ({t.memory.verdict}), host "
                 f"{t.memory.host_peak_bytes / GIB:.0f} GiB; {mine}.")
    if abs(c.gain) < SAME_SPEED:
        lines.append("Both are predicted at the same speed.")
    else:
        lines.append(f"The models rate plan's proposal {c.gain:+.0%} in tokens/s over the recipe.")
    if c.passed:
        lines.append("Left out because `ftrecipes lint` would flag their files: "
                     + ", ".join(f"{n} setups ({rule})" for rule, n in sorted(c.passed.items())) + ".")
    return "\n".join(lines) + "\n"
