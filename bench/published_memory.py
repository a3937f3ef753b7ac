"""The memory estimate against GPU-memory figures published by others (READMEs, tutorials, issues).

    python bench/published_memory.py [--split heldout|train|all] [--json] [--cases FILE]

Cases live in bench/published_memory/cases.yaml (format at the top of that file). Each case's
`setup` is passed to ftrecipes.memory.estimate.Setup as keyword arguments; a key Setup does not
know, or a value the model rejects (unknown GPU or model, bad stage), makes the case "not
expressible" with the reason, and it is counted, never dropped.

What is compared with what:
  measured nvidia-smi -> estimated reserved + CUDA context (nvidia-smi sees the whole process)
  measured reserved   -> estimated reserved  (torch.cuda.max_memory_reserved)
  measured allocated  -> estimated allocated (torch.cuda.max_memory_allocated / peak active)
  measured oom | ran  -> the verdict only
The estimate's allocated figure is Result.gpu_allocated_bytes when the model provides it, else
gpu_peak_bytes less the "runtime" category (CUDA context and other memory the caching
allocator never sees). Its reserved figure is Result.gpu_reserved_bytes when present, else the
allocated figure (no allocator model yet). The card-level figure is Result.gpu_card_bytes when
present, else reserved + CUDA context (Result.cuda_context_bytes, else that runtime category).

Verdict agreement: a reported OOM agrees when the estimate says "oom", or "tight" with the
card-level figure above the GPU's capacity before PyTorch frees its cache (Result.gpu_demand_bytes:
the run is at the card's limit; the summary says how many completed runs are there too); a run that completed (a figure
or "ran") agrees when the estimate does not say "oom" and names no error (a setting it says
the run fails with, Result.errors).
A case may name `rerun`: runs of its stated setting on a real GPU by bench/gpu_calibrate.py
(file under bench/, case name). They are printed beside the case after the summary, and they
change nothing above: the published outcome stays what the case is scored on.
Exit status 0 unless the case file is unusable (2).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

from ftrecipes.errors import UserError  # noqa: E402  (after the path insert)
from ftrecipes.memory.estimate import Setup  # noqa: E402
from ftrecipes.memory.inputs import SETUP_FIELDS, run  # noqa: E402
from ftrecipes.sources import parse_yaml, read_text  # noqa: E402

CASES = os.path.join(HERE, "published_memory", "cases.yaml")
GiB = 1024 ** 3
WHAT = ("nvidia-smi", "reserved", "allocated", "oom", "ran")
SPLITS = ("train", "heldout")
REQUIRED = ("id", "split", "source", "measured", "assumptions", "setup")
MAX_BYTES = 4 * 1024 * 1024


def split_of(case_id: str) -> str:
    """The rule stated at the top of cases.yaml; fixed before anything was fitted."""
    return "heldout" if int(hashlib.sha1(case_id.encode("utf-8")).hexdigest(), 16) % 3 == 0 else "train"


def problems(cases) -> list[str]:
    """Everything wrong with the case list, one line each (empty: the file is usable)."""
    if not isinstance(cases, list) or not cases:
        return ["the file must be a non-empty list of cases"]
    out, seen = [], set()
    for i, c in enumerate(cases):
        name = c.get("id") if isinstance(c, dict) else None
        where = f"case {i + 1} ({name or 'no id'})"
        if not isinstance(c, dict):
            out.append(f"{where}: not a mapping")
            continue
        out += [f"{where}: missing {k}" for k in REQUIRED if k not in c]
        if name in seen:
            out.append(f"{where}: duplicate id")
        seen.add(name)
        if isinstance(name, str) and c.get("split") != split_of(name):
            out.append(f"{where}: split {c.get('split')!r} breaks the rule (should be {split_of(name)!r})")
        src = c.get("source") or {}
        if not isinstance(src, dict) or not src.get("quote") or not (src.get("url") or src.get("repo")):
            out.append(f"{where}: source needs a quote and a url or repo")
        m = c.get("measured") or {}
        what = m.get("what") if isinstance(m, dict) else None
        if what not in WHAT:
            out.append(f"{where}: measured.what must be one of {', '.join(WHAT)}")
        elif what in ("oom", "ran") and "gib" in m:
            out.append(f"{where}: an {what} outcome has no figure")
        elif what not in ("oom", "ran") and not (isinstance(m.get("gib"), (int, float)) and m["gib"] > 0):
            out.append(f"{where}: measured.gib must be a positive number")
        if not isinstance(c.get("assumptions", []), list):
            out.append(f"{where}: assumptions must be a list")
        if not isinstance(c.get("setup"), dict) or not c.get("setup"):
            out.append(f"{where}: setup must be a non-empty mapping")
        out += [f"{where}: rerun {why}" for why in rerun_problems(c.get("rerun", []))]
    return out


def rerun_problems(reruns) -> list[str]:
    if not isinstance(reruns, list):
        return ["must be a list of {file, case}"]
    out = []
    for r in reruns:
        if not isinstance(r, dict) or set(r) != {"file", "case"}:
            out.append("entries need exactly file and case")
        elif rerun_of(r) is None:
            out.append(f"{r['case']!r} is not a run in {r['file']}")
    return out


def rerun_of(ref: dict) -> dict | None:
    """The measured run a case's rerun entry names (bench/gpu_calibrate/*.json), or None."""
    return _measured_runs(str(ref["file"])).get(ref["case"])


