"""qwen7b-dpo-v100x8: LLaMA-Factory LoRA DPO under ZeRO-3 + CPU offload in fp16.

Smoke: the recipe's launch.sh command (its env assignments + `llamafactory-cli train dpo.yaml`)
on 2 CPU processes. Overrides (recipe.yaml `smoke:`): tiny local Qwen2-shaped model, a
dataset_dir with a dataset_info.json and preference data, gpus_per_node=2, seq_len=128,
output_dir, master_port; `max_steps=3` as a llamafactory-cli `key=value` override. No CPU
necessity is needed: fp16 stays fp16, flash_attn is already sdpa, the tiny tokenizer is ChatML
(template qwen fits), and without `use_cpu` accelerate takes its DeepSpeed path, which sets up
deepspeed.comm before ZeRO-3's zero.Init (so no FTRECIPES_CPU_DS_COMM shim either).

Truth negatives: the LLaMA-Factory checks in frameworks/truth_llamafactory.py can fail.
"""

import json
import math
from pathlib import Path

import pytest

from ftrecipes import shellcmd
from truth_jobs import run_truth
from smoke_harness import free_port, launch, make_assets, read_probe, render_into

NAME = "qwen7b-dpo-v100x8"


@pytest.mark.smoke
def test_dpo_lora_zero3_offload_fp16_trains(tmp_path):
    assets = make_assets("llamafactory", tmp_path / "assets", arch="qwen2")
    run = tmp_path / "run"
    sets = [
        f"model={assets['model']}", f"dataset_dir={Path(assets['dataset_info']).parent}", "dataset=tiny_dpo",
        "gpus_per_node=2", "grad_accum=2", "seq_len=128", f"output_dir={tmp_path / 'out'}", f"master_port={free_port()}",
    ]
    render_into(NAME, sets, run)
    [train] = [c for c in shellcmd.commands((run / "launch.sh").read_text()) if c.words[:2] == ["llamafactory-cli", "train"]]
    assert train.words == ["llamafactory-cli", "train", "dpo.yaml"]
    assert train.env["FORCE_TORCHRUN"] == "1" and train.env["NPROC_PER_NODE"] == "2"
    # The script's env assignments, then its command; max_steps is the only appended override.
    launch("llamafactory", train.words + ["max_steps=3"], cwd=run, probe_dir=tmp_path / "probe",
           extra_env=dict(train.env), label=NAME)

    ds = json.loads((run / "ds.json").read_text())
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and ds["fp16"]["enabled"] and ds["fp16"]["loss_scale"] == 0
    records = read_probe(tmp_path / "probe")
    assert sorted(records) == [0, 1], f"ranks seen: {sorted(records)}"
    for rank, recs in records.items():
        assert not [r for r in recs if r["event"] == "probe-error"]
        [e] = [r for r in recs if r["event"] == "engine"]
        assert e["world_size"] == 2 and e["train_batch"] == ds["train_batch_size"], e
        assert e["zero_stage"] == 3, e
        assert (e["offload_optimizer"], e["offload_optimizer_pin_memory"]) == ("cpu", True), e
        assert (e["offload_param"], e["offload_param_pin_memory"]) == ("cpu", True), e
        assert e["basic_optimizer"] == "DeepSpeedCPUAdam", e
        assert e["fp16"] and not e["bf16"] and e["param_dtype"] == "torch.float16", e
        assert e["lora_params"] > 0 and e["trainable_lora_only"], e
        assert e["gradient_checkpointing"], e
        # Measured, and NOT what ds.json asks for: no loss scaling happens. LLaMA-Factory keeps
        # the LoRA adapters in fp32 under ZeRO-3 (llamafactory/model/adapter.py), and DeepSpeed's
        # ZeRO-3 optimizer picks its loss scaler by the dtype of the trainable parameters
        # (stage3.py: fp16 -> DynamicLossScaler, else a static LossScaler(1.0), and overflow
        # checks only for fp16). So the scale is 1.0, not 2**16: the fp16 base runs unscaled.
        # smoke_harness.assert_engine requires loss_scale > 1 for fp16 and is therefore not used.
        # If this starts failing, loss scaling got engaged: update the recipe's README.
        assert e["loss_scale"] == 1.0, e
        losses = [r["value"] for r in recs if r["event"] == "loss"]
        assert losses and all(isinstance(v, float) and math.isfinite(v) for v in losses), losses
        steps = [r for r in recs if r["event"] == "step"]
        assert len(steps) >= 3 and not any(s["skipped"] for s in steps), steps


def _truth(jobs, tmp_path):
    return run_truth("llamafactory", jobs, tmp_path, timeout=600)


@pytest.mark.framework
def test_llamafactory_truth_checks_can_fail(tmp_path):
    """get_train_args from a dict lets a bad Literal through; the checker must not."""
    run = tmp_path / "run"
    render_into(NAME, [], run)
    yaml_job = {"check": "llamafactory", "path": str(run / "dpo.yaml"), "world_size": 8, "cwd": str(run)}
    env = {"FORCE_TORCHRUN": "1", "NNODES": "1", "NPROC_PER_NODE": "8", "MASTER_PORT": "29500"}
    launch_job = {"check": "llamafactory-launch", "env": env, "args": ["train", "dpo.yaml"], "world_size": 8,
                  "devices_per_node": 8, "llamafactory_files": ["dpo.yaml"], "cwd": str(run)}
    cases = [
        (yaml_job, None),
        (dict(yaml_job, overrides={"stage": "dpoo"}, parser_only=True), None),
        (dict(yaml_job, overrides={"stage": "dpoo"}), "stage: 'dpoo' is not one of"),
        (dict(yaml_job, overrides={"pref_loss": "sigmoidd"}), "pref_loss: 'sigmoidd' is not one of"),
        (dict(yaml_job, overrides={"flash_attn": "fa"}), "flash_attn: 'fa' is not one of"),
        (dict(yaml_job, overrides={"template": "qwen25"}), "is not a LLaMA-Factory template"),
        (dict(yaml_job, overrides={"lora_rnk": 8}), "lora_rnk"),  # HfArgumentParser: unknown key
        (dict(yaml_job, overrides={"learning_rate": 1e-5}), "optimizer.params.lr"),  # HF vs ds.json
        (dict(yaml_job, world_size=4), "train_batch_size"),  # ds.json written for 8 processes
        (launch_job, None),
        (dict(launch_job, env=dict(env, NPROC_PER_NODE="4")), "1 x 4 = 4"),
        (dict(launch_job, args=["train", "sft.yaml"]), "not the recipe's rendered file"),
        (dict(launch_job, env={k: v for k, v in env.items() if k != "FORCE_TORCHRUN"}, devices_per_node=1),
         "without torchrun"),
    ]
    results = _truth([job for job, _ in cases], tmp_path)
    for (job, expected), res in zip(cases, results):
        if expected is None:
            assert res["ok"], res["error"]
        else:
            assert not res["ok"] and expected in res["error"], (job, res)
    assert results[0]["facts"]["stage"] == "dpo" and results[0]["facts"]["ds_zero3"]
    # get_train_args alone accepts `stage: dpoo` from a dict: the Literal check is what catches it.
    assert results[1]["facts"]["stage"] == "dpoo"
    assert results[9]["facts"]["world_size"] == 8 and results[9]["facts"]["ds_world_size"] == 8
