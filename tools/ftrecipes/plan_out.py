"""`ftrecipes plan ... -o DIR`: the plan's winner written as a complete recipe folder.

Generic over trainers: WRITERS says, per trainer, which recipes/_lib building blocks make its
files and which extra values they read. A written recipe's templates/ only include those
blocks, so it renders like any hand-written recipe (render, lint, regen, estimate all work on
it). Its values come from the winning memory.Setup; only what the recipe's values can say is
written, so the plan considers only candidates whose every setting reaches the files
(`expressible`), and says when a faster one was passed over.
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import UserError, clip, one_line

# The rendering side (jinja2, the recipe loader, lint) is imported where a recipe is written:
# plain `plan` imports this module only to say which candidates -o would not write.

VOCAB = "https://ftrecipes.dev/schemas/values.schema.json#/$defs/"


def _global_batch(s) -> int:
    return s.micro_batch * s.grad_accum * s.gpus


# GRPO's generation engine: only the TRL blocks render it (trl/grpo.yaml.j2, trl/vllm_serve.sh.j2)
_NO_VLLM = (lambda s: s.vllm_mode != "none", lambda s: "vLLM generation: this trainer has no GRPO building block")


# Distributed back ends (memory.Setup.framework) -> the values' `distributed`: "torch" (one
# process, no wrapper) is DDP's block on one GPU (accelerate's distributed_type NO).
_DISTRIBUTED = {"deepspeed": "deepspeed", "fsdp2": "fsdp2", "ddp": "ddp", "torch": "ddp"}
ALL = frozenset(_DISTRIBUTED)


@dataclass(frozen=True)
class Writer:
    """One trainer's recipe shape. Files: (name, _lib template, format, executable, back ends it
    is written for); `{method}` in a name stands for sft / dpo. The primary file is the
    DeepSpeed config where there is one, else the FSDP accelerate config, else the trainer's."""
    stack: str
    launcher: str
    script: str
    files: tuple
    values: dict  # defaults of the values this trainer's blocks read beyond the common ones
    datasets: dict  # a public dataset per method, the trainer's own example data
    methods: tuple = ("sft", "lora", "qlora", "dpo")  # plan --method values its blocks render
    gaps: tuple = ()  # (test, reason) on a Setup: settings its blocks cannot state beyond _GAPS
    method_blocks: dict = field(default_factory=dict)  # {method: {block: block used instead}}
    backends: frozenset = frozenset({"deepspeed"})  # Setup.framework values its blocks render
    launchers: dict = field(default_factory=dict)  # {distributed: launcher} where not `launcher`
    scripts: dict = field(default_factory=dict)  # {distributed: script} where not `script`

    def block(self, lib: str, method: str) -> str:
        return self.method_blocks.get(method, {}).get(lib, lib)

    def files_for(self, framework: str) -> list:
        """(name, lib, format, primary, executable) of the files written for a back end."""
        rows = [f for f in self.files if framework in f[4]]
        formats = [f[2] for f in rows]
        lead = ("deepspeed" if "deepspeed" in formats else "accelerate" if framework == "fsdp2"
                else next(fmt for fmt in formats if fmt not in ("accelerate", "shell")))
        return [(name, lib, fmt, fmt == lead, executable) for name, lib, fmt, executable, _ in rows]


_TRL = Writer(
    stack="trl", launcher="accelerate", script="trl.scripts.{method}",
    files=(("ds.json", "_lib/ds.json.j2", "deepspeed", False, frozenset({"deepspeed"})),
           ("accelerate.yaml", "_lib/trl/accelerate.yaml.j2", "accelerate", False, ALL),
           ("{method}.yaml", "_lib/trl/trainer.yaml.j2", "trl", False, ALL),
           ("launch.sh", "_lib/trl/launch.sh.j2", "shell", True, ALL)),
    values={"lora_target": "all-linear"},
    # the datasets TRL's own sft/dpo/grpo examples train on
    datasets={"sft": "trl-lib/Capybara", "dpo": "trl-lib/ultrafeedback_binarized", "grpo": "trl-lib/DeepMath-103K"},
    methods=("sft", "lora", "qlora", "dpo", "grpo"),
    method_blocks={"grpo": {"_lib/trl/trainer.yaml.j2": "_lib/trl/grpo.yaml.j2"}},
    backends=ALL,
    gaps=((lambda s: s.method == "grpo" and _global_batch(s) % 2,
           lambda s: f"GRPO: a global batch of {_global_batch(s)} has no num_generations of 2 or more dividing it"),
          (lambda s: s.method == "grpo" and s.framework != "deepspeed",
           lambda s: f"GRPO under {_BACKEND_NAMES.get(s.framework, s.framework)}: the GRPO blocks are written for DeepSpeed"),
          (lambda s: s.method == "grpo" and s.quantization != "none",
           lambda s: "GRPO with a 4-bit base: the GRPO block has no quantization keys")),
)

