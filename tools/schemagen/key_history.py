"""Generate schemas/key_history/<framework>.json: which releases had which config key.

    python3 tools/schemagen/key_history.py [FRAMEWORK ...] [--offline]

Every sampled release is fetched with `pip download --no-deps` (a wheel; DeepSpeed publishes
sdists only) into ~/.cache/ftrecipes/wheels and read with `ast`, never installed or imported, so
any release can be read on any machine in a second. Releases: `pip index versions NAME`, the
newest patch of each minor release from FLOOR on, plus the releases in EXTRA (pinned by
well-known repos, or where a framework renames flags in patch releases). --offline uses only
what the cache holds.

What a release "has" is read from its source:
- dataclass and pydantic fields (class body annotations; pydantic `alias=` too), with the fields
  of base classes defined in the same package;
- argparse flags (`add_argument("--x", ...)` calls in the named modules);
- DeepSpeed's top-level keys: the `NAME = "name"` constants of deepspeed/runtime/constants.py.
A field whose help text or pydantic extras say it is deprecated is recorded as deprecated in
that release, with the backticked key the help names instead when that key exists.

A section (a class, or a flag set) is judged only in the releases where it was found: a class
that moved under a new name is "not found", never "every key removed".
"""

import argparse
import ast
import io
import json
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "schemas" / "key_history"
CACHE = pathlib.Path.home() / ".cache" / "ftrecipes" / "wheels"

# Oldest minor release sampled: releases from early 2025 on (the brief: at least 18 months).
FLOOR = {"transformers": "4.50", "trl": "0.16", "accelerate": "1.3", "peft": "0.14", "deepspeed": "0.15",
         "llamafactory": "0.8.3", "openrlhf": "0.7.5"}
EXTRA = {
    "transformers": ["4.52.3", "4.53.0"],
    "trl": ["0.18.0", "0.19.0"],
    "deepspeed": ["0.16.0", "0.17.0", "0.18.0", "0.19.0"],
    # LLaMA-Factory and OpenRLHF change keys in patch releases: every patch is sampled.
}
EVERY_PATCH = {"llamafactory", "openrlhf"}
SDIST = {"deepspeed"}
PACKAGE_DIR = {"llamafactory": "llamafactory"}

# DeepSpeed sections read by pydantic models: config path -> model class.
DS_SECTIONS = {
    "zero_optimization": "DeepSpeedZeroConfig",
    "zero_optimization.offload_optimizer": "DeepSpeedZeroOffloadOptimizerConfig",
    "zero_optimization.offload_param": "DeepSpeedZeroOffloadParamConfig",
    "fp16": "DeepSpeedFP16Config",
    "bf16": "DeepSpeedBF16Config",
    "comms_logger": "CommsLoggerConfig",
    "tensorboard": "TensorBoardConfig",
    "wandb": "WandbConfig",
    "csv_monitor": "CSVConfig",
    "comet": "CometConfig",
    "compile": "CompileConfig",
    "tensor_parallel": "TPTrainingConfig",
    "hybrid_engine": "HybridEngineConfig",
}
OPENRLHF_SCRIPTS = ["train_sft", "train_dpo", "train_rm", "train_ppo_ray"]


# ------------------------------------------------------------------------------------------
# Releases and archives
# ------------------------------------------------------------------------------------------
def vkey(text):
    parts = re.findall(r"\d+|post", text)
    return tuple(-1 if p == "post" else int(p) for p in parts)


def _minor(v):
    return tuple(int(x) for x in v.split(".")[:2])


def _patch(v):
    return tuple(int(x) for x in re.match(r"\d+(?:\.\d+)*", v).group().split(".")[:3])


def sample(name, available):
    """The newest release of each minor (each patch for EVERY_PATCH) from FLOOR, plus EXTRA."""
    floor = vkey(FLOOR[name])
    final = [v for v in available if re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v) and vkey(v) >= floor]
    group = _patch if name in EVERY_PATCH else _minor
    newest = {}
    for v in final:
        g = group(v)
        if g not in newest or vkey(v) > vkey(newest[g]):
            newest[g] = v
    picked = set(newest.values()) | {v for v in EXTRA.get(name, []) if v in available}
    return sorted(picked, key=vkey)


