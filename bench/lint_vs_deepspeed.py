"""Lint vs DeepSpeed itself over the seeded DeepSpeed-config mutants (tests/fuzz/ds_mutants.py).

    python3 bench/lint_vs_deepspeed.py [--seed N] [--per-base N] [--all]

Prints the confusion matrix (DeepSpeedConfig reject/accept x lint error/clean), the coverage of
keys DeepSpeed silently ignores, and the disagreements: DS rejects but lint is clean (must be
none), DS ignores a key lint does not name, and lint errors on configs DS accepts without ignoring
anything (lint being stricter; grouped by rule and mutation, first examples listed).

How the "lint error, DS accepts" cases were judged (seed 20261121; none fixed as false alarms):
- strings/numbers where a pydantic section wants a bool or int ("true", "3", 0): pydantic
  coerces them, but the HF/accelerate integration reads the raw JSON (stage "3" != 3 turns off
  its ZeRO-3 paths; "false" fails fill_match against the trainer's bool): kept.
- keys DeepSpeedConfig stores unchecked with dict.get (prescale_gradients "false" or "auto" is
  truthy, steps_per_print "10", negative gradient_clipping): the engine misbehaves or fails
  later: true positives DeepSpeedConfig cannot see.
- scheduler/optimizer type names, data_types dtypes: checked at deepspeed.initialize, not by
  the config parser: true positives.
- null for a bool DeepSpeed reads with get (dump_state: null): DeepSpeed treats it as false;
  the closest to a false alarm, kept as strictness (null is not a documented value).
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests")]

from fuzz import ds_compare, ds_mutants  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=ds_mutants.SEED)
    ap.add_argument("--per-base", type=int, default=ds_mutants.PER_BASE)
    ap.add_argument("--all", action="store_true", help="list every disagreement, not the first 10 per kind")
    args = ap.parse_args()
    t0 = time.time()
    records = ds_mutants.generate(args.seed, args.per_base)
    cmp = ds_compare.run_all(records)
    print(f"seed {args.seed}, {len(ds_mutants.bases())} bases, {time.time() - t0:.1f} s")
    print("\n".join(cmp.lines()))
    limit = None if args.all else 10
    for title, items in (("DS rejects, lint clean", cmp.missed_rejections),
                         ("DS ignores a key lint does not name", cmp.missed_ignored)):
        print(f"\n{title}: {len(items)}")
        for item in items[:limit]:
            print("  " + ds_compare.describe(item))
    print(f"\nlint error, DS accepts without ignoring a key: {len(cmp.stricter)} (by rule, mutation)")
    for (rule, op), n in ds_compare.stricter_by_rule(cmp).most_common():
        print(f"  {n:5}  {rule:24} {op}")
    for item in cmp.stricter[:limit]:
        print("  " + ds_compare.describe(item))
    return 1 if cmp.missed_rejections else 0


if __name__ == "__main__":
    sys.exit(main())
