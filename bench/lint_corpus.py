"""Lint the public-config corpus (tests/corpus/) and print how much of what lint says is true.

    .venv/bin/python bench/lint_corpus.py [--recall] [--write-unjudged FILE]

Every corpus file is linted alone and every repository as a tree (`--root` = its folder, with the
repository's --config-extras declarations from tests/corpus/extras/). Each error finding is looked
up in tests/corpus/verdicts.yaml, where a person judged it against the framework's source:

- real: the framework fails or silently does the wrong thing with today's releases and with the
  release the file was written for;
- real-today: a problem with today's releases (those the schemas were made from) that the release
  the file was written for accepted (version skew: issue part 2). lint makes it an error only where
  the repository lets today's release in (no pin, or a range reaching it); where the repository
  pins the old release the file is judged there and the key is a warning, which is not counted;
- false-alarm: the framework accepts the file and does what its author meant.

Printed: precision = (real + real-today) / judged errors (issue 11 calls a finding real when it is
a problem "for the version the file was written for or for today's releases"), and the strict
figure with real-today counted as false (the share already wrong when the file was written); crashes; files no kind was found for; errors nobody judged. With --recall it
also injects realistic mistakes into copies of the corpus files (`mutations()`) and prints the
share that yields an error finding naming the mistaken key. Figures are given for the tuning and
the held-out repositories separately (the split is fixed in SOURCES.yaml).
"""

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from ftrecipes import extras as extras_mod  # noqa: E402
from ftrecipes import lint, rules  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
VERDICTS = CORPUS / "verdicts.yaml"
REAL = ("real", "real-today")


def held_out_repo(repo):
    """The split rule written at the top of SOURCES.yaml (and in bench/corpus_gather.py)."""
    import hashlib

    return int(hashlib.sha256(repo.encode()).hexdigest()[:8], 16) % 3 == 2


def sources(role=None):
    """The corpus entries of SOURCES.yaml: config files, or with role="pins" the files that pin versions."""
    return [e for e in yaml.safe_load((CORPUS / "SOURCES.yaml").read_text())["files"] if e.get("role") == role]


def repo_folder(repo):
    return CORPUS / repo.replace("/", "__")


def extras_files(repo):
    return sorted((CORPUS / "extras").glob(repo.replace("/", "__") + "*.yaml"))


def _rel(text, base):
    return str(text).replace(str(base) + "/", "")


def lint_findings(targets, root, repo, base=CORPUS, gpu=None, severity="error"):
    """(findings of one severity as dicts, checked paths, crash text or None) of one lint run."""
    options = rules.Options(gpu=gpu, config_extras=extras_mod.load(extras_files(repo)))
    try:
        result = lint.run([str(t) for t in targets], options=options, root=str(root), skip_unknown=True)
    except Exception:  # a crash is what this benchmark counts, whatever its type
        return [], set(), traceback.format_exc(limit=3)
    out = [{"file": _rel(f.path, base), "rule": f.rule, "message": _rel(f.message, base)}
           for f in result.findings if f.severity == severity]
    out += [{"file": _rel(e.path or "", base), "rule": "unusable-input", "message": _rel(e.message, base)} for e in result.unusable]
    return out, {_rel(p, base) for p, _ in result.checked}, None


def key(f):
    return (f["file"], f["rule"], f["message"])


def collect():
    """Every error finding (deduplicated), per-file checked set, crashes."""
    findings, checked, crashes = {}, set(), []
    by_repo = {}
    for entry in sources():
        by_repo.setdefault(entry["repo"], []).append(entry)
    for repo, entries in by_repo.items():
        folder = repo_folder(repo)
        runs = [[folder]] + [[folder / e["path"]] for e in entries]
        for targets in runs:
            found, seen, crash = lint_findings(targets, folder, repo)
            if crash:
                crashes.append((str(targets[0]), crash))
            checked |= seen
            for f in found:
                findings.setdefault(key(f), f)
    return findings, checked, crashes


def load_verdicts():
    if not VERDICTS.exists():
        return {}
    data = yaml.safe_load(VERDICTS.read_text()) or []
    return {(v["file"], v["rule"], v["message"]): v for v in data}


def split_of(path, splits):
    repo_dir = path.split("/", 1)[0]
    return splits.get(repo_dir, "tuning")


