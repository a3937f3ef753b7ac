"""qwen7b-dpo-v100x8: LLaMA-Factory LoRA DPO under ZeRO-2 + optimizer offload in fp16.

Smoke: the recipe's launch.sh command (its env assignments + `llamafactory-cli train dpo.yaml`)
on 2 CPU processes. Overrides (recipe.yaml `smoke:`): tiny local Qwen2-shaped model, a
dataset_dir with a dataset_info.json and preference data, gpus_per_node=2, seq_len=128,
output_dir, master_port; `max_steps=3` as a llamafactory-cli `key=value` override. fp16 stays
fp16, flash_attn is already sdpa, the tiny tokenizer is ChatML (template qwen fits).

One CPU necessity, in the test harness only: DeepSpeed 0.19.8's CPU accelerator refuses fp16
("Type fp16 is not supported on your device") unless oneDNN has fp16 kernels for the CPU
(AVX-512 FP16 or AMX), although PyTorch computes fp16 on any x86-64 CPU. Where it refuses,
tests/frameworks/cpu_fp16.py (FTRECIPES_CPU_FP16=bypass, set only by these tests) answers
True in its place; every process records DeepSpeed's own answer and whether it was replaced.
Each test runs both paths on any machine: the CPU's own answer, and the opposite one simulated
(FTRECIPES_CPU_FP16_SIMULATE). That the training really was fp16 is asserted from the engine
and from forward hooks (smoke_harness.assert_fp16_ran).

Loss scaling: the engine's scaler must be DeepSpeed's DynamicLossScaler at 2**loss_scale_power,
and an overflow injected by the probe (FTRECIPES_INJECT_OVERFLOW) must skip the step and, after
the hysteresis ds.json sets, halve the scale.

Truth negatives: the LLaMA-Factory checks in frameworks/truth_llamafactory.py can fail.
"""

import json
import math
from pathlib import Path

import pytest

from ftrecipes import shellcmd
from truth_jobs import run_truth
from smoke_harness import (assert_fp16_ran, cpu_fp16_env, free_port, launch, make_assets, native_cpu_fp16,
                           read_probe, render_into)

NAME = "qwen7b-dpo-v100x8"


def _train(tmp_path, max_steps, extra_env):
    """Render with the smoke overrides and run launch.sh's command; (ds.json, probe records)."""
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
    launch("llamafactory", train.words + [f"max_steps={max_steps}"], cwd=run, probe_dir=tmp_path / "probe",
           extra_env={**train.env, **extra_env}, label=NAME)
    return json.loads((run / "ds.json").read_text()), read_probe(tmp_path / "probe")


def _cpu_path(which):
    """(env, DeepSpeed's expected native answer) for the CPU's own answer or the opposite one."""
    native = native_cpu_fp16("llamafactory")
    if which == "native":
        return cpu_fp16_env(), native
    return cpu_fp16_env(simulate="absent" if native else "present"), not native


@pytest.mark.smoke
@pytest.mark.parametrize("cpu", ["native", "flipped"])
def test_dpo_lora_zero2_offload_fp16_trains(tmp_path, cpu):
    env, native = _cpu_path(cpu)
    ds, records = _train(tmp_path, 3, env)
    zero = ds["zero_optimization"]
    assert zero["stage"] == 2 and ds["fp16"]["enabled"] and ds["fp16"]["loss_scale"] == 0
    assert sorted(records) == [0, 1], f"ranks seen: {sorted(records)}"
    for rank, recs in records.items():
        assert not [r for r in recs if r["event"] == "probe-error"]
        [e] = [r for r in recs if r["event"] == "engine"]
        assert e["world_size"] == 2 and e["train_batch"] == ds["train_batch_size"], e
        assert e["zero_stage"] == 2, e
        assert (e["offload_optimizer"], e["offload_optimizer_pin_memory"]) == ("cpu", True), e
        assert e["offload_param"] == "none", e
        assert e["basic_optimizer"] == "DeepSpeedCPUAdam", e
        assert e["fp16"] and not e["bf16"] and e["param_dtype"] == "torch.float16", e
        assert e["lora_params"] > 0 and e["trainable_lora_only"], e
        assert e["gradient_checkpointing"], e
        losses = [r["value"] for r in recs if r["event"] == "loss"]
        assert losses and all(isinstance(v, float) and math.isfinite(v) for v in losses), losses
        steps = [r for r in recs if r["event"] == "step"]
        assert len(steps) >= 3 and not any(s["skipped"] for s in steps), steps
    # Dynamic loss scaling at 2**16 on fp16 adapters (under ZeRO-3 it was a static 1.0 on fp32
    # adapters: recipe 1.x, README "Tested"), fp16 forward passes, and which probe path ran.
    assert_fp16_ran(records, native, float(2 ** ds["fp16"]["initial_scale_power"]))


@pytest.mark.smoke
def test_dpo_fp16_overflow_skips_the_step_and_lowers_the_scale(tmp_path):
    """An overflow injected into optimizer steps 2 and 3 (an infinite loss: non-finite gradients).

    DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py, update_scale) skips
    every overflowing step; with ds.json's hysteresis of 2 the first overflow only uses up one
    unit of hysteresis and the second halves the scale. For contrast, measured with recipe 1.x
    (ZeRO-3, fp32 adapters, static scaler): the same injection skipped the steps too (ZeRO-3
    skips a non-finite gradient norm), but the scale stayed 1.0 throughout.
    """
    env, native = _cpu_path("native")
    ds, records = _train(tmp_path, 4, {**env, "FTRECIPES_INJECT_OVERFLOW": "2,3"})
    fp16 = ds["fp16"]
    assert fp16["hysteresis"] == 2 and fp16["loss_scale"] == 0
    start = float(2 ** fp16["initial_scale_power"])
    assert_fp16_ran(records, native, start)
    for rank, recs in records.items():
        assert [r["step"] for r in recs if r["event"] == "inject-overflow"] == [2, 3], recs
        steps = [(s["global_steps"], s["skipped_steps"], s["loss_scale"]) for s in recs if s["event"] == "step"]
        assert steps == [(1, 0, start), (2, 1, start), (3, 2, start / 2), (4, 2, start / 2)], (rank, steps)
        losses = [r["value"] for r in recs if r["event"] == "loss"]
        assert all(isinstance(v, float) and math.isfinite(v) for v in losses), losses  # recorded before injection


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
    # HF's DeepSpeed config object, as the trainer builds it from ds.json: ZeRO-2 since recipe 2.0
    # (under ZeRO-3 transformers would build the model under zero.Init and the adapters stay fp32).
    assert results[0]["facts"]["stage"] == "dpo" and results[0]["facts"]["ds_zero3"] is False
    # get_train_args alone accepts `stage: dpoo` from a dict: the Literal check is what catches it.
    assert results[1]["facts"]["stage"] == "dpoo"
    assert results[9]["facts"]["world_size"] == 8 and results[9]["facts"]["ds_world_size"] == 8
