#!/usr/bin/env python3
"""Wall time of `render` and `lint` as a user runs them (fresh interpreter each time).

Target: well under half a second each. Prints the median of N runs per command.
Usage: python3 bench/cli_speed.py [N]
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = int(sys.argv[1]) if len(sys.argv) > 1 else 7
env = {"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"}
with tempfile.TemporaryDirectory() as tmp:
    cases = {
        "render qwen7b-lora-h100x8": ["-m", "ftrecipes", "render", "qwen7b-lora-h100x8"],
        "render -o (all files)": ["-m", "ftrecipes", "render", "qwen7b-lora-h100x8", "-o", f"{tmp}/o", "--force"],
        "lint recipes/ (all rendered)": ["-m", "ftrecipes", "lint", str(ROOT / "recipes")],
        "python -c pass (floor)": ["-c", "pass"],
    }
    print(f"{'command':32} median s  (n={N})")
    for label, args in cases.items():
        times = []
        for _ in range(N):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *args], env=env, capture_output=True, check=False)
            times.append(time.perf_counter() - t0)
        print(f"{label:32} {statistics.median(times):8.3f}")