@functools.lru_cache(maxsize=None)
def _measured_runs(file: str) -> dict:
    """{case name: measurements} of a gpu_calibrate file under bench/, read once ({}: none such)."""
    path = os.path.normpath(os.path.join(HERE, file))
    if not path.startswith(HERE + os.sep) or not os.path.isfile(path):
        return {}
    try:
        return {r["case"]["name"]: r["measured"] for r in json.loads(read_text(path, max_bytes=MAX_BYTES))["runs"]}
    except (ValueError, KeyError, TypeError, UserError):  # not a gpu_calibrate measurements file
        return {}


def load(path: str = CASES) -> list[dict]:
    doc = parse_yaml(read_text(path, max_bytes=MAX_BYTES), path)
    if doc.duplicates:  # YAML keeps the last of two equal keys; a case must state each fact once
        key, line, column = doc.duplicates[0]
        raise UserError(f"duplicate key {'.'.join(map(str, key))}", path=path, line=line, column=column)
    cases = doc.data
    bad = problems(cases)
    if bad:
        raise UserError(bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""), path=path)
    return cases


def setup_of(case: dict) -> dict:
    """A case's Setup fields; a model named by a .json file is a config.json beside cases.yaml
    (models/), for checkpoints whose shape differs from the catalog's."""
    setup = dict(case["setup"])
    if str(setup.get("model", "")).endswith(".json"):
        setup["model"] = os.path.join(os.path.dirname(CASES), setup["model"])
    return setup


def figures(r) -> dict:
    """Allocated, reserved and card-level (nvidia-smi) peaks of an estimate, in bytes.

    Uses the model's own figures where its Result has them (a missing or zero attribute means the
    model does not provide it yet) and otherwise derives them from gpu_peak_bytes."""
    # every phase carries the same runtime bytes; the peak may be a steady state that is no phase
    runtime = max((p.by_category.get("runtime", 0.0) for p in r.phases), default=0.0)
    allocated = getattr(r, "gpu_allocated_bytes", None) or r.gpu_peak_bytes - runtime
    reserved = getattr(r, "gpu_reserved_bytes", None) or allocated
    context = getattr(r, "cuda_context_bytes", None) or runtime
    card = getattr(r, "gpu_card_bytes", None) or reserved + context
    return {"allocated": allocated, "reserved": reserved, "nvidia-smi": card}


def origin(case: dict) -> str:
    """Which publication a case comes from (its repository, else the URL's host), for per-source figures."""
    src = case["source"]
    if src.get("repo"):
        return src["repo"]
    url = src.get("url", "")
    return url.split("//", 1)[-1].split("/", 1)[0] or "?"


