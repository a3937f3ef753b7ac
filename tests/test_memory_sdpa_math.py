"""SDPA on torch's math backend (attn_implementation "sdpa-math") and the attention setting's checks.

Read in torch 2.6 (aten/src/ATen/native/transformers/attention.cpp _scaled_dot_product_attention_math,
ATen/Context.h allowFP16BF16ReductionMathSDP default false): the math backend upcasts bf16/fp16
q, k and v to fp32, repeats K/V for enable_gqa, materialises the fp32 scores and softmax
probabilities, and autograd keeps the probabilities (for the matmul with V and softmax backward).
Unsloth's Gemma-3 attention patch of March-April 2025 (unsloth_zoo 4a66f8b0 temporary_patches.py,
patch_Gemma3Attention) sends a float mask with enable_gqa=True, which only this backend takes.
"""
from __future__ import annotations

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations, attention_bytes_per_token
from ftrecipes.memory.catalog import model

GEMMA = model("Gemma-3-12B")  # 16 query heads of 256, 8 KV heads


def test_math_backend_keeps_fp32_inputs_and_probabilities():
    s = 15000
    q, nh = 16 * 256, 16
    assert attention_bytes_per_token(GEMMA, 2, "sdpa-math", s) == 3 * 4 * q + 4 * nh * s + 2 * q
    # the fp32 probabilities alone: 16 heads x 15,000 x 15,000 x 4 bytes = 14.4 GB for one layer
    assert 4 * nh * s * s == 14_400_000_000
    # eager attention keeps a p-byte cast of the probabilities besides; the fused kernels no s-wide term
    assert attention_bytes_per_token(GEMMA, 2, "eager", s) - attention_bytes_per_token(GEMMA, 2, "sdpa-math", s) \
        == 2 * nh * s - (3 * 4 * q + 2 * q - 4 * 2 * q)
    assert attention_bytes_per_token(GEMMA, 2, "sdpa", s) < nh * s


def test_its_softmax_backward_holds_two_fp32_gradients():
    math = activations(GEMMA, 8192, 1, 2, lora_rank=8, gradient_checkpointing=True, attn_implementation="sdpa-math")
    sdpa = activations(GEMMA, 8192, 1, 2, lora_rank=8, gradient_checkpointing=True)
    assert math.layer_backward_transient - sdpa.layer_backward_transient == 8 * 16 * 8192 * 8192


def test_the_estimate_flags_the_quadratic_path():
    base = dict(model="Gemma-3-12B", gpu="H100-80GB", lora_rank=8, seq_len=15000, framework="torch",
                gradient_checkpointing=True, loss_kernel="chunked")
    assert estimate(Setup(**base)).verdict == "fits"
    assert estimate(Setup(**base, attn_implementation="sdpa-math")).verdict == "oom"


def test_an_unknown_attention_is_refused_not_read_as_sdpa():
    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        estimate(Setup(model="Llama-3-8B", attn_implementation="flash_attention_3"))


def test_gpt_bigcode_keeps_fp32_softmax_probabilities():
    """transformers 4.28.1 modeling_gpt_bigcode.py: attention_softmax_in_fp32 (config default True)
    runs upcast_masked_softmax, `softmax(x.to(float32) * scale).to(dtype)`, so the probabilities
    softmax backward keeps are fp32; then attn_dropout keeps its 1-byte mask and the bmm with V its
    p-byte output. GPT-2 keeps p-byte probabilities."""
    from ftrecipes.memory.activations import gpt2_layer_bytes_per_token
    from ftrecipes.memory.catalog import ModelShape

    def shape(mtype, **cfg):
        return ModelShape("m", 6144, 24576, 40, 48, 1, 49152, model_type=mtype, hf_config=cfg)

    s = 8192
    bigcode = gpt2_layer_bytes_per_token(shape("gpt_bigcode"), 2, s)
    assert bigcode - gpt2_layer_bytes_per_token(shape("gpt2"), 2, s) == 2 * 48 * s
    assert gpt2_layer_bytes_per_token(shape("gpt_bigcode", attention_softmax_in_fp32=False), 2, s) \
        == gpt2_layer_bytes_per_token(shape("gpt2"), 2, s)