def available_releases(name, offline):
    if offline:
        found = set()
        for p in CACHE.glob(f"{name}-*"):
            m = re.match(rf"{name}-(\d[^-]*?)(?:-|\.tar\.gz)", p.name)
            if m:
                found.add(m.group(1))
        return sorted(found, key=vkey)
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Available versions:"))
    return [v.strip() for v in line.split(":", 1)[1].split(",")]


def archive(name, version):
    """Path of the cached wheel/sdist of name==version, downloading it when missing."""
    def cached():
        return [p for p in CACHE.glob(f"{name}-{version}*") if re.match(rf"{re.escape(name)}-{re.escape(version)}(-|\.tar\.gz)", p.name)]

    if not cached():
        CACHE.mkdir(parents=True, exist_ok=True)
        binary = ["--no-binary=:all:"] if name in SDIST else ["--only-binary=:all:"]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *binary, f"{name}=={version}", "-d", str(CACHE)], check=True)
    if not cached():
        raise SystemExit(f"pip download {name}=={version} left no archive in {CACHE}")
    return cached()[0]


def sources(path, package):
    """{'package/mod.py': text} for the package's Python files in a wheel or an sdist."""
    out = {}
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                rel = re.sub(r"^[^/]+\.data/(purelib|platlib)/", "", n)  # platform wheels (OpenRLHF)
                if rel.startswith(package + "/") and rel.endswith(".py"):
                    out[rel] = z.read(n).decode("utf-8", "replace")
        return out
    with tarfile.open(path) as t:
        for m in t.getmembers():
            parts = m.name.split("/")
            rel = "/".join(parts[1:])  # sdists hold NAME-VER/...
            if m.isfile() and rel.startswith(package + "/") and rel.endswith(".py"):
                out[rel] = t.extractfile(m).read().decode("utf-8", "replace")
    return out


