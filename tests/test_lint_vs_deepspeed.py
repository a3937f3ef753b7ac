"""Lint against DeepSpeed itself: 2,000+ mutated DeepSpeed configs, DeepSpeedConfig as the oracle.

DeepSpeed runs once over all mutants in the trl venv (tests/frameworks/ds_oracle.py); lint runs
on each mutant with --kind deepspeed and the mutant's world size as --gpus.
(a) no config DeepSpeed rejects passes lint; (b) every config DeepSpeed accepts while ignoring a
key gets a finding that names it. bench/lint_vs_deepspeed.py prints the full confusion matrix.
"""

import json

import pytest

from fuzz import ds_compare, ds_mutants

# Configs DeepSpeed 0.19.8 rejects (or silently ignores part of) that lint passed before the
# oracle found them; checked here without the venv. (config, --gpus, expected rule)
FOUND_BY_ORACLE = [
    ({"train_batch_size": 8, "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}}, 2, "bad-value"),
    ({"train_batch_size": 8, "gradient_allreduce_op": "sum", "compile": {"deepcompile": True}}, 2, "bad-value"),
    ({"train_batch_size": 8, "bf16": {"enabled": True, "bf16_optimizer_states": True}, "zero_optimization": {"stage": 2}}, 2, "bad-value"),
    ({"train_batch_size": 8, "bf16": {"enabled": True, "bf16_master_weights_and_grads": True}}, 2, "bad-value"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "fp16_master_weights_and_grads": True}, "zero_optimization": {"stage": 0}}, 2, "bad-value"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale_window": -1}}, 2, "bad-value"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": -1}}, 2, "out-of-range"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": 1e30}}, 2, "out-of-range"),
    ({"train_batch_size": 8, "bf16": {"enabled": True}, "bfloat16": {"enabled": False}}, 2, "removed-key"),
    ({"gradient_accumulation_steps": 2}, 2, "batch-arithmetic"),
    ({"train_batch_size": 7, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}, 2, "batch-arithmetic"),
    ({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 3}, 8, "batch-arithmetic"),
    ({"train_batch_size": 64, "gradient_accumulation_steps": 3}, 4, "batch-arithmetic"),
    ({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 10**12}, 8, "batch-arithmetic"),
]
# ...and configs it accepts unchanged that lint must keep passing.
STILL_CLEAN = [
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, 8),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}, 8),
    ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}, 8),
    ({"train_batch_size": 16, "fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 0}}, 2),
    ({"train_batch_size": 16, "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 2}}, 2),
    ({"train_batch_size": 16, "bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}, "zero_optimization": {"stage": 1}}, 2),
    ({"train_batch_size": 16, "zero_optimization": {"stage": 2, "offload_param": {"device": "auto"}}}, 2),
    ({"train_batch_size": 16, "bfloat16": {"enabled": True}}, 2),
    # a null batch key is derived as an absent one is (align-anything; DeepSpeedConfig: 16 / 2 -> 8)
    ({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": None}, 1),
]


def _lint(tmp_path, cfg, gpus):
    from ftrecipes import lint, rules

    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    res = lint.run([str(path)], kind="deepspeed", options=rules.Options(gpus=gpus))
    assert not res.unusable
    return [f for f in res.findings if f.severity == "error"]


@pytest.mark.parametrize("cfg,gpus,rule", FOUND_BY_ORACLE)
def test_oracle_findings_stay_fixed(tmp_path, cfg, gpus, rule):
    errors = _lint(tmp_path, cfg, gpus)
    assert rule in {f.rule for f in errors}, errors


@pytest.mark.parametrize("cfg,gpus", STILL_CLEAN)
def test_accepted_configs_stay_clean(tmp_path, cfg, gpus):
    assert _lint(tmp_path, cfg, gpus) == []


@pytest.fixture(scope="module")
def comparison():
    return ds_compare.run_all()


def test_enough_deterministic_mutants():
    a, b = ds_mutants.generate(), ds_mutants.generate()
    assert len(a) >= 2000
    assert a == b
    assert all(isinstance(r["world_size"], int) and r["world_size"] >= 1 for r in a)


@pytest.mark.framework
def test_unmutated_bases_pass_both(comparison):
    for rid, (r, v, l) in comparison.records.items():
        if r["ops"] == ["none"]:
            assert v["accepted"], (rid, v["error"])
            assert not l["errors"] and not l["unusable"], (rid, l)


@pytest.mark.framework
def test_no_deepspeed_rejection_passes_lint(comparison):
    assert comparison.confusion["reject", "error"] > 500
    missed = [ds_compare.describe(x) for x in comparison.missed_rejections]
    assert not missed, "\n".join(missed[:20])


@pytest.mark.framework
def test_every_ignored_key_gets_a_finding(comparison):
    assert comparison.ignored_total > 100
    missed = [ds_compare.describe(x) for x in comparison.missed_ignored]
    assert not missed, "\n".join(missed[:20])
