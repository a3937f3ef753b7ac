"""Keys a custom training script adds to a framework's config file (`lint --config-extras`).

alignment-handbook and open-r1 read TRL-style YAML with `TrlParser((ScriptArguments, SFTConfig,
ModelConfig))` where their own subclasses add fields (`dataset_mixture`, `chat_template`,
`system_prompt`, ...). TRL's schema cannot know those, so the user declares them, either

- as YAML: `{trl: {open_r1.configs.SFTConfig: [chat_template, system_prompt]}}` (kind -> class ->
  keys), or
- by naming the Python module that defines the script's config dataclasses: every annotated field
  of a class decorated with @dataclass is taken, read with `ast` (the module is never imported or
  run), for the kind `trl`.
"""

import ast
import functools
import itertools
import os
import re
from pathlib import Path

from . import detect, sources
from .errors import UserError

MAX_BYTES = 2 * 1024 * 1024


def load(paths):
    """{kind: {key: class name}} from the declaration files."""
    out = {}
    for path in paths:
        if str(path).endswith(".py"):
            found = _python_keys(str(path), _stamp(path))
        else:
            found = _from_declaration(sources.read_text(path, max_bytes=MAX_BYTES), path)
        for kind, keys in found.items():
            out.setdefault(kind, {}).update(keys)
    return out


# Modules followed from an entry point: a package's __init__ re-exports its classes from a
# sibling module (`from alignment import SFTConfig` -> alignment/__init__.py -> .configs).
MAX_IMPORT_DEPTH = 3
MAX_IMPORTED = 64


def from_entry_point(script, root):
    """Keys the training script a launch command runs adds: the @dataclass fields of the script and
    of the modules it imports from inside root (`from open_r1.configs import GRPOConfig` ->
    root/src/open_r1/configs.py or root/open_r1/configs.py), followed MAX_IMPORT_DEPTH deep."""
    root = Path(root) if root else Path(script).parent
    files = frontier = [Path(script)]
    # `python scripts/run_simpo.py` puts scripts/ first on sys.path, so `from simpo_config import
    # SimPOConfig` in any module it loads resolves there before the repository's top
    bases = (Path(script).parent, root / "src", root)
    for _ in range(MAX_IMPORT_DEPTH):
        new = list(dict.fromkeys(f for s in frontier for f in _local_imports(s, bases) if f not in files))
        new = new[:max(0, MAX_IMPORTED - len(files))]
        if not new:
            break
        files, frontier = files + new, new
    return load([str(f) for f in files]).get("trl", {})


# A repository's scripts are looked for among at most this many .py files, so a linted checkout
# of a large project costs a bounded walk.
MAX_SCRIPTS = 4000
_PARSERS = ("TrlParser", "HfArgumentParser")
# `class ArgumentParserPlus(HfArgumentParser):` (open-instruct): a parser of the repository's own
_PARSER_SUBCLASS = re.compile(r"^\s*class\s+(\w+)\s*\([^)]*\b(?:TrlParser|HfArgumentParser)\b", re.M)
# A subclass defined in an installed package (alignment-handbook's H4ArgumentParser, which
# Online-RLHF imports from `alignment`) is known by how it is called: HfArgumentParser's idiom
# is a tuple of argument dataclasses, `H4ArgumentParser((ScriptArguments, DPOConfig, ...))`.
_PARSER_IDIOM = re.compile(r"\b\w*Parser\s*\(\s*\(\s*\w*(?:Arguments|Args|Config)\s*,")


@functools.lru_cache(maxsize=32)
def from_repository(root):
    """Keys the repository's own argument-parsing scripts add, for a TRL-style YAML that no launch
    command links to its script (open-r1's recipes run as `accelerate launch src/open_r1/grpo.py
    --config $CONFIG` from a Slurm file with variables; philschmid's recipes from a README).

    Every .py file under root that builds a TrlParser, an HfArgumentParser or a subclass of
    either defined in the repository counts as an entry point (from_entry_point: its @dataclass
    fields and those of the modules it imports). A key one of them defines is the repository's
    own, not a typo; a file fed to the plain `trl` CLI instead would be refused on it, which lint
    then misses: a missed error costs less than an error on every recipe of a repository whose
    scripts read them correctly."""
    keys = {}
    for script in _scripts(root):
        try:
            found = from_entry_point(script, root)
        except UserError:
            continue  # a script that does not parse declares nothing
        for key, cls in found.items():
            keys.setdefault(key, cls)
    return keys


