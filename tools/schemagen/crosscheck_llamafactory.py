"""Parse the llamafactory schema examples with LLaMA-Factory's own parser (no training).

    /tmp/scratch-schemas/lf/bin/python tools/schemagen/crosscheck_llamafactory.py

Train-shaped files go through llamafactory.hparams.get_train_args (all cross-field checks; a one-process
distributed environment is faked because `deepspeed:` wants one); files without `stage`/`do_train`
through get_infer_args. Files are loaded with OmegaConf, as llamafactory-cli does.
"""
import os
import pathlib

from omegaconf import OmegaConf

os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
from llamafactory.hparams import get_infer_args, get_train_args  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/schema_examples/llamafactory"
for kind in ("valid", "invalid"):
    for p in sorted((HERE / kind).glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(p))
        train = "do_train" in cfg or "stage" in cfg
        if isinstance(cfg.get("deepspeed"), str) and not os.path.exists(cfg["deepspeed"]):
            # Paths in the examples point into a user's checkout: stand in a minimal HF-style config.
            cfg["deepspeed"] = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                "train_batch_size": "auto", "bf16": {"enabled": "auto"},
                                "zero_optimization": {"stage": 3 if "3" in cfg["deepspeed"] else 2}}
        if train:
            cfg.setdefault("use_cpu", True)  # this machine has no GPU; bf16 needs use_cpu here
        try:
            (get_train_args if train else get_infer_args)(cfg)
            verdict = "accepted"
        except BaseException as e:  # noqa: BLE001
            verdict = f"rejected: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        print(f"{kind:7} {'train' if train else 'infer':5} {p.name:32} {verdict}")
