"""Lint config files: find them, parse them, run the schema checks and the rules."""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import checks, detect, formats, pins, readers, rules, shellcmd, sources
from . import extras as extras_mod
from .rules.facts import launcher_of
from .errors import UserError
from . import findings as findings_mod
from .findings import ERROR, Finding

MAX_BYTES = sources.MAX_BYTES
# A broken file found while walking is searched for a checked format's keys in its first MiB only
# (no config we check is near that size), which bounds the scan of a large broken file.
SURFACE_CHARS = 1 << 20

# Flags of launchers and trainers that name another config file.
CONFIG_FLAGS = {"config_file", "config", "deepspeed", "deepspeed_config", "ds_config"}


@dataclass
class Result:
    findings: list = field(default_factory=list)
    unusable: list = field(default_factory=list)  # UserErrors: inputs we could not read or parse
    checked: list = field(default_factory=list)  # (path, kind)
    # Said on stderr, never a verdict: a walk that found no config checked nothing, which is no
    # error in a pull request check of a repository without configs (ruff and black say so and
    # exit 0 for a folder without Python files; a named file that is no config stays unusable).
    notes: list = field(default_factory=list)


@dataclass
class Config:
    path: str
    kind: str  # deepspeed | accelerate | trl | llamafactory | openrlhf | launch
    doc: sources.Document
    commands: list = field(default_factory=list)  # shell scripts: shellcmd.Command list
    root: str | None = None  # working directory its launch implies: references resolve from here first
    # Keys a launch command sets on the command line for this file (`accelerate launch
    # --config_file x.yaml --num_processes 8`): {key: (launch Config, command index)}.
    overridden: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)  # {key: class}: keys the script that reads this file adds
    linked: bool = False  # a launch command names the script that reads this file
    # {command index: keys the script it runs defines in dataclasses of its own}: a launch
    # script's flags such a class takes are the script's, whatever transformers did with them
    script_keys: dict = field(default_factory=dict)
    # {framework: version} it is judged at (--framework-version, else the repo's pins): found once,
    # asked by the schema check and two rules.
    framework_versions: dict | None = None

    @property
    def data(self):
        return self.doc.data

    @property
    def dir(self):
        return Path(self.path).parent


def discover(targets, ignore=()):
    """Expand directories into candidate files; explicit files are always kept.

    Returns [(path, explicit, top)]; a directory contributes regular files by suffix only
    (a fifo or a device named *.json is not read, nor waited on), and files that turn
    out not to be configs are skipped quietly. top is the folder walked (None for a named
    file): see walk_top.
    """
    out = []
    for target in targets:
        if os.path.isdir(target):
            out.extend((path, False, str(target)) for path in _walk(str(target), ignore))
        else:
            out.append((str(target), True, None))
    return out


def _unlistable(target):
    """A UserError for a folder named on the command line that cannot be listed (no read or
    search permission): the walk skips such folders quietly, so it read as 'no configs found',
    exit 0, while every config in it went unchecked."""
    if not os.path.isdir(target):
        return None
    try:
        with os.scandir(target):
            return None
    except OSError as exc:
        return UserError(f"cannot read folder: {exc.strerror}", path=target)


def walk_top(path, top):
    """The repository top for a file found by walking folder top, when no .git says otherwise.

    A source archive or a copied tree has no .git, and a walk of it would otherwise read the
    dependency files of each config's own folder only: LLaVA's scripts/*.sh would miss the
    transformers==4.37.2 of the pyproject.toml at the top of the folder the user named. The
    named folder is the one boundary the user gave, so it stands in for the repository's top;
    a .git above or inside it still wins (lint repo/examples reads repo's pins)."""
    if top is None or repo_root(path) is not None:
        return None
    return top


def _walk(top, ignore):
    """Candidate files under top (config suffixes), less the folders and files --ignore names."""
    return sources.walk(top, detect.SUFFIX_SYNTAX, skip_dir=lambda name: name in ignore,
                        skip_file=lambda path: _ignored(path, ignore))


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


