"""The one check of a parsed config file, shared by render (every file it writes) and lint.

Checks are the last step of recipe -> values -> templates -> files -> checks: this module reads
formats, schemas and versions and nothing above them.
"""

import copy

from . import schemas, versions
from .findings import ERROR, Finding


def check_document(doc, fmt, framework_versions=None, declared=None, key_versions=False):
    """Findings for one parsed file of format fmt.

    declared: {key: class} a custom script adds to the format's own keys (lint's entry points and
    --config-extras). key_versions: also report keys of another framework version here (render;
    lint reports those through its framework-version rule, warnings included).
    """
    findings = [Finding(str(doc.path), line, col, "duplicate-key", ERROR, f"duplicate key '{key[-1]}' ({fmt.duplicate_note})")
                for key, line, col in doc.duplicates]
    if fmt.schema is None:
        return findings
    if not isinstance(doc.data, dict):
        line, col = doc.where(())
        findings.append(Finding(str(doc.path), line, col, "wrong-type", ERROR, f"a {fmt.description} must be a mapping at the top level"))
        return findings
    if key_versions:
        for key, severity, message in versions.key_problems(doc.data, fmt.name, framework_versions or {}):
            if severity == ERROR:
                line, col = doc.where((key,))
                findings.append(Finding(str(doc.path), line, col, "framework-version", severity, message))
    shown = _without_empty_unknown(doc, fmt) if fmt.drops_unknown else doc
    findings.extend(_with_extras(shown, declared or {}, lambda d: versions.schema_findings(d, fmt, framework_versions)))
    return findings


def _without_empty_unknown(doc, fmt):
    """The document less its unknown top-level keys left empty (`debug:` in an axolotl example).
    A framework that drops unknown keys does with an empty one exactly what the author wrote:
    nothing."""
    known = schemas.load_schema(fmt.schema).get("properties", {})
    empty = [k for k, v in doc.data.items() if v is None and k not in known]
    if not empty:
        return doc
    own = copy.copy(doc)
    own.data = {k: v for k, v in doc.data.items() if k not in empty}
    return own


def _with_extras(doc, declared, check):
    """Schema findings with the keys a custom script declares left out; an unknown top-level key
    then says that the script's own classes do not define it either."""
    if not declared:
        return check(doc)
    own = copy.copy(doc)
    own.data = {k: v for k, v in doc.data.items() if k not in declared}
    classes = ", ".join(sorted(set(declared.values())))
    out = []
    for f in check(own):
        # Top-level keys only: schemas.check words a nested one "unknown key 'k' in section (...)".
        if f.rule == "unknown-key" and f.message.startswith("unknown key '") and "' in " not in f.message.split("(", 1)[0]:
            f = Finding(f.path, f.line, f.column, f.rule, f.severity,
                        f"{f.message}; the script's own classes ({classes}) do not define it either: add it to one of them or remove it")
        out.append(f)
    return out