def precision_report(findings, verdicts, checked, crashes):
    entries = sources()
    splits = {e["repo"].replace("/", "__"): e["split"] for e in entries}
    lines = [f"corpus: {len(entries)} files from {len(splits)} repositories "
             f"({sum(e['split'] == 'held-out' for e in entries)} files held out)", ""]
    lines.append("| split | files | not classified | errors | real | real-today | false alarms | unjudged | precision | strict precision |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    unjudged = []
    for split in ("tuning", "held-out", "all"):
        files = [e for e in entries if split in ("all", e["split"])]
        paths = {e["repo"].replace("/", "__") + "/" + e["path"] for e in files}
        mine = [f for k, f in findings.items() if f["file"] in paths or (split == "all")]
        counts = Counter(verdicts[key(f)]["verdict"] if key(f) in verdicts else "unjudged" for f in mine)
        judged = sum(counts[v] for v in ("real", "real-today", "false-alarm"))
        prec = (counts["real"] + counts["real-today"]) / judged if judged else 1.0
        strict = counts["real"] / judged if judged else 1.0
        lines.append(f"| {split} | {len(paths)} | {len(paths - checked)} | {len(mine)} | {counts['real']} | {counts['real-today']} | "
                     f"{counts['false-alarm']} | {counts['unjudged']} | {prec:.1%} | {strict:.1%} |")
        if split == "all":
            unjudged = [f for f in mine if key(f) not in verdicts]
    lines += ["", f"crashes: {len(crashes)}"] + [f"  {p}: {t.strip().splitlines()[-1]}" for p, t in crashes]
    not_classified = sorted({e["repo"].replace("/", "__") + "/" + e["path"] for e in entries} - checked)
    lines += ["", f"files not classified (no config kind found; skipped): {len(not_classified)}"]
    lines += [f"  {p}" for p in not_classified]
    by_rule = Counter((f["rule"], verdicts[key(f)]["verdict"] if key(f) in verdicts else "unjudged") for f in findings.values())
    lines += ["", "| rule | verdict | findings |", "|---|---|---:|"]
    lines += [f"| {r} | {v} | {n} |" for (r, v), n in sorted(by_rule.items())]
    return lines, unjudged


# --- recall: realistic mistakes injected into copies of corpus files -------------------------------

TYPO_KEYS = {
    ".json": ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping", "zero_optimization", "train_batch_size"],
    ".yaml": ["per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "num_train_epochs", "lora_rank",
              "cutoff_len", "num_processes", "distributed_type", "mixed_precision", "max_completion_length", "num_generations"],
}


def _typo(word, rng):
    i = rng.randrange(1, len(word) - 1)
    kind = rng.choice(["swap", "drop", "plural"])
    if kind == "swap" and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    return word + "s"


PINNED_HAS_IT = " (the pinned release has it: a warning)"


def _pinned_has(rel, key):
    """True when the repository pins a transformers whose TrainingArguments has key, by the key
    history (schemas/key_history/transformers.json), or one older than every release it read."""
    from ftrecipes import pins, versions

    repo_dir = rel.split("/", 1)[0]
    version = pins.versions_for(CORPUS / rel, None, CORPUS / repo_dir).get("transformers")
    h = versions.key_history("transformers")
    if version is None:
        return False
    at = h.sample_for(version)
    return at is None or any(a <= at <= b for a, b in h.spans(key, h.select("TrainingArguments")))


def _parses(rel, text):
    """A JSON mutation needs a JSON config to start from (not a template with ${placeholders})."""
    if not rel.endswith(".json"):
        return True
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def mutations(rng):
    """(category, relative file, mutate(text) -> text, expected key, gpu) for the corpus files."""
    out = []
    for e in sources():
        rel = e["repo"].replace("/", "__") + "/" + e["path"]
        text = (CORPUS / rel).read_text()
        suffix = Path(e["path"]).suffix.replace(".yml", ".yaml")
        if not _parses(rel, text):
            continue
        for k in TYPO_KEYS.get(suffix, []):
            pat = re.compile(rf'^(\s*"?){k}("?\s*:)', re.M)
            if pat.search(text) and (suffix == ".json" or re.search(rf"^{k}:", text, re.M)):
                bad = _typo(k, rng)
                out.append(("key typo", rel, lambda t, p=pat, b=bad: p.sub(lambda m: m.group(1) + b + m.group(2), t, count=1), bad, None))
        if suffix == ".json" and '"zero_optimization"' in text:
            out.append(("stage-ignored ZeRO key", rel, _stage_ignored, "offload_param", None))
            # DeepSpeed converts "3", the HF Trainer and accelerate compare the raw value with 3:
            # the error must name them (a coerced-value warning alone would be a miss).
            out.append(("ZeRO stage written as text", rel, _stage_as_text, "stage: DeepSpeed's model of this section converts '", None))
        if suffix == ".yaml" and re.search(r"^bf16:\s*true", text, re.M):
            out.append(("bf16 on V100", rel, lambda t: t, "bf16", "V100-32GB"))
        if suffix == ".sh" and "openrlhf.cli." in text:
            flags = re.findall(r"--((?:train|data|ds|model|actor|vllm)\.[a-z_]+)\b", text)
            for flag in sorted(set(flags))[:3]:
                bad = _typo(flag.split(".")[-1], rng)
                new = flag.rsplit(".", 1)[0] + "." + bad
                out.append(("OpenRLHF flag typo", rel, lambda t, f=flag, n=new: _sub_code(t, rf"--{re.escape(f)}\b", "--" + n), new, None))
        if suffix == ".sh" and re.search(r"--(eval_strategy|save_strategy)\b", text) and "openrlhf" not in text:
            # Not a mistake where the repository pins a transformers that still has the flag
            # (QwenLM/Qwen: >=4.32,<4.38): there the right report is a version-skew warning.
            cat = "removed transformers arg" + (PINNED_HAS_IT if _pinned_has(rel, "evaluation_strategy") else "")
            out.append((cat, rel, lambda t: _sub_code(t, r"--(eval_strategy|save_strategy)\b", "--evaluation_strategy"),
                        "evaluation_strategy", None))
        if suffix == ".yaml" and re.search(r"^(eval_strategy|save_strategy|output_dir):", text, re.M) and "base_model:" not in text:
            # A key the file already has would be a duplicate key, another rule's find: take the
            # other removed argument then (transformers 4.x's evaluation_strategy).
            for key, line in (("overwrite_output_dir", "overwrite_output_dir: true"), ("evaluation_strategy", "evaluation_strategy: steps")):
                if not re.search(rf"^{key}:", text, re.M):
                    cat = "removed transformers arg" + (PINNED_HAS_IT if _pinned_has(rel, key) else "")
                    out.append((cat, rel, lambda t, add=line: t.rstrip("\n") + f"\n{add}\n", key, None))
                    break
        if suffix == ".yaml" and "base_model:" in text:
            # Value mistakes axolotl's pydantic model refuses (bench/axolotl_values.md found the
            # first in axolotl's own examples): a warmup ratio under warmup_steps, and the HF
            # Trainer's "auto" for a batch size axolotl wants as a number.
            if re.search(r"^warmup_ratio:\s*0?\.\d+\s*$", text, re.M):
                out.append(("axolotl wrong value", rel, lambda t: re.sub(r"^warmup_ratio:", "warmup_steps:", t, count=1, flags=re.M),
                            "warmup_steps: expected integer", None))
            if re.search(r"^micro_batch_size:\s*\d+\s*$", text, re.M):
                out.append(("axolotl wrong value", rel, lambda t: re.sub(r"^micro_batch_size:.*$", "micro_batch_size: auto", t, count=1, flags=re.M),
                            "micro_batch_size: expected integer", None))
        m = re.search(r"^deepspeed:\s*(\S+\.json)", text, re.M)
        if suffix == ".yaml" and m and re.search(r"^per_device_train_batch_size:\s*(\d+)", text, re.M):
            out.append(("batch mismatch across files", rel, None, "train_micro_batch_size_per_gpu", m.group(1)))
    return out


def _sub_code(text, pattern, repl):
    """re.sub of the first match on a line that is not a shell comment (mutate the flag, not its mention)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("#") and re.search(pattern, line):
            lines[i] = re.sub(pattern, repl, line, count=1)
            return "\n".join(lines)
    return None


def _stage_ignored(text):
    try:
        data = json.loads(text)
    except ValueError:
        return None  # a template (DeepSpeedExamples' ds_config_temp.json), not a config
    z = data.get("zero_optimization")
    if not isinstance(z, dict):
        return None
    if z.get("stage", 0) == 3:
        z["stage"] = 2
    z["offload_param"] = {"device": "cpu", "pin_memory": True}
    return json.dumps(data, indent=2)


def _stage_as_text(text):
    try:
        data = json.loads(text)
    except ValueError:
        return None
    z = data.get("zero_optimization")
    if not isinstance(z, dict) or not isinstance(z.get("stage"), int) or isinstance(z.get("stage"), bool):
        return None
    z["stage"] = str(z["stage"])
    return json.dumps(data, indent=2)


def _batch_mismatch(folder, rel_in_repo, ds_name):
    """Give the DeepSpeed config the trainer file names a micro batch one above the trainer's."""
    text = (folder / rel_in_repo).read_text()
    micro = int(re.search(r"^per_device_train_batch_size:\s*(\d+)", text, re.M).group(1))
    ds_path = folder / ds_name
    if not ds_path.is_file():
        return False
    try:
        data = json.loads(ds_path.read_text())
    except ValueError:
        return False
    data["train_micro_batch_size_per_gpu"] = micro + 1
    ds_path.write_text(json.dumps(data, indent=2))
    return True


def recall_report(limit_per_category=40):
    rng = random.Random(11)
    cases = mutations(rng)
    by_cat = {}
    for c in cases:
        by_cat.setdefault(c[0], []).append(c)
    splits = {e["repo"].replace("/", "__"): e["split"] for e in sources()}
    repo_names = {e["repo"].replace("/", "__"): e["repo"] for e in sources()}
    tally = Counter()
    misses = []
    for cat, items in sorted(by_cat.items()):
        rng.shuffle(items)
        for _, rel, mutate, expected, extra in items[:limit_per_category]:
            repo_dir, rel_in_repo = rel.split("/", 1)
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp) / repo_dir
                shutil.copytree(CORPUS / repo_dir, folder)
                target = folder / rel_in_repo
                gpu = None
                if cat == "batch mismatch across files":
                    if not _batch_mismatch(folder, rel_in_repo, extra):
                        continue
                else:
                    new = mutate(target.read_text())
                    if new is None:
                        continue
                    target.write_text(new)
                    gpu = extra
                found, _, crash = lint_findings([target], folder, repo_names[repo_dir], base=Path(tmp), gpu=gpu,
                                                severity="warning" if cat.endswith(PINNED_HAS_IT) else "error")
            hit = not crash and any(expected in f["message"] for f in found)
            split = splits[repo_dir]
            tally[(cat, split, hit)] += 1
            tally[("all", split, hit)] += 1
            if not hit:
                misses.append(f"  {cat}: {rel} ({expected})" + (" CRASH" if crash else ""))
    lines = ["| mistake | tuning found/injected | held-out found/injected | recall |", "|---|---:|---:|---:|"]
    for cat in sorted(by_cat) + ["all"]:
        t = [tally[(cat, s, True)] for s in ("tuning", "held-out")]
        n = [tally[(cat, s, True)] + tally[(cat, s, False)] for s in ("tuning", "held-out")]
        total = sum(n)
        lines.append(f"| {cat} | {t[0]}/{n[0]} | {t[1]}/{n[1]} | {sum(t) / total:.1%} |" if total else f"| {cat} | 0/0 | 0/0 | - |")
    return lines + ["", f"missed: {len(misses)}"] + misses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recall", action="store_true", help="also inject mistakes and measure recall")
    ap.add_argument("--write-unjudged", metavar="FILE", help="write the unjudged findings as YAML verdict stubs")
    args = ap.parse_args(argv)
    start = time.time()
    findings, checked, crashes = collect()
    lines, unjudged = precision_report(findings, load_verdicts(), checked, crashes)
    print("\n".join(lines))
    if args.write_unjudged:
        Path(args.write_unjudged).write_text(yaml.safe_dump([dict(f, verdict="?", reason="?") for f in unjudged], sort_keys=False, width=400))
    if args.recall:
        print("\n## Recall on injected mistakes\n")
        print("\n".join(recall_report()))
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