WRITERS = {
    "trl": _TRL,
    # HF Trainer through TRL's own scripts: `--framework accelerate` is written as the TRL recipe
    # (accelerate launch of trl.scripts.<method>, whose SFTTrainer / DPOTrainer are HF Trainers)
    "accelerate": _TRL,
    "llamafactory": Writer(
        stack="llamafactory", launcher="llamafactory-cli", script="llamafactory-cli train",
        files=(("ds.json", "_lib/ds.json.j2", "deepspeed", False, frozenset({"deepspeed"})),
               ("accelerate.yaml", "_lib/llamafactory/accelerate.yaml.j2", "accelerate", False, frozenset({"fsdp2"})),
               ("{method}.yaml", "_lib/llamafactory/train.yaml.j2", "llamafactory", False, ALL),
               ("launch.sh", "_lib/llamafactory/launch.sh.j2", "shell", True, ALL)),
        values={"lora_target": "all", "dataset_dir": "data", "template": "default"},
        # the demo datasets LLaMA-Factory ships in its data/ folder (dataset_info.json)
        datasets={"sft": "alpaca_en_demo", "dpo": "dpo_en_demo"},
        backends=ALL,
        launchers={"fsdp2": "accelerate"}, scripts={"fsdp2": "llamafactory.launcher"},
        gaps=(_NO_VLLM,
              (lambda s: s.framework == "fsdp2" and s.quantization != "none",
               lambda s: "4-bit base under FSDP2: LLaMA-Factory 4-bit recipes are written for DDP or one GPU"),
              # pure_bf16 needs bf16; fp16 mixed precision would have accelerate <= 1.11 upcast the whole model
              (lambda s: s.framework == "fsdp2" and s.lora_rank and s.precision != "bf16",
               lambda s: f"LoRA under FSDP2 in {s.precision}: LLaMA-Factory's FSDP2 LoRA recipe trains in pure bf16")),
    ),
    "openrlhf": Writer(
        stack="openrlhf", launcher="deepspeed", script="openrlhf.cli.train_{method}",
        files=(("launch.sh", "_lib/openrlhf/train_sft.sh.j2", "openrlhf", True, ALL),
               ("ds.json", "_lib/openrlhf/ds.json.j2", "deepspeed", False, ALL)),
        values={"openrlhf_version": "0.11.2"},
        # the dataset and keys of OpenRLHF's own SFT example (examples/scripts/train_sft_llama.sh)
        datasets={"sft": "Open-Orca/OpenOrca"},
        methods=("sft",),
        gaps=((lambda s: s.offload_param != "none",
               lambda s: "parameter offload: the OpenRLHF launch renders --ds.adam_offload only"), _NO_VLLM),
    ),
}


def unsupported(a) -> str | None:
    """Why `plan -o` cannot write this request, or None."""
    if a.framework not in WRITERS:
        return f"plan -o: --framework {a.framework} is not written as a recipe yet (supported: {', '.join(WRITERS)})"
    methods = WRITERS[a.framework].methods
    if a.method not in methods:
        return (f"plan -o: --method {a.method} is not written as a recipe yet for {a.framework} "
                f"(supported: {', '.join(methods)})")
    if a.nodes != 1:
        return f"plan -o: --nodes {a.nodes}: only one-node recipes are written so far"
    return None


