"""The whole hostile-input suite (issue 9): prints the issue's table for the current code.

    python bench/hostile.py [--mode wheel|checkout] [--per-kind N] [--max-kill-n N] [--rounds N]

By default the tool under test is a wheel built from this checkout and installed into a
temporary folder (no checkout on its path), as a user would run it. Every case runs the real
CLI in a subprocess, two at a time; cases are defined in tests/hostile/ (fixed list: cases.py,
generated: gen.py, SIGKILL and concurrency: writes.py). Output is Markdown; the committed run
is bench/hostile.md.
"""

import argparse
import collections
import hashlib
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hostile import cases as fixed  # noqa: E402
from hostile import gen, writes  # noqa: E402
from hostile.harness import ROWS, SLOW_SECONDS, Tool, tally  # noqa: E402
from hostile.run import run_all  # noqa: E402

KILL_RECIPES = ("qwen7b-dpo-v100x8", "qwen7b-lora-h100x8")
VERBS = ("list", "show", "render", "lint", "estimate", "plan", "regen", "trace")


def distinct_inputs(cases):
    """Cases that differ in what the tool is given (verb, arguments, files, env, limits)."""
    keys = set()
    for c in cases:
        h = hashlib.sha1(repr((c.program, c.verb, c.args, sorted(c.env.items()), c.fsize, c.cwd_gone)).encode())
        for rel, spec in sorted(c.files.items()):
            h.update(rel.encode() + (spec if isinstance(spec, bytes) else repr(spec).encode()))
        keys.add(h.hexdigest())
    return len(keys)


def run(args):
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as tmp:
        tool = Tool(Path(tmp) / "tool", args.mode) if args.mode == "checkout" else Tool(_mkdir(Path(tmp) / "tool"), "wheel")
        cases = fixed.all_cases() + gen.generated(args.per_kind)
        results = run_all(cases, tool, workers=2, scratch=tmp)
        trials = writes.sigkill_trials(tool, KILL_RECIPES, tmp, max_n=args.max_kill_n)
        rounds = writes.concurrent_rounds(tool, KILL_RECIPES[0], tmp, rounds=args.rounds)
    report(args, cases, results, trials, rounds, time.monotonic() - started)
    if args.failures:
        write_failures(args.failures, cases, results, trials, rounds)
    rows = tally(results)
    failing = sum(len(v) for v in rows.values())
    bad_kills = sum(1 for t in trials if t.temp_left or t.partial)
    both_won = sum(1 for r in rounds if r.codes == (0, 0))
    return 1 if failing or bad_kills or both_won else 0


def _mkdir(p):
    p.mkdir(parents=True)
    return p


def report(args, cases, results, trials, rounds, seconds):
    rows = tally(results)
    print("# Hostile-input suite: results for the current code\n")
    print(f"`python bench/hostile.py --mode {args.mode} --per-kind {args.per_kind}"
          f"{'' if args.max_kill_n is None else f' --max-kill-n {args.max_kill_n}'} --rounds {args.rounds}` on "
          f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
          f"tool under test: {'an installed wheel (no checkout on its path)' if args.mode == 'wheel' else 'a copy of the checkout'}; "
          f"{seconds:.0f} s wall, 2 workers, load average {os.getloadavg()[0]:.1f} at the end "
          f"(the machine is shared; wall times include waiting for the CPU).\n")
    print(f"Distinct hostile inputs: **{distinct_inputs(cases)}** "
          f"({len(fixed.all_cases())} fixed cases, {len(cases) - len(fixed.all_cases())} generated), "
          f"plus {len(trials)} SIGKILL trials and {len(rounds)} concurrent-render rounds.\n")
    by_verb = collections.Counter(c.verb for c in cases)
    print("Cases per verb: " + ", ".join(f"{v} {by_verb.get(v, 0)}" for v in VERBS) + "\n")
    kills = [t for t in trials if t.killed]
    print("| measure | count |\n|---|---:|")
    for row in ROWS:
        print(f"| {row} | {len(rows.get(row, []))} |")
    temp = sum(1 for t in trials if t.temp_left)
    partial = sum(1 for t in trials if t.partial)
    print(f"| render -o killed (SIGKILL) at its Nth filesystem event: temp files left in the target | {temp} of {len(trials)} |")
    print(f"| same, a partial set of files left in the target | {partial} of {len(trials)} |")
    executed = rows.get("template code executed", [])
    sandbox_total = sum(1 for c in cases if c.id.startswith("sandbox/"))
    print(f"| recipe-folder templates reaching Python objects or outside files: code executed / leaked | {len(executed)} of {sandbox_total} |")
    both = sum(1 for r in rounds if r.codes == (0, 0))
    print(f"| two concurrent renders into one folder without --force: both won | {both} of {len(rounds)} |")
    print(f"\nSIGKILL trials: {len(kills)} killed before the end ({len(trials) - len(kills)} ran past their last event); "
          f"recipes {', '.join(KILL_RECIPES)}; scenarios {', '.join(writes.SCENARIOS)}.")
    outcomes = collections.Counter((r.codes, r.state) for r in rounds)
    print("Concurrent rounds (exit codes, target state): " + ", ".join(f"{c} {s}: {n}" for (c, s), n in sorted(outcomes.items())))
    _per_verb(results, cases)
    _failures(rows, trials, rounds)
    slow = sorted((r for r in results if r.seconds > SLOW_SECONDS and r.code is not None), key=lambda r: -r.seconds)
    print(f"\n## Cases slower than {SLOW_SECONDS:.0f} s (goal: a clean answer in < 2 s): {len(slow)}\n")
    for r in slow[:40]:
        print(f"- `{r.case}` {r.seconds:.1f} s (exit {r.code})")


