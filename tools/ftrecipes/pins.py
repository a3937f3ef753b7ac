"""The framework versions a repository pins, read from its dependency files.

Lint checks keys against the release a repo runs, not only against today's: a TRL YAML next
to a requirements.txt with ``trl==0.18.0`` is judged by TRL 0.18. The files are looked for
in the linted file's folder and each parent up to the repository root (the nearest folder
with ``.git``, or ``root`` when given); without a repository root only the file's own folder
is read. The nearest file that names a framework wins. ``==X`` gives X; a range gives the
newest release in it that the key history knows (a range older than all of them, its lower
bound); ``--framework-version`` overrides both.

Requirements are found with one pattern that fits requirements*.txt lines, the quoted strings
of pyproject.toml / setup.cfg, and conda's environment.yml (``name=1.2``): the files are read as
text, never executed. setup.py is parsed with ``ast`` (never run) and only the strings of its
requirement lists count: see setup_py_requirements. Poetry's caret ranges (``^4.52``) are not read.
An install script (install*.sh, setup*.sh) counts by its `pip install` / `conda install` lines
only: see shell_requirements; an install guide (install*.md, INSTALL*.md, also under docs/) by
those lines in its fenced code blocks: see markdown_code.
"""

import ast
import functools
import itertools
import os
import re
from pathlib import Path

from . import sources, versions
from .errors import UserError

FRAMEWORKS = ("deepspeed", "transformers", "trl", "accelerate", "peft", "llamafactory", "openrlhf")
ALIASES = {"llama-factory": "llamafactory", "llama_factory": "llamafactory"}
PATTERNS = ("requirements*.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml", "environment.yaml",
            "install*.sh", "setup*.sh", "install*.md", "INSTALL*.md", "docs/install*.md", "docs/INSTALL*.md")
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


_SETUP_KEYWORDS = ("install_requires", "extras_require")


def setup_py_requirements(text):
    """[(framework, specifier text, line)] from a setup.py, parsed with ast and never executed.

    Counted: the strings of setup()'s install_requires and extras_require (a literal list, a dict
    of lists, a sum of lists, or a module-level name holding one), and of any module-level list
    or dict of strings that the module reads again (the `_deps = [...]` table transformers-style
    setup.py files index). A requirement-looking string elsewhere (a description, a print) is not
    a dependency. A file ast cannot parse (Python 2) is read as text like the other files.
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return requirements(text)
    assigned = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and node.value is not None:
                assigned[t.id] = node.value
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    roots = [kw.value for call in ast.walk(tree) if isinstance(call, ast.Call) and _callee(call.func) == "setup"
             for kw in call.keywords if kw.arg in _SETUP_KEYWORDS]
    roots += [v for name, v in assigned.items() if name in read and isinstance(v, (ast.List, ast.Tuple, ast.Set, ast.Dict))]
    found = {}
    for root in roots:
        _strings(root, assigned, found, set())
    return [(fw, spec, line) for (line, _), value in sorted(found.items()) for fw, spec, _ in requirements(value)]


# The installer commands whose arguments are requirements. Anything else in a script (a version
# printed by echo, a `git checkout v4.40.0`, a model name such as trl-lib/...) is not a pin.
_INSTALL = re.compile(r"^\s*(?:\S*/)?(?:sudo\s+)?(?:pip3?|python3?\s+-m\s+pip|uv\s+pip|conda|mamba|micromamba)"
                      r"\s+install\b(?P<args>.*)$")


def shell_requirements(text):
    """[(framework, specifier text, line)] from the install commands of a shell script.

    Research repositories often state their environment only as a script of `pip install X==Y`
    lines (ContextualAI/HALOs' install.sh pins accelerate==0.33.0, whose launch still reads the
    fsdp_backward_prefetch_policy key that 1.0 dropped): that is the release the repository's
    configs were written for, as much as a requirements.txt line would be. Only the arguments
    of an install command count; a continued line (trailing backslash) is one command."""
    out, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command, pending = pending + line, ""
        m = _INSTALL.match(command)
        if m:
            out += [(fw, spec, start) for fw, spec, _ in requirements(m["args"])]
    return out


_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_code(text):
    """The fenced code blocks of a Markdown file, every other line blanked so line numbers hold.

    Some repositories state their environment only in an install guide: InternLM-XComposer's
    docs/install.md has `pip install transformers==4.33.2` in a bash block, the release its remote
    modelling code and its finetune.sh flags (--evaluation_strategy) were written for. Prose that
    names a release (`tested with transformers==5.0`) is no install command and is not read."""
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            out.append("")
        else:
            out.append(line if fence else "")
    return "\n".join(out)


def _callee(func):
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _strings(node, assigned, found, seen):
    """The string constants of a requirement expression, by (line, column)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        found[(node.lineno, node.col_offset)] = node.value
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for elt in node.elts:
            _strings(elt, assigned, found, seen)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            _strings(value, assigned, found, seen)
    elif isinstance(node, ast.BinOp):
        _strings(node.left, assigned, found, seen)
        _strings(node.right, assigned, found, seen)
    elif isinstance(node, ast.Name) and node.id in assigned and node.id not in seen:
        seen.add(node.id)
        _strings(assigned[node.id], assigned, found, seen)


