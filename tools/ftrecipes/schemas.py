"""Load our JSON Schemas (Draft 2020-12) and validate data against them with positions."""

import copy
import difflib
import functools
import heapq
import json
import os
import re
from collections import deque

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from . import paths
from .errors import UserError
from .findings import ERROR, WARNING, Finding, ordered

SCHEMA_BASE = "https://ftrecipes.dev/schemas/"


@functools.lru_cache(maxsize=None)
def _load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


_SCHEMA_FILE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.json")
MAX_RECIPE_SCHEMA_BYTES = 1024 * 1024
MAX_RECIPE_SCHEMA_DEPTH = 40  # the shipped values schemas nest 6 levels; jsonschema recurses per level
# $id and $schema only name things (nothing resolves to them from outside), so any value is fine.
_REF_KEYS = ("$ref", "$dynamicRef")


def _retrieve(uri):
    # Schemas are found by their $id: https://ftrecipes.dev/schemas/<file name>.
    # Loading on demand keeps `render` from parsing half a megabyte of schemas it doesn't use.
    # Only a plain file name of schemas/ is looked up: never a path, never the network.
    name = uri[len(SCHEMA_BASE):] if uri.startswith(SCHEMA_BASE) else ""
    if not _SCHEMA_FILE.fullmatch(name) or not (paths.schemas_dir() / name).is_file():
        raise LookupError(f"unknown schema {uri}")
    return Resource.from_contents(_load(str(paths.schemas_dir() / name)))


def load_recipe_schema(path):
    """A recipe's values.schema.json, which arrives in pull requests: read with limits, checked
    to be a JSON Schema whose references stay inside the file or our own schemas/."""
    from . import sources

    doc = sources.parse_json(sources.read_text(path, max_bytes=MAX_RECIPE_SCHEMA_BYTES), str(path))
    if not isinstance(doc.data, dict):
        raise UserError("a values schema must be a JSON object", path=path, line=1, column=1)
    refs = []
    _check_refs(doc, doc.data, (), refs)
    try:
        Draft202012Validator.check_schema(doc.data)
    except SchemaError as exc:
        line, col = doc.where(tuple(exc.absolute_path))
        key = _dotted(tuple(exc.absolute_path))
        raise UserError(f"not a valid JSON Schema: {exc.message}", path=path, line=line, column=col, key=key) from None
    resolver = validator(doc.data)._resolver
    targets = {}  # ref -> the schema it names; a lookup re-crawls the registry, so once per ref
    for at, ref in refs:
        if ref in targets:
            continue
        try:
            targets[ref] = resolver.lookup(ref).contents
        except (Unresolvable, LookupError) as exc:
            line, col = doc.where(at)
            raise UserError(f"{at[-1]} {ref!r} points to nothing ({type(exc).__name__})", path=path, line=line, column=col, key=_dotted(at)) from None
    _refuse_ref_loops(doc, targets)
    return doc.data


# Keywords whose subschemas apply to the same instance: a cycle through them (and $ref) never
# reaches a smaller part of the value, so validation would recurse until the stack runs out.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "$ref", "$dynamicRef")


def _refuse_ref_loops(doc, targets):
    nodes = {}  # id(schema dict) -> (dict, path)
    stack = [(doc.data, ())]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            nodes[id(node)] = (node, at)
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((v, at + (k,)) for k, v in children)

    def edges(node):
        for key in _IN_PLACE:
            value = node.get(key)
            if key in _REF_KEYS and isinstance(value, str):
                yield targets[value]
            elif isinstance(value, list):
                yield from value
            elif isinstance(value, dict):
                yield from (value.values() if key == "dependentSchemas" else (value,))

    state = {}  # id -> 1 on the current path, 2 done
    for start in list(nodes):
        if start in state:
            continue
        path = [(start, edges(nodes[start][0]))]
        state[start] = 1
        while path:
            current, it = path[-1]
            nxt = next((c for c in it if isinstance(c, dict)), None)
            if nxt is None:
                state[current] = 2
                path.pop()
            elif state.get(id(nxt)) == 1:
                line, col = doc.where(nodes[current][1])
                raise UserError("$ref loop: this schema applies itself to the same value without end", path=doc.path,
                                line=line, column=col, key=_dotted(nodes[current][1]))
            elif id(nxt) not in state and id(nxt) in nodes:
                state[id(nxt)] = 1
                path.append((id(nxt), edges(nxt)))