def evaluate(case: dict) -> dict:
    m = case["measured"]
    row = {"id": case["id"], "split": case["split"], "source": origin(case), "what": m["what"],
           "measured_gib": m.get("gib")}
    unknown = sorted(set(case["setup"]) - SETUP_FIELDS)
    if unknown:
        return {**row, "expressible": False, "why": "Setup has no " + ", ".join(unknown)}
    try:
        r = run(Setup(**setup_of(case)), with_remedies=False)
    except (KeyError, ValueError, TypeError) as e:
        return {**row, "expressible": False, "why": str(e).strip("'\"")}
    f = figures(r)
    row.update(expressible=True, verdict=r.verdict, capacity_gib=r.gpu_bytes / GiB,
               allocated_gib=f["allocated"] / GiB, reserved_gib=f["reserved"] / GiB, card_gib=f["nvidia-smi"] / GiB)
    # tight, and the allocator would want more than the card: it fits only by freeing its cache
    row["at_limit"] = r.verdict == "tight" and max(f["nvidia-smi"], r.gpu_demand_bytes) > r.gpu_bytes
    if m["what"] == "oom":
        row["agrees"] = r.verdict == "oom" or row["at_limit"]
    else:
        row["agrees"] = r.verdict != "oom" and not r.errors
    if case.get("rerun"):
        row["reruns"] = [(ref["case"], rerun_of(ref)) for ref in case["rerun"]]
    if m["what"] not in ("oom", "ran"):
        est = f[m["what"]] / GiB
        row["estimate_gib"] = est
        row["error_pct"] = 100.0 * (est - m["gib"]) / m["gib"]
    return row


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if r["expressible"]]
    errs = [r["error_pct"] for r in ok if "error_pct" in r]
    ooms = [r for r in ok if r["what"] == "oom"]
    ran = [r for r in ok if r["what"] != "oom"]
    return {
        "cases": len(rows), "expressible": len(ok), "not_expressible": len(rows) - len(ok),
        "figures": len(errs),
        "median_abs_error_pct": statistics.median(abs(e) for e in errs) if errs else None,
        "low": sum(e < 0 for e in errs), "high": sum(e > 0 for e in errs),
        "verdict_agreement": sum(r["agrees"] for r in ok), "verdict_total": len(ok),
        "oom_reported": len(ooms), "oom_recall": sum(r["agrees"] for r in ooms),
        "oom_reported_not_expressible": sum(r["what"] == "oom" and not r["expressible"] for r in rows),
        "false_oom": sum(not r["agrees"] for r in ran), "ran_total": len(ran),
        # how sharp "at the card's limit" is: reported OOMs it flags, completed runs it also holds
        "at_limit": (sum(r["at_limit"] for r in ooms), sum(r["at_limit"] for r in ran)),
    }


def by_source(rows: list[dict]) -> dict:
    names = sorted({r["source"] for r in rows})
    return {n: summary([r for r in rows if r["source"] == n]) for n in names}


def _num(v, fmt="{:.1f}"):
    return "" if v is None else fmt.format(v)