def exact(spec):
    """The version an `==X` specifier names, else None (a range)."""
    clauses = spec.split(",")
    if len(clauses) == 1 and clauses[0].startswith("==") and "*" not in clauses[0]:
        return clauses[0][2:]
    return None


def resolve(framework, spec, cap=None):
    """The version a specifier stands for: the pinned one, else the newest release the key
    history knows inside the range (at most cap, where the range reaches that low); None when
    neither."""
    if exact(spec) is not None:
        return exact(spec)
    try:
        s = versions.Specifier(spec)
    except ValueError:
        return None
    h = versions.key_history(framework)
    inside = [r for r in (h.releases if h else []) if s.contains(r)]
    if cap is not None and s.contains(cap):
        return cap  # the release pip installs, sampled or not
    capped = [r for r in inside if cap is not None and r <= versions.parse(cap)]
    if capped:
        return str(max(capped))
    if inside:
        return str(max(inside))
    # A range wholly older than the releases the history read (`>=4.32.0,<4.38.0`) still says
    # the repository runs an old release: its lower bound is one, and later rules judge what
    # they can at it (a version older than every sample is never judged as today's).
    low = [v for op, v in s.clauses if op in (">=", "~=", "==") and not v.endswith(".*")]
    if h and low and s.contains(low[0]) and versions.parse(low[0]) < h.releases[0]:
        return low[0]
    # Only a ceiling below every release read (Mantis's `transformers<4.46.0`): pip installs the
    # newest release under it, an older one than today's, so it is not judged as today's either;
    # it is named by the series below the ceiling (4.45 for <4.46.0, the bound itself for <=)
    high = [(op, v) for op, v in s.clauses if op in ("<", "<=") and not v.endswith(".*")]
    if h and high and not low:
        op, bound = min(high, key=lambda c: versions.parse(c[1]))
        below = bound if op == "<=" else _series_below(bound)
        if below and s.contains(below) and versions.parse(below) < h.releases[0]:
            return below
    return None


def _series_below(bound):
    """The release series just under a ceiling: 4.45 under 4.46.0, 4.46 under 4.46.1, 4 under 5.0."""
    parts = [int(p) for p in versions.parse(bound).release or ()]
    while parts and parts[-1] == 0:
        parts.pop()
    if not parts:
        return None
    parts[-1] -= 1
    return ".".join(str(p) for p in parts) if any(parts) else None


def repo_root(folder, root=None):
    """The folder the walk stops at: root, else the nearest folder with .git, else None."""
    if root is not None:
        return _real(root)
    return _git_top(os.fspath(folder))


def _real(path) -> Path:
    # os.path.realpath, not Path.resolve: on a symbolic-link loop Python 3.11's resolve raises
    # RuntimeError, while realpath leaves the loop's name, and the read of the file itself then
    # reports the loop as bad input (sources)
    return Path(os.path.realpath(path))