# Settings a candidate may have that the written recipe files cannot state yet: the shared
# blocks render stock AdamW, no fused loss, bitsandbytes 4-bit base weights only without
# DeepSpeed (ZeRO-3 would need the storage dtype FSDP gets), and only their trainer's back ends.
_GAPS = (
    (lambda s: s.optimizer != "adamw", lambda s: f"{s.optimizer}: the values have no optimizer setting"),
    (lambda s: s.loss_kernel != "none", lambda s: f"{s.loss_kernel} loss: the values have no loss-kernel setting"),
    (lambda s: s.quantization not in ("none", "4bit"),
     lambda s: f"{s.quantization} base weights: the values state 4-bit only"),
    (lambda s: s.quantization != "none" and s.framework == "deepspeed",
     lambda s: "4-bit base under DeepSpeed: 4-bit recipes are written for DDP, FSDP2 or one GPU"),
)
_BACKEND_NAMES = {"fsdp2": "FSDP2", "fsdp": "FSDP", "ddp": "DDP", "torch": "one GPU without DeepSpeed"}


def gap(s, framework: str = "trl") -> str | None:
    """Why the recipe files of `framework` cannot state setup `s`, or None when they can."""
    if framework not in WRITERS:
        return None
    w = WRITERS[framework]
    if s.framework not in w.backends:
        return f"{_BACKEND_NAMES.get(s.framework, s.framework)}: the written {framework} files do not render it"
    return next((why(s) for test, why in _GAPS + w.gaps if test(s)), None)


def expressible(s, framework: str = "trl") -> bool:
    """The Setup's every setting reaches the rendered files and the recipe's memory estimate."""
    return gap(s, framework) is None


def not_written(s, a) -> str | None:
    """Why `plan ... -o` would not write candidate `s` for request `a`, or None (plan's ranking
    prints it beside each candidate)."""
    problem = unsupported(a)
    return problem.removeprefix("plan -o: ") if problem else gap(s, a.framework)


def _values(s, a, w: Writer) -> dict:
    v = {
        "model": a.model, "dataset": w.datasets[s.method], "output_dir": f"outputs/{a.name}",
        "nodes": s.nodes, "gpus_per_node": s.gpus_per_node, "micro_batch_size": s.micro_batch,
        "grad_accum": s.grad_accum, "seq_len": s.seq_len, "zero_stage": s.zero_stage, "precision": s.precision,
        "offload_optimizer": s.offload_optimizer, "offload_param": s.offload_param, "pin_memory": s.pin_memory,
        "gradient_checkpointing": s.gradient_checkpointing, "attn_implementation": s.attn_implementation,
        # TRL's SFTConfig and LLaMA-Factory's example defaults for full fine-tuning; 1e-4 for adapters
        "learning_rate": 1.0e-4 if s.lora_rank else 1.0e-5, "lr_scheduler": "cosine", "warmup_ratio": 0.03,
        "weight_decay": 0.0, "gradient_clipping": 1.0, "epochs": 1, "logging_steps": 10, "save_steps": 500,
        "master_port": 29500,
    }
    v["distributed"] = _DISTRIBUTED[s.framework]
    if s.framework != "deepspeed":
        # DeepSpeed's own settings; FSDP2's CPU offload is offload_param (as in llama8b-lora-fsdp2-4090x2)
        for key in ("zero_stage", "offload_optimizer", "pin_memory"):
            del v[key]
        v["offload_param"] = "cpu" if s.fsdp_offload else "none"
        if s.framework != "fsdp2":
            del v["offload_param"]
    elif s.precision == "fp16":
        v["loss_scale_power"] = 16  # DeepSpeed's dynamic loss scale; torch's GradScaler needs none
    if s.quantization != "none":
        v["quantization"] = s.quantization
    if s.lora_rank:
        v.update(lora_rank=s.lora_rank, lora_alpha=2 * s.lora_rank, lora_dropout=s.lora_dropout,
                 lora_target=w.values["lora_target"])
    if s.method == "dpo":
        v["beta"] = 0.1
    if s.method == "grpo":
        v.update(_grpo_values(s))
    v.update({k: x for k, x in w.values.items() if k != "lora_target"})
    return v


