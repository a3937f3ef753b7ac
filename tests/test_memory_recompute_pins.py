"""ZeRO-3 keeps a LoRA model's frozen weights gathered through backward when a reentrant
recompute runs the layer's hooks inside the checkpoint (DeepSpeed >= 0.19.3, transformers < 5.23):
memory.deepspeed_transients.recompute_pinned and model_states.checkpoint_reentrant.

The estimator tests pin the rule's edges; the framework test counts it in DeepSpeed's own
parameter coordinator (tests/frameworks/zero3_recompute_pins.py) in the two stacks that sit on
either side of the transformers boundary."""
import json
import subprocess

import pytest

from ftrecipes.memory import catalog
from ftrecipes.memory.estimate import Setup, estimate
from ftrecipes.memory.host import GiB

# Qwen2-7B LoRA under ZeRO-3 on two 24 GB cards, LLaMA-Factory (LlamaFactory#5070's setting)
BASE = dict(model="Qwen2-7B-Instruct", gpu="RTX-4090", gpus=2, seq_len=2048, micro_batch=1, precision="bf16",
            zero_stage=3, framework="deepspeed", gradient_checkpointing=True, lora_rank=16, lora_target="all",
            trainer="llamafactory", deepspeed_version="0.19.8")


def backward(**kw):
    r = estimate(Setup(**{**BASE, **kw}))
    return next(ph for ph in r.phases if ph.name == "backward").total_bytes


def frozen_layers_bytes():
    shape = catalog.model(BASE["model"])
    return 2 * shape.num_hidden_layers * shape.layer_params()


def gain(**kw):
    """Backward's peak with 0.19.8 over 0.19.2, all else equal."""
    return backward(**kw) - backward(**{**kw, "deepspeed_version": "0.19.2"})


def test_pinned_weights_appear_from_0_19_3_only():
    r = estimate(Setup(**BASE))
    back = next(ph for ph in r.phases if ph.name == "backward")
    # at the bottom layer every decoder layer's frozen weights sit beside the rank's partition
    assert back.by_category["temporaries"] >= frozen_layers_bytes()
    assert back.total_bytes >= back.by_category["params"] + frozen_layers_bytes()
    # it moves the peak by more than half of them (the start of backward, with every saved
    # activation and the loss's gradients, was the peak before)
    assert gain() > 0.5 * frozen_layers_bytes()
    assert backward(deepspeed_version="0.19.2") == backward(deepspeed_version="0.16.9")
    assert any("use_reentrant_gc: false" in n for n in r.notes), r.notes


@pytest.mark.parametrize("change", [
    dict(checkpoint_reentrant=False),        # non-reentrant: each layer's frozen weights go with it
    dict(transformers_version="5.23.0"),     # hooks outside the checkpoint
    dict(lora_rank=0),                       # nothing frozen
    dict(gradient_checkpointing=False),      # no recompute
    dict(zero_stage=2),
])
def test_no_pinning_outside_the_rule(change):
    assert gain(**change) < 0.05 * GiB, change


def test_trainer_defaults():
    half = 0.5 * frozen_layers_bytes()
    # LLaMA-Factory 0.9.5 pins transformers<=5.6.0 and use_reentrant_gc defaults to true
    assert gain() > half
    # OpenRLHF checkpoints non-reentrant unless asked; a plain transformers 5.x run too
    for trainer in ("openrlhf", ""):
        assert gain(trainer=trainer, transformers_version="5.6.0") == 0
    # ... while transformers 4.x checkpointed reentrant by default
    assert gain(trainer="", transformers_version="4.57.1") > half
    # TRL >= 1.9 forces reentrant for PEFT under ZeRO-3, whatever the config says
    forced = dict(trainer="trl", trl_version="1.16.0", transformers_version="5.22.0", checkpoint_reentrant=False)
    assert gain(**forced) > half
    assert gain(**{**forced, "trl_version": "1.8.0"}) == 0
    # an offloading checkpointer recomputes inside its own backward, whatever use_reentrant says
    assert gain(checkpoint_offload=True, checkpoint_reentrant=False) > half
    # axolotl's normalize_config asks for reentrant checkpointing where transformers 5.x would not
    assert gain(trainer="axolotl", transformers_version="5.6.0") > half
    assert gain(trainer="axolotl", transformers_version="5.6.0", checkpoint_reentrant=False) == 0


def test_axolotl_default_is_reentrant_except_gemma4():
    from ftrecipes.memory.model_states import checkpoint_reentrant

    s = Setup(**{**BASE, "trainer": "axolotl", "transformers_version": "5.6.0"})
    assert checkpoint_reentrant(s, "qwen2") is True
    assert checkpoint_reentrant(s, "gemma4_text") is False


def test_readers_take_use_reentrant(tmp_path):
    from ftrecipes.memory.configs import read

    lf = tmp_path / "lf.yaml"
    lf.write_text("stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-7B\nfinetuning_type: lora\nuse_reentrant_gc: false\n")
    trl = tmp_path / "trl.yaml"
    trl.write_text("model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nuse_peft: true\n"
                   "gradient_checkpointing_kwargs: {use_reentrant: true}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nuse_peft: true\n")
    assert read([str(lf)])[1]["checkpoint_reentrant"] is False
    assert read([str(trl)])[1]["checkpoint_reentrant"] is True
    assert "checkpoint_reentrant" not in read([str(plain)])[1]
    ax = tmp_path / "ax.yaml"
    ax.write_text("base_model: Qwen/Qwen2.5-7B\nadapter: lora\ngradient_checkpointing: true\n"
                  "gradient_checkpointing_kwargs:\n  use_reentrant: false\n")
    assert read([str(ax)])[1]["checkpoint_reentrant"] is False


@pytest.mark.framework
@pytest.mark.parametrize("stack,reentrant,pinned,extra", [
    ("llamafactory", 1, True, []),   # transformers 5.6: hooks inside the checkpoint
    ("llamafactory", 0, False, []),
    # use_unsloth_gc: LLaMA-Factory's offloading Function recomputes inside backward, as reentrant does
    ("llamafactory", 0, True, ["--unsloth-gc", "1"]),
    ("trl", 1, False, []),           # transformers 5.23: hooks outside
])
def test_deepspeed_coordinator_counts(tmp_path, stack, reentrant, pinned, extra):
    from ftrecipes import devenv
    from smoke_harness import FRAMEWORKS, free_port

    python = devenv.ensure_env(stack)
    argv = [str(python), "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(FRAMEWORKS / "zero3_recompute_pins.py"), "--reentrant", str(reentrant), *extra]
    proc = subprocess.run(argv, cwd=tmp_path, env=devenv.run_env(stack), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [r] = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert r["deepspeed"] == "0.19.8", r
    assert all(loss == loss and loss < 20 for loss in r["losses"]), r
    if pinned:
        # at the bottom layer: every decoder layer's frozen weights and the head, whole
        assert r["peaks"][-1] >= r["layers"] + r["head"] - 0.01, r
    else:
        assert r["peaks"][-1] < 0.35, r
