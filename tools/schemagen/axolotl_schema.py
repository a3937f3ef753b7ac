"""Generate schemas/axolotl.schema.json from an unpacked axolotl release (its pydantic models' source).

    pip download --no-deps axolotl==0.19.0 && unzip axolotl-0.19.0-py3-none-any.whl -d /tmp/axolotl
    python3 tools/schemagen/axolotl_schema.py /tmp/axolotl

Importing axolotl needs its whole training stack; only names are wanted here, so the models are
read with `ast` instead of imported and nothing has to be installed. The top-level keys are the fields (and their
`alias=`es) of AxolotlInputConfig, AxolotlConfigWCapabilities and every base class they inherit
from, plus the fields of every plugin's argument model (axolotl/integrations/*/args.py), which
validate_config merges in when `plugins:` names the plugin. Only names are taken: values are not
checked. validate_config returns `model.model_dump()` of a model that ignores unknown fields, so an
unknown key is dropped without a word: that is what this schema reports.
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
    props = {k: {"description": f"axolotl {v}"} for k, v in sorted(keys.items())}
    return closed_object("axolotl.schema.json", "axolotl config",
                         f"axolotl training YAML: the top-level keys of its config models (AxolotlInputConfig and bases, "
                         f"AxolotlConfigWCapabilities, plugin argument models), read from axolotl {version}'s source by "
                         "tools/schemagen/axolotl_schema.py. Names only; unknown keys are rejected here because axolotl "
                         "drops them silently.", {"name": "axolotl", "version": version}, props)


if __name__ == "__main__":
    write(build(sys.argv[1]), "axolotl.schema.json")