def _check_refs(doc, node, at, refs):
    if len(at) > MAX_RECIPE_SCHEMA_DEPTH:
        line, col = doc.where(at)
        raise UserError(f"nested more than {MAX_RECIPE_SCHEMA_DEPTH} levels deep", path=doc.path, line=line, column=col)
    if isinstance(node, list):
        for i, item in enumerate(node):
            _check_refs(doc, item, at + (i,), refs)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in _REF_KEYS and isinstance(value, str) and not _local_ref(key, value):
            line, col = doc.where(at + (key,))
            raise UserError(f"{key} {value!r}: only references inside this file (#...) or to {SCHEMA_BASE}<file>.json are allowed; "
                            "nothing is fetched", path=doc.path, line=line, column=col, key=_dotted(at + (key,)))
        if key in _REF_KEYS and isinstance(value, str):
            refs.append((at + (key,), value))
        _check_refs(doc, value, at + (key,), refs)


def _local_ref(key, value):
    if value.startswith("#"):
        return True
    name = value[len(SCHEMA_BASE):].partition("#")[0] if value.startswith(SCHEMA_BASE) else ""
    return bool(_SCHEMA_FILE.fullmatch(name)) and (paths.schemas_dir() / name).is_file()


@functools.lru_cache(maxsize=1)
def registry():
    return Registry(retrieve=_retrieve)


