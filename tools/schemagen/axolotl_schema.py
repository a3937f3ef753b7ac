"""Generate schemas/axolotl.schema.json from an unpacked axolotl release (its pydantic models).

    pip download --no-deps axolotl==0.19.0 && unzip axolotl-0.19.0-py3-none-any.whl -d /tmp/axolotl
    VENV/bin/python tools/schemagen/axolotl_schema.py /tmp/axolotl

Names: the fields (and their `alias=`es) of AxolotlInputConfig, AxolotlConfigWCapabilities and every
base class they inherit from, plus the fields of every plugin's argument model
(axolotl/integrations/*/args.py), which validate_config merges in when `plugins:` names the plugin.
They are read with `ast`, so a plugin whose imports need GPU packages still gives its names.
validate_config returns `model.model_dump()` of a model that ignores unknown fields, so an unknown key
is dropped without a word: that is what this schema reports for a key no model has.

Values: AxolotlConfigWCapabilities.model_json_schema(), which needs `import axolotl.utils.schemas.config`
(pydantic, torch, transformers, accelerate and Pillow: the trl stack venv plus Pillow will do; see
README.md). validate_config builds that model from the YAML and a ValidationError stops the run, so
a value the model refuses is an error. pydantic validates in lax mode, which JSON Schema's types do
not: `lax()` widens each scalar type to what pydantic coerces (an integer field takes "8", 8.0 and
true; a float field "1e-5", which PyYAML reads as a string; a boolean 0, 1 and "yes"), measured on
pydantic 2 with tests/test_parse_behaviour.py. Fields with a `mode="before"` field validator keep
only their names: the validator rewrites the value before the type applies. Without the import
the generator stops rather than write a names-only schema.
"""
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import closed_object, write  # noqa: E402

ROOTS = ("AxolotlInputConfig", "AxolotlConfigWCapabilities")


def classes(files):
    """{class name: (base names, {field: description})} over the given modules."""
    out = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                fields = {}
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_"):
                        if item.target.id != "model_config":
                            fields[item.target.id] = f"{node.name}.{item.target.id}"
                        for alias in _aliases(item.value):
                            fields[alias] = f"{node.name}.{item.target.id} (alias {alias})"
                out.setdefault(node.name, (bases, {}))[1].update(fields)
                out[node.name] = (bases, out[node.name][1])
    return out


def _aliases(value):
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg in ("alias", "validation_alias") and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                yield kw.value.value


def closure(name, table, seen):
    if name in seen or name not in table:
        return {}
    seen.add(name)
    bases, fields = table[name]
    out = {}
    for b in bases:
        out.update(closure(b, table, seen))
    out.update(fields)
    return out


# pydantic's lax-mode coercions (pydantic/_internal, checked by tests/test_parse_behaviour.py).
_INT_TEXT = {"type": "string", "pattern": r"^\s*[-+]?\d+(\.0*)?\s*$"}
_FLOAT_TEXT = {"type": "string", "pattern": r"^\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|(?i:[-+]?(inf|infinity|nan)))\s*$"}
_BOOL_TEXT = {"type": "string", "pattern": r"^(?i:0|1|t|f|y|n|true|false|yes|no|on|off)$"}
_LAX = {
    "integer": [{"type": "integer"}, {"type": "boolean"}, _INT_TEXT],
    "number": [{"type": "number"}, {"type": "boolean"}, _FLOAT_TEXT],
    "boolean": [{"type": "boolean"}, {"enum": [0, 1]}, _BOOL_TEXT],
}


def lax(node):
    """The schema widened to the values pydantic's lax mode accepts for each scalar type; the
    type the model states is kept in x-expected for messages."""
    if isinstance(node, list):
        return [lax(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: lax(v) for k, v in node.items() if k != "title"}
    kind = out.get("type")
    if isinstance(kind, str) and kind in _LAX:
        out.pop("type")
        out["anyOf"] = [dict(b) for b in _LAX[kind]]
        out["x-expected"] = kind
    return out


def value_schemas(pkg):
    """{key: schema} and the $defs from the real models, or ({}, {}) where they cannot be imported."""
    sys.path.insert(0, str(pkg))
    try:
        from axolotl.utils.schemas.config import AxolotlConfigWCapabilities as model
        from pydantic.json_schema import GenerateJsonSchema
    except ImportError as exc:
        # A names-only schema would silently drop every value check lint has: refuse instead.
        raise SystemExit(f"cannot import axolotl's models ({exc}): run this with the venv tools/schemagen/README.md describes")

    class Generator(GenerateJsonSchema):
        def enum_schema(self, schema):
            # TorchAOQuantDType's members are torch.dtype objects, which no YAML value equals.
            try:
                return super().enum_schema(schema)
            except Exception:
                return {}

    full = model.model_json_schema(schema_generator=Generator)
    rewritten = {f for d in model.__pydantic_decorators__.field_validators.values() if d.info.mode != "after" for f in d.info.fields}
    props = {}
    for key, sub in full["properties"].items():
        if key in rewritten or key in ("capabilities", "env_capabilities"):
            continue
        sub = {k: v for k, v in lax(sub).items() if k not in ("default", "description")}
        if sub:
            props[key] = sub
    return props, lax(full.get("$defs", {}))


def build(pkg):
    meta = next(Path(pkg).glob("axolotl-*.dist-info/METADATA"))
    version = next(l.split(":", 1)[1].strip() for l in meta.read_text().splitlines() if l.startswith("Version:"))
    pkg = Path(pkg) / "axolotl"
    schema_files = sorted((pkg / "utils" / "schemas").rglob("*.py"))
    plugin_files = sorted((pkg / "integrations").rglob("args.py"))
    table = classes(schema_files + plugin_files)
    keys, seen = {}, set()
    for root in ROOTS:
        keys.update(closure(root, table, seen))
    plugin_table = classes(plugin_files)
    for name in plugin_table:
        keys.update(closure(name, table, seen))
    values, defs = value_schemas(Path(pkg).parent)
    props = {k: {"description": f"axolotl {v}", **values.get(k, {})} for k, v in sorted(keys.items())}
    schema = closed_object("axolotl.schema.json", "axolotl config",
                           f"axolotl training YAML: the top-level keys of its config models (AxolotlInputConfig and bases, "
                           f"AxolotlConfigWCapabilities, plugin argument models), read from axolotl {version}'s source by "
                           "tools/schemagen/axolotl_schema.py (types, choices and bounds of the model's fields, widened to "
                           "pydantic's lax coercions; plugin fields by name). Unknown keys are rejected here because axolotl "
                           "drops them silently.", {"name": "axolotl", "version": version}, props)
    if defs:
        schema["$defs"] = defs
    return schema


if __name__ == "__main__":
    write(build(sys.argv[1]), "axolotl.schema.json")