def _grpo_values(s) -> dict:
    """GRPO values from a Setup whose seq_len is prompt + completion (the step-time model's
    half-and-half split, which the plan ranked with)."""
    completion = s.seq_len // 2
    v = {"seq_len": s.seq_len - completion, "max_completion_length": completion,
         # TRL's default 8 when the batch allows; the completions of one prompt form its group
         "num_generations": next(g for g in (8, 4, 2) if _global_batch(s) % g == 0),
         "beta": 0.0, "vllm_mode": s.vllm_mode}
    if s.vllm_mode == "server":
        # TRL 1.16's server defaults (trl vllm-serve's port 8000; GRPOConfig's group port); the
        # reservation is the one the plan searched with (plan.SERVER_UTILIZATION, trl vllm-serve's 0.9)
        v.update(vllm_gpus=s.vllm_gpus, vllm_tensor_parallel_size=1, vllm_port=8000, vllm_group_port=51216)
    v["vllm_gpu_memory_utilization"] = s.vllm_gpu_memory_utilization
    return v


def _values_schema(name: str, values: dict) -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ftrecipes.dev/recipes/{name}/values.schema.json",
        "title": f"{name} values", "type": "object", "additionalProperties": False,
        "required": list(values),
        "properties": {k: {"$ref": VOCAB + k} for k in values},
    }


def _pins(stack: str) -> dict:
    """tested_with: the exact pins of the stack's test venv (tests/envs/<stack>/requirements.txt)."""
    from . import paths, sources

    root = paths.repo_root()
    if root is None:  # an installed wheel: None / "tests" was a TypeError traceback
        raise UserError(f"-o writes the pins of the {stack} test environment (tests/envs/{stack}/requirements.txt) as "
                        "the recipe's tested_with, and an installed ftrecipes has no checkout to read them from; "
                        "run plan -o from a checkout")
    path = root / "tests" / "envs" / stack / "requirements.txt"
    want = {"trl": ("trl", "transformers", "accelerate", "deepspeed", "peft", "torch"),
            "llamafactory": ("llamafactory", "transformers", "deepspeed", "peft", "torch"),
            "openrlhf": ("openrlhf", "deepspeed", "transformers", "torch")}[stack]
    pins = {}
    for line in sources.read_text(path).splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if m and m.group(1).lower() in want:
            pins[m.group(1).lower()] = m.group(2)
    return {k: pins[k] for k in want if k in pins}


def _story(c, runner_up, a, passed: list, m) -> dict:
    from .plan import describe, why

    gib = 1024 ** 3
    cause = (f"`ftrecipes plan` searched sharding (ZeRO stages, FSDP2, DDP), offload, checkpointing, attention "
             f"and micro batch for "
             f"{a.framework}; this setup is predicted at {c.speed.tokens_per_s:,.0f} tokens/s "
             f"({c.speed.seconds:.2f} s per step, MFU {c.speed.mfu:.0%}) and needs "
             f"{m.gpu_card_bytes / gib:.1f} of {m.gpu_bytes / gib:.1f} GiB per GPU ({m.verdict}).")
    if runner_up is not None:
        cause += f" Against the next candidate: {why(c, runner_up)}."
    if passed:
        cause += " Passed over although faster: " + "; ".join(passed) + "."
    kind = "QLoRA (4-bit base)" if c.setup.quantization != "none" else "LoRA"
    lora = f" with {kind} rank {c.setup.lora_rank}" if c.setup.lora_rank else ""
    return {
        "symptom": (f"{c.setup.method.upper()}{lora} of {a.model} on {a.gpus} at seq_len {a.seq_len} with "
                    f"{a.global_batch} sequences per optimizer step: which sharding, offload, checkpointing "
                    "and micro batch is fastest without running out of memory?"),
        "cause": cause,
        "fix": describe(c.setup) + ".",
        "sources": [f"ftrecipes plan --model {a.model} --method {a.method} --gpus {a.gpus} --seq-len {a.seq_len} "
                    f"--global-batch {a.global_batch} --framework {a.framework}"
                    + (f" --adapter {a.adapter}" if a.adapter != "none" else "")
                    + (f" --host-ram {a.host_ram:g}" if a.host_ram else ""),
                    "tools/ftrecipes/memory (memory model) and tools/ftrecipes/memory/steptime.py (step time)"],
    }