# ------------------------------------------------------------------------------------------
# Reading the source
# ------------------------------------------------------------------------------------------
def _const_str(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _joined(node):
    """A string constant, or implicitly concatenated / parenthesised constants."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _joined(node.left), _joined(node.right)
        return a + b if a is not None and b is not None else None
    return _const_str(node)


def _kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _field_info(value):
    """(aliases, help text, deprecated flag, new_param) from a field(...)/Field(...) default."""
    aliases, help_text, deprecated, new = [], "", False, None
    if not isinstance(value, ast.Call):
        return aliases, help_text, deprecated, new
    alias = _const_str(_kw(value, "alias"))
    if alias:
        aliases.append(alias)
    for dict_kw in ("metadata", "json_schema_extra"):
        d = _kw(value, dict_kw)
        if isinstance(d, ast.Dict):
            for k, v in zip(d.keys, d.values):
                k = _const_str(k)
                if k == "help":
                    help_text = _joined(v) or ""
                elif k == "deprecated" and isinstance(v, ast.Constant) and v.value:
                    deprecated = True
                elif k == "new_param":
                    new = _const_str(v)
    if isinstance(_kw(value, "deprecated"), ast.Constant) and _kw(value, "deprecated").value:
        deprecated = True
    return aliases, help_text, deprecated, new


def _is_classvar(ann):
    text = ast.unparse(ann)
    return "ClassVar" in text


def class_index(files):
    """{class name: (base names, {field: info})} for every class in the given sources."""
    index = {}
    for rel, text in files.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
            fields = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not _is_classvar(stmt.annotation):
                    name = stmt.target.id
                    if name.startswith("_") or name == "model_config":
                        continue
                    aliases, help_text, deprecated, new = _field_info(stmt.value)
                    fields[name] = {"aliases": aliases, "help": help_text, "deprecated": deprecated, "new": new}
            # The first definition wins; a same-named class elsewhere (tests, examples) must not replace it.
            index.setdefault(node.name, (bases, fields, rel))
    return index


def fields_of(index, name, seen=()):
    """Fields of a class with those of its bases from the same package (nearest definition wins)."""
    if name not in index or name in seen:
        return {}
    bases, own, _ = index[name]
    out = {}
    for b in bases:
        out.update(fields_of(index, b, seen + (name,)))
    out.update(own)
    return out


# "Deprecated", "is deprecated", "<Deprecated version=...>", "will be removed": not "replaces the deprecated `x`".
_DEPRECATED = re.compile(r"^\W*deprecated|\bis deprecated|\bdeprecated[.,:;)]|<deprecated|will be removed", re.IGNORECASE)
_TICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_.]*)`")


def keys_of(fields):
    """{key: deprecation or None} from fields: every alias is a key; deprecation names a successor."""
    out = {}
    for name, info in fields.items():
        dep = None
        if info["deprecated"] or _DEPRECATED.search(info["help"] or ""):
            successor = info["new"] or next((t for t in _TICKED.findall(info["help"] or "") if t != name and t in fields), None)
            dep = {"use": successor} if successor else {}
        for key in [name, *info["aliases"]]:
            out[key] = dep
    return out


def argparse_flags(text):
    """{flag without dashes: deprecation or None} for every add_argument("--flag", ...) call."""
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [_const_str(a) for a in node.args]
            help_text = _joined(_kw(node, "help")) or ""
            for n in names:
                if n and n.startswith("--"):
                    dep = None
                    if _DEPRECATED.search(help_text):
                        succ = next((t.lstrip("-") for t in re.findall(r"--[A-Za-z_][A-Za-z0-9_.]*", help_text) if t != n), None)
                        dep = {"use": succ} if succ else {}
                    out[n[2:]] = dep
    return out


def dataclasses_in(files, wanted):
    """Sections {class: keys} for classes chosen by wanted(name, bases, rel)."""
    index = class_index(files)
    return {name: keys_of(fields_of(index, name)) for name, (bases, _, rel) in index.items() if wanted(name, bases, rel)}


# ------------------------------------------------------------------------------------------
# Per framework: {section: {key: deprecation or None}} for one release
# ------------------------------------------------------------------------------------------
def transformers_sections(files):
    index = class_index({k: v for k, v in files.items() if k.startswith("transformers/training_args")})
    return {name: keys_of(fields_of(index, name)) for name in ("TrainingArguments", "Seq2SeqTrainingArguments") if name in index}


def trl_sections(files):
    def wanted(name, bases, rel):
        if "/vllm_serve" in rel or "/tests/" in rel or not name.endswith(("Config", "Arguments")):
            return False
        return rel.split("/")[1] in ("trainer", "scripts", "experimental") or rel.startswith("trl/trainer")
    return {k: v for k, v in dataclasses_in(files, wanted).items() if v}


def accelerate_sections(files):
    index = class_index({k: v for k, v in files.items() if k.endswith("commands/config/config_args.py")})
    out = {"ClusterConfig": keys_of(fields_of(index, "ClusterConfig"))} if "ClusterConfig" in index else {}
    launch = files.get("accelerate/commands/launch.py")
    if launch:
        out["launch"] = argparse_flags(launch)
    return out


def peft_sections(files):
    index = class_index({k: v for k, v in files.items() if k in ("peft/config.py", "peft/tuners/lora/config.py")})
    return {"LoraConfig": keys_of(fields_of(index, "LoraConfig"))} if "LoraConfig" in index else {}


def llamafactory_sections(files):
    def wanted(name, bases, rel):
        return rel.startswith("llamafactory/hparams/") and name.endswith("Arguments")
    return {k: v for k, v in dataclasses_in(files, wanted).items() if v}


def openrlhf_sections(files):
    return {s: argparse_flags(files[f"openrlhf/cli/{s}.py"]) for s in OPENRLHF_SCRIPTS if f"openrlhf/cli/{s}.py" in files}


def deepspeed_sections(files):
    index = class_index({k: v for k, v in files.items() if k.startswith("deepspeed/") and "/inference/" not in k})
    out = {path: keys_of(fields_of(index, cls)) for path, cls in DS_SECTIONS.items() if cls in index}
    consts = files.get("deepspeed/runtime/constants.py", "")
    top = {}
    for node in ast.parse(consts).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _const_str(node.value)
            if value and value == node.targets[0].id.lower():
                top[value] = None
    # A section is a top-level key of every release whose runtime code names it, with or
    # without a pydantic model for it (bf16 was read from a plain dict before 0.17).
    runtime = "".join(t for k, t in files.items() if k.startswith("deepspeed/runtime/"))
    for path in DS_SECTIONS:
        if "." not in path and re.search(rf"""["']{path}["']""", runtime):
            top.setdefault(path, None)
    out[""] = top  # top-level keys
    return out


EXTRACT = {"transformers": transformers_sections, "trl": trl_sections, "accelerate": accelerate_sections,
           "peft": peft_sections, "llamafactory": llamafactory_sections, "openrlhf": openrlhf_sections,
           "deepspeed": deepspeed_sections}


# ------------------------------------------------------------------------------------------
# From per-release key sets to spans
# ------------------------------------------------------------------------------------------
def spans(present, releases):
    """'a..b' spans (comma-joined) of consecutive sampled releases in which a key was present."""
    out, start, prev = [], None, None
    for r in releases:
        if r in present:
            start = start or r
            prev = r
        elif start:
            out.append(f"{start}..{prev}")
            start = None
    if start:
        out.append(f"{start}..{prev}")
    return ",".join(out)


def history(name, releases, per_release):
    """The committed form: per section, the releases it was found in and each key's spans."""
    sections = {}
    for section in sorted({s for r in releases for s in per_release[r]}):
        found = [r for r in releases if section in per_release[r]]
        keys = {}
        for key in sorted({k for r in found for k in per_release[r][section]}):
            have = {r for r in found if key in per_release[r][section]}
            entry = {"in": spans(have, found)}
            dep = [(r, per_release[r][section][key]) for r in found if key in per_release[r][section] and per_release[r][section][key] is not None]
            if dep:
                entry["deprecated"] = dep[0][0]
                use = dep[-1][1].get("use")
                if use:
                    entry["use"] = use
            keys[key] = entry
        sections[section] = {"releases": spans(set(found), releases), "keys": keys}
    return {
        "$comment": f"Generated by tools/schemagen/key_history.py from {name}'s released source (pip download, read with ast); do not edit.",
        "framework": name,
        "releases": releases,
        "sections": sections,
    }


def generate(name, offline=False):
    releases = sample(name, available_releases(name, offline))
    per_release = {}
    package = PACKAGE_DIR.get(name, name)
    for r in releases:
        per_release[r] = EXTRACT[name](sources(archive(name, r), package))
        print(f"{name} {r}: " + ", ".join(f"{s or '<top>'} {len(k)}" for s, k in per_release[r].items()), file=sys.stderr)
    return history(name, releases, per_release)


def fetch(names):
    """Download the archives of the releases the committed histories name (nothing is regenerated).

    tools/run-tests calls this so that tests/test_key_history.py checks the histories against the
    real releases on a fresh machine too, instead of skipping there.
    """
    from concurrent.futures import ThreadPoolExecutor

    wanted = [(name, r) for name in names for r in json.loads((OUT / f"{name}.json").read_text(encoding="utf-8"))["releases"]]
    # Downloads wait on the network, not the CPU: a few at a time.
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda job: archive(*job), wanted))
    print(f"key history: {len(wanted)} release archives in {CACHE}", file=sys.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("frameworks", nargs="*", default=list(EXTRACT))
    p.add_argument("--offline", action="store_true", help="use only the cached archives")
    p.add_argument("--fetch", action="store_true", help="only download the archives the committed histories name")
    args = p.parse_args(argv)
    if args.fetch:
        return fetch(args.frameworks)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.frameworks:
        data = generate(name, args.offline)
        text = json.dumps(data, indent=1, sort_keys=False) + "\n"
        (OUT / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"wrote {OUT / (name + '.json')}: {len(data['releases'])} releases", file=sys.stderr)


if __name__ == "__main__":
    main()