@functools.lru_cache(maxsize=1024)
def _git_top(folder):
    # Asked for every config of a setup (lint, pins): a folder of 5,000 files walks up once.
    p = _real(folder)
    for _ in range(MAX_DEPTH):
        # os.path.exists: a folder that may not be searched (mode 600) is no readable repository
        # top, where Path.exists raised PermissionError (a traceback in estimate --config)
        if os.path.exists(p / ".git"):
            return p
        if p.parent == p:
            break
        p = p.parent
    return None


# A repository that carries a framework's own source (LIMO and SkyThought ship LLaMA-Factory
# 0.9.2.dev0 with setup.py name="llamafactory") runs that copy: its version is the pin. The
# version is a literal `version=` beside the name, else `__version__` / `VERSION = "..."` in the
# package's own modules (LLaMA-Factory's get_version() reads src/llamafactory/extras/env.py).
_OWN_NAME = re.compile(rf"""^\s*name\s*=\s*["'](?P<name>{_NAMES})["']""", re.IGNORECASE | re.M)
_OWN_VERSION = re.compile(r"""^\s*(?:version|__version__|VERSION)\s*=\s*["'](?P<v>[0-9][\w.+!-]*)["']""", re.M)
MAX_PACKAGE_FILES = 200


def _own_package(folder):
    """(framework, version, 'file:line') when folder holds a framework's own packaging, else None."""
    for path, text, fw in _own_packaging(folder):
        for where, body in itertools.chain([(path, text)], _package_modules(folder, fw)):
            v = _OWN_VERSION.search(body)
            if v:
                return fw, v["v"], f"{where}:{body.count(chr(10), 0, v.start()) + 1}"
    return None


def _own_packaging(folder):
    """(path, text, framework) of each packaging file in folder that names a framework itself."""
    for name in ("setup.py", "pyproject.toml"):
        path = Path(folder) / name
        if not path.is_file():
            continue
        try:
            text = sources.read_text(path, max_bytes=MAX_BYTES)
        except UserError:
            continue
        m = _OWN_NAME.search(text)
        if m:
            yield path, text, ALIASES.get(m["name"].lower(), m["name"].lower())


def _package_modules(folder, fw):
    """(path, text) of the package's modules, read one at a time: the search stops at the first
    version string."""
    for base in (Path(folder) / "src" / fw, Path(folder) / fw):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py"))[:MAX_PACKAGE_FILES]:
            try:
                yield path, sources.read_text(path, max_bytes=MAX_BYTES)
            except UserError:
                continue


@functools.lru_cache(maxsize=256)
def _folder_pins(folder):
    """{framework: (version, 'file:line', specifier)} from the dependency files of one folder."""
    found = {}
    own = _own_package(folder)
    if own is not None:
        found[own[0]] = (own[1], own[2], "==" + own[1])
    for pattern in PATTERNS:
        for path in sorted(Path(folder).glob(pattern)):
            if not path.is_file():
                continue
            try:
                text = sources.read_text(path, max_bytes=MAX_BYTES)
            except UserError:
                continue  # an unreadable dependency file says nothing about versions
            if path.name == "setup.py":
                reqs = [(fw, spec, f"{path}:{line}") for fw, spec, line in setup_py_requirements(text)]
            elif path.suffix == ".txt":
                reqs = _pip_requirements(path, text)
            elif path.suffix in (".sh", ".md"):
                body = text if path.suffix == ".sh" else markdown_code(text)
                reqs = [(fw, spec, f"{path}:{line}") for fw, spec, line in shell_requirements(body)]
            else:
                reqs = [(fw, spec, f"{path}:{line}") for fw, spec, line in requirements(text)]
            for fw, spec, where in reqs:
                if fw in found:
                    continue
                version = resolve(fw, spec)
                if version is not None:
                    found[fw] = (version, where, spec)
    return found


