"""A word (a --set value, a shell flag's argument) turned into the type a schema property asks for.

Below both values (recipe --set overrides) and readers (launch-script flags), so neither imports
the other: data flows recipe -> values -> templates -> files -> checks.
"""

import re

_INT = re.compile(r"^[-+]?\d+$")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def kind_of(prop):
    """The JSON type a property schema asks for (string when it says nothing usable)."""
    if not isinstance(prop, dict):
        return "string"
    if "type" in prop:
        t = prop["type"]
        return t if isinstance(t, str) else next((x for x in t if x != "null"), "string")
    for word in ("enum", "const"):
        if word in prop:
            sample = prop[word][0] if word == "enum" else prop[word]
            return {bool: "boolean", int: "integer", float: "number"}.get(type(sample), "string")
    return "string"


def coerce(raw, kind):
    """Turn a word (--set value, shell argument) into the type the schema asks for; ValueError when it can't."""
    if kind == "integer":
        if not _INT.match(raw.strip()):
            raise ValueError("expected an integer")
        return int(raw)
    if kind == "number":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("expected a finite number")
        return int(value) if _INT.match(raw.strip()) else value
    if kind == "boolean":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError("expected true or false")
    return raw
