"""The framework versions a repository pins, read from its dependency files.

Lint checks keys against the release a repo runs, not only against today's: a TRL YAML next
to a requirements.txt with ``trl==0.18.0`` is judged by TRL 0.18. The files are looked for
in the linted file's folder and each parent up to the repository root (the nearest folder
with ``.git``, or ``root`` when given); without a repository root only the file's own folder
is read. The nearest file that names a framework wins. ``==X`` gives X; a range gives the
newest release in it that the key history knows; ``--framework-version`` overrides both.

Requirements are found with one pattern that fits requirements*.txt lines, the quoted strings
of pyproject.toml / setup.py / setup.cfg, and conda's environment.yml (``name=1.2``): the
files are read as text, never executed. Poetry's caret ranges (``^4.52``) are not read.
"""

import functools
import os
import re
from pathlib import Path

from . import sources, versions
from .errors import UserError

FRAMEWORKS = ("deepspeed", "transformers", "trl", "accelerate", "peft", "llamafactory", "openrlhf")
ALIASES = {"llama-factory": "llamafactory", "llama_factory": "llamafactory"}
PATTERNS = ("requirements*.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml", "environment.yaml")
MAX_BYTES = 1024 * 1024
MAX_DEPTH = 12  # parent folders walked at most

_NAMES = "|".join(re.escape(n) for n in sorted(set(FRAMEWORKS) | set(ALIASES), key=len, reverse=True))
_CLAUSE = r"(?:===|==|>=|<=|!=|~=|>|<|=)\s*[0-9][\w.*+!]*"
_REQUIREMENT = re.compile(
    rf"(?<![\w.-])(?P<name>{_NAMES})(?![\w-])\s*(?:\[[^\]]*\])?\s*(?P<spec>{_CLAUSE}(?:\s*,\s*{_CLAUSE})*)",
    re.IGNORECASE,
)


def requirements(text):
    """[(framework, specifier text, line)] for each framework requirement with a version."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        for m in _REQUIREMENT.finditer(line):
            name = m["name"].lower()
            spec = re.sub(r"(?<![=<>!~])=(?!=)", "==", re.sub(r"\s+", "", m["spec"]))  # conda's name=1.2
            out.append((ALIASES.get(name, name), spec.replace("===", "=="), number))
    return out


def resolve(framework, spec):
    """The version a specifier stands for: the pinned one, else the newest release the key
    history knows inside the range; None when neither."""
    clauses = spec.split(",")
    if len(clauses) == 1 and clauses[0].startswith("==") and "*" not in clauses[0]:
        return clauses[0][2:]
    try:
        s = versions.Specifier(spec)
    except ValueError:
        return None
    h = versions.key_history(framework)
    inside = [r for r in (h.releases if h else []) if s.contains(r)]
    return str(max(inside)) if inside else None


def repo_root(folder, root=None):
    """The folder the walk stops at: root, else the nearest folder with .git, else None."""
    if root is not None:
        return Path(root).resolve()
    return _git_top(os.fspath(folder))


@functools.lru_cache(maxsize=1024)
def _git_top(folder):
    # Asked for every config of a setup (lint, pins): a folder of 5,000 files walks up once.
    p = Path(folder).resolve()
    for _ in range(MAX_DEPTH):
        if (p / ".git").exists():
            return p
        if p.parent == p:
            break
        p = p.parent
    return None


@functools.lru_cache(maxsize=256)
def _folder_pins(folder):
    """{framework: (version, 'file:line')} from the dependency files of one folder."""
    found = {}
    for pattern in PATTERNS:
        for path in sorted(Path(folder).glob(pattern)):
            if not path.is_file():
                continue
            try:
                text = sources.read_text(path, max_bytes=MAX_BYTES)
            except UserError:
                continue  # an unreadable dependency file says nothing about versions
            for fw, spec, line in requirements(text):
                if fw in found:
                    continue
                version = resolve(fw, spec)
                if version is not None:
                    found[fw] = (version, f"{path}:{line}")
    return found


def pinned(config_path, root=None):
    """{framework: (version, where)} pinned for a config file, nearest dependency file first."""
    start = Path(config_path).resolve().parent
    stop = repo_root(start, root)
    folders = [start]
    if stop is not None and (stop == start or stop in start.parents):
        p = start
        while p != stop and len(folders) < MAX_DEPTH:
            p = p.parent
            folders.append(p)
    out = {}
    for folder in folders:
        for fw, hit in _folder_pins(os.fspath(folder)).items():
            out.setdefault(fw, hit)
    return out


def versions_for(config_path, explicit=None, root=None):
    """{framework: version} for a config: --framework-version first, then the repo's pins."""
    out = {fw: v for fw, (v, _) in pinned(config_path, root).items()}
    out.update(explicit or {})
    return out
