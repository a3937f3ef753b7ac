"""Layer kernels in the activation model (Setup.layer_kernels): Unsloth's own LoRA layers and
Liger-Kernel's RMSNorm / SwiGLU functions.

What the model claims, read in unslothai/unsloth at 7e1c6a6 (2024-04-03; the same autograd
functions are in the 2026 snapshot): patch_peft_model (unsloth/models/llama.py lines 1545-1603)
swaps a layer's MLP for LoRA_MLP and its q/k/v and o projections for LoRA_QKV / LoRA_W only with
lora_dropout 0, bias "none" and LoRA on every projection of the group, without a bias (Qwen2's
q/k/v biases keep its attention on PEFT's layers). LoRA_MLP.forward saves (A, B of each
projection, X, e, g) and recomputes the SwiGLU product in backward (kernels/fast_lora.py
lines 59-79, swiglu.py _DWf_DW_dfg_kernel writes the gradients over e and g); LoRA_QKV saves X
only; LoRA_W saves (A, B, X) with X the attention output. Fast_RMS_Layernorm keeps its input and
the fp32 inverse RMS. Unsloth's kernels need CUDA (Triton), so the numbers below are the source's
saved-tensor lists counted by hand, not traced.

Liger (linkedin/Liger-Kernel 7e0f459, src/liger_kernel/ops): LigerRMSNormFunction.forward saves
(X, W, RSTD), the input in its own dtype and one fp32 inverse RMS per row; LigerSiLUMulFunction
saves (a, b) and its backward writes the gradients over them; the RoPE function rotates q and k in
place. transformers' Trainer use_liger_kernel, LLaMA-Factory enable_liger_kernel and OpenRLHF's
AutoLigerKernelForCausalLM leave rms_norm and swiglu at their defaults (on); axolotl patches each
kernel only when its own flag is set.
"""
from __future__ import annotations

import pytest
from ftrecipes.errors import UserError
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations, layer_bytes_per_token, lora_targets, unsloth_patched
from ftrecipes.memory.catalog import model
from ftrecipes.memory.configs import parse_sets, read
from ftrecipes.memory.trl_head import UNSLOTH_TRL_MAX, release

LLAMA = model("Llama-2-7B")
QWEN = model("Qwen2.5-7B")
ALL = lora_targets("all")


def _per_token(shape, kernels, targets=ALL, dropout=False, attn="flash_attention_2"):
    return layer_bytes_per_token(shape, 2, 16, targets, True, attn, 4096, True, dropout, (0, 0), kernels)


def test_a_fully_patched_llama_layer_keeps_the_source_saved_tensors():
    h, i, q, kv, nh = 4096, 11008, 4096, 4096, 32
    norms = 2 * (2 * h + 4)                    # each RMSNorm: p-byte input + fp32 inverse RMS
    attention = 2 * 2 * q + 2 * 2 * kv + 4 * nh  # FA2: q, k, v, output, log-sum-exp
    qkv = 2 * h                                # LoRA_QKV's X
    mlp = 2 * h + 2 * 2 * i                    # LoRA_MLP's X, e, g
    assert _per_token(LLAMA, "unsloth") == norms + attention + qkv + mlp
    # PEFT's layers keep fp32 adapter inputs and the SwiGLU intermediates: well over twice as much
    assert _per_token(LLAMA, "hf") > 2.2 * _per_token(LLAMA, "unsloth")


def test_only_groups_unsloth_patches_change():
    assert unsloth_patched(LLAMA, ALL, False) == (True, True, True)
    assert unsloth_patched(QWEN, ALL, False) == (False, True, True)  # q/k/v biases
    assert unsloth_patched(LLAMA, ALL, True) == (False, False, False)  # dropout: nothing patched
    assert unsloth_patched(LLAMA, ("q_proj", "v_proj"), False) == (False, False, False)
    # with nothing patched only the norms differ: Unsloth's p-byte input against HF's fp32 upcast
    qv = ("q_proj", "v_proj")
    assert _per_token(LLAMA, "hf", qv) - _per_token(LLAMA, "unsloth", qv) == 2 * (4 * 4096 - 2 * 4096)
    # Qwen2.5's attention stays PEFT's: its fp32 q/k/v adapter inputs remain
    assert _per_token(QWEN, "unsloth") > _per_token(QWEN, "unsloth", ("o_proj",) + tuple(ALL[4:]))


def test_backward_of_a_patched_mlp_allocates_only_the_down_input_gradient():
    hf = activations(LLAMA, 4096, 1, 2, lora_rank=16, gradient_checkpointing=True)
    un = activations(LLAMA, 4096, 1, 2, lora_rank=16, gradient_checkpointing=True, layer_kernels="unsloth")
    assert hf.layer_backward_transient - un.layer_backward_transient == 2 * 2 * 11008 * 4096