def report(rows: list[dict], sums: dict, sources: dict) -> str:
    out = ["# Memory estimate vs published measurements", "",
           "Output of `python bench/published_memory.py` (cases: bench/published_memory/cases.yaml). "
           "Estimates are per GPU: allocated / reserved / card (reserved + CUDA context, what nvidia-smi shows) "
           "of the GPU's capacity; `compared` is the one matching what was measured. Error % = "
           "(estimate - measured) / measured.", "",
           "| case | split | measured | GiB | estimate GiB (alloc / reserved / card) | compared | error % | verdict | agrees |",
           "|---|---|---|---:|---|---:|---:|---|---|"]
    for r in rows:
        if not r["expressible"]:
            out.append(f"| {r['id']} | {r['split']} | {r['what']} | {_num(r['measured_gib'], '{:.2f}')} | "
                       f"not expressible: {r['why']} | | | | |")
            continue
        est = f"{r['allocated_gib']:.2f} / {r['reserved_gib']:.2f} / {r['card_gib']:.2f} of {r['capacity_gib']:.1f}"
        out.append(f"| {r['id']} | {r['split']} | {r['what']} | {_num(r['measured_gib'], '{:.2f}')} | {est} | "
                   f"{_num(r.get('estimate_gib'), '{:.2f}')} | {_num(r.get('error_pct'), '{:+.1f}')} | "
                   f"{r['verdict']}{' (at limit)' if r['at_limit'] else ''} | "
                   f"{'yes' if r['agrees'] else 'NO'} |")
    out += ["", "| split | cases | expressible | figures | median abs error % | low / high | verdicts agree | "
            "OOM recall | false OOM | at the limit (OOM / ran) | not expressible |",
            "|---|---:|---:|---:|---:|---|---|---|---|---|---:|"]
    for name, s in sums.items():
        recall = f"{s['oom_recall']}/{s['oom_reported']}"
        if s["oom_reported_not_expressible"]:
            recall += f" (+{s['oom_reported_not_expressible']} not expressible)"
        out.append(f"| {name} | {s['cases']} | {s['expressible']} | {s['figures']} | "
                   f"{_num(s['median_abs_error_pct'])} | {s['low']} / {s['high']} | "
                   f"{s['verdict_agreement']}/{s['verdict_total']} | {recall} | {s['false_oom']}/{s['ran_total']} | "
                   f"{s['at_limit'][0]} / {s['at_limit'][1]} | {s['not_expressible']} |")
    out += ["", "At the limit: `tight`, with the allocator wanting more than the card before PyTorch frees its "
            "cache (the run fits only by freeing it); a reported OOM there counts as flagged."]
    out += rerun_table(rows)
    out += ["", "By source (all splits):", "", "| source | cases | expressible | median abs error % | low / high | "
            "verdicts agree |", "|---|---:|---:|---:|---|---|"]
    for name, s in sources.items():
        out.append(f"| {name} | {s['cases']} | {s['expressible']} | {_num(s['median_abs_error_pct'])} | "
                   f"{s['low']} / {s['high']} | {s['verdict_agreement']}/{s['verdict_total']} |")
    return "\n".join(out)


def rerun_table(rows: list[dict]) -> list[str]:
    """Cases whose stated setting was also run on a GPU (bench/gpu_calibrate): what that run did."""
    reran = [r for r in rows if r.get("reruns")]
    if not reran:
        return []
    out = ["", "Stated settings rerun on a GPU (bench/gpu_calibrate.py; the published outcome above is "
           "what the case is scored on):", "",
           "| case | published | estimate | rerun | outcome | allocated / reserved / card GiB |", "|---|---|---|---|---|---|"]
    for r in reran:
        for name, meas in r["reruns"]:
            phases = [v for v in meas.values() if isinstance(v, dict)]
            peak = " / ".join(f"{max(v.get(k, 0) for v in phases) / GiB:.2f}" for k in ("allocated", "reserved", "card_now"))
            outcome = f"OOM in {meas['oom']}" if "oom" in meas else "ran"
            out.append(f"| {r['id']} | {r['what']} | {r.get('verdict', '-')} | {name} | {outcome} | {peak} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=("heldout", "train", "all"), default="all")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cases", default=CASES)
    a = ap.parse_args(argv)
    try:
        cases = load(a.cases)
    except UserError as e:
        print(f"published_memory: {e}", file=sys.stderr)
        return 2
    chosen = [c for c in cases if a.split == "all" or c["split"] == a.split]
    rows = [evaluate(c) for c in chosen]
    parts = SPLITS if a.split == "all" else (a.split,)
    sums = {p: summary([r for r in rows if r["split"] == p]) for p in parts}
    if a.split == "all":
        sums["all"] = summary(rows)
    sources = by_source(rows)
    if a.json:
        print(json.dumps({"cases": rows, "summary": sums, "by_source": sources}, indent=1))
    else:
        print(report(rows, sums, sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
