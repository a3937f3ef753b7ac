"""Fit the caching-allocator constants of memory.estimate on the published-measurements train split.

    python bench/fit_allocator.py [--cases FILE]            (the fit; output in fit_allocator.md)
    python bench/fit_allocator.py --gpu-crosscheck         (output in fit_allocator_gpu.md)
    python bench/fit_allocator.py --expandable             (output in fit_allocator_expandable.md)

The estimate's reserved figure is allocated + ALLOCATOR_FIXED + ALLOCATOR_SLACK x churn, plus
ALLOCATOR_VARYING x the logits/loss transients when the steps see different sequence lengths
(churn = activations + temporaries at the peak; see memory/estimate._reserved); its card figure
adds NCCL_BUFFERS for every process of a multi-process run. These four are the only constants of
the estimate fitted to published figures. Every case is estimated four times (no allocator model,
churn alone, logits transients alone, NCCL alone), which gives its allocated bytes, churn, logits
transients and whether NCCL applies; the grid is then arithmetic on those, which shortlists the
best SHORTLIST points, and real runs of the benchmark at those points choose. The fit:
  - uses `split: train` cases only; held-out figures are computed once, with the chosen values,
    and never take part in the choice;
  - uses the figures that measure reserved memory (`reserved`, `nvidia-smi`), except those within
    2 % of the card's capacity (a reserved figure with the CUDA context added): a full card is censored data (PyTorch's caching
    allocator keeps what it reserved and grows until the card is full, so it says how much was
    available, not how much was needed);
  - keeps only values under which the train split's verdicts are as good as with no allocator
    model (no reported OOM lost, no run that fitted called oom), then takes the values that flag
    the most reported OOMs and, among those, the lowest median absolute error (ties: the smaller
    values).
"""
from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))

import published_memory as pm  # noqa: E402  (after the path insert)
import ftrecipes.memory.estimate  # noqa: E402,F401

est = sys.modules["ftrecipes.memory.estimate"]
GiB = 1024 ** 3
FIXED = [i / 4 for i in range(0, 21)]     # 0 .. 5 GiB
SLACK = [i / 20 for i in range(0, 61)]    # 0 .. 3
VARYING = [i / 10 for i in range(0, 31)]  # 0 .. 3
NCCL = [i / 4 for i in range(0, 9)]        # 0 .. 2 GiB
CENSORED = 0.98
SHORTLIST = 30  # grid points run for real, best arithmetic keys first
# the cross-check on our own GPU runs (gpu_crosscheck)
GPU_ALLOCATED = 0.05
GPU_FIXED = [i / 4 for i in range(0, 5)]        # 0 .. 1 GiB
GPU_SLACK = [i / 20 for i in range(0, 11)]      # 0 .. 0.5
SAVED_GRID = [i / 10 for i in range(0, 6)]      # 0 .. 0.5
VARYING_GRID = [i / 20 for i in range(0, 21)]   # 0 .. 1
EXPANDABLE = [i / 20 for i in range(0, 21)]     # 0 .. 1


def rows_at(fixed_gib: float, slack: float, cases: list[dict], varying: float = 0.0, nccl_gib: float = 0.0) -> list[dict]:
    set_constants(fixed_gib, slack, 1.0, varying)
    est.NCCL_BUFFERS = nccl_gib * GiB
    return [pm.evaluate(c) for c in cases]


def bases(cases: list[dict]) -> list[tuple[dict, float, float, float]]:
    """(row without allocator model, churn GiB, GiB that ALLOCATOR_VARYING multiplies, 1 where
    NCCL_BUFFERS applies) per case."""
    # the base figures are taken without the card's ceiling, which row_at applies itself
    ceiling, est._ceiling = est._ceiling, lambda c, outside_torch: float("inf")
    try:
        plain = rows_at(0.0, 0.0, cases)
        churned = rows_at(0.0, 1.0, cases)
        varied = rows_at(0.0, 0.0, cases, 1.0)
        nccl = rows_at(0.0, 0.0, cases, 0.0, 1.0)
    finally:
        est._ceiling = ceiling
    return [(r, q["reserved_gib"] - r["reserved_gib"], v["reserved_gib"] - r["reserved_gib"], m["card_gib"] - r["card_gib"])
            if r.get("expressible") else (r, 0.0, 0.0, 0.0) for r, q, v, m in zip(plain, churned, varied, nccl)]


