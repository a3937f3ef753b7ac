"""Tell which kind of config a file is, from its content (the name is only a hint).

The hints live in formats.FORMATS (each Format's `detection` and `command`); this module only
scores a document against them.
"""

import functools
import re
from pathlib import Path

from .formats import FORMATS, detectable, unchecked_owner
from .schemas import load_schema

KINDS = detectable()
SUFFIX_SYNTAX = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".sh": "shell", ".bash": "shell"}


def syntax_of(path, text):
    suffix = Path(path).suffix.lower()
    if suffix in SUFFIX_SYNTAX:
        return SUFFIX_SYNTAX[suffix]
    stripped = text.lstrip()
    if stripped.startswith("#!") or "\ntorchrun " in text or "\ndeepspeed " in text:
        return "shell"
    if stripped.startswith("{"):
        return "json"
    return "yaml"


def command_kind(text):
    """The shell format whose command the script runs, or None."""
    return next((k for k in KINDS if FORMATS[k].command and FORMATS[k].command in text), None)


def _score(fmt, syntax, keys):
    d = fmt.detection
    if fmt.syntax == syntax:
        together = 3 if d.together and all(k in keys for k in d.together) else 0
        return len(keys & d.markers) + together
    # JSON is YAML: a format written in the other syntax counts only its strongest keys.
    return sum(len(keys & group) * points for group, points in d.foreign) if syntax == "yaml" else 0


def kind_of(syntax, data, text):
    """The config kind of a parsed document, or None when it isn't one we know."""
    if syntax == "shell":
        return command_kind(text)
    if not isinstance(data, dict):
        return None
    keys = set(data)
    if unchecked_owner(keys):
        return None
    if syntax == "json":
        # Of the formats we check only DeepSpeed writes JSON configs: one marker suffices, unless
        # most keys are not DeepSpeed's (HfArgumentParser.parse_json_file reads a trainer's
        # arguments from JSON too, and per_device_train_batch_size is no DeepSpeed key)
        scores = {k: _score(FORMATS[k], syntax, keys) for k in KINDS if FORMATS[k].syntax == "json"}
        best = max(scores, key=lambda k: (scores[k], k), default=None)
        if best is None or scores[best] < 1 or _mostly_unknown(best, keys):
            return None
        return best
    for k in KINDS:
        if keys & FORMATS[k].detection.decisive:
            return k
    scores = {k: _score(FORMATS[k], syntax, keys) for k in KINDS if FORMATS[k].syntax in ("yaml", "json")}
    best = max(scores, key=lambda k: (scores[k], k))
    if scores[best] < 2 or _mostly_unknown(best, keys):
        # keys every trainer uses (output_dir, learning_rate) score for several formats: a file
        # most of whose keys the best one does not know is another format's (LLaMA-Factory's v1
        # `model:`/`peft_config:` files scored as TRL), and judging it as that one would call
        # every key an error
        return None
    return best


_YAML_TOP_KEY = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:(?:[ \t]|$)", re.M)


# One token of JSON-like text for surface_keys: a string, a comment, a bracket or a colon.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|//[^\n]*|/\*[^*]*(?:\*+[^*/][^*]*)*(?:\*+/)?|[{\[]+|[}\]]+|:')


def surface_keys(syntax, text):
    """The top-level keys a file's text names, read without parsing it (the file may not parse).

    YAML: names at the start of a line followed by a colon. JSON: strings followed by a colon at
    depth one, skipping // and /* */ comments, so JSONC and JSON with NaN still give their keys."""
    if syntax != "json":
        return _YAML_TOP_KEY.findall(text)
    keys, depth, last = [], 0, None
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        if tok == ":":
            if last is not None:
                keys.append(last)
        elif tok[0] in "{[":
            depth += len(tok)
        elif tok[0] in "}]":
            depth -= len(tok)
        last = tok[1:-1] if depth == 1 and tok[0] == '"' else None
    return keys


def _mostly_unknown(kind, keys) -> bool:
    known = _top_keys(kind)
    return known is not None and len(keys & known) * 2 < len(keys)


@functools.lru_cache(maxsize=None)
def _top_keys(kind) -> frozenset | None:
    """The top-level keys the kind's schema names; None where it has no schema or names none."""
    schema = FORMATS[kind].schema
    return frozenset(load_schema(schema).get("properties", {})) or None if schema else None