def load_schema(name):
    """A schema from schemas/ by file name (e.g. 'deepspeed.schema.json')."""
    path = os.path.join(paths.schemas_dir(), name)
    try:
        return _load(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load schema: {exc}", path=path) from None


_LISTED_EXTRAS = 20


def _additional_properties(validator, ap, instance, schema):
    """jsonschema's own additionalProperties, but its message names the first 20 extra keys, not
    all of them: sorting 300,000 keys of a generated file into one message took seconds, for a
    message lint never shows (each unknown key is a finding of its own, see _findings)."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))  # joined as jsonschema joins them
    matches = re.compile(patterns).search if patterns else None
    extras = [k for k in instance if k not in properties and not (matches and matches(k))]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        shown = ", ".join(repr(k) for k in heapq.nsmallest(_LISTED_EXTRAS, extras, key=str))
        more = f" and {len(extras) - _LISTED_EXTRAS:,} more" if len(extras) > _LISTED_EXTRAS else ""
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{shown}{more} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({shown}{more} {verb} unexpected)")


# Keywords that say something about a schema and nothing about a value.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"})
# An item schema made of these only judges a mapping by its keys, the types of the values under
# type-only subschemas, and the values under the others: what _item_shape summarises.
_SHAPE_KEYWORDS = _ANNOTATIONS | {"type", "properties", "additionalProperties", "required"}
# Item-level errors whose message is made from the item's keys alone, so an item of the same
# shape gets the same error: copies of it are exact.
_KEY_ONLY_ERRORS = ("additionalProperties", "required")


def _annotation(keyword):
    return keyword in _ANNOTATIONS or isinstance(keyword, str) and keyword.startswith("x-")


def _type_only(schema):
    """True when a subschema's verdict on a value depends on the value's type alone."""
    return isinstance(schema, bool) or isinstance(schema, dict) and all(k == "type" or _annotation(k) for k in schema)


def _kind(value):
    # jsonschema's types are decided by the Python type (bool is not an integer) and, for a
    # float, by whether it is whole in drafts that count 1.0 as an integer.
    kind = type(value)
    return (kind, value.is_integer()) if kind is float else kind


_EXACT = (str, int, bool, type(None))


def _item_shape(validator, schema):
    """A function from a list item to a hashable summary of everything schema's verdict on it
    depends on (None from it: this item is not summarised), or None when the schema uses a
    keyword outside _SHAPE_KEYWORDS."""
    for _ in range(10):
        if not isinstance(schema, dict) or "$ref" not in schema:
            break
        if any(k != "$ref" and not _annotation(k) for k in schema):
            return None
        try:
            schema = validator._resolver.lookup(schema["$ref"]).contents
        except Unresolvable:
            return None  # the descent says what is wrong with it
    if not isinstance(schema, dict) or any(k not in _SHAPE_KEYWORDS and not _annotation(k) for k in schema):
        return None
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return None
    typed = {k for k, sub in props.items() if _type_only(sub)}
    extras_typed = _type_only(schema.get("additionalProperties", True))

    def shape(item):
        if type(item) is not dict:
            return _kind(item)
        out = []
        for key, value in item.items():
            # A key is itself unless it is no string: True and 1 are equal keys with other names.
            name = key if type(key) is str else (type(key), repr(key))
            if (key in typed) if key in props else extras_typed:
                out.append((name, _kind(value)))
            elif type(value) in _EXACT:
                out.append((name, type(value), value))
            elif type(value) in (dict, list):
                return None
            else:  # a float or a timestamp: its repr tells -0.0 from 0.0, and time zones apart
                out.append((name, type(value), repr(value)))
        return tuple(out)

    return shape


def _items(validator, items, instance, schema):
    """jsonschema's `items` (Draft 2020-12), checking once each shape of item a list holds.

    A generated config can hold a list of 180,000 mappings of one shape (dataset entries), each
    with the same unknown key: descending into every item cost jsonschema seconds. Items whose
    shape (_item_shape) was seen take the first one's errors, copied with their own path and
    value, when those errors are key-only (_KEY_ONLY_ERRORS, at the item itself); any other
    error, or an item that cannot be summarised, gets jsonschema's own descent.
    """
    if not validator.is_type(instance, "array"):
        return
    prefix = len(schema.get("prefixItems", []))
    shape = _item_shape(validator, items) if len(instance) - prefix > 1 and items is not False else None
    if shape is None:
        yield from _ITEMS(validator, items, instance, schema)
        return
    seen = {}  # shape -> the errors of its first item (copies to reuse), or None: descend
    for index in range(prefix, len(instance)):
        item = instance[index]
        key = shape(item)
        if key is None or key in seen and seen[key] is None:
            yield from validator.descend(instance=item, schema=items, path=index)
        elif key in seen:
            for first in seen[key]:
                yield _copy_error(first, item, index)
        else:
            kept = []
            for err in validator.descend(instance=item, schema=items, path=index):
                reusable = err.validator in _KEY_ONLY_ERRORS and list(err.path) == [index] and not err.context
                if kept is not None:
                    kept = kept + [_copy_error(err, item, index)] if reusable else None
                yield err
            seen[key] = kept


def _copy_error(err, instance, index):
    """err as it would be raised at item index of the list, for instance (of the same shape)."""
    new = err.__class__.__new__(err.__class__)  # copy.copy goes through __reduce_ex__: 3 times slower
    new.__dict__.update(err.__dict__)
    new.args = err.args
    new.instance = instance
    new.path = new.relative_path = deque([index])
    new.schema_path = new.relative_schema_path = deque(err.schema_path)
    new.context = []
    return new


_ITEMS = Draft202012Validator.VALIDATORS["items"]
_Validator = validators.extend(Draft202012Validator, {"additionalProperties": _additional_properties, "items": _items})
_VALIDATORS = {}  # id(schema) -> (schema, validator): one per schema, not one per file checked


def validator(schema):
    seen = _VALIDATORS.get(id(schema))
    if seen is not None and seen[0] is schema:  # the same schema object, not a new one at that id
        return seen[1]
    if len(_VALIDATORS) > 256:  # recipe schemas are loaded anew for each render
        _VALIDATORS.clear()
    made = _Validator(schema, registry=registry())
    _VALIDATORS[id(schema)] = (schema, made)
    return made


_MAX_SUGGESTIONS = 50


def suggest(word, choices):
    """'did you mean' for a misspelled key, or '' when nothing is close."""
    return _suggest(str(word), tuple(str(c) for c in choices))


@functools.lru_cache(maxsize=4096)
def _suggest(word, choices):
    # Cached: a big config repeats the same unknown key in every list item (a 9 MB YAML of
    # 180k dataset entries asked difflib the same question 180k times, ~4 s).
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        # Prefix/suffix slips (a stray 's', a dropped '_per_gpu') are common in configs.
        low = word.lower()
        close = [c for c in choices if low.startswith(c.lower()) or c.lower().startswith(low)][:1]
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
    if "x-expected" in schema:
        # A type widened to what a lax parser coerces (axolotl's pydantic): name the type it states.
        return schema["x-expected"] + _bounds(schema)
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(e) for e in schema["enum"])
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return " or ".join(types) + _bounds(schema)
    for word in ("anyOf", "oneOf"):
        if word in schema:
            return " or ".join(dict.fromkeys(_expectation(v, s) for s in schema[word])) + _bounds(schema)
    return "a valid value"


def _bounds(schema):
    bounds = [f"{op} {schema[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                                  ("exclusiveMaximum", "<")) if k in schema]
    return " " + " and ".join(bounds) if bounds else ""


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


def check(doc, schema, unknown_note=None, value_verdict=None):
    """Validate a sources.Document against a schema; return Findings sorted by position.

    Unknown keys become ``unknown-key`` findings with a 'did you mean' and, when
    ``unknown_note(path of the mapping)`` says so, what the framework does with them
    (formats.Format.unknown_note); every other violation names the key, the value and
    what was expected, and a wrong value what the framework does with it when
    ``value_verdict(path, rule, value, types, accepts)`` says so (formats.Format.value_verdict):
    a value the parser converts into one the schema takes is a ``coerced-value`` warning, or a
    ``misread-value`` error where another reader of the file takes it as written.
    """
    v = validator(schema)

    def ignored_by(path):
        note = unknown_note(path) if unknown_note else ""
        return f" ({note})" if note else ""

    findings = []
    try:
        for err in v.iter_errors(doc.data):
            found = _findings(v, err, doc, ignored_by)
            if value_verdict:
                found = [_with_effect(v, err, f, value_verdict) for f in found]
            findings.extend(found)
    except RecursionError:
        # Only a recipe's own values schema can do this ({"$ref": "#"} and other loops).
        raise UserError("the values schema refers to itself without end ($ref loop); cannot check", path=doc.path) from None
    return ordered(findings)


def _any_of(patterns):
    """A test of a key against patternProperties, None when there are none: one regex search
    per key where the patterns can be joined into one."""
    if not patterns:
        return None
    try:
        return re.compile("|".join(f"(?:{p})" for p in patterns)).search
    except re.error:  # a pattern that cannot be grouped (a global flag inside): ask each in turn
        compiled = [re.compile(p) for p in patterns]
        return lambda key: any(p.search(key) for p in compiled)


_VALUE_RULES = ("wrong-type", "bad-value", "out-of-range")


def _with_effect(v, err, finding, value_verdict):
    if finding.rule not in _VALUE_RULES:
        return finding
    path, value = tuple(err.absolute_path), err.instance
    # evolve keeps the root's resolver, so $refs in the sub-schema still resolve.
    verdict = value_verdict(path, finding.rule, value, expected_types(v, err.schema),
                            lambda made: v.evolve(schema=err.schema).is_valid(made))
    if verdict.coerced:
        said = f"{_dotted(path)}: {verdict.by} converts {_show(value)} to {verdict.written}"
        if verdict.misread:
            return Finding(finding.path, finding.line, finding.column, "misread-value", ERROR,
                           f"{said}, but {verdict.misread}; write {verdict.written}")
        return Finding(finding.path, finding.line, finding.column, "coerced-value", WARNING, f"{said}; write {verdict.written}")
    if not verdict.note:
        return finding
    severity = WARNING if verdict.acts_as else finding.severity
    return Finding(finding.path, finding.line, finding.column, finding.rule, severity, f"{finding.message} ({verdict.note})")


def expected_types(v, schema, depth=0):
    """The JSON types a schema accepts, in its order: `type`, the types of `enum`/`const` members,
    and the same for each branch of anyOf/oneOf."""
    schema = resolve_ref(v, schema)
    if not isinstance(schema, dict) or depth > 8:
        return []
    out = list(schema["type"]) if isinstance(schema.get("type"), list) else [schema["type"]] if "type" in schema else []
    members = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
    members += [schema["const"]] if "const" in schema else []
    out += [_json_type(m) for m in members]
    for word in ("anyOf", "oneOf"):
        for sub in schema.get(word, []):
            out += expected_types(v, sub, depth + 1)
    return list(dict.fromkeys(out))


def _json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "null" if value is None else "object"


_KEY_FACTS = {}  # (id(v), id(schema)) -> (v, schema, facts): the same for each of 180,000 list items


def _key_facts(v, schema):
    """The keys a mapping schema allows: as a list, a set, the strings 'did you mean' picks
    from, and a test of patternProperties."""
    seen = _KEY_FACTS.get((id(v), id(schema)))
    if seen is not None and seen[0] is v and seen[1] is schema:  # $refs resolve from v's root
        return seen[2]
    if len(_KEY_FACTS) > 4096:
        _KEY_FACTS.clear()
    allowed = _allowed_keys(v, schema)
    facts = (allowed, set(allowed), tuple(str(c) for c in allowed), _any_of(schema.get("patternProperties", {})),
             _homes(schema))
    _KEY_FACTS[(id(v), id(schema))] = (v, schema, facts)
    return facts


def _homes(schema):
    """{key: section} for the keys of this mapping's sections: a key written one level too high
    (FlagEmbedding's top-level `offload_optimizer`, which DeepSpeed ignores there) is told where it
    goes; difflib guessed 'optimizer', another section. A key two sections share has no one home."""
    out, props = {}, schema.get("properties") if isinstance(schema, dict) else None
    for section, sub in (props or {}).items():
        for key in sub.get("properties", {}) if isinstance(sub, dict) else ():
            out[key] = None if key in out else section
    return {k: v for k, v in out.items() if v is not None}


def _findings(v, err, doc, ignored_by):
    path = tuple(err.absolute_path)
    name = _dotted(path)

    def at(p, rule, message):
        line, col = doc.where(p)
        return Finding(str(doc.path), line, col, rule, ERROR, message)

    if err.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(err.instance, dict):
        allowed, allowed_set, choices, matches_pattern, homes = _key_facts(v, err.schema)
        # The same for every key of this mapping: worked out once (a file may hold 300,000 keys).
        where = ("" if not path else f" in {name}") + ignored_by(path)
        out = []
        file, key_at = str(doc.path), doc.key_positions.get
        for key in err.instance:
            if key in allowed_set or matches_pattern and matches_pattern(key):
                continue
            # A 'did you mean' costs milliseconds (difflib against every allowed key): past the
            # first few unknown keys of one object it is a generated file, not a typo.
            hint = (f"; it is a key of {homes[key]}" if key in homes else
                    _suggest(str(key), choices) if len(out) < _MAX_SUGGESTIONS else "")
            line, col = key_at(path + (key,)) or doc.where(path + (key,))  # where() from its key, as at() does
            out.append(Finding(file, line, col, "unknown-key", ERROR, f"unknown key '{key}'{where}{hint}"))
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
        if why and err.schema.get("x-rule"):  # a generator named the rule (one cause, one finding per key)
            return [at(path, err.schema["x-rule"], f"{name}: {why}")]
        if why and err.schema.get("not") == {}:
            return [at(path, "removed-key", f"{name}: {why}")]
        return [at(path, "bad-value", f"{name}: value {_show(err.instance)} is not allowed here" + (f" ({why})" if why else ""))]
    message = err.message
    # err.schema is a boolean for a `false` subschema (a key no branch allows).
    if isinstance(err.schema, dict) and "description" in err.schema and err.validator in ("if", "then", "allOf", "dependentRequired", "dependentSchemas"):
        message = err.schema["description"]
    return [at(path, "schema", f"{name}: {message}")]
