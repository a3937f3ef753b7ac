"""Load our JSON Schemas (Draft 2020-12) and validate data against them with positions."""

import difflib
import re
import functools
import json

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from . import paths
from .errors import UserError
from .findings import ERROR, Finding

SCHEMA_BASE = "https://ftrecipes.dev/schemas/"


@functools.lru_cache(maxsize=None)
def _load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _retrieve(uri):
    # Schemas are found by their $id: https://ftrecipes.dev/schemas/<file name>.
    # Loading on demand keeps `render` from parsing half a megabyte of schemas it doesn't use.
    if not uri.startswith(SCHEMA_BASE):
        raise LookupError(f"unknown schema {uri}")
    return Resource.from_contents(_load(str(paths.schemas_dir() / uri[len(SCHEMA_BASE):])))


@functools.lru_cache(maxsize=1)
def registry():
    return Registry(retrieve=_retrieve)


def load_schema(name):
    """A schema from schemas/ by file name (e.g. 'deepspeed.schema.json')."""
    path = paths.schemas_dir() / name
    try:
        return _load(str(path))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load schema: {exc}", path=path) from None


def validator(schema):
    return Draft202012Validator(schema, registry=registry())


def suggest(word, choices):
    """'did you mean' for a misspelled key, or '' when nothing is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    if not close:
        # Prefix/suffix slips (a stray 's', a dropped '_per_gpu') are common in configs.
        low = str(word).lower()
        close = [c for c in choices if low.startswith(str(c).lower()) or str(c).lower().startswith(low)][:1]
    return f"; did you mean '{close[0]}'?" if close else ""


def _dotted(path):
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def resolve_ref(validator_, schema):
    """Follow a $ref so that error messages can list the allowed keys and types."""
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 10:
        schema = validator_._resolver.lookup(schema["$ref"]).contents
        seen += 1
    return schema


def _expectation(v, schema):
    schema = resolve_ref(v, schema)
    if not isinstance(schema, dict):
        return "a valid value"
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(e) for e in schema["enum"])
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        text = " or ".join(types)
        bounds = []
        if "minimum" in schema:
            bounds.append(f">= {schema['minimum']}")
        if "exclusiveMinimum" in schema:
            bounds.append(f"> {schema['exclusiveMinimum']}")
        if "maximum" in schema:
            bounds.append(f"<= {schema['maximum']}")
        if bounds:
            text += " " + " and ".join(bounds)
        return text
    for word in ("anyOf", "oneOf"):
        if word in schema:
            return " or ".join(_expectation(v, s) for s in schema[word])
    return "a valid value"


def _allowed_keys(v, schema):
    schema = resolve_ref(v, schema)
    keys = list(schema.get("properties", {}))
    for word in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(word, []):
            keys += _allowed_keys(v, sub)
    return keys


def _show(value):
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check(doc, schema, unknown_note=""):
    """Validate a sources.Document against a schema; return Findings sorted by position.

    Unknown keys become ``unknown-key`` findings with a 'did you mean'; every other
    violation names the key, the value and what was expected.
    """
    v = validator(schema)
    ignored_by = f" ({unknown_note})" if unknown_note else ""
    findings = []
    for err in v.iter_errors(doc.data):
        findings.extend(_findings(v, err, doc, ignored_by))
    unique = {f.sort_key(): f for f in findings}
    return sorted(unique.values(), key=Finding.sort_key)


def _findings(v, err, doc, ignored_by):
    path = tuple(err.absolute_path)
    name = _dotted(path)

    def at(p, rule, message):
        line, col = doc.where(p)
        return Finding(str(doc.path), line, col, rule, ERROR, message)

    if err.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(err.instance, dict):
        schema = err.schema
        allowed = _allowed_keys(v, schema)
        patterns = list(schema.get("patternProperties", {}))

        out = []
        for key in err.instance:
            if key in allowed or any(re.search(p, key) for p in patterns):
                continue
            where = "" if not path else f" in {name}"
            out.append(at(path + (key,), "unknown-key", f"unknown key '{key}'{where}{ignored_by}{suggest(key, allowed)}"))
        return out or [at(path, "schema", err.message)]
    if err.validator == "required":
        missing = [k for k in err.validator_value if isinstance(err.instance, dict) and k not in err.instance]
        return [at(path, "missing-key", f"{name}: missing required key '{k}'") for k in missing]
    if err.validator == "type":
        return [at(path, "wrong-type", f"{name}: expected {_expectation(v, err.schema)}, got {_show(err.instance)}")]
    if err.validator in ("enum", "const"):
        return [at(path, "bad-value", f"{name}: expected {_expectation(v, err.schema)}, got {_show(err.instance)}")]
    if err.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        return [at(path, "out-of-range", f"{name}: {_show(err.instance)} is out of range (expected {_expectation(v, err.schema)})")]
    if err.validator in ("anyOf", "oneOf"):
        # Prefer a nested unknown key over a vague "not valid under any": a typo
        # inside a section that accepts an object or a boolean is still a typo.
        for sub in err.context or ():
            if sub.validator in ("additionalProperties", "unevaluatedProperties") and sub.instance == err.instance:
                return _findings(v, sub, doc, ignored_by)
        # A branch that failed on something other than the type tells what is wrong
        # with a value of the right type (5 for a stage that takes 0-3 or "auto").
        rule = "wrong-type"
        for sub in err.context or ():
            if sub.validator in ("enum",):
                rule = "bad-value"
            elif sub.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                rule = "out-of-range"
        return [at(path, rule, f"{name}: expected {_expectation(v, err.schema)}, got {_show(err.instance)}")]
    if err.validator == "not":
        why = err.schema.get("description") if isinstance(err.schema, dict) else None
        if why and err.schema.get("not") == {}:
            return [at(path, "removed-key", f"{name}: {why}")]
        return [at(path, "bad-value", f"{name}: value {_show(err.instance)} is not allowed here" + (f" ({why})" if why else ""))]
    message = err.message
    if "description" in err.schema and err.validator in ("if", "then", "allOf", "dependentRequired", "dependentSchemas"):
        message = err.schema["description"]
    return [at(path, "schema", f"{name}: {message}")]