def _meta(c, a, w: Writer, values: dict, story: dict, names: dict) -> dict:
    from .memory import catalog
    from .plan import describe

    s = c.setup
    method = s.method
    files = []
    for name, lib, fmt, primary, executable in w.files_for(s.framework):
        entry = {"name": names[name], "template": names[name] + ".j2", "format": fmt}
        if primary:
            entry["primary"] = True
        if executable:
            entry["executable"] = True
        entry["description"] = f"built from recipes/{w.block(lib, method)}"
        files.append(entry)
    hardware = {"gpu": s.gpu, "gpus_per_node": s.gpus_per_node, "nodes": s.nodes}
    if a.host_ram:
        hardware["host_ram_gib"] = a.host_ram
    return {
        "name": a.name, "version": "1.0.0",
        "summary": _summary(a, s),
        "model": {"name": catalog.model(a.model).name, "hf_id": a.model},
        "method": method,
        "finetuning": ("qlora" if s.quantization != "none" else "lora") if s.lora_rank else "full",
        "framework": {"name": a.framework, "launcher": w.launchers.get(s.framework, w.launcher), "stack": w.stack,
                      "script": w.scripts.get(s.framework, w.script).format(method=method)},
        "hardware": hardware, "tested_with": _pins(w.stack), "story": story,
        "files": files, "values": values,
    }


def _summary(a, s) -> str:
    """recipe.yaml's summary (at most 200 characters, recipe.schema.json): the setup in full when
    it fits, else its sharding and offload (the story's fix has the rest)."""
    from .plan import describe

    adapter = (" + QLoRA" if s.quantization != "none" else " + LoRA") if s.lora_rank else ""
    head = f"{a.framework} {s.method}{adapter} of {a.model} on {s.gpus_per_node}x{s.gpu}: "
    full = f"{head}{describe(s)} (written by ftrecipes plan)"
    return full if len(full) <= 200 else f"{head}{describe(s).split(', micro ')[0]} (written by ftrecipes plan)"[:200]


def _readme(r, c, result) -> str:
    from . import recipe_memory

    sp = c.speed
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in sp.parts.items() if v)
    files = "\n".join(f"- `{f.name}` ({f.format}): {f.description}" for f in r.files)
    m = r.meta
    return f"""# {r.name}

{m['summary']}.

Written by `ftrecipes plan -o`: {m['story']['symptom']}

## Why this setup

{m['story']['cause']}

## Predicted throughput

From the step-time model (tools/ftrecipes/memory/steptime.py) for the default values:
**{sp.tokens_per_s:,.0f} tokens/s**, {sp.seconds:.2f} s per optimizer step, MFU {sp.mfu:.0%}.
Where the step's time goes: {parts}.

## Memory

<!-- ftrecipes:memory:begin -->
{recipe_memory.markdown_table(r, result)}<!-- ftrecipes:memory:end -->

## Files

{files}

Run `./rendered/launch.sh` (or render with your own values: `ftrecipes render {r.name} --set model=... -o OUT`).
The dataset and learning rate are the trainer's example defaults, not tuned for this model.
"""


def _skeleton(meta: dict, values: dict, w: Writer, names: dict, framework: str) -> dict:
    method = meta["method"]
    out = {"recipe.yaml": (_yaml(meta), False),
           "values.schema.json": (json.dumps(_values_schema(meta["name"], values), indent=2) + "\n", False)}
    for name, lib, *_ in w.files_for(framework):
        out[f"templates/{names[name]}.j2"] = (
            f'{{#- Written by ftrecipes plan -o: the shared building block, for {method}. -#}}\n'
            f'{{%- set method = "{method}" -%}}\n{{% include "{w.block(lib, method)}" %}}', False)
    out["CHANGELOG.md"] = (f"# Changelog — {meta['name']}\n\n## 1.0.0\n- Written by `ftrecipes plan -o`: "
                           f"{meta['summary']}.\n", False)
    return out


def _yaml(data) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


MAX_TRIES = 40  # candidates rendered and linted before giving up (each takes well under a second)