def load(path, explicit, kind=None, hint=None):
    """A Config, or None for a non-config found while walking a directory. hint: what an
    explicit file of no detectable kind is told to do, by default lint's --kind; other verbs
    pass their own (estimate has no --kind, and told its users to pass one)."""
    text = sources.read_text(path, max_bytes=MAX_BYTES)
    syntax = detect.syntax_of(path, text)
    if kind and formats.FORMATS[kind].syntax == "shell":
        syntax = "shell"
    elif kind and syntax == "shell":
        syntax = "yaml"  # JSON is YAML too
    if syntax == "shell":
        shell_doc, cmds = _shell_doc(text, path)
        found = kind if kind and formats.FORMATS[kind].syntax == "shell" else detect.command_kind(text)
        doc = readers.read(text, path, formats.FORMATS[found]) if found else None
        if doc is not None:
            doc.positions.update(shell_doc.positions)
            return Config(path, found, doc, cmds)
        if not cmds:
            if explicit:
                raise UserError("launch script runs no commands; nothing to lint", path=path)
            return None
        return Config(path, "launch", shell_doc, cmds)
    if not text.strip():
        raise UserError("empty file", path=path, line=1)
    doc = sources.parse(text, path, syntax)  # what the text is written in, whatever the kind
    found = kind or detect.kind_of(syntax, doc.data, text)
    if found is None:
        if not explicit:
            return None
        owner = formats.unchecked_owner(set(doc.data)) if isinstance(doc.data, dict) else None
        kinds = ", ".join(detect.KINDS)
        if owner:
            raise UserError(f"a config for {owner[0]} ({', '.join(owner[1])}), which ftrecipes does not check; "
                            f"{hint or 'pass --kind to judge it as one of ' + kinds}", path=path)
        raise UserError(f"cannot tell which kind of config this is; {hint or 'pass --kind (' + kinds + ')'}", path=path)
    return Config(path, found, doc)


def repo_root(path):
    """The nearest folder above path that is a repository's top (holds .git), or None."""
    # A file that is no link lies in its folder: the folder's answer is cached for all its files.
    folder = os.path.dirname(os.path.realpath(path)) if os.path.islink(path) else os.path.dirname(os.path.abspath(path))
    top = pins.repo_root(folder)
    return str(top) if top is not None else None


def launch_root(path, root=None):
    """The working directory a launch of this file implies: --root when the file is inside it,
    else its repository's top. Frameworks open `deepspeed: examples/ds.json` and `--config_file
    examples/x.yaml` from the directory the job starts in, which examples expect to be the top."""
    # realpath: Path.resolve raises on a symbolic-link loop (Python 3.11); the read reports it
    if root and Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
        return str(root)
    return repo_root(path)


def _named_files(cfg):
    """The names of the files this config points at, as written."""
    yield from _declared_names(cfg)
    for cmd in cfg.commands:
        yield from _positional_names(cmd)


def _declared_names(cfg):
    """The names a config key or a config flag (--deepspeed, --config_file) gives."""
    fmt = formats.FORMATS.get(cfg.kind)
    for at in fmt.references if fmt else ():
        node = cfg.data
        for part in at:
            node = node.get(part) if isinstance(node, dict) else None
        yield node
    for cmd in cfg.commands:
        flags, _ = shellcmd.flags_after(cmd, 0)
        for k, (v, _) in flags.items():
            if k in CONFIG_FLAGS and isinstance(v, str):
                yield v


def _positional_names(cmd):
    """The config-looking words of a command, flag values among them."""
    return [w for w in cmd.words[1:] if w.endswith((".yaml", ".yml", ".json")) and not w.startswith("-")]


def resolve(cfg, name):
    """The file a name in cfg points at: from the launch's working directory, else cfg's folder."""
    if not isinstance(name, str) or not name or "$" in name:
        return None
    bases = [Path(cfg.root)] if cfg.root else []
    for base in bases + [cfg.dir]:
        p = Path(name) if os.path.isabs(name) else base / name
        if p.is_file():
            return os.path.normpath(str(p))
    return None