def row_at(base: tuple, fixed_gib: float, slack: float, varying: float, nccl_gib: float = 0.0) -> dict:
    """What published_memory.evaluate gives under these constants, from the case's base figures
    (the same comparisons and verdict rules; main() checks the chosen point against a real run)."""
    r, churn, varied, peers = base
    if not r.get("expressible"):
        return r
    reclaim = varying * varied
    add = fixed_gib + slack * churn + reclaim
    out = dict(r, reserved_gib=r["reserved_gib"] + add, card_gib=r["card_gib"] + add + nccl_gib * peers)
    cap = r["capacity_gib"]
    # estimate._reserved: the allocator releases reclaimable cache rather than outgrow the card
    released = min(reclaim, max(0.0, out["card_gib"] - cap))
    out["reserved_gib"] -= released
    out["card_gib"] -= released
    reclaim -= released
    out["verdict"] = est.verdict(out["card_gib"] - reclaim, cap)
    if r["what"] == "oom":
        out["agrees"] = out["verdict"] == "oom" or (out["verdict"] == "tight" and out["card_gib"] > cap)
    else:
        out["agrees"] = out["verdict"] != "oom"
    if r["what"] not in ("oom", "ran"):
        e = out[{"nvidia-smi": "card_gib", "reserved": "reserved_gib", "allocated": "allocated_gib"}[r["what"]]]
        out["estimate_gib"] = e
        out["error_pct"] = 100.0 * (e - r["measured_gib"]) / r["measured_gib"]
    return out


def fit_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("expressible") and "error_pct" in r and r["what"] in ("reserved", "nvidia-smi")
            and not censored(r)]


def censored(r: dict) -> bool:
    """A figure that says the card was full: nvidia-smi near capacity, or max_memory_reserved plus
    the CUDA context near it (the allocator grows its cache into all the free memory there is)."""
    card = r["measured_gib"] + (r["card_gib"] - r["reserved_gib"] if r["what"] == "reserved" else 0.0)
    return card >= CENSORED * r["capacity_gib"]


def median_error(rows: list[dict]) -> float:
    errs = [abs(r["error_pct"]) for r in fit_rows(rows)]
    return statistics.median(errs) if errs else float("nan")


def verdicts(rows: list[dict]) -> tuple[int, int]:
    s = pm.summary(rows)
    return s["oom_recall"], s["false_oom"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=pm.CASES)
    ap.add_argument("--gpu-crosscheck", action="store_true",
                    help="only the cross-check of the constants in use on our own GPU runs (gpu_crosscheck)")
    ap.add_argument("--expandable", action="store_true",
                    help="only ALLOCATOR_EXPANDABLE, on the runs with expandable segments (fit_expandable)")
    a = ap.parse_args(argv)
    cases = pm.load(a.cases)
    if a.expandable:
        fit_expandable(cases)
        return 0
    if a.gpu_crosscheck:
        in_use = (est.ALLOCATOR_FIXED / GiB, est.ALLOCATOR_SLACK, est.ALLOCATOR_SAVED, est.ALLOCATOR_VARYING)
        with tempfile.TemporaryDirectory() as folder:
            gpu_crosscheck(cases, gpu_runs(folder), in_use, est.NCCL_BUFFERS / GiB)
        return 0
    train = [c for c in cases if c["split"] == "train"]
    tb = bases(train)
    base = verdicts([row_at(b, 0.0, 0.0, 0.0) for b in tb])
    keyed = []
    for fixed in FIXED:
        for slack in SLACK:
            for varying in VARYING:
                for nccl in NCCL:
                    rows = [row_at(b, fixed, slack, varying, nccl) for b in tb]
                    recall, false_oom = verdicts(rows)
                    if recall < base[0] or false_oom > base[1]:
                        continue
                    # a missed OOM is the worse mistake: the most OOMs flagged first, then the error
                    keyed.append(((-recall, median_error(rows)), (fixed, slack, varying, nccl)))
    keyed.sort()
    # The arithmetic is exact only while the reserved figure is linear in the constants; terms
    # that take a maximum or a cap (a DeepSpeed cast block kept reserved, the card's ceiling)
    # break that, so the grid only shortlists and real runs of the benchmark decide.
    real_base = verdicts(rows_at(0.0, 0.0, train))
    best = None
    for _key, point in keyed[:SHORTLIST]:
        real = rows_at(point[0], point[1], train, point[2], point[3])
        recall, false_oom = verdicts(real)
        if recall < real_base[0] or false_oom > real_base[1]:
            continue
        key = (-recall, median_error(real))
        if best is None or key < best[0]:
            best = (key, point, real)
    if best is None:
        raise SystemExit("fit_allocator: no shortlisted point keeps the train verdicts")
    _key, (fixed, slack, varying, nccl), real = best
    print(f"train cases: {len(train)}, figures used for the fit: {len(fit_rows(real))} "
          f"(reserved or nvidia-smi, card below {CENSORED:.0%} of capacity)")
    print(f"chosen on train: ALLOCATOR_FIXED = {fixed:.2f} GiB, ALLOCATOR_SLACK = {slack:.2f}, "
          f"ALLOCATOR_VARYING = {varying:.2f}, NCCL_BUFFERS = {nccl:.2f} GiB\n")
    print("| split | fitted figures: median abs error % | all figures: median abs error % | figures | "
          "verdicts agree | OOM recall | false OOM |")
    print("|---|---:|---:|---:|---|---|---|")
    for label, (fx, sl, va, nc) in (("no allocator model", (0.0, 0.0, 0.0, 0.0)),
                                    ("fitted", (fixed, slack, varying, nccl))):
        rows = rows_at(fx, sl, cases, va, nc)
        for name in ("train", "heldout"):
            part = [r for r in rows if r["split"] == name]
            s = pm.summary(part)
            print(f"| {name} ({label}) | {median_error(part):.1f} | {s['median_abs_error_pct']:.1f} | {s['figures']} | "
                  f"{s['verdict_agreement']}/{s['verdict_total']} | {s['oom_recall']}/{s['oom_reported']} | "
                  f"{s['false_oom']}/{s['ran_total']} |")
    return 0