def _scripts(root):
    texts, names = [], set(_PARSERS)
    for path in itertools.islice(sources.walk(root, (".py",)), MAX_SCRIPTS):
        try:
            text = sources.read_text(path, max_bytes=MAX_BYTES)
        except UserError:
            continue
        if "Parser" in text:
            texts.append((path, text))
            names.update(_PARSER_SUBCLASS.findall(text))
    call = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names))) + r")\s*\(")
    return [Path(path) for path, text in texts if call.search(text) or _PARSER_IDIOM.search(text)]


def _stamp(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def argparse_flags(script, root):
    """{flag: where} for the `add_argument("--flag", ...)` calls of a training module that lies
    inside the repository being linted, read with `ast` (never imported); {} for a module outside
    root or one that does not parse. MM-EUREKA ships its own fork of OpenRLHF and runs `python -m
    openrlhf.cli.train_ppo_ray` from its top, so that fork's parser, not the released one, decides
    which flags exist (the fifth lint blind round: 71 errors, all of them this)."""
    if not root or not Path(os.path.realpath(script)).is_relative_to(os.path.realpath(root)):
        return {}
    return dict(_argparse_flags(str(script), _stamp(script)))


@functools.lru_cache(maxsize=256)
def _argparse_flags(script, stamp):
    try:
        tree = ast.parse(sources.read_text(script, max_bytes=MAX_BYTES), filename=script)
    except (SyntaxError, UserError, ValueError):
        return ()
    where = os.path.basename(script)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    found.append((arg.value[2:], f"the repository's own {where}"))
    return tuple(found)


# A repository's launch scripts run the same few entry points, which import the same modules:
# verl's 197 scripts parsed 12,000 modules for 205 entry points (three minutes for a folder walk).
# Each module is read once per content (path, mtime, size); the answers are small.
@functools.lru_cache(maxsize=8192)
def _python_keys(path, stamp):
    return _from_python(sources.read_text(path, max_bytes=MAX_BYTES), path)


def _local_imports(script, bases):
    """The files of the modules script imports that lie under one of bases (absolute imports) or
    beside it (relative ones)."""
    return list(_imports_of(str(script), tuple(map(str, bases)), _stamp(script)))


@functools.lru_cache(maxsize=8192)
def _imports_of(script, bases, stamp):
    script, bases = Path(script), [Path(b) for b in bases]
    try:
        tree = ast.parse(sources.read_text(script, max_bytes=MAX_BYTES), filename=str(script))
    except (SyntaxError, UserError):
        return ()
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = script.parent if node.level else None
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            names.append((base, node.module))
        elif isinstance(node, ast.Import):
            names += [(None, a.name) for a in node.names]
    found = []
    for base, module in names:
        rel = Path(*module.split("."))
        for b in [base] if base else bases:
            for candidate in (b / rel.with_suffix(".py"), b / rel / "__init__.py"):
                if candidate.is_file() and candidate not in found:
                    found.append(candidate)
    return tuple(found)


def _from_python(text, path):
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise UserError(f"cannot read the script's config classes: {exc.msg}", path=path, line=exc.lineno) from None
    module = Path(path).stem
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and any(_is_dataclass(d) for d in n.decorator_list)]
    # A dataclass named in another one's field types (`datasets: list[DatasetConfig]`) is a nested
    # value, not one of the parser's classes: its fields are not top-level keys.
    nested = {n.id for c in classes for item in c.body if isinstance(item, ast.AnnAssign)
              for n in ast.walk(item.annotation) if isinstance(n, ast.Name)}
    keys = {}
    for node in classes:
        if node.name not in nested:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    keys.setdefault(item.target.id, f"{module}.{node.name}")
    return {"trl": keys}


def _is_dataclass(decorator):
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
    return name == "dataclass"


def _from_declaration(text, path):
    doc = sources.parse(text, path, detect.syntax_of(path, text))
    if not isinstance(doc.data, dict):
        raise UserError("a config-extras file maps a config kind to {class: [keys]}", path=path, line=1)
    out = {}
    for kind, classes in doc.data.items():
        line, _ = doc.where((kind,))
        if kind not in detect.KINDS:
            raise UserError(f"unknown config kind '{kind}' (one of {', '.join(detect.KINDS)})", path=path, line=line, key=kind)
        if not isinstance(classes, dict):
            raise UserError(f"{kind}: expected a mapping of class name to a list of keys", path=path, line=line, key=kind)
        for cls, keys in classes.items():
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                line, _ = doc.where((kind, cls))
                raise UserError(f"{kind}.{cls}: expected a list of key names", path=path, line=line, key=f"{kind}.{cls}")
            for key in keys:
                out.setdefault(kind, {}).setdefault(key, str(cls))
    return out