def references(cfg):
    """Paths of other config files this one names."""
    out = []
    for name in _named_files(cfg):
        p = resolve(cfg, name)
        if p and p not in out:
            out.append(p)
    return out


def _undeclared(cfg, refs):
    """The references that only a bare word of a command names (`python train_eval.py
    configs/anet.yaml`), not a config key or a flag such as --deepspeed: the program may read any
    YAML, so whether the file is ours is for its content to say, as for a file a walk finds."""
    declared = {resolve(cfg, name) for name in _declared_names(cfg)}
    return {r for r in refs if r not in declared}


# `accelerate launch` flags that also are config-file keys: on the command line they win.
_LAUNCH_OVERRIDES = {"num_processes", "num_machines", "machine_rank", "mixed_precision", "gpu_ids", "main_process_port", "main_process_ip"}


def apply_overrides(configs):
    """Mark the keys of config files that the command launching them overrides: `accelerate
    launch --config_file x.yaml --num_processes 8`, `train.py --config sft.yaml
    --per_device_train_batch_size 4` (TrlParser: the command line wins over the file) and
    `llamafactory-cli train x.yaml per_device_train_batch_size=4`."""
    by_path = {os.path.normpath(c.path): c for c in configs}
    for cfg in configs:
        for i, cmd in enumerate(cfg.commands):
            _trainer_overrides(cfg, i, cmd, by_path)
            if launcher_of(cmd) != "accelerate":
                continue
            words = cmd.words[: next((j for j, w in enumerate(cmd.words) if w.endswith(".py") or w == "-m"), len(cmd.words))]
            flags, _ = shellcmd.flags_after(shellcmd.Command(cmd.line, words, cmd.word_lines), 2)
            target = by_path.get(resolve(cfg, (flags.get("config_file") or flags.get("config-file") or (None,))[0]) or "")
            if target is None or target.kind != "accelerate":
                continue
            for name in flags:
                if name.replace("-", "_") in _LAUNCH_OVERRIDES:
                    target.overridden[name.replace("-", "_")] = (cfg, i)


def _trainer_overrides(cfg, i, cmd, by_path):
    if launcher_of(cmd) == "llamafactory-cli":
        target = next((by_path.get(resolve(cfg, w) or "") for w in cmd.words[2:3]), None)
        keys = [w.split("=", 1)[0] for w in cmd.words[3:] if "=" in w and not w.startswith("-")]
    else:
        flags, _ = shellcmd.flags_after(cmd, 0)
        target = by_path.get(resolve(cfg, (flags.get("config") or (None,))[0]) or "")
        keys = [k for k in flags if k != "config"]
    fmt = formats.FORMATS.get(target.kind) if target is not None else None
    if fmt is not None and fmt.overridable:
        for key in keys:
            target.overridden[key] = (cfg, i)


def apply_entry_points(configs):
    """Give each TRL-style file the keys of the script its launch command passes it to
    (`accelerate launch src/open_r1/grpo.py --config recipes/x.yaml`, `python -m open_r1.sft --config ...`);
    a file no command links gets those of every argument-parsing script of its repository."""
    by_path = {os.path.normpath(c.path): c for c in configs}
    for cfg in configs:
        for i, cmd in enumerate(cfg.commands):
            flags, _ = shellcmd.flags_after(cmd, 0)
            target = by_path.get(resolve(cfg, (flags.get("config") or (None,))[0]) or "")
            script = _entry_point(cfg, cmd)
            if not script:
                continue
            try:
                keys = extras_mod.from_entry_point(script, cfg.root)
            except UserError:
                continue  # a script we cannot read declares nothing; its YAML is checked as plain TRL
            cfg.script_keys[i] = set(keys)
            if getattr(cfg.doc, "module", None) and cmd.words and _runs_module(cmd, cfg.doc.module):
                # the launch runs the repository's own copy of the framework's module: its parser decides
                cfg.extras.update(extras_mod.argparse_flags(script, cfg.root))
            if target is not None and target.kind == "trl":
                target.extras.update(keys)
                target.linked = True
    for cfg in configs:
        if cfg.kind == "trl" and not cfg.linked and cfg.root:
            cfg.extras.update(extras_mod.from_repository(cfg.root))


