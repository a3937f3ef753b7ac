"""Generate schemas/trl.schema.json from TRL's real argument dataclasses.

    /tmp/scratch-schemas/trl/bin/python tools/schemagen/trl_schema.py

Venv: /tmp/scratch-schemas/trl with torch==2.13.0, trl==1.16.0, transformers==5.23.0, peft==0.21.2,
accelerate==1.15.0, deepspeed==0.19.8 (see tools/schemagen/README.md).

The YAML given to `trl <command> --config x.yaml` (TrlParser.parse_args_and_config) sets defaults for the
fields of the command's dataclasses: each trainer script's make_parser() lists them, e.g.
grpo = (GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig). The schema is the union over
all training commands; `x-trainers` lists the config classes whose command accepts each key.
Keys that are no dataclass field are handed to `accelerate launch` by the `trl` CLI (and silently ignored
when the script is run directly), so accelerate launch flags are allowed too (marked `x-launcher`).
"""
import dataclasses
import importlib
import json
import pathlib
import sys
import typing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import trl  # noqa: E402
import transformers  # noqa: E402
from accelerate.commands.launch import launch_command_parser  # noqa: E402

from common import argparse_scalar, closed_object, jsonable_default, short, type_schema, write  # noqa: E402

COMMANDS = ["sft", "dpo", "grpo", "kto", "reward", "rloo", "distillation"]
# Free-`str` fields whose valid values TRL only documents in the help text (checked in __post_init__ or
# by `if loss_type == ...` chains in the trainer). Each value must appear in the help (checked below),
# so a TRL upgrade that changes the help fails the generator instead of silently drifting.
CURATED = {
    ("GRPOConfig", "loss_type"): ["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"],
    ("DPOConfig", "loss_type"): ["sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard",
                                 "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"],
    ("GRPOConfig", "vllm_mode"): ["server", "colocate"],
    ("RLOOConfig", "vllm_mode"): ["server", "colocate"],
    ("DistillationConfig", "vllm_mode"): ["server", "colocate"],
    ("GRPOConfig", "importance_sampling_level"): ["token", "sequence"],
    ("GRPOConfig", "scale_rewards"): ["group", "batch", "none"],
}
# Keys common in older recipes that no longer exist (rejected with a pointer to the replacement).
REMOVED = {
    "warmup_ratio": "Removed in transformers 5.15 (deprecated since 5.0): use warmup_steps with a float in [0, 1) for a ratio.",
    "overwrite_output_dir": "Removed in transformers 5 (the output directory is always reused).",
    "no_cuda": "Removed in transformers 5: use use_cpu.",
    "torch_dtype": "ModelConfig field is now dtype.",
    "evaluation_strategy": "Renamed to eval_strategy.",
}
BOOL_TOO = {("GRPOConfig", "scale_rewards")}


def field_schema(f, hint, config_name=None):
    s = type_schema(hint)
    curated = CURATED.get((config_name, f.name))
    if curated:
        help_text = f.metadata.get("help", "")
        missing = [v for v in curated if v not in help_text]
        assert not missing, f"{config_name}.{f.name}: curated values {missing} no longer in help text"
        enum_s = {"enum": list(curated)}
        if s.get("type") == "array" or "array" in json.dumps(s):
            s = {"anyOf": [enum_s, {"type": "array", "items": enum_s}]}
        else:
            s = enum_s
        if (config_name, f.name) in BOOL_TOO:
            s = {"anyOf": [{"type": "boolean"}, enum_s]}
        return s
    choices = f.metadata.get("choices")
    if choices:
        s = {"enum": list(choices) + ([None] if s.get("type") == ["string", "null"] or "null" in str(s.get("type")) else [])}
    return s


