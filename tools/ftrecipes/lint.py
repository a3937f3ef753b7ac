"""Lint config files: find them, parse them, run the schema checks and the rules."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import detect, formats, launch, rules, shellcmd, sources, versions
from .errors import UserError
from .findings import ERROR, Finding

MAX_BYTES = 10 * 1024 * 1024  # configs are kilobytes; a huge file is a mistake, not a config
IGNORED_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache", "site-packages"}
# Flags of launchers and trainers that name another config file.
CONFIG_FLAGS = {"config_file", "config", "deepspeed", "deepspeed_config", "ds_config"}


@dataclass
class Result:
    findings: list = field(default_factory=list)
    unusable: list = field(default_factory=list)  # UserErrors: inputs we could not read or parse
    checked: list = field(default_factory=list)  # (path, kind)


@dataclass
class Config:
    path: str
    kind: str  # deepspeed | accelerate | trl | llamafactory | openrlhf | launch
    doc: sources.Document
    commands: list = field(default_factory=list)  # shell scripts: shellcmd.Command list

    @property
    def data(self):
        return self.doc.data

    @property
    def dir(self):
        return Path(self.path).parent


def discover(targets, ignore=()):
    """Expand directories into candidate files; explicit files are always kept.

    Returns [(path, explicit)]; a directory contributes files by suffix only, and
    files that turn out not to be configs are skipped quietly.
    """
    out = []
    for target in targets:
        p = Path(target)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS and not d.startswith(".") and d not in ignore)
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if Path(name).suffix.lower() in detect.SUFFIX_SYNTAX and not _ignored(full, ignore):
                        out.append((full, False))
        else:
            out.append((str(target), True))
    return out


def _ignored(path, patterns):
    import fnmatch

    return any(fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(os.path.basename(path), pat) for pat in patterns)


def _shell_doc(text, path):
    """A launch script as a Document whose positions are its commands and words."""
    doc = sources.Document(path=path, data={}, text=text)
    cmds = list(shellcmd.commands(text))
    lines = text.split("\n")
    for i, cmd in enumerate(cmds):
        doc.positions[("command", i)] = (cmd.line, 1)
        for j, (word, line) in enumerate(zip(cmd.words, cmd.word_lines)):
            doc.positions[("command", i, j)] = (line, shellcmd.column(lines, line, word))
    return doc, cmds


def load(path, explicit, kind=None):
    """A Config, or None for a non-config found while walking a directory."""
    text = sources.read_text(path, max_bytes=MAX_BYTES)
    syntax = detect.syntax_of(path, text)
    if kind == "openrlhf":
        syntax = "shell"
    elif kind and syntax == "shell":
        syntax = "yaml"  # JSON is YAML too
    if syntax == "shell":
        shell_doc, cmds = _shell_doc(text, path)
        if "openrlhf.cli." in text:
            doc = launch.openrlhf_document(text, path)
            if doc is not None:
                doc.positions.update(shell_doc.positions)
                return Config(path, "openrlhf", doc, cmds)
        if not cmds:
            if explicit:
                raise UserError("launch script runs no commands; nothing to lint", path=path)
            return None
        return Config(path, "launch", shell_doc, cmds)
    if not text.strip():
        raise UserError("empty file", path=path, line=1)
    doc = sources.parse(text, path, syntax)
    found = kind or detect.kind_of(syntax, doc.data, text)
    if found is None:
        if explicit:
            raise UserError(f"cannot tell which kind of config this is; pass --kind ({', '.join(detect.KINDS)})", path=path)
        return None
    return Config(path, found, doc)


def references(cfg):
    """Paths of other config files this one names (resolved against its folder)."""
    names = []
    data = cfg.data if isinstance(cfg.data, dict) else {}
    if cfg.kind == "accelerate" and isinstance(data.get("deepspeed_config"), dict):
        names.append(data["deepspeed_config"].get("deepspeed_config_file"))
    if cfg.kind in ("llamafactory", "trl"):
        names.append(data.get("deepspeed"))
    for cmd in cfg.commands:
        flags, _ = shellcmd.flags_after(cmd, 0)
        names += [v for k, (v, _) in flags.items() if k in CONFIG_FLAGS and isinstance(v, str)]
        names += [w for w in cmd.words[1:] if w.endswith((".yaml", ".yml", ".json")) and not w.startswith("-")]
    out = []
    for name in names:
        if isinstance(name, str) and name and "$" not in name:
            p = Path(name) if os.path.isabs(name) else cfg.dir / name
            if p.is_file():
                out.append(os.path.normpath(str(p)))
    return out


def check_config(cfg, framework_versions=None):
    fmt = formats.FORMATS.get(cfg.kind)
    findings = []
    for key, line, col in cfg.doc.duplicates:
        what = "DeepSpeed's loader rejects it" if cfg.kind == "deepspeed" else "only the last value is used"
        findings.append(Finding(cfg.path, line, col, "duplicate-key", ERROR, f"duplicate key '{key[-1]}' ({what})"))
    if fmt is None:
        return findings
    if not isinstance(cfg.doc.data, dict):
        line, col = cfg.doc.where(())
        findings.append(Finding(cfg.path, line, col, "wrong-type", ERROR, f"a {fmt.description} must be a mapping at the top level"))
        return findings
    if fmt.schema:
        findings.extend(versions.schema_findings(cfg.doc, fmt, framework_versions))
    return findings


def _groups(configs):
    """Configs used together: same folder, or linked by a reference (union-find)."""
    parent = list(range(len(configs)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = {os.path.normpath(c.path): i for i, c in enumerate(configs)}
    by_dir = {}
    for i, c in enumerate(configs):
        by_dir.setdefault(os.path.normpath(str(c.dir)), []).append(i)
        for ref in references(c):
            if ref in index:
                parent[find(i)] = find(index[ref])
    for members in by_dir.values():
        for i in members[1:]:
            parent[find(i)] = find(members[0])
    groups = {}
    for i in range(len(configs)):
        groups.setdefault(find(i), []).append(configs[i])
    return list(groups.values())


def run(targets, kind=None, options=None, ignore=(), skip_unknown=False):
    result = Result()
    options = options or rules.Options()
    configs = []
    seen = set()

    def add(path, explicit, kind_=None):
        key = os.path.normpath(path)
        if key in seen:
            return
        seen.add(key)
        try:
            cfg = load(path, explicit, kind_)
        except UserError as err:
            result.unusable.append(err)
            return
        if cfg is None:
            return
        configs.append(cfg)
        # Files a config names are part of its setup even when outside the targets.
        for ref in references(cfg):
            add(ref, False)

    for path, explicit in discover(targets, ignore):
        add(path, explicit and not skip_unknown, kind)
    for cfg in configs:
        result.checked.append((cfg.path, cfg.kind))
        result.findings.extend(check_config(cfg, options.framework_versions))
    for group in _groups(configs):
        result.findings.extend(rules.run(rules.Setup(group, options)))
    if not result.checked and not result.unusable and not skip_unknown:
        where = ", ".join(str(t) for t in targets)
        result.unusable.append(UserError(f"no configs found in {where}"))
    result.findings = sorted({f.sort_key(): f for f in result.findings}.values(), key=Finding.sort_key)
    return result
