"""Shared helpers for the ftrecipes schema generators (run inside scratch venvs, not at lint time)."""
import ast
import dataclasses
import enum
import types
import typing
import inspect
import json
import textwrap
from pathlib import Path

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"


def closed_object(file_name, title, description, framework, properties, required=None):
    """A generated top-level schema: a closed object of the given properties (unknown keys rejected)."""
    schema = {"$schema": DRAFT, "$id": f"https://ftrecipes.dev/schemas/{file_name}", "title": title, "description": description}
    schema["x-framework"] = framework
    schema["type"] = "object"
    if required:
        schema["required"] = required
    schema["properties"] = properties
    schema["additionalProperties"] = False
    return schema


def argparse_scalar(action):
    """enum / integer / number for an argparse action with choices or a numeric type, else None."""
    if action.choices:
        return {"enum": list(action.choices)}
    if action.type is int:
        return {"type": "integer"}
    if action.type is float:
        return {"type": "number"}
    return None


def attribute_docstrings(cls):
    """Map attribute name -> docstring written right after its annotated assignment (whole MRO)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(src)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:] + [None]):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)):
                    docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def short(text, limit=400):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def write(schema, file_name):
    path = SCHEMAS / file_name
    path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(schema.get('properties', {}))} top-level keys)")


# PyYAML (YAML 1.1) reads 5e-7 (no dot) as a string; argparse then converts string defaults with the
# field's type, so numeric strings work for float fields.
NUMERIC_STRING = {"type": "string", "pattern": r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$",
                  "description": "Numeric string (PyYAML reads 5e-7 without a dot as a string; TrlParser and OmegaConf turn it into a float)."}


def type_schema(tp):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is typing.Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if origin is typing.Union or origin is types.UnionType:
        parts = []
        for a in args:
            s = type_schema(a)
            if s == {}:
                return {}
            if s not in parts:
                parts.append(s)
        return merge_union(parts)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, typing.List, set, frozenset):
        item = type_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (tuple, typing.Tuple):
        if args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [type_schema(a) for a in args], "minItems": len(args), "maxItems": len(args)}
        return {"type": "array"}
    if origin in (dict, typing.Dict) or tp is dict:
        return {"type": "object"}
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return {"enum": [m.value for m in tp]}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"anyOf": [{"type": "number"}, NUMERIC_STRING]}
        if tp is str:
            return {"type": "string"}
        if dataclasses.is_dataclass(tp):
            return dataclass_object(tp)
        if tp.__name__ == "ParallelismConfig":
            return {"type": "object", "description": "accelerate ParallelismConfig keyword arguments."}
    return {}


def merge_union(parts):
    """Collapse simple {"type": X} members into one type list; keep the rest in anyOf."""
    simple, rest = [], []
    for p in parts:
        if set(p) == {"type"} and isinstance(p["type"], str):
            simple.append(p["type"])
        elif "anyOf" in p:
            rest.extend(p["anyOf"])
        else:
            rest.append(p)
    # enum + string: the enum is advisory when a free string is allowed (e.g. IntervalStrategy | str):
    # HfArgumentParser turns Enum|str into the enum, so keep the enum and drop the free string.
    if "string" in simple and any("enum" in r for r in rest):
        simple.remove("string")
    if "null" in simple:
        for r in rest:
            if "enum" in r and None not in r["enum"]:
                r["enum"] = r["enum"] + [None]
                simple.remove("null")
                break
    out = []
    if simple:
        out.append({"type": simple[0] if len(simple) == 1 else simple})
    out.extend(rest)
    return out[0] if len(out) == 1 else {"anyOf": out}



def jsonable_default(f):
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:
        try:
            v = f.default_factory()
        except Exception:  # noqa: BLE001
            return dataclasses.MISSING
    else:
        return dataclasses.MISSING
    if isinstance(v, enum.Enum):
        v = v.value
    try:
        json.dumps(v)
        return v
    except TypeError:
        return dataclasses.MISSING




def dataclass_object(cls):
    hints = typing.get_type_hints(cls)
    props = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        s = type_schema(hints[f.name])
        s["description"] = short(f.metadata.get("help") or f.name.replace("_", " "), 300)
        props[f.name] = s
    return {"type": "object", "description": short(cls.__doc__ or cls.__name__, 200), "properties": props,
            "additionalProperties": False}