def test_the_estimate_takes_the_setting_and_its_loss_and_trl_release():
    base = dict(model="Llama-3-8B", gpu="A100-80GB", lora_rank=16, quantization="4bit", seq_len=16384,
                gradient_checkpointing=True, checkpoint_offload=True, framework="torch", trainer="trl")
    hf, un = estimate(Setup(**base)), estimate(Setup(**base, layer_kernels="unsloth"))
    plain = {**base, "trainer": ""}
    assert estimate(Setup(**plain, layer_kernels="unsloth")).gpu_allocated_bytes \
        < estimate(Setup(**plain)).gpu_allocated_bytes
    # Unsloth's forward computes its own loss, so "none" (transformers' fp32 log-probs) never runs:
    # the estimate equals the one asking for the chunked kernel outright
    chunked = estimate(Setup(**base, layer_kernels="unsloth", loss_kernel="chunked"))
    assert un.gpu_allocated_bytes == chunked.gpu_allocated_bytes
    # Unsloth caps TRL below the releases with their own fused LM head
    assert release(Setup(**base, layer_kernels="unsloth")) == UNSLOTH_TRL_MAX
    assert release(Setup(**base)) == "" and release(Setup(**base, trl_version="0.9.6")) == "0.9.6"
    assert not any("fused LM head" in n for n in un.notes)
    assert any("fused LM head" in n for n in hf.notes)


def test_full_fine_tuning_and_unknown_values_are_refused():
    with pytest.raises(ValueError, match="layer_kernels unsloth needs LoRA"):
        estimate(Setup(model="Llama-3-8B", layer_kernels="unsloth"))
    with pytest.raises(ValueError, match="layer_kernels must be one of"):
        estimate(Setup(model="Llama-3-8B", lora_rank=8, layer_kernels="flash"))
    assert parse_sets(["layer_kernels=unsloth"]) == {"layer_kernels": "unsloth"}


def test_llamafactory_use_unsloth_runs_unsloths_lora_layers(tmp_path):
    """model/adapter.py hands LoRA to FastLanguageModel.get_peft_model under use_unsloth; a full
    fine-tune gets no Unsloth LoRA layers."""
    def settings(text):
        p = tmp_path / "c.yaml"
        p.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\n" + text)
        return read([str(p)])[1]
    assert settings("finetuning_type: lora\nuse_unsloth: true\n")["layer_kernels"] == "unsloth"
    assert "layer_kernels" not in settings("finetuning_type: lora\n")
    assert "layer_kernels" not in settings("finetuning_type: full\nuse_unsloth: true\n")


def test_a_bad_value_in_set_is_one_clear_error():
    with pytest.raises((UserError, ValueError)):
        estimate(Setup(**{"model": "Llama-3-8B", "lora_rank": 8, **parse_sets(["layer_kernels=fast"])}))


def test_liger_norms_and_swiglu_keep_the_source_saved_tensors():
    q = model("Qwen2.5-7B")
    h, i = 3584, 18944
    def full(kernels):
        return layer_bytes_per_token(q, 2, 0, ALL, True, "flash_attention_2", 4096, True, False, (0, 0), kernels)
    # full fine-tuning: each norm drops the fp32 input copy and the normalised input (X and RSTD
    # suffice for dW), the MLP drops silu(gate)
    assert full("hf") - full("liger") == 2 * ((4 * h + 2 * h) - 2 * h) + 2 * i
    # LoRA: each norm keeps a 2-byte instead of a 4-byte input, the MLP one i-wide tensor less
    assert _per_token(q, "hf") - _per_token(q, "liger") == 2 * (4 * h - 2 * h) + 2 * i
    hf = activations(q, 4096, 1, 2, gradient_checkpointing=True)
    li = activations(q, 4096, 1, 2, gradient_checkpointing=True, layer_kernels="liger")
    assert hf.layer_backward_transient - li.layer_backward_transient == 2 * 2 * i * 4096


def test_the_liger_switches_of_each_framework(tmp_path):
    def read_one(name, text):
        p = tmp_path / name
        p.write_text(text)
        return read([str(p)])[1]
    lf = "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: full\n"
    assert read_one("lf.yaml", lf + "enable_liger_kernel: true\n")["layer_kernels"] == "liger"
    assert "layer_kernels" not in read_one("lf.yaml", lf)
    trl = "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nmax_length: 1024\n"
    assert read_one("sft.yaml", trl + "use_liger_kernel: true\n")["layer_kernels"] == "liger"
    ax = "base_model: Qwen/Qwen2.5-7B-Instruct\nsequence_len: 2048\nmicro_batch_size: 1\n"
    both = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\nliger_glu_activation: true\n"
    assert read_one("axolotl.yaml", ax + both)["layer_kernels"] == "liger"
    only_norm = "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\n"
    assert "layer_kernels" not in read_one("axolotl.yaml", ax + only_norm)


def test_unsloths_forward_builds_no_causal_mask():
    """LlamaModel_fast_forward (llama.py line 590 at 7e1c6a6) sets attention_mask = None in
    training; xformers gets a lazy LowerTriangularMask, FA2 and SDPA causal flags. The HF
    checkpointed layers' b*s*s bool mask is therefore not there."""
    s = 65536
    kw = dict(lora_rank=16, gradient_checkpointing=True, checkpoint_offload=True, attn_implementation="sdpa")
    hf = activations(LLAMA, s, 1, 2, **kw)
    un = activations(LLAMA, s, 1, 2, layer_kernels="unsloth", **kw)
    assert hf.saved_layers - un.saved_layers == s * s