def fit_expandable(cases: list[dict]) -> None:
    """ALLOCATOR_EXPANDABLE, the other constants as they are: the share of the fragmented and
    varying-length cache that reserved and nvidia-smi figures still show under expandable
    segments. Only cases that state expandable_segments take part; the value is chosen on their
    train split (verdicts no worse than with the whole share shown, then the lowest median
    absolute error of the uncensored reserved / nvidia-smi figures, ties: the larger share),
    and the held-out split is computed once with it."""
    used = [c for c in cases if c["setup"].get("expandable_segments")]
    train = [c for c in used if c["split"] == "train"]
    in_use = est.ALLOCATOR_EXPANDABLE
    est.ALLOCATOR_EXPANDABLE = 1.0
    base = verdicts([pm.evaluate(c) for c in train])
    best = None
    for k in EXPANDABLE:
        est.ALLOCATOR_EXPANDABLE = k
        rows = [pm.evaluate(c) for c in train]
        recall, false_oom = verdicts(rows)
        if recall < base[0] or false_oom > base[1]:
            continue
        key = (round(median_error(rows), 6), -k)
        best = min(best or key, key)
    chosen = -best[1]
    print(f"cases with expandable segments: {len(used)} ({len(train)} train); "
          f"chosen on train: ALLOCATOR_EXPANDABLE = {chosen:.2f} (in use before: {in_use:.2f})\n")
    print("| split | ALLOCATOR_EXPANDABLE | fitted figures | median abs error % | low / high | verdicts agree | "
          "OOM recall | false OOM |")
    print("|---|---:|---:|---:|---|---|---|---|")
    for k in (1.0, chosen):
        est.ALLOCATOR_EXPANDABLE = k
        rows = [pm.evaluate(c) for c in used]
        for name in ("train", "heldout"):
            part = [r for r in rows if r["split"] == name]
            s = pm.summary(part)
            fitted = fit_rows(part)
            low = sum(1 for r in fitted if r["error_pct"] < 0)
            print(f"| {name} | {k:.2f} | {len(fitted)} | {median_error(part):.1f} | {low} / {len(fitted) - low} | "
                  f"{s['verdict_agreement']}/{s['verdict_total']} | {s['oom_recall']}/{s['oom_reported']} | "
                  f"{s['false_oom']}/{s['ran_total']} |")
    est.ALLOCATOR_EXPANDABLE = in_use


