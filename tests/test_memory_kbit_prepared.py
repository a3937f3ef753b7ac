"""PEFT's prepare_model_for_kbit_training and the dtype of the hidden states.

Facts read in the release wheels (not in the estimate's own code):
- peft 0.3.0 prepare_model_for_int8_training and peft 0.4.0 on prepare_model_for_kbit_training
  (peft/utils/other.py) cast every fp16/bf16 parameter to fp32 (embeddings, norms, LM head);
  peft 0.6.0 on skip GPTQ models.
- bitsandbytes 0.39.0 Linear4bit.forward ends with `out = out.to(inp_dtype)` and MatMul8bitLt
  with `output.to(A.dtype)`: a quantized projection answers in its input's dtype, so an fp32
  norm output gives fp32 q/k/v and gate/up, and the residual stream stays fp32.
- TRL calls it on a model it wraps itself: sft_trainer.py from 0.4.x (prepare_model_for_int8_training,
  8-bit and 4-bit) to 0.25.x, models/utils.py prepare_peft_model (SFT and GRPO) from 0.22.0 to
  0.25.x, dpo_trainer.py to 0.28.x; 0.26.0's SFT/GRPO trainers and 0.29.0's DPOTrainer call
  get_peft_model alone. Sharded QLoRA (params on cpu/meta: FSDP, ZeRO-3) is skipped.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations
from ftrecipes.memory.catalog import model as resolve_model
from ftrecipes.memory.configs import parse_sets
from ftrecipes.memory.model_states import kbit_prepared

QLORA = Setup(model="Llama-3.1-8B-Instruct", gpu="A100-80GB", gpus=1, framework="torch", trainer="trl",
              seq_len=2048, micro_batch=4, precision="bf16", gradient_checkpointing=False, lora_rank=16,
              quantization="4bit", load_dtype="bf16")


@pytest.mark.parametrize("method, release, prepared", [
    ("sft", "0.4.7", True), ("sft", "0.25.1", True), ("sft", "0.26.0", False), ("sft", "", False),
    ("dpo", "0.12.2", True), ("dpo", "0.28.0", True), ("dpo", "0.29.0", False),
    ("grpo", "0.21.0", False), ("grpo", "0.22.0", True), ("grpo", "0.26.0", False)])
def test_trl_prepares_by_release_and_method(method, release, prepared):
    assert kbit_prepared(replace(QLORA, method=method, trl_version=release)) is prepared


@pytest.mark.parametrize("change", [
    {"quantization": "none"},                                   # nothing quantized: never called
    {"layer_kernels": "unsloth"},                               # Unsloth hands TRL a PeftModel
    {"framework": "fsdp"},                                      # sharded QLoRA is skipped
    {"framework": "deepspeed", "zero_stage": 3},
    {"trainer": "llamafactory"},                                # its own preparation, no PEFT cast
    {"trainer": "axolotl"},                                     # casts the norms back
])
def test_runs_that_keep_the_norms_in_the_compute_dtype(change):
    assert not kbit_prepared(replace(QLORA, trl_version="0.12.2", **change))


def test_a_stated_value_wins_over_the_trainer():
    assert kbit_prepared(replace(QLORA, trainer="hf", kbit_prepared=True))
    assert not kbit_prepared(replace(QLORA, trl_version="0.12.2", kbit_prepared=False))
    # it cannot apply without a quantized base: the cast is the kbit preparation's
    assert not kbit_prepared(replace(QLORA, quantization="none", kbit_prepared=True))


def test_fp32_stream_doubles_the_checkpointed_inputs_and_the_mlp_tensors():
    shape = resolve_model("Llama-3.1-8B-Instruct")
    kw = dict(lora_rank=16, attn_implementation="flash_attention_2")
    T = 2 * 1024
    for gc in (True, False):
        plain = activations(shape, 1024, 2, 2, gradient_checkpointing=gc, **kw)
        fp32 = activations(shape, 1024, 2, 2, gradient_checkpointing=gc, stream_bytes=4, **kw)
        h, i, L = shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers
        if gc:
            # one checkpointed input per layer but the first (frozen embedding under LoRA), now 4 bytes
            assert fp32.saved_layers - plain.saved_layers == (L - 1) * 2 * h * T
        else:
            # gate, up and their product per layer, 2 more bytes each
            assert fp32.saved_layers - plain.saved_layers == L * 3 * 2 * i * T
        assert fp32.layer_backward_transient - plain.layer_backward_transient == (3 * 2 * i + 2 * 2 * h) * T
        # the loss terms do not depend on the stream
        assert fp32.forward_transient == plain.forward_transient


def test_estimate_counts_it_and_says_so():
    off = estimate(replace(QLORA, trl_version="0.26.0"))
    on = estimate(replace(QLORA, trl_version="0.25.1"))
    assert on.gpu_allocated_bytes > off.gpu_allocated_bytes
    assert any("prepare_model_for_kbit_training" in n for n in on.notes)
    assert not any("prepare_model_for_kbit_training" in n for n in off.notes)


def test_set_takes_it():
    assert parse_sets(["kbit_prepared=true"]) == {"kbit_prepared": True}


def test_a_trl_config_is_prepared_under_the_trl_release_it_runs():
    # alignment-handbook's zephyr QLoRA recipe (tests/corpus, cited in tests/corpus/SOURCES.yaml):
    # load_in_4bit with a LoRA config, read as TRL's SFT
    import os

    from ftrecipes.memory.configs import setup_from_files

    path = os.path.join(os.path.dirname(__file__), "corpus", "huggingface__alignment-handbook", "recipes",
                        "zephyr-7b-beta", "sft", "config_qlora.yaml")
    old = setup_from_files([path], framework_versions={"trl": "0.12.2"})[0]
    new = setup_from_files([path], framework_versions={"trl": "1.16.0"})[0]
    assert old.quantization == "4bit" and old.lora_rank and old.trainer == "trl"
    assert kbit_prepared(old) and not kbit_prepared(new)
    assert estimate(old).gpu_allocated_bytes > estimate(replace(old, kbit_prepared=False)).gpu_allocated_bytes