def _runs_module(cmd, module):
    """Whether the command runs module (`-m openrlhf.cli.train_sft` or its file path)."""
    path = module.replace(".", "/") + ".py"
    return any(w == module or w.endswith(path) for w in cmd.words)


def _entry_point(cfg, cmd):
    """The Python file a command runs: a `.py` word, or the module after -m, found under the root."""
    for j, w in enumerate(cmd.words):
        if w.endswith(".py"):
            return resolve(cfg, w) or _from_a_parent(cfg, w)
        if w in ("-m", "--module") and j + 1 < len(cmd.words):
            rel = cmd.words[j + 1].replace(".", "/") + ".py"
            # a fork vendored in a sub-folder runs from there (`cd OpenRLHF-STILL` first)
            return resolve(cfg, rel) or resolve(cfg, "src/" + rel) or _from_a_parent(cfg, rel)
    return None


def _from_a_parent(cfg, name):
    """A relative script name found in a folder above the launch script's, up to the repository's
    top: `scripts_finetune/finetune_sft.sh` runs `torchrun ... finetune.py` from the project
    folder above it (s1's gpt-accelera), a layout a launch from the top would not find."""
    if not isinstance(name, str) or "$" in name or os.path.isabs(name) or not cfg.root:
        return None
    top, folder = Path(os.path.realpath(cfg.root)), Path(os.path.realpath(cfg.dir))
    while folder != top and top in folder.parents:
        folder = folder.parent
        if (folder / name).is_file():
            return os.path.normpath(str(folder / name))
    return None


def check_config(cfg, framework_versions=None, extras=None):
    fmt = formats.FORMATS.get(cfg.kind)
    if fmt is None:  # a launch script: its duplicate flags are not keys of one mapping
        return [Finding(cfg.path, line, col, "duplicate-key", ERROR, f"duplicate key '{key[-1]}' ({formats.LAST_WINS})")
                for key, line, col in cfg.doc.duplicates]
    declared = {**(extras or {}).get(cfg.kind, {}), **cfg.extras}
    return checks.check_document(cfg.doc, fmt, framework_versions, declared)


def _groups(configs):
    """Setups: each file nobody else names, with the files it names (transitively).

    Two launch scripts that both name ds_config_zero2.json are two setups sharing that file, not
    one. A folder holding at most one config of each kind counts as one unit (a rendered recipe);
    a folder with several of one kind holds alternatives (TRL's accelerate_configs/,
    LLaMA-Factory's examples/deepspeed/) that nobody runs together, so they are not compared.
    """
    index = {os.path.normpath(c.path): i for i, c in enumerate(configs)}
    unit_of = list(range(len(configs)))  # folder unit: index of its first member
    by_dir = {}
    for i, c in enumerate(configs):
        by_dir.setdefault(os.path.normpath(str(c.dir)), []).append(i)
    for members in by_dir.values():
        kinds = [configs[i].kind for i in members]
        if len(set(kinds)) == len(kinds):
            for i in members:
                unit_of[i] = members[0]
    units = {}
    for i, u in enumerate(unit_of):
        units.setdefault(u, []).append(i)
    refs = {u: {unit_of[index[r]] for i in members for r in references(configs[i]) if r in index} - {u}
            for u, members in units.items()}
    named = set().union(*refs.values()) if refs else set()

    def closure(u):
        seen, stack = set(), [u]
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(refs[v])
        return seen

    groups, covered = [], set()
    for u in units:
        if u not in named:
            groups.append(closure(u))
            covered |= groups[-1]
    for u in units:
        if u not in covered:  # only reachable inside a cycle of references
            groups.append(closure(u))
            covered |= groups[-1]
    return [[configs[i] for v in sorted(g) for i in units[v]] for g in groups]


