"""Analytic memory estimate vs a measured (fake-tensor) training step, per phase and category.

    python bench/memory_vs_trace.py --python /tmp/scratch-mem/venv/bin/python [--cache traces.json]

The trace (ftrecipes.memory.trace, needs torch + transformers + peft) runs in the given
interpreter, one subprocess per case; the estimate runs here with the base dependencies. Both
describe plain single-process PyTorch training in bf16 (AdamW states in bf16, no DeepSpeed), the
only setup the trace can execute; the estimate is run with framework="torch", no CUDA context,
and attn_implementation="sdpa-cpu" (see activations.py: the CPU SDPA kernel torch picks under
FakeTensorMode keeps a per-layer s*s term that CUDA flash/efficient kernels do not).
Exit status 1 if any activation or peak error exceeds 5 %.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

from ftrecipes.memory.estimate import Setup, estimate  # noqa: E402  (after the path insert)

MODELS = ["Qwen2.5-7B", "Llama-3-8B"]
SEQ_LENS = [1024, 4096]
CASES = [dict(model=m, seq_len=s, gradient_checkpointing=gc, lora_rank=r)
         for m, s, gc, r in itertools.product(MODELS, SEQ_LENS, [False, True], [0, 16])]
CASES += [dict(model=m, seq_len=8192, gradient_checkpointing=True, lora_rank=r)
          for m, r in itertools.product(MODELS, [0, 16])]
# eager attention (explicit s*s scores) once per architecture
CASES += [dict(model=m, seq_len=2048, gradient_checkpointing=False, lora_rank=0, attn_implementation="eager")
          for m in MODELS]
# held-out shape: small model with tied embeddings (not used to derive the formulas)
CASES += [dict(model="Qwen2.5-0.5B", seq_len=2048, gradient_checkpointing=gc, lora_rank=r)
          for gc, r in [(False, 0), (True, 16)]]
LIMIT = 0.05
GB = 1e9
CATS = ["params", "grads", "optimizer", "activations", "temporaries"]


def attn(c):
    return c.get("attn_implementation", "sdpa")


def key(c):
    k = f"{c['model']}|{c['seq_len']}|{int(c['gradient_checkpointing'])}|{c['lora_rank']}"
    return k if attn(c) == "sdpa" else f"{k}|{attn(c)}"


def run_trace(python, case):
    code = ("import json,sys; from ftrecipes.memory.trace import trace_step; "
            "print('JSON'+json.dumps(trace_step(**json.loads(sys.argv[1]))))")
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    out = subprocess.run([python, "-c", code, json.dumps(case)], capture_output=True, text=True, env=env, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("JSON")][-1]
    return json.loads(line[4:])


def est_phases(case):
    r = estimate(Setup(model=case["model"], seq_len=case["seq_len"], micro_batch=1, precision="bf16",
                       gradient_checkpointing=case["gradient_checkpointing"], lora_rank=case["lora_rank"],
                       lora_target="all", framework="torch", cuda_context_bytes=0, adam_impl="single",
                       attn_implementation="sdpa-cpu" if attn(case) == "sdpa" else attn(case)))
    phases = {}
    for p in r.phases:
        c = dict(p.by_category)
        c["optimizer"] = c.get("optimizer", 0) + c.pop("master", 0)
        phases[p.name] = c
    return phases, r.saved_activation_bytes


def err(e, t):
    return (e - t) / t if t else 0.0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch+transformers+peft")
    ap.add_argument("--cache", default="/tmp/ftr-memory-traces.json")
    ap.add_argument("--only", type=int, default=None, help="run only the first N cases")
    ap.add_argument("--model", help="run only the cases of this model (e.g. Llama-3-8B)")
    a = ap.parse_args(argv)
    cache = json.load(open(a.cache)) if os.path.exists(a.cache) else {}
    cases = [c for c in CASES if not a.model or c["model"] == a.model]
    cases = cases[: a.only] if a.only else cases
    worst = 0.0
    print("| case | phase | trace GB | estimate GB | error | " + " | ".join(f"{c} t/e" for c in CATS) + " |")
    print("|---|---|---:|---:|---:|" + "---|" * len(CATS))
    summary = []
    for case in cases:
        k = key(case)
        if k not in cache:
            cache[k] = run_trace(a.python, case)
            json.dump(cache, open(a.cache, "w"), indent=1)
        tr = cache[k]
        est, saved = est_phases(case)
        name = (f"{case['model']} s={case['seq_len']} {'GC' if case['gradient_checkpointing'] else 'noGC'} "
                f"{'LoRA r' + str(case['lora_rank']) if case['lora_rank'] else 'full'}"
                + ("" if attn(case) == "sdpa" else f" {attn(case)}"))
        case_worst = 0.0
        for ph in tr["phases"]:
            e_c = est[ph["name"]]
            t_c = dict(ph["by_category"])
            t_c["params"] = t_c.get("params", 0) + t_c.pop("buffers", 0) + t_c.pop("other", 0)
            e_tot = sum(v for kk, v in e_c.items())
            e = err(e_tot, ph["total_bytes"])
            case_worst = max(case_worst, abs(e))
            cells = " | ".join(f"{t_c.get(c, 0) / GB:.2f}/{e_c.get(c, 0) / GB:.2f}" for c in CATS)
            print(f"| {name} | {ph['name']} | {ph['total_bytes'] / GB:.2f} | {e_tot / GB:.2f} | {e:+.1%} | {cells} |")
        fw = next(p for p in tr["phases"] if p["name"] == "forward")
        t_saved = fw["after_by_category"].get("activations", 0)
        e_saved = err(saved, t_saved)
        t_fwact = fw["by_category"].get("activations", 0)
        e_fwact = err(est["forward"]["activations"] + est["forward"]["temporaries"], t_fwact)
        print(f"| {name} | saved activations | {t_saved / GB:.2f} | {saved / GB:.2f} | {e_saved:+.1%} | "
              + " | ".join([""] * len(CATS)) + " |")
        print(f"| {name} | forward-peak activations | {t_fwact / GB:.2f} | "
              f"{(est['forward']['activations'] + est['forward']['temporaries']) / GB:.2f} | {e_fwact:+.1%} | "
              + " | ".join([""] * len(CATS)) + " |")
        case_worst = max(case_worst, abs(e_saved), abs(e_fwact))
        worst = max(worst, case_worst)
        summary.append((name, case_worst, tr.get("seconds")))
    print()
    print("| case | worst abs error (peaks per phase, activations) | trace seconds |")
    print("|---|---:|---:|")
    for name, w, sec in summary:
        print(f"| {name} | {w:.2%} | {sec} |")
    print(f"\nworst error over {len(cases)} cases: {worst:.2%} (limit {LIMIT:.0%})")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
