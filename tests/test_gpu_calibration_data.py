"""The memory model against real H100 measurements (bench/gpu_calibrate/*.json, made by
bench/gpu_calibrate.py on one H100 80GB with DeepSpeed 0.19.8, transformers 5.17, peft 0.21,
bitsandbytes 0.50.2; bench/gpu_calibrate.md is the report). The measurements are data; every
assertion recomputes today's estimate for the case as run and compares it with torch's
max_memory_allocated. What each group proves:
- DeepSpeed ZeRO-1/2 setup (flatten copy, master clone, the fp32 zero gradient) within 1 %;
- accelerate's FSDP2 fp32 cast by release (1.12: the whole model, 1.15: trainable only): the
  step's allocated figure within 1 %;
- whole-run allocated peak within 5 % where the model claims to be exact (no DeepSpeed, or
  ZeRO-1/2 without offload); ZeRO-3 with parameter offload is a known weakness (the README's
  accuracy section says so) and is held only to the verdict, and so is a transformers 4.x
  decoder layer without checkpointing (h100-run7: 4.49.0 keeps 6 bytes per token and hidden
  unit per layer more than 5.17.0, -5.0 %; the model follows 5.x layers);
- ZeRO-3 LoRA with parameter offload: the backward's gathered base by reentrancy and DeepSpeed
  release (deepspeed_transients.recompute_pinned) within 5 %;
- transformers' own loss by release (activations.hf_loss_forward_transient): the forward phase
  of the 4.41 / 4.46 / 5.17 runs within 1 %;
- every run that ran is not called oom, every run that hit an OOM is."""

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gpu_calibrate  # noqa: E402

RUNS = sorted((ROOT / "bench" / "gpu_calibrate").glob("*.json"))


def _cases():
    out = []
    for path in RUNS:
        data = json.loads(path.read_text())
        for run in data["runs"]:
            out.append(pytest.param(gpu_calibrate.Case(**run["case"]), run["measured"], data["environment"],
                                    id=f"{path.stem}:{run['case']['name']}"))
    return out


def _estimate(case, env, tmp_path):
    return gpu_calibrate.estimate_phases(case, env, gpu_calibrate.model_path_for(case, str(tmp_path), False))


def _peak(measured, figure="allocated"):
    return max(v[figure] for v in measured.values() if isinstance(v, dict))


def _cases_where(keep):
    """The cases whose Case and measurements pass keep(case, measured)."""
    return [c for c in _cases() if keep(c.values[0], c.values[1])]


def test_calibration_data_is_present():
    assert len(RUNS) >= 4 and sum(len(json.loads(p.read_text())["runs"]) for p in RUNS) >= 17


@pytest.mark.parametrize("case, measured, env", _cases())
def test_estimate_against_h100_measurement(case, measured, env, tmp_path):
    est = _estimate(case, env, tmp_path)
    assert ("oom" in measured) == (est["verdict"] == "oom"), (case.name, est["verdict"])
    if case.engine == "deepspeed" and case.zero_stage in (1, 2):
        assert est["phases"]["setup"] == pytest.approx(measured["setup"]["allocated"], rel=0.01)
    if case.engine == "fsdp2":
        # accelerate's fp32 cast by release (whole model up to 1.12, trainable only from 1.14):
        # the step holds just the prepared parameters, LoRA's gradients and Adam's states
        assert est["phases"]["step"] == pytest.approx(measured["step"]["allocated"], rel=0.01), case.accelerate
    exact = case.engine == "torch" or (case.zero_stage in (1, 2) and case.offload_optimizer == "none")
    old_layers = case.transformers.startswith("4.") and not case.gradient_checkpointing
    if exact and not old_layers and "oom" not in measured:
        assert est["allocated"] == pytest.approx(_peak(measured), rel=0.05), case.name


@pytest.mark.parametrize("case, measured, env", _cases_where(
    lambda case, measured: case.engine == "deepspeed" and case.offload_optimizer == "none" and case.lora_rank == 0
    and "oom" not in measured))
def test_reserved_of_full_zero_runs(case, measured, env, tmp_path):
    """Full ZeRO-1/2/3 with Adam on the GPU: from the second step on the allocator keeps a second
    fp32 cast block (estimate._step_recast). Without it reserved was 8-10 % low on every such run;
    with it ZeRO-1/2 must be within 7 % of max_memory_reserved (+0.6 % now).

    ZeRO-3 is held to 10 %, a known gap rather than a fit: these runs are on one GPU, where
    DeepSpeed uses each partition in place and gathers nothing (deepspeed_transients.
    gathers_allocate). Once the estimate stopped counting a gather window there, its allocated
    figures met the measured ones (backward -0.1 and +0.1 %) and its reserved figures showed what
    the window had covered: -6.0 % at 2,048 tokens and -7.8 % at 8,192, where the allocator keeps
    9.8 GiB beyond the allocated peak and the model accounts for 4.4."""
    est = _estimate(case, env, tmp_path)
    bound = 0.10 if case.zero_stage == 3 else 0.07
    assert est["reserved"] == pytest.approx(_peak(measured, "reserved"), rel=bound), case.name


