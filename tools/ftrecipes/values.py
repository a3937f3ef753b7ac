"""Values: recipe defaults, --set overrides, typed by the recipe's values schema and validated."""

import math

from . import schemas, sources
from .errors import UserError, clip
from .scalars import coerce, kind_of  # noqa: F401 (values.coerce and values.kind_of are this layer's API)


def _property_schema(recipe, key):
    schema = recipe.values_schema.get("properties", {}).get(key)
    if schema is None:
        return None
    v = schemas.validator(recipe.values_schema)
    merged = {}
    stack = [schema]
    # A recipe narrows a vocabulary entry with allOf/$ref: gather every part so the type is known.
    while stack:
        part = schemas.resolve_ref(v, stack.pop())
        if not isinstance(part, dict):
            continue
        for k, val in part.items():
            if k in ("allOf",):
                stack.extend(val)
            elif k != "$ref":
                merged.setdefault(k, val)
        if "$ref" in part:
            stack.append({"$ref": part["$ref"]})
    return merged


_PYTHON_TYPES = {
    # bool is an int in Python and 4096.0 an integer to jsonschema; neither is one to a launch flag.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
}


def type_problem(recipe, key, value):
    """What is wrong with a value's Python type for its schema, the way --set would see it; None if fine."""
    prop = _property_schema(recipe, key)
    check = _PYTHON_TYPES.get(kind_of(prop)) if prop is not None else None
    if value is None or check is None or check(value):
        return None
    return f"expected {'an' if kind_of(prop)[0] == 'i' else 'a'} {kind_of(prop)}, got {type(value).__name__} {clip(repr(value))}"


def _check_types(recipe, data, doc, prefix=()):
    for key, value in data.items():
        problem = type_problem(recipe, key, value)
        if problem:
            line, col = doc.where(prefix + (key,))
            raise UserError(problem, path=doc.path, line=line, column=col, key=str(key))


def parse_sets(recipe, items):
    """--set key=value items → {key: typed value}; later items win, like Helm."""
    out = {}
    allowed = list(recipe.values_schema.get("properties", {}))
    for item in items:
        if "=" not in item:
            raise UserError(f"--set {item}: expected key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        prop = _property_schema(recipe, key)
        if prop is None:
            raise UserError(f"--set {item}: recipe {recipe.name} has no value '{key}'{schemas.suggest(key, allowed)}")
        if any("\ud800" <= c <= "\udfff" for c in raw):
            # An argv byte that is not UTF-8 arrives as a lone surrogate: no file can hold it.
            raise UserError(f"--set {key}: value is not valid UTF-8")
        try:
            out[key] = coerce(raw, kind_of(prop))
        except ValueError as exc:
            raise UserError(f"--set {item}: {key}: {exc}") from None
    return out


def load_file(recipe, path):
    """A values file (YAML or JSON mapping, like Helm's -f): checked key by key where it is written."""
    text = sources.read_text(path, max_bytes=1024 * 1024)
    doc = sources.parse_yaml(text, str(path))
    if doc.data is None:
        return {}
    if not isinstance(doc.data, dict):
        raise UserError("a values file must be a mapping of value names to values", path=path, line=1)
    if doc.duplicates:
        key, line, col = doc.duplicates[0]
        raise UserError(f"duplicate key '{key[-1]}'", path=path, line=line, column=col)
    partial = {k: v for k, v in recipe.values_schema.items() if k != "required"}
    problems = schemas.check(doc, partial)
    if problems:
        p = problems[0]
        raise UserError(p.message, path=path, line=p.line, column=p.column)
    _check_types(recipe, doc.data, doc)
    return dict(doc.data)


def _first_problem(recipe, data, where_doc):
    doc = where_doc if where_doc is not None else sources.Document(path="--set", data=data)
    doc.data = data
    problems = schemas.check(doc, recipe.values_schema)
    return problems[0] if problems else None


def first_problem(recipe, data):
    """The first way `data` (a whole set of values) breaks the recipe's values schema, or None."""
    return _first_problem(recipe, data, None)


def resolve(recipe, overrides=None):
    """Defaults merged with overrides, each validated: errors name the file and line, or the --set."""
    defaults = recipe.defaults
    if not isinstance(defaults, dict):
        line, col = recipe.doc.where(("values",))
        raise UserError("values must be a mapping", path=recipe.yaml_path, line=line, column=col)
    # Validate the defaults where they are written, so a bad default points at recipe.yaml.
    sub = sources.Document(
        path=str(recipe.yaml_path),
        data=defaults,
        positions={p[1:]: pos for p, pos in recipe.doc.positions.items() if p[:1] == ("values",)},
        key_positions={p[1:]: pos for p, pos in recipe.doc.key_positions.items() if p[:1] == ("values",)},
    )
    problem = _first_problem(recipe, defaults, sub)
    if problem:
        raise UserError(problem.message.replace("(top level)", "values"), path=problem.path, line=problem.line, column=problem.column)
    _check_types(recipe, defaults, sub)
    overrides = overrides or {}
    merged = dict(defaults)
    merged.update(overrides)
    problem = _first_problem(recipe, merged, None)
    if problem:
        setting = ", ".join(f"{k}={v}" for k, v in overrides.items())
        raise UserError(f"--set {setting}: {problem.message}")
    return merged
