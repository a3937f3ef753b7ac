#!/usr/bin/env python3
"""Print each smoke test's wall time and the total of the last test run.

The smoke harness appends one line per launch to .smoke-timings.jsonl
(tools/run-tests empties it first; the test run itself prints the same figures
and the run total before pytest's closing line). Usage: python3 bench/smoke_times.py [FILE]
"""

import json
import sys
from pathlib import Path

path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / ".smoke-timings.jsonl"
if not path.is_file():
    sys.exit(f"{path}: no timings yet; run tools/run-tests (or the smoke tests) first")
rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
smoke = [r for r in rows if "test" in r]
totals = [r for r in rows if "total_seconds" in r]
width = max([len(r["test"]) for r in smoke] + [10])
print(f"{'smoke test'.ljust(width)}  seconds  result")
for r in smoke:
    print(f"{r['test'].ljust(width)}  {r['seconds']:7.1f}  {'ok' if r['returncode'] == 0 else 'FAILED'}")
print(f"{'smoke sum'.ljust(width)}  {sum(r['seconds'] for r in smoke):7.1f}")
for t in totals:
    print(f"{('run total (' + t.get('what', 'tests') + ')').ljust(width)}  {t['total_seconds']:7.1f}")