def _per_verb(results, cases):
    verb_of = {c.id: c.verb for c in cases}
    print("\n## Failing cases per verb\n")
    print("| verb | cases | failing |\n|---|---:|---:|")
    total = collections.Counter(verb_of.values())
    bad = collections.Counter(verb_of[r.case] for r in results if r.problems)
    for v in VERBS:
        print(f"| {v} | {total.get(v, 0)} | {bad.get(v, 0)} |")


def _failures(rows, trials, rounds):
    print("\n## Failing cases\n")
    for row, items in rows.items():
        if not items:
            continue
        print(f"\n### {row} ({len(items)})\n")
        for case, detail in items:
            print(f"- `{case}`: {_md(detail)}")
    bad = [t for t in trials if t.temp_left or t.partial]
    if bad:
        print(f"\n### render -o SIGKILL trials that left temp files or a partial set ({len(bad)})\n")
        for t in bad:
            print(f"- {t.recipe} {t.scenario} kill at event {t.n}: state {t.state}"
                  f"{', temp ' + ', '.join(t.temp_left) if t.temp_left else ''}")
    beside = [t for t in trials if t.beside]
    if beside:
        print(f"\nLeftovers beside the target (not counted above): {len(beside)} trials, e.g. {beside[0].beside[:3]}")
    both = [r for r in rounds if r.codes == (0, 0)]
    if both:
        print(f"\n### concurrent rounds where both renders won ({len(both)})\n")
        for r in both:
            print(f"- exits {r.codes}, target {r.state}")


def area(case_id, row):
    """Which part of the tool a failure points at (for the helpers fixing it)."""
    if row == "template code executed" or case_id.startswith("sandbox/") or "/template" in case_id or "remote-ref" in case_id:
        return "sandbox"
    if case_id.startswith(("o/", "svg-")) or row.startswith("cases that created"):
        return "atomic"
    if case_id.startswith(("lint-json/", "lint-kind-ds/", "gen-ds-lint/", "lint-flag/kind")) and row.startswith("wrong exit"):
        return "lint-rule"
    if case_id.startswith(("estimate-flag/", "estimate-config/", "gen-ds-estimate/", "gen-hf/", "estimate-model/")) and row.startswith("wrong exit"):
        return "estimate"
    return "input"


def write_failures(path, cases, results, trials, rounds):
    by_id = {c.id: c for c in cases}
    lines = []
    for res in results:
        case = by_id[res.case]
        argv = " ".join(case.argv("{d}", "{recipes}"))
        files = ", ".join(f"{k}={_spec(v)}" for k, v in case.files.items())
        for row, detail in res.problems.items():
            lines.append(f"- [area: {area(case.id, row)}] {case.program if case.program == 'render' else 'ftrecipes'} {argv}"
                         f"{'  (files: ' + files + ')' if files else ''}{'  (RLIMIT_FSIZE ' + str(case.fsize) + ')' if case.fsize else ''}"
                         f" → {row}: {_md(detail)[:200]}  [case {case.id}; want exit {'/'.join(map(str, case.expect))}]")
    for t in trials:
        if t.temp_left or t.partial:
            lines.append(f"- [area: atomic] ftrecipes render {t.recipe} -o out ({t.scenario}) killed at filesystem event {t.n} → "
                         f"target {t.state}{', temp files ' + ', '.join(t.temp_left) if t.temp_left else ''}")
    both = [r for r in rounds if r.codes == (0, 0)]
    if both:
        lines.append(f"- [area: atomic] two concurrent `ftrecipes render NAME -o out` (no --force) → both exited 0 in {len(both)} of {len(rounds)} rounds")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"\n## bench/hostile.py run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(lines)} failures\n")
        fh.write("\n".join(lines) + "\n")


def _spec(v):
    if isinstance(v, bytes):
        return repr(v[:60]) + (f"…({len(v)} bytes)" if len(v) > 60 else "")
    return type(v).__name__


def _md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["wheel", "checkout"], default="wheel")
    ap.add_argument("--per-kind", type=int, default=40, help="generated inputs per generator (5 generators)")
    ap.add_argument("--max-kill-n", type=int, help="kill at events 1..N only (default: every event)")
    ap.add_argument("--rounds", type=int, default=60, help="concurrent-render rounds")
    ap.add_argument("--failures", metavar="FILE", help="append one line per failing case to FILE")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
