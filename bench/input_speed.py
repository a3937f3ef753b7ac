"""Time `ftrecipes lint` on big-but-legal inputs (issue 9: each must stay under 5 s).

Inputs are generated here, in a temporary folder:
- a DeepSpeed JSON with 100,000 extra top-level keys (each one an unknown-key finding);
- a 10 MB DeepSpeed JSON (a few keys and one long list of numbers under an unknown key);
- a 9 MB TRL YAML (a real TRL config plus 300,000 extra keys), and 280,000 of them with quoted values;
- a 9 MB TRL YAML whose bulk is one list of 178,000 mappings (block and flow style alternating),
  each with a key TRL does not know: one finding per item;
- the same kind of list (105,000 entries) where each entry holds a two-line block scalar (`|`):
  outside the line reader's subset (sources._block_mapping), so PyYAML's events carry it;
- a folder of 5,000 small files: DeepSpeed JSON, accelerate and TRL YAML, launch scripts,
  in 100 sub-folders (each sub-folder one setup of 50 files).

Each is linted by the real CLI in a fresh process (`python -m ftrecipes lint`, startup
included), --repeat times; the table gives the fastest, the median and the slowest run (this
VM's timing noise reaches 1.8x, so the slowest run is the one the limit must hold for).
Prints a Markdown table; bench/input_speed.md holds the output committed with the code it
measured.

    python bench/input_speed.py [--repeat 3]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 5.0

DS = {
    "train_batch_size": 16,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 8,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True},
}
TRL = (
    "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nbf16: true\nper_device_train_batch_size: 2\n"
    "gradient_accumulation_steps: 8\nlearning_rate: 1.0e-05\nnum_train_epochs: 1\noutput_dir: out\n"
)
ACCELERATE = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 1\n"
    "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\nmixed_precision: bf16\n"
)
LAUNCH = "#!/bin/bash\naccelerate launch --config_file accelerate.yaml train.py --config trl.yaml\n"


def make_inputs(tmp):
    big_keys = dict(DS, **{f"extra_key_{i}": i for i in range(100_000)})
    (tmp / "keys.json").write_text(json.dumps(big_keys, indent=1))
    # 10,000,000 bytes: just under the 10 MiB a config may have.
    ten = json.dumps(dict(DS, extra_numbers=list(range(1_230_000))))
    (tmp / "ten_mb.json").write_text(ten[:-2] + " " * (10_000_000 - len(ten)) + ten[-2:])
    (tmp / "nine_mb.yaml").write_text(TRL + "".join(f"extra_setting_{i}: value {i}\n" for i in range(300_000)))
    # The same keys with quoted values: outside the block-mapping subset sources._block_mapping
    # reads line by line, so PyYAML's events (libyaml) carry it.
    (tmp / "nine_mb_quoted.yaml").write_text(TRL + "".join(f'extra_setting_{i}: "value {i}"\n' for i in range(280_000)))
    items = "".join(f"  - {{name: ds_{i}, split: train, weight: 0.5}}\n" if i % 2
                    else f"  - name: ds_{i}\n    split: train\n    weight: 0.5\n" for i in range(178_000))
    (tmp / "nine_mb_list.yaml").write_text(TRL + "datasets:\n" + items)
    blocks = "".join(f"  - name: ds_{i}\n    split: train\n    template: |\n      Q: {{q}}\n      A: {{a}} {i}\n" for i in range(105_000))
    (tmp / "nine_mb_blocks.yaml").write_text(TRL + "datasets:\n" + blocks)
    folder = tmp / "many"
    for d in range(100):
        sub = folder / f"setup{d:03d}"
        sub.mkdir(parents=True)
        (sub / "ds.json").write_text(json.dumps(DS, indent=2))
        (sub / "accelerate.yaml").write_text(ACCELERATE)
        (sub / "trl.yaml").write_text(TRL)
        (sub / "launch.sh").write_text(LAUNCH)
        for i in range(46):
            (sub / f"ds_{i:02d}.json").write_text(json.dumps(dict(DS, train_micro_batch_size_per_gpu=1 + i % 4), indent=2))
    return [
        ("100,000-key DeepSpeed JSON", [tmp / "keys.json"]),
        ("10 MB DeepSpeed JSON", [tmp / "ten_mb.json"]),
        ("9 MB TRL YAML", [tmp / "nine_mb.yaml"]),
        ("10 MB TRL YAML, quoted values", [tmp / "nine_mb_quoted.yaml"]),
        ("9 MB TRL YAML, a list of 178,000 mappings", [tmp / "nine_mb_list.yaml"]),
        ("9 MB TRL YAML, a list of 105,000 mappings with a block scalar each", [tmp / "nine_mb_blocks.yaml"]),
        ("folder of 5,000 files", [folder]),
    ]


def lint_seconds(paths, repeat):
    """The seconds of each run, and the exit status (the same every run, or the bench stops)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    runs, codes = [], set()
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "ftrecipes", "lint", *map(str, paths)], capture_output=True, text=True, env=env)
        runs.append(time.perf_counter() - start)
        codes.add(proc.returncode)
        if "Traceback" in proc.stderr:
            raise SystemExit(proc.stderr)
    if len(codes) != 1:
        raise SystemExit(f"exit status changed between runs: {sorted(codes)}")
    return runs, codes.pop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import yaml

    started = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        cases = make_inputs(Path(tmp))
        rows = []
        for name, paths in cases:
            size = sum(p.stat().st_size for path in paths for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
            runs, code = lint_seconds(paths, args.repeat)
            rows.append((name, size, runs, code))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"`python bench/input_speed.py --repeat {args.repeat}` on {platform.machine()}, {os.cpu_count()} CPUs "
          f"(load average {started} when it started, {load} when it finished), Python {platform.python_version()}, "
          f"PyYAML {yaml.__version__} (libyaml: {yaml.__with_libyaml__})\n")
    print(f"| input | bytes | lint seconds: min | median | max ({args.repeat} runs) | exit status | every run under {LIMIT_S:g} s |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, size, runs, code in rows:
        print(f"| {name} | {size:,} | {min(runs):.2f} | {statistics.median(runs):.2f} | {max(runs):.2f} | {code} "
              f"| {'yes' if max(runs) < LIMIT_S else 'NO'} |")
    return 0 if all(max(r[2]) < LIMIT_S for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
