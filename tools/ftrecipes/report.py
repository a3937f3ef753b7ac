"""Print lint findings: one formatter per output format, nothing else."""

import json
import os

from .errors import MAX_MESSAGE, clip, needs_escape, one_line


def text(result, out):
    # One finding, one line, nothing a terminal obeys: paths, keys and values quoted from the
    # files may hold line breaks and escape sequences.
    # One write: a file with 300,000 findings must not cost 300,000 calls into the stream.
    lines = [f"{f.path}:{f.line}:{f.column}: {f.rule} {f.message if len(f.message) <= MAX_MESSAGE else clip(f.message, MAX_MESSAGE)}"
             for f in result.findings]
    if needs_escape("".join(lines)):  # one scan of everything; line by line only when some line needs it
        lines = [one_line(line) for line in lines]
    lines += [one_line(f"{_where(err)} unusable-input {err.key + ': ' if err.key else ''}{clip(err.message, MAX_MESSAGE)}")
              for err in result.unusable]
    if lines:
        out.write("\n".join(lines) + "\n")


def as_json(result, out):
    items = [f.as_dict() for f in result.findings]
    for err in result.unusable:
        items.append(
            {
                "path": str(err.path) if err.path is not None else "",
                "line": err.line or 0,
                "column": err.column or 0,
                "rule": "unusable-input",
                "severity": "error",
                "message": err.message,
            }
        )
    json.dump(items, out, indent=2)
    out.write("\n")


def _where(err):
    if err.path is None:
        return "ftrecipes:"
    return f"{err.path}:{err.line or 1}:{err.column or 1}:"


def _all(result):
    """Findings plus unusable inputs, as Findings, in one list."""
    from .findings import ERROR, Finding

    extra = [
        Finding(str(e.path) if e.path is not None else "", e.line or 1, e.column or 1, "unusable-input", ERROR, e.message)
        for e in result.unusable
    ]
    return result.findings + extra


def _escape_data(text):
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text):
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github(result, out):
    """GitHub Actions workflow commands: each finding shows inline on the pull request."""
    for f in _all(result):
        level = "error" if f.severity == "error" else "warning"
        out.write(
            f"::{level} file={_escape_prop(f.path)},line={f.line},col={f.column},title={_escape_prop(f.rule)}::"
            f"{_escape_data(f.rule + ' ' + f.message)}\n"
        )


def artifact_uri(path):
    """A path as a SARIF artifact URI (RFC 3986): relative paths stay relative, absolute ones are file: URIs."""
    from pathlib import PurePath
    from urllib.parse import quote

    if os.path.isabs(path):
        return PurePath(path).as_uri()
    # Everything but unreserved characters and '/' percent-encoded: a ':' in the first segment would read as a scheme.
    return quote(path.replace(os.sep, "/"), safe="/", errors="surrogateescape")


def sarif(result, out):
    """SARIF 2.1.0 for code scanning."""
    from . import __version__, rules

    known = rules.all_rules()
    findings = _all(result)
    used = sorted({f.rule for f in findings})
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ftrecipes",
                        "version": __version__,
                        "informationUri": "https://ftrecipes.dev",
                        "rules": [
                            {
                                "id": rid,
                                "shortDescription": {"text": known[rid].summary if rid in known else rid},
                                "fullDescription": {"text": known[rid].doc if rid in known else rid},
                                "defaultConfiguration": {"level": "error" if (known[rid].severity if rid in known else "error") == "error" else "warning"},
                            }
                            for rid in used
                        ],
                    }
                },
                "results": [
                    {
                        "ruleId": f.rule,
                        "level": "error" if f.severity == "error" else "warning",
                        "message": {"text": f.message},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": artifact_uri(f.path)},
                                    "region": {"startLine": max(f.line, 1), "startColumn": max(f.column, 1)},
                                }
                            }
                        ],
                    }
                    for f in findings
                ],
            }
        ],
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


FORMATTERS = {"text": text, "json": as_json, "github": github, "sarif": sarif}
