"""Generate schemas/openrlhf.schema.json from OpenRLHF's argparse definitions.

    /tmp/scratch-schemas/orl/bin/python tools/schemagen/openrlhf_schema.py
    (any Python 3.11 works: it only needs the openrlhf source, found via OPENRLHF_SRC or the venv)

Venv: /tmp/scratch-schemas/orl with `pip install --no-deps openrlhf==0.11.2` (source only; its imports
need CUDA-only packages). Each training CLI builds its parser under `if __name__ == "__main__":`; this
script parses the module with `ast`, takes that block's statements up to `parser.parse_args()` (parser
construction, add_argument calls, the `for prefix in ("actor", "critic")` loop) and executes only those
with argparse, then reads parser._actions. Nothing from openrlhf is imported.

Output: an object keyed by flag name without the leading `--` (e.g. "ds.zero_stage"); store_true /
store_false flags take `true` (flag present), choices become enums, type int/float/str the JSON type,
nargs a list. `x-commands` lists the CLI modules accepting each flag.
"""
import argparse
import ast
import datetime
import importlib.util
import math
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import closed_object, short, write  # noqa: E402

COMMANDS = ["train_sft", "train_dpo", "train_rm", "train_ppo_ray"]
INT_STRING = {"type": "string", "pattern": r"^[-+]?\d+$"}
FLOAT_STRING = {"type": "string", "pattern": r"^([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?inf|nan)$"}

# Flag names of earlier OpenRLHF eras (NOTES.md): rejected with a pointer to the 0.11 spelling.
LEGACY = {
    "zero_stage": "ds.zero_stage",
    "bf16": "ds.param_dtype",
    "param_dtype": "ds.param_dtype",
    "flash_attn": "ds.attn_implementation",
    "attn_implementation": "ds.attn_implementation",
    "adam_offload": "ds.adam_offload",
    "gradient_checkpointing": "model.gradient_checkpointing_enable",
    "micro_train_batch_size": "train.micro_batch_size",
    "train_batch_size": "train.batch_size",
    "max_len": "data.max_len",
    "max_epochs": "train.max_epochs",
    "learning_rate": "adam.lr",
    "save_path": "ckpt.output_dir",
    "pretrain": "model.model_name_or_path",
    "lora_rank": "ds.lora.rank",
}


# Values the flag's consumer restricts further than argparse does.
CONSTRAINTS = {
    "ds.zero_stage": {"enum": [0, 1, 2, 3, "0", "1", "2", "3"]},
}


def source_dir():
    if os.environ.get("OPENRLHF_SRC"):
        return pathlib.Path(os.environ["OPENRLHF_SRC"])
    spec = importlib.util.find_spec("openrlhf")
    return pathlib.Path(spec.submodule_search_locations[0])


class _FixedDatetime(datetime.datetime):
    """Run-name defaults use datetime.now(): pin it so the output is reproducible (see TIME_DEFAULT)."""

    @classmethod
    def now(cls, tz=None):
        return cls(2000, 1, 1)


TIME_DEFAULT = "0101T00:00"


def build_parser(path):
    tree = ast.parse(path.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    body = []
    for stmt in main.body:
        if "parse_args(" in ast.unparse(stmt):
            break
        body.append(stmt)
    ns = {"argparse": argparse, "datetime": _FixedDatetime, "math": math, "os": os}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)  # noqa: S102
    return ns["parser"]


def value_schema(a):
    kind = type(a).__name__
    if kind in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction"):
        effect = {"_StoreTrueAction": "sets it true", "_StoreFalseAction": f"sets {a.dest} false",
                  "_StoreConstAction": f"stores {a.const!r}"}[kind]
        return {"const": True, "x-argparse": {"_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
                                                   "_StoreConstAction": "store_const"}[kind],
                "_effect": f"Switch (no argument): presence {effect}."}
    if a.choices is not None:
        item = {"enum": list(a.choices)}
    elif a.type is int:
        item = {"anyOf": [{"type": "integer"}, INT_STRING]}
    elif a.type is float:
        item = {"anyOf": [{"type": "number"}, FLOAT_STRING]}
    elif a.type in (str, None):
        item = {"type": "string"}
    else:
        item = {}
    if a.nargs in ("*", "+") or isinstance(a.nargs, int):
        s = {"type": "array", "items": item, "x-nargs": a.nargs}
        if isinstance(a.nargs, int):
            s["minItems"] = s["maxItems"] = a.nargs
        elif a.nargs == "+":
            s["minItems"] = 1
        if a.nargs in ("*", "+"):
            # a single value is also fine in the object form
            s = {"anyOf": [s, item], "x-nargs": a.nargs} if item else s
        return s
    return item