MAX_INCLUDES = 16  # -r/-c files followed from one requirements file, all levels together
_INCLUDE = re.compile(r"^\s*(?:-r|-c|--requirement|--constraint)(?:\s*=\s*|\s+)(\S+)")


def _pip_requirements(path, text):
    """[(framework, specifier, 'file:line')] of a pip requirements file and of the files it
    includes with -r / -c (InternVL's requirements.txt is `-r requirements/internvl_chat.txt`,
    which pins transformers==4.37.2), each include relative to the file that names it, the
    file's own lines first."""
    out, queue, seen = [], [(Path(path), text)], {os.path.realpath(path)}
    while queue:
        current, body = queue.pop(0)
        out += [(fw, spec, f"{current}:{line}") for fw, spec, line in requirements(body)]
        for raw in body.splitlines():
            m = _INCLUDE.match(raw.split(" #", 1)[0])
            if not m or len(seen) > MAX_INCLUDES:
                continue
            target = current.parent / m.group(1)
            if os.path.realpath(target) in seen or not target.is_file():
                continue
            seen.add(os.path.realpath(target))
            try:
                queue.append((target, sources.read_text(target, max_bytes=MAX_BYTES)))
            except UserError:
                continue  # an unreadable include says nothing about versions
    return out


def pinned(config_path, root=None):
    """{framework: (version, where)} pinned for a config file, nearest dependency file first."""
    return {fw: (version, where) for fw, (version, where, _) in _pins(config_path, root).items()}


def _pins(config_path, root):
    # A file that is no link lies in its folder: the walk is worked out once per folder.
    folder = _real(config_path).parent if os.path.islink(config_path) else os.path.dirname(os.path.abspath(config_path))
    out = {}
    for folder in _folders(os.fspath(folder), None if root is None else os.fspath(root)):
        try:
            hits = _folder_pins(folder)
        except OSError:
            # a folder that may not be searched pins nothing we can read (Path.is_file raised
            # PermissionError); the config in it is then refused by its own read, in one line
            continue
        for fw, hit in hits.items():
            out.setdefault(fw, hit)
    return out


@functools.lru_cache(maxsize=1024)
def _folders(folder, root):
    """The folders whose dependency files pin versions for the files in folder, nearest first."""
    start = _real(folder)
    stop = repo_root(start, root)
    folders = [start]
    if stop is not None and (stop == start or stop in start.parents):
        p = start
        while p != stop and len(folders) < MAX_DEPTH:
            p = p.parent
            folders.append(p)
    return tuple(os.fspath(f) for f in folders)


def versions_for(config_path, explicit=None, root=None, kind=None):
    """{framework: version} for a config of format kind: --framework-version first, then the
    repo's pins, a range read as the newest release the format's framework runs with."""
    found = _pins(config_path, root)
    out = {fw: v for fw, (v, _, _) in found.items()}
    out.update(explicit or {})
    # A framework's config runs on the companion releases that framework's own requirements let
    # in, not on whatever a repository's loose range reaches: llamafactory 0.9.5 requires
    # transformers<=5.6.0 and refuses a newer one at start-up (extras/misc.py check_dependencies),
    # so MiniCPM's `transformers>=4.36.2` beside a LLaMA-Factory YAML means 5.6.0 there, where
    # warmup_ratio still exists, not 5.23.0, where it is gone. The format's schema records the
    # companions pip installed with the release it was read from; they hold only for that release.
    # The framework's own repository (LLaMA-Factory's pyproject, `transformers<=5.8.0` at a commit
    # after 0.9.5) states its own requirements: those win.
    name, release, companions = versions.companions(kind)
    if name is None or out.get(name, release) != release:
        return out
    for fw, cap in companions.items():
        if fw not in found or fw in (explicit or {}) or exact(found[fw][2]) is not None:
            continue
        origin = found[fw][1].rsplit(":", 1)[0]
        if not any(own == name for _, _, own in _own_packaging(os.path.dirname(origin))):
            out[fw] = resolve(fw, found[fw][2], cap) or out[fw]
    return out
