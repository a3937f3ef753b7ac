"""Compare `ftrecipes lint` with DeepSpeed's own verdict over the mutants of ds_mutants.

Used by tests/test_lint_vs_deepspeed.py and bench/lint_vs_deepspeed.py. DeepSpeed runs once, in the
trl stack venv (tests/frameworks/ds_oracle.py); lint runs in this process, on each mutant written to
its own folder as ds.json, with ``--kind deepspeed`` and the mutant's world size as ``--gpus``.
"""

import json
import os
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import ds_mutants

ROOT = ds_mutants.ROOT
ORACLE = ROOT / "tests" / "frameworks" / "ds_oracle.py"


def run_oracle(records, python, env, workdir):
    src = Path(workdir) / "mutants.jsonl"
    dst = Path(workdir) / "verdicts.jsonl"
    with open(src, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps({k: r[k] for k in ("id", "config", "world_size", "fill")}) + "\n")
    proc = subprocess.run([str(python), str(ORACLE), str(src), str(dst)], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"ds_oracle failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = {}
    with open(dst, encoding="utf-8") as fh:
        for line in fh:
            v = json.loads(line)
            out[v["id"]] = v
    return out


def run_lint(records, workdir):
    from ftrecipes import lint, rules

    out = {}
    for i, r in enumerate(records):
        d = Path(workdir) / f"m{i:05d}"
        d.mkdir(parents=True, exist_ok=True)
        path = d / "ds.json"
        path.write_text(json.dumps(r["config"], indent=2) + "\n", encoding="utf-8")
        res = lint.run([str(path)], kind="deepspeed", options=rules.Options(gpus=r["world_size"]))
        out[r["id"]] = {
            "errors": [f"{f.rule}: {f.message}" for f in res.findings if f.severity == "error"],
            "warnings": [f"{f.rule}: {f.message}" for f in res.findings if f.severity != "error"],
            "unusable": [str(e) for e in res.unusable],
        }
    return out


def _mentions(findings, dotted_path):
    """A finding names the ignored key, or the section that makes DeepSpeed skip it
    (optimizer.params is ignored when optimizer.type is missing: "optimizer: missing required key")."""
    parent, _, key = dotted_path.rpartition(".")
    return any(key in f or (parent and (f"{parent}: " in f or f" {parent}." in f)) for f in findings)


@dataclass
class Comparison:
    total: int = 0
    confusion: Counter = field(default_factory=Counter)  # (ds "reject"|"accept", lint "error"|"clean")
    missed_rejections: list = field(default_factory=list)  # DS rejects, lint clean
    ignored_total: int = 0  # DS-accepted mutants that ignore at least one key
    ignored_covered: int = 0
    ignored_warning_only: int = 0  # covered, but only by warnings (stage3_* knobs below stage 3)
    missed_ignored: list = field(default_factory=list)
    stricter: list = field(default_factory=list)  # lint error, DS accepts, no ignored key
    records: dict = field(default_factory=dict)

    def lines(self):
        c = self.confusion
        out = [
            f"mutants: {self.total}",
            "                 lint error   lint clean",
            f"DS rejects       {c['reject', 'error']:10}   {c['reject', 'clean']:10}",
            f"DS accepts       {c['accept', 'error']:10}   {c['accept', 'clean']:10}",
            f"DS accepts but ignores a key: {self.ignored_total}; lint finding names it: {self.ignored_covered}"
            f" (by a warning only: {self.ignored_warning_only})",
            f"DS rejects, lint clean: {len(self.missed_rejections)}",
            f"DS accepts (no ignored key), lint error: {len(self.stricter)}",
        ]
        return out


def compare(records, verdicts, linted):
    cmp = Comparison(total=len(records))
    for r in records:
        v, l = verdicts[r["id"]], linted[r["id"]]
        errors = l["errors"] + l["unusable"]
        lint_verdict = "error" if errors else "clean"
        ds_verdict = "accept" if v["accepted"] else "reject"
        cmp.confusion[ds_verdict, lint_verdict] += 1
        cmp.records[r["id"]] = (r, v, l)
        if ds_verdict == "reject" and lint_verdict == "clean":
            cmp.missed_rejections.append((r, v, l))
        if ds_verdict == "accept":
            ignored = v["ignored"] + v["stage_ignored"]
            if ignored:
                cmp.ignored_total += 1
                findings = errors + l["warnings"]
                if all(_mentions(findings, p) for p in ignored):
                    cmp.ignored_covered += 1
                    if not errors:
                        cmp.ignored_warning_only += 1
                else:
                    cmp.missed_ignored.append((r, v, l))
            elif lint_verdict == "error":
                cmp.stricter.append((r, v, l))
    return cmp


def stricter_by_rule(cmp):
    """Lint-error/DS-accept cases grouped by the first error's rule and mutation operator."""
    groups = Counter()
    for r, v, l in cmp.stricter:
        rule = (l["errors"] or l["unusable"])[0].split(":", 1)[0]
        groups[rule, r["ops"][0].split(" ")[0]] += 1
    return groups


def describe(item):
    r, v, l = item
    return f"{r['id']} [{'; '.join(r['ops'])}] world={r['world_size']} DS: {'accept' if v['accepted'] else (v['error'] or '').splitlines()[0][:160]}" + (
        f" ignored={v['ignored'] + v['stage_ignored']}" if v.get("ignored") or v.get("stage_ignored") else ""
    ) + f" | lint: {(l['errors'] + l['unusable'] + l['warnings'])[:3]}"


def run_all(records=None, workdir=None):
    """Generate (or take) the mutants, run both sides, return a Comparison."""
    from ftrecipes import devenv

    records = records if records is not None else ds_mutants.generate()
    python = devenv.ensure_env("trl")
    env = devenv.run_env("trl")
    own = workdir is None
    tmp = tempfile.TemporaryDirectory(prefix="ftr-ds-oracle-") if own else None
    workdir = tmp.name if own else workdir
    try:
        verdicts = run_oracle(records, python, env, workdir)
        linted = run_lint(records, os.path.join(workdir, "lint"))
    finally:
        if tmp:
            tmp.cleanup()
    return compare(records, verdicts, linted)
