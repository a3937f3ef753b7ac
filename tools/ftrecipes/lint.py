"""Lint config files: find them, parse them, run the checks, collect findings."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import detect, formats, launch, schemas, sources
from .errors import UserError
from .findings import ERROR, Finding

MAX_BYTES = 10 * 1024 * 1024  # configs are kilobytes; a huge file is a mistake, not a config
IGNORED_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache", "site-packages"}


@dataclass
class Result:
    findings: list = field(default_factory=list)
    unusable: list = field(default_factory=list)  # UserErrors: inputs we could not read or parse
    checked: list = field(default_factory=list)  # (path, kind)


@dataclass
class Config:
    path: str
    kind: str
    doc: sources.Document


def discover(targets):
    """Expand directories into candidate files; explicit files are always kept.

    Returns [(path, explicit)]; a directory contributes files by suffix only, and
    files that turn out not to be configs are skipped quietly.
    """
    out = []
    for target in targets:
        p = Path(target)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if Path(name).suffix.lower() in detect.SUFFIX_SYNTAX:
                        out.append((os.path.join(root, name), False))
        else:
            out.append((str(target), True))
    return out


def load(path, explicit, kind=None):
    """A Config, or None for a non-config found while walking a directory."""
    text = sources.read_text(path, max_bytes=MAX_BYTES)
    syntax = detect.syntax_of(path, text)
    if kind == "openrlhf":
        syntax = "shell"
    elif kind and syntax == "shell":
        syntax = "yaml"  # JSON is YAML too
    if syntax == "shell":
        if "openrlhf.cli." not in text:
            if explicit:
                raise UserError("launch script runs no openrlhf.cli trainer; nothing to lint here", path=path)
            return None
        doc = launch.openrlhf_document(text, path)
        return Config(path, "openrlhf", doc)
    if not text.strip():
        raise UserError("empty file", path=path, line=1)
    doc = sources.parse(text, path, syntax)
    found = kind or detect.kind_of(syntax, doc.data, text)
    if found is None:
        if explicit:
            raise UserError(f"cannot tell which kind of config this is; pass --kind ({', '.join(detect.KINDS)})", path=path)
        return None
    return Config(path, found, doc)


def check_config(cfg):
    fmt = formats.get(cfg.kind)
    findings = []
    for key, line, col in cfg.doc.duplicates:
        what = "DeepSpeed's loader rejects it" if cfg.kind == "deepspeed" else "only the last value is used"
        findings.append(Finding(cfg.path, line, col, "duplicate-key", ERROR, f"duplicate key '{key[-1]}' ({what})"))
    if not isinstance(cfg.doc.data, dict):
        line, col = cfg.doc.where(())
        findings.append(Finding(cfg.path, line, col, "wrong-type", ERROR, f"a {fmt.description} must be a mapping at the top level"))
        return findings
    if fmt.schema:
        findings.extend(schemas.check(cfg.doc, schemas.load_schema(fmt.schema), fmt.unknown_note))
    return findings


def run(targets, kind=None):
    result = Result()
    candidates = discover(targets)
    for path, explicit in candidates:
        try:
            cfg = load(path, explicit, kind)
        except UserError as err:
            result.unusable.append(err)
            continue
        if cfg is None:
            continue
        result.checked.append((cfg.path, cfg.kind))
        result.findings.extend(check_config(cfg))
    if not result.checked and not result.unusable:
        where = ", ".join(str(t) for t in targets)
        result.unusable.append(UserError(f"no configs found in {where}"))
    result.findings.sort(key=Finding.sort_key)
    return result