def _collect():
    """Every init field of each command's parser dataclasses: its schema (types merged where classes
    disagree), the trainer configs that accept it, their defaults and the non-config classes owning it."""
    props, trainers, defaults, classes = {}, {}, {}, {}
    all_configs = []
    for cmd in COMMANDS:
        module = importlib.import_module(f"trl.scripts.{cmd}")
        parser = module.make_parser()
        config_cls = [t for t in parser.dataclass_types if issubclass(t, transformers.TrainingArguments)][0]
        all_configs.append(config_cls.__name__)
        for dc in parser.dataclass_types:
            hints = typing.get_type_hints(dc)
            for f in dataclasses.fields(dc):
                if not f.init:
                    continue
                s = field_schema(f, hints[f.name], config_cls.__name__ if dc is config_cls else None)
                if f.name not in props:
                    s["description"] = short(f.metadata.get("help") or f.name.replace("_", " "))
                    props[f.name] = s
                    classes[f.name] = []
                else:
                    prev = {k: v for k, v in props[f.name].items() if k != "description"}
                    if prev != s and s not in props[f.name].get("anyOf", []):
                        # Same key, different type in another class: accept either.
                        desc = props[f.name]["description"]
                        members = []
                        for m in (prev, s):
                            for x in (m["anyOf"] if set(m) == {"anyOf"} else [m]):
                                if x not in members:
                                    members.append(x)
                        props[f.name] = {"anyOf": members, "description": desc}
                trainers.setdefault(f.name, []).append(config_cls.__name__)
                owner = dc.__name__
                if owner not in classes[f.name] and owner != config_cls.__name__:
                    classes[f.name].append(owner)
                d = jsonable_default(f)
                if d is not dataclasses.MISSING:
                    defaults.setdefault(f.name, {})[config_cls.__name__] = d
    return props, trainers, defaults, classes, all_configs


def _annotate(props, trainers, defaults, classes, all_configs):
    """x-trainers / x-source / default or x-defaults, and which trainers a key is limited to."""
    for name, s in props.items():
        tr = sorted(set(trainers[name]), key=all_configs.index)
        s["x-trainers"] = tr
        if classes[name]:
            s["x-source"] = classes[name]
        ds = defaults.get(name, {})
        vals = list({json.dumps(v, sort_keys=True) for v in ds.values()})
        if len(vals) == 1:
            s["default"] = ds[next(iter(ds))]
        elif vals:
            s["x-defaults"] = ds
        if len(tr) < len(all_configs):
            s["description"] = short(s["description"], 380) + f" [only: {', '.join(tr)}]"


def _launcher_keys(props):
    """accelerate launch flags the `trl` CLI takes as config keys (no dataclass field of their own)."""
    launch = launch_command_parser()
    for a in launch._actions:
        opts = [o[2:] for o in a.option_strings if o.startswith("--")]
        if not opts or a.dest in ("help", "config_file"):
            continue
        key = opts[0]
        if key in props:
            continue
        if type(a).__name__ in ("_StoreTrueAction", "_StoreFalseAction"):
            s = {"type": "boolean"}
        elif argparse_scalar(a):
            s = argparse_scalar(a)
        else:
            s = {"type": ["string", "number", "boolean"]}
        s["description"] = short(f"accelerate launch --{key} (only through the `trl` CLI). " + (a.help or ""))
        s["x-launcher"] = "accelerate"
        props[key] = s


def build():
    props, trainers, defaults, classes, all_configs = _collect()
    _annotate(props, trainers, defaults, classes, all_configs)
    for key, why in REMOVED.items():
        assert key not in props, f"{key} is a field again: drop it from REMOVED"
        props[key] = {"not": {}, "description": why}

    props["env"] = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                    "description": "Environment variables set before training (TrlParser pops this key)."}
    _launcher_keys(props)
    props["accelerate_config"] = {"type": "string", "x-launcher": "trl",
                                  "description": "accelerate config for the `trl` CLI: a path or a bundled name (single_gpu, multi_gpu, zero1, zero2, zero3, fsdp1, fsdp2)."}
    props["config_file"] = {"type": "string", "x-launcher": "accelerate", "description": "accelerate launch --config_file (only through the `trl` CLI)."}

    return closed_object("trl.schema.json", "TRL training config (TrlParser YAML)",
                    f"YAML for `trl <sft|dpo|grpo|kto|reward|rloo|distillation> --config file.yaml`, generated from trl {trl.__version__} "
                    f"(transformers {transformers.__version__}) by tools/schemagen/trl_schema.py: union of the script arguments, "
                    "ModelConfig, DatasetMixtureConfig and each trainer config (TrainingArguments subclasses). `x-trainers` "
                    "lists the config classes accepting a key; which command applies is not known from the file alone.",
                    {"name": "trl", "version": trl.__version__, "transformers": transformers.__version__, "trainers": all_configs},
                    props)


if __name__ == "__main__":
    write(build(), "trl.schema.json")
