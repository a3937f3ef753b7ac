"""What bitsandbytes' autograd functions keep for backward under a frozen quantized base.

Read in bitsandbytes/autograd/_functions.py (git tags of bitsandbytes-foundation/bitsandbytes):
MatMul4Bit.forward sets `ctx.tensors = (A, B)` when any input needs a gradient up to 0.43.1 and
`(None, B)` from 0.43.2 (9e75374, #1270); its backward computes grad_A from the dequantized weight
alone. MatMul8bitLt.forward keeps `(CAt, subA, A)` in every release; CAt, the int8 transposed copy
of A, comes from `F.double_quant` on every call up to 0.44.1, and from 0.45.0 (81e6345, #1401) only
when the weight needs a gradient. Autograd keeps a tensor once however many functions save it, so
the model counts an input only where nothing else keeps it already; LitGPT's config-hub QLoRA rows
(bitsandbytes==0.42.0) are where the gap was seen (bench/published_memory.md).
"""
from __future__ import annotations

import subprocess
import sys

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations, bnb_kept_input_bytes
from ftrecipes.memory.catalog import model

LLAMA = model("Llama-3-8B")
T = 1024
P = 2


def _acts(keeps, **kw):
    kw.setdefault("lora_target", "q_proj,v_proj")
    return activations(LLAMA, T, 1, P, lora_rank=16, quantized_keeps=keeps, **kw)


@pytest.mark.parametrize("version, keeps", [
    ("0.42.0", (P, 0)), ("0.43.1", (P, 0)), ("0.43.2", (0, 0)), ("0.45.5", (0, 0)), ("", (0, 0))])
def test_4bit_layers_keep_their_input_up_to_0_43_1(version, keeps):
    assert bnb_kept_input_bytes("4bit", version, P) == keeps


@pytest.mark.parametrize("version, keeps", [("0.41.3", (P, 1)), ("0.44.1", (P, 1)), ("0.45.0", (P, 0)), ("", (P, 0))])
def test_8bit_layers_keep_their_input_always_and_an_int8_copy_up_to_0_44(version, keeps):
    assert bnb_kept_input_bytes("8bit", version, P) == keeps


def test_unquantized_runs_keep_nothing_extra():
    assert bnb_kept_input_bytes("none", "0.42.0", P) == (0, 0)


def test_inputs_no_adapter_keeps_count_once_per_layer():
    """fp32 adapters on q/v (PEFT's default) keep their own fp32 casts, so the base layers' p-byte
    inputs are extra: the q/k/v input (h), the gate/up input (h, one tensor for both) and the
    down_proj input (i); o_proj's input is the attention output the attention terms keep. The
    first layer's q/k/v input comes from the frozen embedding and needs no gradient."""
    h, i, L = LLAMA.hidden_size, LLAMA.intermediate_size, LLAMA.num_hidden_layers
    gap = _acts((P, 0)).saved_layers - _acts((0, 0)).saved_layers
    assert gap == (L * P * (2 * h + i) - P * h) * T


def test_an_input_an_adapter_already_shares_is_not_counted_again():
    """Adapters in the compute dtype without dropout read the base layer's own input tensor
    (activations._adapter_bytes_per_token), so a bitsandbytes layer saving it adds nothing."""
    h, i, L = LLAMA.hidden_size, LLAMA.intermediate_size, LLAMA.num_hidden_layers
    shared = dict(adapter_fp32=False, lora_target="all")
    assert _acts((P, 0), **shared).saved_layers == _acts((0, 0), **shared).saved_layers
    qv = dict(adapter_fp32=False)  # q/v share the q/k/v input; gate/up and down_proj inputs are extra
    assert _acts((P, 0), **qv).saved_layers - _acts((0, 0), **qv).saved_layers == L * P * (h + i) * T


def test_int8_copies_count_per_layer_call():
    h, i, L = LLAMA.hidden_size, LLAMA.intermediate_size, LLAMA.num_hidden_layers
    q = LLAMA.num_attention_heads * LLAMA.head_dim
    shared = dict(adapter_fp32=False, lora_target="all")
    gap = _acts((P, 1), **shared).saved_layers - _acts((P, 0), **shared).saved_layers
    per_layer = 3 * h + q + 2 * h + i  # q, k, v, o, gate, up, down: one copy of its input each
    assert gap == (L * per_layer - 3 * h - q) * T  # the first layer's attention calls keep none


def test_checkpointing_keeps_them_only_for_the_recomputed_layer():
    h, i = LLAMA.hidden_size, LLAMA.intermediate_size
    a = _acts((0, 0), gradient_checkpointing=True)
    b = _acts((P, 0), gradient_checkpointing=True)
    assert b.saved_layers == a.saved_layers
    assert b.recompute_layer - a.recompute_layer == P * (2 * h + i) * T


def test_estimate_reads_the_release_and_refuses_a_malformed_one():
    base = dict(model="Llama-3-8B", framework="torch", gpu="A10G", seq_len=T, lora_rank=16,
                lora_target="q_proj,v_proj", quantization="4bit", lora_dropout=0.05)
    old = estimate(Setup(**base, bitsandbytes_version="0.42.0")).gpu_allocated_bytes
    new = estimate(Setup(**base, bitsandbytes_version="0.43.2")).gpu_allocated_bytes
    assert old > new and estimate(Setup(**base)).gpu_allocated_bytes == new
    with pytest.raises(ValueError, match="bitsandbytes_version"):
        estimate(Setup(**base, bitsandbytes_version="zero.four"))


def test_cli_set_takes_the_release_and_a_bad_one_is_one_line_exit_2():
    args = [sys.executable, "-m", "ftrecipes", "estimate", "--model", "Llama-3-8B", "--gpu", "A10G",
            "--lora-rank", "16", "--seq-len", str(T), "--set", "quantization=4bit", "--json"]
    ok = subprocess.run(args + ["--set", "bitsandbytes_version=0.42.0"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert '"bitsandbytes_version": "0.42.0"' in ok.stdout
    bad = subprocess.run(args + ["--set", "bitsandbytes_version=four"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "bitsandbytes_version" in bad.stderr