def jsonable(v):
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (str, int, float, bool, list)) or v is None:
        return v
    return None


def build():
    src = source_dir()
    version = "unknown"
    for line in (src / "__init__.py").read_text().splitlines() if (src / "__init__.py").exists() else []:
        if line.startswith("__version__"):
            version = line.split("=")[1].strip().strip("\"'")
    if version == "unknown":
        try:
            from importlib.metadata import version as v
            version = v("openrlhf")
        except Exception:  # noqa: BLE001
            pass
    props, commands, defaults = {}, {}, {}
    for cmd in COMMANDS:
        parser = build_parser(src / "cli" / f"{cmd}.py")
        for a in parser._actions:
            flags = [o[2:] for o in a.option_strings if o.startswith("--")]
            if not flags or a.dest == "help":
                continue
            for flag in flags:
                s = value_schema(a)
                effect = s.pop("_effect", "")
                help_text = (a.help or "").replace("%%", "%")
                if help_text and effect and not help_text.rstrip().endswith("."):
                    help_text = help_text.rstrip() + "."
                desc = " ".join(x for x in (help_text, effect) if x) or f"{flag.replace('.', ' ').replace('_', ' ')} (no help text in OpenRLHF)"
                if flag not in props:
                    s["description"] = short(desc)
                    props[flag] = s
                elif {k: v for k, v in props[flag].items() if k != "description"} != s:
                    old = {k: v for k, v in props[flag].items() if k != "description"}
                    props[flag] = {"anyOf": [old, s], "description": props[flag]["description"]}
                commands.setdefault(flag, [])
                if cmd not in commands[flag]:
                    commands[flag].append(cmd)
                if not a.option_strings[0].startswith("--") or a.default is argparse.SUPPRESS:
                    continue
                d = jsonable(a.default)
                if isinstance(d, str) and d.endswith(TIME_DEFAULT):
                    d = d[: -len(TIME_DEFAULT)] + "<MMDD>T<HH:MM> (launch time)"
                if d is not None and "const" not in s:
                    defaults.setdefault(flag, {})[cmd] = d
    for flag, s in props.items():
        s["x-commands"] = commands[flag]
        ds = defaults.get(flag, {})
        if len({repr(v) for v in ds.values()}) == 1:
            s["default"] = next(iter(ds.values()))
        elif ds:
            s["x-defaults"] = ds
    for flag, extra in CONSTRAINTS.items():
        assert flag in props, flag
        keep = {k: v for k, v in props[flag].items() if k.startswith("x-") or k in ("description", "default")}
        props[flag] = dict(extra, **keep)
    for old, new in LEGACY.items():
        assert new in props, f"legacy target {new} missing"
        if old not in props:
            props[old] = {"not": {}, "description": f"Flag of OpenRLHF before 0.10.2; since then use {new}."}
    return closed_object("openrlhf.schema.json", "OpenRLHF training flags",
                    f"Command-line flags of OpenRLHF {version} (openrlhf.cli.{{{','.join(COMMANDS)}}}) as an object: key = flag "
                    "without the leading --, value = its argument (true for switches). Generated by "
                    "tools/schemagen/openrlhf_schema.py from the argparse definitions. Flags are the dotted 0.10.2+ names; "
                    "x-commands lists the CLI modules accepting each flag.",
                    {"name": "openrlhf", "version": version, "commands": COMMANDS}, dict(sorted(props.items())))


if __name__ == "__main__":
    write(build(), "openrlhf.schema.json")
