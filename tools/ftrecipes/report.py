"""Print lint findings: one formatter per output format, nothing else."""

import json


def text(result, out):
    for f in result.findings:
        out.write(f"{f.path}:{f.line}:{f.column}: {f.rule} {f.message}\n")
    for err in result.unusable:
        out.write(f"{_where(err)} unusable-input {err.message}\n")


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


FORMATTERS = {"text": text, "json": as_json}
