"""How well schemas/key_history/ answers for releases it did not sample (held out).

    python3 bench/key_history_heldout.py

The generator samples the newest patch of each minor release; lint maps any other version to a
sample (versions.KeyHistory.sample_for). This reads releases that were NOT sampled (other
patches of a minor, an older patch of OpenRLHF) with the generator's own reader and compares, per
section, the keys the release really has with the keys the history predicts for it. Archives
come from ~/.cache/ftrecipes/wheels (pip download when missing).
"""

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "schemagen"))

import key_history as gen  # noqa: E402
from ftrecipes import versions  # noqa: E402

HELD_OUT = [
    ("transformers", "4.55.0"), ("transformers", "5.5.0"), ("transformers", "5.10.1"), ("transformers", "5.20.0"),
    ("trl", "0.22.0"), ("trl", "0.26.0"), ("trl", "1.9.0"), ("trl", "1.14.0"),
    ("accelerate", "1.8.0"), ("accelerate", "1.10.0"), ("peft", "0.17.0"),
    ("openrlhf", "0.8.9"), ("openrlhf", "0.10.1"), ("deepspeed", "0.18.4"),
]


def compare(fw, release):
    h = versions.key_history(fw)
    at = h.sample_for(release)
    real = gen.EXTRACT[fw](gen.sources(gen.archive(fw, release), gen.PACKAGE_DIR.get(fw, fw)))
    same = missing = extra = 0
    for section, keys in real.items():
        if section not in h.sections or not h.judged([section], at):
            continue
        predicted = {k for k in h.sections[section][1] if any(a <= at <= b for a, b in h.spans(k, [section]))}
        same += len(predicted & set(keys))
        missing += len(set(keys) - predicted)  # the release has it, the history says no: a false error
        extra += len(predicted - set(keys))  # the history says yes, the release lacks it: a missed error
    return at, same, missing, extra


def main():
    start = time.time()
    print("| framework | held-out release | stands in | keys agreeing | release has, history says no | history says yes, release lacks | agreement |")
    print("|---|---|---|---:|---:|---:|---:|")
    totals = [0, 0, 0]
    for fw, release in HELD_OUT:
        at, same, missing, extra = compare(fw, release)
        totals = [totals[0] + same, totals[1] + missing, totals[2] + extra]
        print(f"| {fw} | {release} | {at} | {same} | {missing} | {extra} | {100 * same / max(1, same + missing + extra):.1f}% |")
    same, missing, extra = totals
    print(f"| all | {len(HELD_OUT)} releases | | {same} | {missing} | {extra} | {100 * same / max(1, same + missing + extra):.1f}% |")
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