_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*?\}\}")


def _not_ours(path):
    """True for a file found while walking whose text names no keys of a format we check.

    Such a file failed to parse (JSON with comments or NaN, YAML with Python tags, an empty file).
    A walk reaches every .json and .yaml of a repository, and tsconfig.json or mkdocs.yml reported
    as unusable configs are false alarms. The keys are read off the text (detect.surface_keys), so
    a DeepSpeed JSON with a trailing comma still names zero_optimization and is reported."""
    text = _walk_text(path)
    if text is None:
        return False  # unreadable (too large, a link loop, no permission): reported as it is
    syntax = detect.syntax_of(path, text)
    if syntax == "shell":
        return False
    head = text[:SURFACE_CHARS]
    return detect.kind_of(syntax, dict.fromkeys(detect.surface_keys(syntax, head)), head) is None


def _walk_text(path):
    """The text of a walked file for judging whether it names a config's keys, or None.

    A regular file that is not UTF-8 text (NUL bytes, UTF-16, Latin-1) is read with its NULs
    dropped and bad bytes replaced: InternLM-XComposer's reward_bench/results.json is 262,471 NUL
    bytes, no config, and made a whole-tree walk exit 2. Text naming a DeepSpeed key still shows
    the key, so such a config is reported as before."""
    try:
        return sources.read_text(path, max_bytes=MAX_BYTES)
    except UserError:
        if not sources.regular_file(path, MAX_BYTES):
            return None
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES)
    except OSError:
        return None
    return raw.replace(b"\0", b"").decode("utf-8", "replace")


def _template(path):
    """True for a file with ${VAR} or {{ var }} placeholders (DeepSpeedExamples' ds_config_temp.json,
    which its run.sh fills in with sed): it does not parse until a script has substituted them."""
    try:
        text = sources.read_text(path, max_bytes=MAX_BYTES)
    except UserError:
        return False
    return bool(_PLACEHOLDER.search(text))


def run(targets, kind=None, options=None, ignore=(), skip_unknown=False, root=None):
    result = Result()
    options = options or rules.Options()
    configs = []
    seen = set()

    def add(path, explicit, kind_=None, walked=False, top=None):
        key = os.path.normpath(path)
        if key in seen:
            return
        seen.add(key)
        try:
            cfg = load(path, explicit, kind_)
        except UserError as err:
            if not explicit and _template(path):
                return  # found while walking a folder: an input of some script, not a config
            if walked and _not_ours(path):
                return  # another tool's file that does not parse as a config (tsconfig, mkdocs.yml)
            result.unusable.append(err)
            return
        if cfg is None:
            return
        cfg.root = launch_root(path, root or walk_top(path, top))
        configs.append(cfg)
        # Files a config names are part of its setup even when outside the targets.
        refs = references(cfg)
        loose = _undeclared(cfg, refs)
        for ref in refs:
            add(ref, False, walked=ref in loose, top=top)

    result.unusable.extend(filter(None, map(_unlistable, targets)))
    for path, explicit, top in discover(targets, ignore):
        add(path, explicit and not skip_unknown, kind, walked=not explicit, top=top)
    apply_entry_points(configs)
    for cfg in configs:
        result.checked.append((cfg.path, cfg.kind))
        # Judged at the release the repo pins (--framework-version overrides), like the rules.
        cfg.framework_versions = pins.versions_for(cfg.path, options.framework_versions, cfg.root, cfg.kind)
        result.findings.extend(check_config(cfg, cfg.framework_versions, options.config_extras))
    apply_overrides(configs)
    for group in _groups(configs):
        result.findings.extend(rules.run(rules.Setup(group, options)))
    if not result.checked and not result.unusable and not skip_unknown:
        where = ", ".join(str(t) for t in targets)
        result.notes.append(f"no configs found in {where}; nothing was checked")
    result.findings = findings_mod.ordered(result.findings)
    return result