@pytest.mark.parametrize("case, measured, env", _cases_where(
    lambda case, measured: case.engine == "deepspeed" and case.zero_stage in (1, 2) and case.offload_optimizer != "none"))
def test_backward_of_zero2_with_adam_offload(case, measured, env, tmp_path):
    """ZeRO-1/2 with Adam offloaded: no gradient partition stays on the GPU, but the LM head's
    gradient (larger than the reduce bucket, so outside it) and its fp32 cast for the host copy
    do, early in backward. Without them the first backward was 12.8 and 12.9 % below
    max_memory_allocated; with them it must be within 11 % (9.0 and 10.8 % now; what is still
    missing is not known)."""
    est = _estimate(case, env, tmp_path)
    assert est["phases"]["backward"] == pytest.approx(measured["backward"]["allocated"], rel=0.11), case.name


@pytest.mark.parametrize("case, measured, env", _cases_where(
    lambda case, measured: case.name.startswith(("llamafactory-4026-rank", "qwen2.5-7b-lora-r16-s8192-tf"))))
def test_loss_path_by_transformers_release(case, measured, env, tmp_path):
    """The forward peak of a checkpointed LoRA run is the loss: 10 bytes per logit under 5.x, 12
    under 4.41 (upcast in the model and a shifted fp32 copy), 14 under 4.46 (the copy in
    loss_utils while the model holds its fp16 logits), and 10 again for a one-row batch, whose
    shifted slice is contiguous already (qwen2.5 under 4.46). Same setting, measured 39.06 /
    42.97 / 46.88 GiB: each release must land within 1 %."""
    est = _estimate(case, env, tmp_path)
    assert est["phases"]["forward"] == pytest.approx(measured["forward"]["allocated"], rel=0.01), case.name


@pytest.mark.parametrize("case, measured, env", _cases_where(lambda case, measured: case.optimizer == "adamw_8bit"))
def test_eight_bit_adam_step(case, measured, env, tmp_path):
    """transformers' Trainer builds bnb.optim.AdamW(optim_bits=8) for adamw_8bit since 4.30; only
    a class named Adam8bit (adamw_bnb_8bit up to 4.29) gave embeddings 32-bit states. The step of
    SmolLM2-1.7B, whose 0.1 B embedding would add 0.56 GiB on 32-bit states, within 2 %."""
    est = _estimate(case, env, tmp_path)
    assert est["phases"]["step"] == pytest.approx(measured["step"]["allocated"], rel=0.02), case.name


@pytest.mark.parametrize("case, measured, env", _cases_where(
    lambda case, measured: case.engine == "deepspeed" and case.zero_stage == 3 and case.lora_rank > 0))
def test_zero3_lora_backward_by_reentrancy_and_deepspeed_release(case, measured, env, tmp_path):
    """ZeRO-3 with parameter offload gathers every weight into a GPU copy, so what a LoRA run's
    backward keeps gathered shows in max_memory_allocated (h100-run10, Qwen2.5-7B, LLaMA-Factory's
    ds_z3_offload_config). deepspeed_transients.recompute_pinned says a reentrant recompute leaves
    the whole frozen base gathered from DeepSpeed 0.19.3 while transformers before 5.23 runs the
    layer's hooks inside the checkpoint, and nothing of the kind under 0.16.9 or without
    reentrancy. Measured 13.30 GiB (0.19.8 reentrant) against 3.96 (non-reentrant) and 3.96
    (0.16.9 reentrant): the backward of each within 5 % of the first step's or the second's."""
    est = _estimate(case, env, tmp_path)["phases"]["backward"]
    peak = max(measured["backward"]["allocated"], measured["backward (step 2)"]["allocated"])
    assert est == pytest.approx(peak, rel=0.05), case.name


def test_steps_of_a_varying_case_follow_its_lengths():
    """A case with lengths runs one step per length and merges steps 2..N into one row per phase
    (h100-run8/9); a case without runs two steps at seq_len, as runs 1-7 were recorded."""
    fixed = gpu_calibrate.Case("x", "Llama-3-8B", "torch", seq_len=1024)
    varying = gpu_calibrate.Case("y", "Llama-3-8B", "torch", seq_len=4096, lengths=(512, 4096, 1024))
    assert gpu_calibrate.step_lengths(fixed) == [1024, 1024]
    assert gpu_calibrate.step_lengths(varying) == [512, 4096, 1024]
    assert [gpu_calibrate.phase_key("forward", k, 2) for k in (1, 2)] == ["forward", "forward (step 2)"]
    assert gpu_calibrate.phase_key("backward", 3, 3) == "backward (steps 2-3)"
    for case in gpu_calibrate.CASES:
        assert not case.lengths or max(case.lengths) == case.seq_len, case.name
