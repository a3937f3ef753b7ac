"""Wall time of `ftrecipes plan` full searches on this machine (target: under 2 s each).

Each line is one complete CLI run in a fresh process (interpreter start and imports included),
so the figure is what a user waits for. Usage: python bench/plan_speed.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

CASES = [
    "--model Qwen2.5-7B --method sft --gpus 8xA100-80GB --seq-len 2048 --global-batch 64",
    "--model Qwen2.5-72B --method sft --gpus 8xH100 --nodes 2 --seq-len 4096 --global-batch 64 --host-ram 2000",
    "--model Llama-3-8B --method qlora --gpus 1xRTX-4090 --seq-len 2048 --global-batch 64",
    "--model Qwen2.5-7B-Instruct --method dpo --adapter lora --gpus 8xV100-32GB --seq-len 1536 --global-batch 32 --framework llamafactory",
    "--model Qwen2.5-7B-Instruct --method grpo --adapter lora --gpus 8xH100 --seq-len 2048 --global-batch 128",
    "--model MiniCPM-V-2_6 --method sft --gpus 2xA100-40GB --seq-len 2048 --global-batch 8 --host-ram 128",
    # worst case found: full GRPO whose batch divides over every server split (1..7 GPUs serving)
    "--model Qwen2.5-7B --method grpo --gpus 8xH100 --seq-len 4096 --global-batch 840 --host-ram 2000",
]
REPEATS = 3


def main() -> int:
    worst = 0.0
    print("| search | median of 3 (s) | exit |\n|---|---|---|")
    for args in CASES:
        times, rc = [], 0
        for _ in range(REPEATS):
            t = time.perf_counter()
            rc = subprocess.run([sys.executable, "-m", "ftrecipes", "plan", *args.split()],
                                capture_output=True).returncode
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"| `plan {args}` | {med:.2f} | {rc} |")
    print(f"\nslowest: {worst:.2f} s (target < 2 s)")
    return 0 if worst < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
