"""Feed the deepspeed schema examples to the real parser (deepspeed.runtime.config.DeepSpeedConfig).

    DS_ACCELERATOR=cpu /tmp/scratch-schemas/trl/bin/python tools/schemagen/crosscheck_deepspeed.py

HF-filled "auto" values are replaced the way HF Trainer would (world size 1) before parsing.
Prints, per example, whether DeepSpeed accepts it; invalid examples DeepSpeed accepts are the
silent-ignore cases the schema exists to catch.
"""
import json
import os
import pathlib

os.environ.setdefault("DS_ACCELERATOR", "cpu")
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/schema_examples/deepspeed"
FILL = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
        "lr": 1e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "warmup_min_lr": 0,
        "warmup_max_lr": 1e-5, "warmup_num_steps": 10, "total_num_steps": 100, "enabled": False,
        "reduce_bucket_size": 4096 * 4096, "stage3_prefetch_bucket_size": 15099494,
        "stage3_param_persistence_threshold": 40960}


def fill(d, top):
    for k, v in list(d.items()):
        if isinstance(v, dict):
            fill(v, top)
        elif v == "auto" and k in FILL:
            d[k] = FILL[k]
    if d is top and d.get("train_batch_size") == "auto":
        d["train_batch_size"] = d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"]


for kind in ("valid", "invalid"):
    for p in sorted((HERE / kind).glob("*.json")):
        cfg = json.loads(p.read_text())
        fill(cfg, cfg)
        if "train_batch_size" in cfg and "train_micro_batch_size_per_gpu" in cfg:
            cfg["gradient_accumulation_steps"] = cfg["train_batch_size"] // cfg["train_micro_batch_size_per_gpu"]
        try:
            DeepSpeedConfig(cfg)
            verdict = "accepted"
        except Exception as e:  # noqa: BLE001
            verdict = f"rejected: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
        print(f"{kind:7} {p.name:45} {verdict}")