def _stage(c, runner_up, a, w: Writer, passed: list, tmp: Path):
    """Render candidate c as recipe `a.name` under tmp: ({path: (text, executable)}, lint findings)."""
    from . import lint, recipe as recipe_mod, recipe_memory, render

    values = _values(c.setup, a, w)
    names = {n: n.format(method=c.setup.method) for n, *_ in w.files_for(c.setup.framework)}
    meta = _meta(c, a, w, values, _story(c, runner_up, a, passed, c.memory), names)
    files = _skeleton(meta, values, w, names, c.setup.framework)
    stage = tmp / a.name
    for name, (text, _) in files.items():
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_text(text, encoding="utf-8")
    r = recipe_mod.load_dir(stage)
    for f, text in render.render(r):
        files[f"rendered/{f.name}"] = (text, f.executable)
        (stage / "rendered").mkdir(exist_ok=True)
        (stage / "rendered" / f.name).write_text(text, encoding="utf-8")
    findings = [replace(f, message=f.message.replace(f"{stage}/", ""))
                for f in lint.run([stage / "rendered"]).findings]
    if findings:
        return files, findings
    # The README's numbers and the story's are the recipe's own estimate (what `estimate` prints).
    result = recipe_memory.estimate(r)
    meta["story"] = _story(c, runner_up, a, passed, result)
    files["recipe.yaml"] = (_yaml(meta), False)
    (stage / "recipe.yaml").write_text(files["recipe.yaml"][0], encoding="utf-8")
    r = recipe_mod.Recipe(r.name, r.dir, meta, r.doc, r.files)
    files["README.md"] = (_readme(r, c, result), False)
    files["memory.svg"] = (recipe_memory.svg(r, result), False)
    return files, []


_RECIPE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,199}")
_NAME_RULE = "a recipe name is up to 200 lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"


def write(ranked: list, fastest, a) -> int:
    """Write the first of `ranked` (the search limited to `expressible` setups) whose files lint
    clean to a.output as a recipe folder; `fastest` is the unrestricted winner, named in the
    story when it is faster."""
    from . import atomic
    from .plan import describe

    # -o DIR writes the folder DIR; with --name, the folder DIR/NAME (e.g. -o recipes --name x)
    # The name given is checked, not the last part of DIR/NAME: --name ../x passed as "x" and
    # wrote beside DIR, --name a/b wrote DIR/a/b. 200 characters leave room under the file
    # system's 255 for the hidden staging folder beside it (.NAME.ftrecipes-PID-new).
    if a.name is not None and not _RECIPE_NAME.fullmatch(a.name):
        raise UserError(f"--name {clip(repr(a.name))}: {_NAME_RULE}")
    out = Path(a.output) / a.name if a.name else Path(a.output)
    a.name = out.name
    if not _RECIPE_NAME.fullmatch(a.name):
        raise UserError(f"-o {clip(repr(a.output))}: the folder's name is the recipe's name: {_NAME_RULE}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not a.force:
        raise UserError("exists and is not empty; use --force to replace it", path=out)
    w = WRITERS[a.framework]
    if not ranked:
        raise UserError(f"plan -o: nothing that {a.framework} recipe files can express fits "
                        f"(the fastest setup that fits: {describe(fastest.setup)})")
    passed = []
    if fastest.speed.tokens_per_s > ranked[0].speed.tokens_per_s * 1.005:
        passed.append(f"{describe(fastest.setup)} ({fastest.speed.tokens_per_s:,.0f} tokens/s), not written: "
                      f"{gap(fastest.setup, a.framework) or 'its files fail lint'}")
    for i, c in enumerate(ranked[:MAX_TRIES]):
        runner_up = ranked[i + 1] if i + 1 < len(ranked) else None
        with tempfile.TemporaryDirectory(prefix="ftrecipes-plan-") as tmp:
            files, findings = _stage(c, runner_up, a, w, passed, Path(tmp))
        if not findings:
            atomic.write_all(out, files, force=a.force, exact=True, tree=True)
            print(one_line(f"wrote {out} (recipe {a.name}: {describe(c.setup)})"))
            return 0
        f = findings[0]
        passed.append(f"{describe(c.setup)} ({c.speed.tokens_per_s:,.0f} tokens/s), whose files `ftrecipes lint` "
                      f"flags ({f.rule}: {f.message})")
    raise UserError(f"plan -o: the {min(len(ranked), MAX_TRIES)} fastest candidates all fail lint; "
                    f"the first: {passed[-1]}")