def gpu_crosscheck(cases: list[dict], runs: list[tuple], in_use: tuple, nccl: float) -> None:
    """The same reserve against our own GPU runs, and the constants those runs alone would give.

    Printed, not used: on the runs whose allocation the estimate gets right the reserve is the
    allocator's own, so they measure it directly, but the constants they give flag fewer of the
    train split's reported OOMs (the declared rule's first criterion), so the published fit stays."""
    point, kept, mean = gpu_fit(runs)
    print(f"\nCross-check on our own GPU runs (bench/gpu_calibrate/*.json): {len(runs)} completed, {len(kept)} "
          f"with the estimated allocated peak within {GPU_ALLOCATED:.0%} of the measured one. The constants "
          f"they alone give (lowest mean abs error of max_memory_reserved, {100 * mean:.1f} %): "
          f"ALLOCATOR_FIXED = {point[0]:.2f} GiB, ALLOCATOR_SLACK = {point[1]:.2f}, ALLOCATOR_SAVED = "
          f"{point[2]:.2f}, ALLOCATOR_VARYING = {point[3]:.2f}.\n")
    print(gpu_table(kept, in_use, point))
    print("| split (GPU runs' constants, NCCL as in use) | all figures: median abs error % | verdicts agree | "
          "OOM recall | false OOM |")
    print("|---|---:|---|---|---|")
    set_constants(*point)
    est.NCCL_BUFFERS = nccl * GiB
    rows = [pm.evaluate(c) for c in cases]
    for name in ("train", "heldout"):
        s = pm.summary([r for r in rows if r["split"] == name])
        print(f"| {name} | {s['median_abs_error_pct']:.1f} | {s['verdict_agreement']}/{s['verdict_total']} | "
              f"{s['oom_recall']}/{s['oom_reported']} | {s['false_oom']}/{s['ran_total']} |")


def gpu_runs(folder: str) -> list[tuple]:
    """(name, Setup, measured allocated peak, measured reserved peak) of every completed run in
    bench/gpu_calibrate/*.json, each Setup as bench/gpu_calibrate.py builds it for the estimate
    (a model with fewer layers than its catalog entry is a config.json written to folder)."""
    import gpu_calibrate as gc

    runs = []
    for path in sorted(glob.glob(os.path.join(HERE, "gpu_calibrate", "*.json"))):
        data = json.loads(open(path, encoding="utf-8").read())
        for run in data["runs"]:
            case, m = gc.Case(**run["case"]), run["measured"]
            phases = [v for v in m.values() if isinstance(v, dict)]
            if m.get("oom") or "error" in m or not phases:
                continue
            s = gc.setup_for(case, data["environment"], gc.model_path_for(case, folder, False))
            runs.append((case.name, s, max(p["allocated"] for p in phases), max(p["reserved"] for p in phases)))
    return runs


def gpu_fit(runs: list[tuple]) -> tuple[tuple, list, float]:
    """ALLOCATOR_FIXED, ALLOCATOR_SLACK, ALLOCATOR_SAVED and ALLOCATOR_VARYING from our own GPU
    runs: max_memory_reserved of each run whose estimated allocated peak is within GPU_ALLOCATED
    of the measured one (what is left is then the allocator's own), by the lowest mean absolute
    error. Returns the point, the runs used and that error."""
    kept = [r for r in runs if abs(est.estimate(r[1]).gpu_allocated_bytes - r[2]) <= GPU_ALLOCATED * r[2]]
    best = None
    for point in itertools.product(GPU_FIXED, GPU_SLACK, SAVED_GRID, VARYING_GRID):
        set_constants(*point)
        errs = [abs(est.estimate(s).gpu_reserved_bytes - reserved) / reserved for _n, s, _a, reserved in kept]
        key = (round(statistics.mean(errs), 5), point)
        best = min(best or key, key)
    return best[1], kept, best[0]


def set_constants(fixed_gib: float, slack: float, saved: float, varying: float) -> None:
    est.ALLOCATOR_FIXED, est.ALLOCATOR_SLACK = fixed_gib * GiB, slack
    est.ALLOCATOR_SAVED, est.ALLOCATOR_VARYING = saved, varying


def gpu_table(kept: list, in_use: tuple, point: tuple) -> str:
    lines = ["| GPU run | measured reserved GiB | constants in use | GPU runs' constants |", "|---|---:|---:|---:|"]
    for name, s, _alloc, reserved in kept:
        cells = []
        for constants in (in_use, point):
            set_constants(*constants)
            e = est.estimate(s).gpu_reserved_bytes
            cells.append(f"{e / GiB:.2f} ({100 * (e - reserved) / reserved:+.1f} %)")
        lines.append(f"| {name} | {reserved / GiB:.2f} | {cells[0]} | {cells[1]} |")
    set_constants(*point)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
