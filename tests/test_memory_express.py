"""Settings users run beyond ZeRO (issue 10 part 3): QLoRA, pure bf16, 8-bit/paged AdamW,
fused/chunked cross-entropy, modules_to_save, DDP, FSDP/FSDP2, ZeRO-3 without zero.Init, vision
towers, the grown GPU/model catalogs and `estimate --config` for every framework's files.

Expected values are derived from the frameworks' published facts (cited per test), not read back
from the code: each test says which fact it checks.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.catalog import GPUS, model
from ftrecipes.errors import UserError
from conftest import ROOT
from ftrecipes.memory.configs import read
from ftrecipes.memory.activations import ALL_LINEAR, lora_targets

GB = 1000 ** 3
GiB = 1024 ** 3
QWEN = model("Qwen2.5-7B")


def phase(r, name):
    return next(p for p in r.phases if p.name == name).by_category


def decoder_linear_weights(shape):
    # every nn.Linear of the decoder layers, counted from the published shapes (not the code's helper)
    h, i, L = shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_key_value_heads * shape.head_dim
    return L * (h * q + 2 * h * kv + q * h + 3 * h * i)


# --- QLoRA -------------------------------------------------------------------------------------

def test_4bit_base_weights_cost_half_a_byte_plus_the_absmax_constants():
    """QLoRA (arXiv:2305.14314, sec. 3): NF4 with blocks of 64 and an fp32 constant per block is
    4 + 32/64 = 4.5 bits a weight; double quantization stores the constants in 8 bits with an
    fp32 constant per 256 of them: 4 + 8/64 + 32/(64*256) = 4.127 bits. Only the decoder's linear
    layers are quantized (transformers skips lm_head; embeddings are not nn.Linear)."""
    n = decoder_linear_weights(QWEN)
    base = dict(model="Qwen2.5-7B", lora_rank=16, framework="ddp")
    plain = phase(estimate(Setup(**base)), "setup")["params"]
    q4 = phase(estimate(Setup(**base, quantization="4bit")), "setup")["params"]
    q4dq = phase(estimate(Setup(**base, quantization="4bit", double_quant=True)), "setup")["params"]
    assert plain - q4 == pytest.approx(n * (16 - 4.5) / 8, rel=1e-9)
    assert plain - q4dq == pytest.approx(n * (16 - (4 + 8 / 64 + 32 / (64 * 256))) / 8, rel=1e-9)
    # the whole model then needs ~6.0 GB: 6.53B linear weights at 4.5 bits (3.67 GB) + 1.09B
    # embedding/head weights in bf16 (2.18 GB) + 40M fp32 LoRA adapter weights (0.16 GB)
    assert 5.9 * GB < q4 < 6.1 * GB


def test_torchtunes_nf4_scales_are_double_quantized_unless_told_otherwise():
    """torchtune's LoRA linears call torchao's to_nf4(weight), whose NF4Tensor.from_tensor always
    runs double_quantize_scalers (int8 scales, one fp32 factor per 256): the same 4.127 bits a
    weight as bitsandbytes' double quantisation. Other trainers default to bitsandbytes' plain NF4."""
    base = dict(model="Qwen2.5-7B", lora_rank=16, framework="torch", quantization="4bit")
    params = {k: phase(estimate(Setup(**base, **k2)), "setup")["params"] for k, k2 in (
        ("torchtune", {"trainer": "torchtune"}), ("dq", {"trainer": "torchtune", "double_quant": True}),
        ("plain", {"trainer": "torchtune", "double_quant": False}), ("trl", {"trainer": "trl"}),
        ("trl plain", {"trainer": "trl", "double_quant": False}))}
    assert params["torchtune"] == params["dq"] < params["plain"]
    assert params["trl"] == params["trl plain"]


def test_torchao_01_quantizes_each_weight_whole_at_load():
    """torchao 0.1's to_nf4 (dtypes/nf4tensor.py quantize_tensor_nearest, read in the 0.1 wheel)
    builds (value - nf4).abs() over the whole weight: two [numel, 16] bf16 tensors beside the
    weight and its scaled copy, 68 bytes per element. torchtune (pinned to torchao==0.1 from April
    to June 2024) quantizes on the GPU while it builds the model, so setup holds the quantized
    model plus that for the largest linear. 0.2.0 quantizes 1,048,576 elements at a time."""
    base = dict(model="Llama-2-7B", lora_rank=8, framework="torch", quantization="4bit", trainer="torchtune",
                seq_len=512, micro_batch=2, master_weights=False, gradient_checkpointing=True)
    old, new, unstated = (estimate(Setup(**base, torchao_version=v)) for v in ("0.1", "0.2.0", ""))
    shape = model("Llama-2-7B")
    big = max(i * o for i, o in shape.linear_shapes().values())  # 4096 x 11008 MLP weights
    assert phase(old, "setup")["temporaries"] == pytest.approx(68 * big, rel=1e-9)
    assert phase(new, "setup")["temporaries"] == phase(unstated, "setup")["temporaries"] == 0
    assert old.peak_phase == "setup" and old.gpu_peak_bytes > new.gpu_peak_bytes
    # bitsandbytes (other trainers) quantizes with a CUDA kernel: no such term
    trl = estimate(Setup(**{**base, "trainer": "trl"}, torchao_version="0.1"))
    assert phase(trl, "setup")["temporaries"] == 0
    with pytest.raises(ValueError, match="torchao_version"):
        estimate(Setup(**base, torchao_version="zero.one"))


def test_qlora_adapter_dtype_follows_the_trainer():
    """PEFT upcasts LoRA weights to fp32 (autocast_adapter_dtype); TRL's SFTTrainer casts a
    quantized model's adapters back to bf16; torchtune builds everything in bf16."""
    kw = dict(model="Qwen2.5-7B", lora_rank=16, framework="ddp", quantization="4bit", double_quant=False)
    fp32 = estimate(Setup(**kw, trainer="llamafactory"))
    trl = estimate(Setup(**kw, trainer="trl"))
    tune = estimate(Setup(**{**kw, "quantization": "none"}, trainer="torchtune"))
    plain = estimate(Setup(**{**kw, "quantization": "none"}, trainer="llamafactory"))
    adapters = trl.trainable_params
    assert phase(fp32, "setup")["params"] - phase(trl, "setup")["params"] == pytest.approx(2 * adapters, rel=1e-9)
    assert phase(plain, "setup")["params"] - phase(tune, "setup")["params"] == pytest.approx(2 * adapters, rel=1e-9)


def test_8bit_base_weights_are_one_byte_plus_a_row_scale():
    """LLM.int8 (Int8Params): int8 weights and one fp32 scale per output row."""
    base = dict(model="Qwen2.5-7B", lora_rank=16, framework="ddp")
    plain = phase(estimate(Setup(**base)), "setup")["params"]
    q8 = phase(estimate(Setup(**base, quantization="8bit")), "setup")["params"]
    n = decoder_linear_weights(QWEN)
    saved = plain - q8
    assert n * 1 * 0.999 < saved < n * 1  # one byte a weight saved, minus the small row scales


def test_quantized_layers_add_one_dequantized_weight_as_a_temporary():
    """bitsandbytes MatMul4Bit dequantizes the running layer's weight to the compute dtype
    (F.dequantize_4bit(...).to(A.dtype)): the biggest projection, 2 bytes a weight in bf16."""
    base = dict(model="Qwen2.5-7B", lora_rank=16, framework="ddp")
    a = phase(estimate(Setup(**base)), "forward")["temporaries"]
    b = phase(estimate(Setup(**base, quantization="4bit")), "forward")["temporaries"]
    assert b - a == 2 * QWEN.hidden_size * QWEN.intermediate_size


def test_quantization_needs_lora():
    with pytest.raises(ValueError, match="LoRA"):
        estimate(Setup(model="Qwen2.5-7B", quantization="4bit"))


# --- precision and optimizers ----------------------------------------------------------------

def test_pure_bf16_halves_full_fine_tuning_model_states():
    """Without fp32 master weights every trainable byte is bf16: weights 2 + grads 2 + AdamW's
    two states in the parameter dtype 4 = 8 bytes a parameter; with fp32 trainable weights under
    autocast it is 4 + 4 + 8 = 16 (the ZeRO paper's mixed-precision count has the same 16)."""
    psi = QWEN.param_count()
    for mw, per_param in ((False, 8), (True, 16)):
        pt = per_param // 4  # bytes of a trainable weight, and of each AdamW state
        for impl, temporary in (("fused", 0), ("foreach", pt * psi),
                                ("single", 2 * pt * QWEN.vocab_size * QWEN.hidden_size)):
            r = estimate(Setup(model="Qwen2.5-7B", framework="torch", master_weights=mw, gpu="H200", adam_impl=impl))
            step = phase(r, "step")
            states = step["params"] + step["grads"] + step["optimizer"]
            assert states - temporary == pytest.approx(per_param * psi, rel=1e-3), impl


def test_torch_adamw_update_temporaries_follow_the_implementation():
    """torch/optim/adam.py: _multi_tensor_adam (foreach, torch's default on CUDA) takes
    _foreach_sqrt of every exp_avg_sq at once, one state-sized copy of all trainable parameters;
    _single_tensor_adam holds sqrt and its quotient for one tensor (the largest: the embedding);
    the fused kernel none. Under DeepSpeed, "auto" is DeepSpeed's own optimizer (in place)."""
    kw = dict(model="Qwen2.5-7B", framework="torch", master_weights=False, gpu="H200")
    step = {i: phase(estimate(Setup(adam_impl=i, **kw)), "step")["optimizer"] for i in ("fused", "foreach", "single")}
    assert step["foreach"] - step["fused"] == pytest.approx(2 * QWEN.param_count())
    assert step["single"] - step["fused"] == pytest.approx(2 * 2 * QWEN.vocab_size * QWEN.hidden_size)
    ds = dict(model="Qwen2.5-7B", zero_stage=2, gpus=8, gpu="H200")
    assert phase(estimate(Setup(**ds)), "step") == phase(estimate(Setup(adam_impl="fused", **ds)), "step")
    with pytest.raises(ValueError, match="adam_impl"):
        estimate(Setup(adam_impl="chunked", **kw))


def test_config_optim_names_the_adamw_update(tmp_path):
    """transformers' `optim`: adamw_torch -> torch's choice (foreach on CUDA), *_fused and the
    default (adamw_torch_fused with torch >= 2.8) -> fused; a DeepSpeed config that names its own
    optimizer makes the trainer's `optim` irrelevant."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    for line, impl in (("optim: adamw_torch\n", "foreach"), ("optim: adamw_torch_fused\n", "fused"), ("", "fused"),
                       ("optim: adamw_bnb_8bit\n", None)):
        p = tmp_path / "sft.yaml"
        p.write_text("model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nbf16: true\n" + line)
        assert read([str(p)])[1].get("adam_impl") == impl, line
    p.write_text(f"model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nbf16: true\noptim: adamw_torch\ndeepspeed: {ds}\n")
    assert read([str(p)])[1]["adam_impl"] == "foreach"
    ds.write_text('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW"}}')
    assert "adam_impl" not in read([str(p)])[1]


def test_trainer_adamw_under_deepspeed_steps_the_flat_partition():
    """stage_1_and_2.step / stage3._optimizer_step hand the trainer's optimizer one flat fp32
    partition (ZeRO-3: one sub-group): foreach adds its fp32 gradient and a sqrt copy of it."""
    kw = dict(model="Qwen2.5-7B", gpus=8, gpu="H200")
    psi = QWEN.param_count()
    for stage, elems in ((2, psi / 8), (3, min(1e9, psi / 8))):
        own, client = (estimate(Setup(zero_stage=stage, adam_impl=i, **kw)) for i in ("auto", "foreach"))
        assert phase(client, "step")["temporaries"] == pytest.approx(max(phase(own, "step")["temporaries"], 8 * elems))
    off = dict(kw, zero_stage=2, offload_optimizer="cpu")
    assert estimate(Setup(adam_impl="foreach", **off)).gpu_allocated_bytes == estimate(Setup(**off)).gpu_allocated_bytes


def test_optimizer_in_backward_keeps_one_gradient_at_a_time():
    """torchtune's optimizer_in_bwd steps and frees each parameter's gradient in a
    post-accumulate-grad hook: the largest gradient (the embedding) is all that is ever held."""
    kw = dict(model="Qwen2.5-7B", framework="torch", master_weights=False, gpu="H200", optimizer="paged_adamw_8bit",
              gradient_checkpointing=True)
    plain, hooked = estimate(Setup(**kw)), estimate(Setup(optimizer_in_backward=True, **kw))
    assert phase(plain, "step")["grads"] == pytest.approx(2 * QWEN.param_count())
    assert phase(hooked, "step")["grads"] == pytest.approx(2 * QWEN.vocab_size * QWEN.hidden_size)
    assert hooked.gpu_allocated_bytes < plain.gpu_allocated_bytes
    with pytest.raises(ValueError, match="grad_accum"):
        estimate(Setup(optimizer_in_backward=True, grad_accum=4, **kw))
    with pytest.raises(ValueError, match="DeepSpeed"):
        estimate(Setup(model="Qwen2.5-7B", zero_stage=2, optimizer_in_backward=True))


def test_8bit_adamw_keeps_two_bytes_a_parameter_and_32bit_states_only_for_old_embeddings():
    """bitsandbytes 8-bit Adam: two uint8 states + an fp32 absmax per 256 values, embeddings too
    (transformers >= 4.30 builds bnb.optim.AdamW(optim_bits=8)); only the Adam8bit class of
    transformers <= 4.29 had its Trainer override nn.Embedding to 32-bit states."""
    base = dict(model="Qwen2.5-7B", framework="torch", gpu="H200")
    adam = phase(estimate(Setup(**base)), "step")["optimizer"]
    a8 = phase(estimate(Setup(**base, optimizer="adamw_8bit")), "step")["optimizer"]
    old = phase(estimate(Setup(**base, optimizer="adamw_8bit", transformers_version="4.29.2")), "step")["optimizer"]
    emb = QWEN.vocab_size * QWEN.hidden_size
    n = QWEN.param_count()
    # bf16 AdamW states: 4 bytes/param; 8-bit: 2 + 8/256. torch's foreach AdamW also takes the
    # sqrt of every exp_avg_sq at once (2 bytes a parameter); bitsandbytes updates in one fused
    # kernel without it.
    assert adam - a8 == pytest.approx(n * (4 - 2 - 8 / 256) + 2 * n, rel=1e-6)
    assert old - a8 == pytest.approx(emb * (8 - 2 - 8 / 256), rel=1e-6)


def test_paged_optimizer_states_leave_the_gpu_budget():
    """Paged states live in CUDA unified memory (bitsandbytes get_paged): evictable to host."""
    base = dict(model="Qwen2.5-7B", lora_rank=64, framework="ddp")
    r = estimate(Setup(**base, optimizer="paged_adamw_8bit"))
    assert phase(r, "step")["optimizer"] < 1e8  # only the step's temporaries stay
    assert r.host["offloaded_states"] > 0
    # ... and bitsandbytes pages them (cudaMallocManaged), it does not pin them: the note that
    # pinned states need that much free RAM must not speak of them (it said "0.0 GiB ... pinned")
    assert not [n for n in r.notes if "pinned" in n], r.notes
    full = estimate(Setup(model="Qwen2.5-7B", framework="fsdp", gpus=2, fsdp_offload=True, optimizer="paged_adamw_8bit"))
    assert [n for n in full.notes if "pinned" in n]  # FSDP's CPUOffload shards are pinned


def test_sgd_has_no_state():
    r = estimate(Setup(model="Qwen2.5-0.5B", framework="torch", optimizer="sgd"))
    assert phase(r, "step")["optimizer"] == 0


# --- loss kernels ------------------------------------------------------------------------------

def test_liger_and_chunked_loss_remove_the_full_vocabulary_fp32_logits():
    """transformers' loss upcasts all T x V logits to fp32 (4V) next to the bf16 ones (2V) and keeps
    4V log-probs; Liger's fused linear cross-entropy never builds them (chunks of ~T*h/V tokens);
    a chunked CE kernel upcasts 1/8 of the tokens at a time and keeps only a logsumexp per token."""
    T, V = 8192, QWEN.vocab_size
    base = dict(model="Qwen2.5-7B", lora_rank=16, seq_len=T, framework="ddp")
    none = phase(estimate(Setup(**base)), "forward")
    liger = phase(estimate(Setup(**base, loss_kernel="liger")), "forward")
    chunked = phase(estimate(Setup(**base, loss_kernel="chunked")), "forward")
    full_fp32 = 6 * V * T  # bf16 + fp32 logits
    assert none["temporaries"] - liger["temporaries"] > 0.9 * full_fp32
    assert none["activations"] - liger["activations"] == pytest.approx(4 * V * T - (2 * QWEN.hidden_size + 4) * T, rel=1e-9)
    assert none["temporaries"] - chunked["temporaries"] == pytest.approx(full_fp32 - 4 * V * T / 8, rel=1e-9)


def test_offloaded_checkpointing_keeps_one_layer_input_on_the_gpu():
    """Unsloth's offloaded checkpointer (unsloth/models/_utils.py Unsloth_Offloaded_Gradient_Checkpointer;
    LLaMA-Factory's use_unsloth_gc copy in model_utils/checkpointing.py) saves each layer's input with
    hidden_states.to("cpu") and copies it back only for that layer's recompute, so of the L checkpointed
    inputs (p*h bytes a token each) one is on the GPU at a time; everything else is unchanged."""
    from ftrecipes.memory.activations import activations
    T, L, h = 16384, QWEN.num_hidden_layers, QWEN.hidden_size
    kw = dict(lora_rank=16, gradient_checkpointing=True, attn_implementation="flash_attention_2")
    plain = activations(QWEN, T, 1, 2, **kw)
    off = activations(QWEN, T, 1, 2, checkpoint_offload=True, **kw)
    # LoRA: L-1 checkpointed inputs (the first layer's input comes from the frozen embedding)
    assert plain.saved_layers - off.saved_layers == (L - 2) * 2 * h * T
    assert (off.saved_other, off.recompute_layer, off.forward_transient) == \
        (plain.saved_other, plain.recompute_layer, plain.forward_transient)
    # without checkpointing nothing is offloaded: the flag only changes where checkpoints wait
    nogc = dict(kw, gradient_checkpointing=False)
    assert activations(QWEN, T, 1, 2, checkpoint_offload=True, **nogc) == activations(QWEN, T, 1, 2, **nogc)
    base = dict(model="Qwen2.5-7B", seq_len=T, framework="torch", **kw)
    gap = estimate(Setup(**base)).gpu_allocated_bytes - estimate(Setup(**base, checkpoint_offload=True)).gpu_allocated_bytes
    assert gap == (L - 2) * 2 * h * T


def test_llamafactory_unsloth_settings_offload_the_checkpoints(tmp_path):
    """use_unsloth passes use_gradient_checkpointing="unsloth" (llamafactory/model/model_utils/unsloth.py)
    and use_unsloth_gc installs the same checkpointer; disabling checkpointing leaves nothing to offload."""
    def settings(text):
        p = tmp_path / "c.yaml"
        p.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\n" + text)
        return read([str(p)])[1]
    assert settings("use_unsloth_gc: true\n")["checkpoint_offload"] is True
    assert settings("use_unsloth: true\n")["checkpoint_offload"] is True
    assert "checkpoint_offload" not in settings("use_unsloth: true\ndisable_gradient_checkpointing: true\n")
    assert "checkpoint_offload" not in settings("")


# --- LoRA modules_to_save ----------------------------------------------------------------------

def test_modules_to_save_trains_a_full_copy_of_embeddings_and_head():
    """PEFT's ModulesToSaveWrapper keeps the original module and trains a copy: embed_tokens and
    lm_head add 2*V*h trainable parameters (and as many total), with grads and optimizer states."""
    a = estimate(Setup(model="Qwen2.5-7B", lora_rank=16, framework="ddp"))
    b = estimate(Setup(model="Qwen2.5-7B", lora_rank=16, framework="ddp", modules_to_save=["embed_tokens", "lm_head"]))
    extra = 2 * QWEN.vocab_size * QWEN.hidden_size
    assert b.trainable_params - a.trainable_params == extra
    assert b.params - a.params == extra
    # PEFT upcasts only LoRA layers (cast_adapter_dtype): the copies keep bf16 weights, grads and
    # AdamW states (2 + 2 + 4 bytes); LLaMA-Factory casts every trainable parameter to fp32 (4 + 4 + 8)
    for trainer, per_param in (("trl", 8), ("llamafactory", 16)):
        # (fused AdamW: this counts states; the foreach update's temporaries have their own test)
        a = estimate(Setup(model="Qwen2.5-7B", lora_rank=16, framework="ddp", trainer=trainer, adam_impl="fused"))
        b = estimate(Setup(model="Qwen2.5-7B", lora_rank=16, framework="ddp", trainer=trainer, adam_impl="fused",
                           modules_to_save=["embed_tokens", "lm_head"]))
        states = [phase(r, "step")["params"] + phase(r, "step")["grads"] + phase(r, "step")["optimizer"] for r in (a, b)]
        # (the frozen originals are the model's own embedding and head, present in both)
        assert states[1] - states[0] == pytest.approx(per_param * extra, rel=1e-6)


# --- DDP, FSDP, ZeRO-3 without zero.Init ---------------------------------------------------------

def test_ddp_buckets_are_a_second_copy_of_the_gradients():
    """torch DDP docs (gradient_as_bucket_view): the saved memory equals the total gradient size;
    the Trainer leaves it False. One process is not wrapped, so no buckets."""
    one = estimate(Setup(model="Qwen2.5-0.5B", framework="ddp", gpus=1))
    four = estimate(Setup(model="Qwen2.5-0.5B", framework="ddp", gpus=4))
    grads = phase(four, "step")["grads"] - phase(four, "setup")["grads"]
    assert phase(one, "setup")["grads"] == 0
    assert phase(four, "setup")["grads"] == pytest.approx(grads, rel=1e-9) and grads > 0


def test_fsdp_full_shard_divides_model_states_and_gathers_layers():
    """FSDP FULL_SHARD / FSDP2 fully_shard: parameters, gradients and optimizer states are split
    over the ranks; only the running (and prefetched) units are gathered. Pure bf16 on both sides
    (mixed_precision no): with mixed precision accelerate casts FSDP2's trainable weights to fp32,
    which test_memory_upcast.py covers."""
    ddp = estimate(Setup(model="Llama-3-8B", framework="ddp", gpus=8, gpu="H100", mixed_precision="no"))
    for fw in ("fsdp", "fsdp2"):
        f = estimate(Setup(model="Llama-3-8B", framework=fw, gpus=8, gpu="H100", mixed_precision="no"))
        assert phase(f, "setup")["params"] == pytest.approx(phase(ddp, "setup")["params"] / 8, rel=1e-9)
        assert phase(f, "step")["optimizer"] < phase(ddp, "step")["optimizer"] / 7
        layer = model("Llama-3-8B").layer_params()
        assert phase(f, "forward")["temporaries"] > 2 * 2 * layer  # two bf16 units in flight


def test_fsdp_accumulation_keeps_unsharded_gradients_between_micro_batches():
    """grad_accum > 1 under FSDP: the Trainer's no_sync micro batches keep each rank's whole
    unsharded gradient (test_smoke_llama8b_full_h100x8 counts it in torch's FSDP1 and FSDP2):
    every trainable parameter in full fine-tuning; under FSDP1 LoRA every decoder-layer unit,
    frozen base weights included. Not with accelerate's sync_each_batch, not in torchtune's
    recipes (they reduce-scatter every micro batch), and not with one micro batch a step."""
    shape = model("Llama-3-8B")
    total = shape.param_count()
    base = dict(model="Llama-3-8B", gpus=8, gpu="H100", mixed_precision="no", seq_len=1024)
    for fw in ("fsdp", "fsdp2"):
        one = estimate(Setup(framework=fw, **base))
        acc = estimate(Setup(framework=fw, grad_accum=4, **base))
        assert phase(one, "backward")["grads"] <= 2 * total / 8 * 1.01
        assert phase(acc, "backward")["grads"] == pytest.approx(2 * total, rel=1e-9)
        assert phase(acc, "forward")["grads"] == pytest.approx(2 * total, rel=1e-9)
        assert phase(acc, "step")["grads"] == phase(one, "step")["grads"]  # sharded by then
        for other in (dict(sync_each_batch=True), dict(trainer="torchtune")):
            r = estimate(Setup(framework=fw, grad_accum=4, **base, **other))
            assert phase(r, "backward")["grads"] == phase(one, "backward")["grads"], other
    lora = dict(base, lora_rank=8, lora_target="q_proj,v_proj", grad_accum=4)
    adapters = shape.num_hidden_layers * 8 * (2 * shape.hidden_size + shape.num_key_value_heads * shape.head_dim
                                               + shape.hidden_size)
    units = shape.num_hidden_layers * shape.layer_params()
    r1 = estimate(Setup(framework="fsdp", **lora))
    assert phase(r1, "backward")["grads"] == pytest.approx(2 * (units + adapters), rel=1e-9)
    r2 = estimate(Setup(framework="fsdp2", **lora))
    assert phase(r2, "backward")["grads"] == pytest.approx(2 * adapters, rel=1e-9)
    # the transformers Trainer (4.39 on) wraps a PEFT model's adapters as FSDP units of their own
    # (test_smoke_llama8b_full_h100x8 counts it through transformers' update_fsdp_plugin_peft):
    # only the adapters keep unsharded gradients; before 4.39, and outside the Trainer, as above
    for trainer in ("trl", "llamafactory", "axolotl"):
        r = estimate(Setup(framework="fsdp", trainer=trainer, **lora))
        assert phase(r, "backward")["grads"] == pytest.approx(2 * adapters, rel=1e-9), trainer
    for other in (dict(trainer="trl", transformers_version="4.38.2"), dict(trainer="accelerate")):
        r = estimate(Setup(framework="fsdp", **other, **lora))
        assert phase(r, "backward")["grads"] == pytest.approx(2 * (units + adapters), rel=1e-9), other


def test_the_micro_batch_remedy_estimates_the_accumulation_it_asks_for():
    """'micro_batch 4 -> 1' keeps the batch only with 4x the accumulation; under FSDP that costs
    the unsharded gradients, so the remedy is estimated with it (and says so)."""
    from dataclasses import replace

    from ftrecipes.memory.remedies import remedies

    s = Setup(model="Llama-3-8B", framework="fsdp2", gpus=8, gpu="A100-40GB", mixed_precision="no",
              micro_batch=4, seq_len=4096)
    r = estimate(s)
    change = "micro_batch 4 -> 1, grad_accum 1 -> 4 (same batch)"
    [m] = [m for m in remedies(s, r.gpu_peak_bytes) if m["change"] == change]
    assert m["gpu_peak_bytes"] == estimate(replace(s, micro_batch=1, grad_accum=4)).gpu_peak_bytes
    assert m["gpu_peak_bytes"] > estimate(replace(s, micro_batch=1)).gpu_peak_bytes


def test_grad_accum_flag_and_recipe_mode_refusing_setup_flags(run_cli):
    """--grad-accum reaches the estimate; a recipe's setup comes from its values, so a setup flag
    next to a recipe name is refused (exit 2, one line) instead of being silently dropped."""
    args = ["estimate", "--model", "Llama-3-8B", "--gpus", "8", "--gpu", "H100", "--set", "framework=fsdp2",
            "--set", "mixed_precision=no", "--json"]
    code, one, _ = run_cli(*args)
    code4, four, _ = run_cli(*args, "--grad-accum", "4")
    assert code == code4 == 0
    assert json.loads(four)["gpu_allocated_bytes"] > json.loads(one)["gpu_allocated_bytes"] + 10 * GiB
    code, out, err = run_cli("estimate", "llama8b-full-h100x8", "--micro-batch", "2", "--gpu", "H100")
    assert code == 2 and out == "" and "--gpu, --micro-batch" in err and "--set" in err
    assert len(err.strip().splitlines()) == 1
    # every option of the parser is either a setup option (refused with a recipe) or one recipe
    # mode reads; the flags above are among the setup options
    import argparse

    from ftrecipes.memory import cli as memory_cli

    sub = argparse.ArgumentParser().add_subparsers()
    memory_cli.register(sub)
    parser = sub.choices["estimate"]
    options = memory_cli.setup_options(parser)
    assert {"gpu", "micro_batch", "grad_accum", "config", "model"} <= set(options)
    assert not set(options) & memory_cli.NOT_SETUP_OPTIONS
    assert set(options) | memory_cli.NOT_SETUP_OPTIONS == {a.dest for a in parser._actions}


def test_trainer_files_give_the_accumulation_and_sync_each_batch(tmp_path):
    """gradient_accumulation_steps of a LLaMA-Factory / TRL file, and TrainingArguments'
    accelerator_config.gradient_accumulation_kwargs.sync_each_batch when written inline."""
    p = tmp_path / "sft.yaml"
    head = "model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nbf16: true\n"
    p.write_text(head + "gradient_accumulation_steps: 8\n")
    got = read([str(p)])[1]
    assert got["grad_accum"] == 8 and "sync_each_batch" not in got
    p.write_text(head + "accelerator_config:\n  gradient_accumulation_kwargs:\n    sync_each_batch: true\n")
    got = read([str(p)])[1]
    assert got["grad_accum"] == 1 and got["sync_each_batch"] is True
    p.write_text(head + "accelerator_config:\n  gradient_accumulation_kwargs:\n    sync_each_batch: maybe\n")
    with pytest.raises(UserError) as e:
        read([str(p)])
    assert "accelerator_config" in str(e.value) and "sync_each_batch" in str(e.value)
    # the other readers that take the trainer's accumulation: LLaMA-Factory, axolotl, a torchrun launch
    lf = tmp_path / "lf.yaml"
    lf.write_text("stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-7B\nfinetuning_type: lora\n"
                  "gradient_accumulation_steps: 4\n")
    ax = tmp_path / "axolotl.yml"
    ax.write_text("base_model: Qwen/Qwen2.5-7B\nsequence_len: 1024\ngradient_accumulation_steps: 2\n")
    sh = tmp_path / "run.sh"
    sh.write_text("torchrun --nproc_per_node 2 finetune.py --model_name_or_path Qwen/Qwen2.5-7B "
                  "--gradient_accumulation_steps 16\n")
    assert [read([str(f)])[1]["grad_accum"] for f in (lf, ax, sh)] == [4, 2, 16]


def test_fsdp_cpu_offload_moves_model_states_to_the_host():
    on = estimate(Setup(model="Llama-3-8B", framework="fsdp", gpus=8, gpu="H100", fsdp_offload=True))
    off = estimate(Setup(model="Llama-3-8B", framework="fsdp", gpus=8, gpu="H100"))
    assert phase(on, "setup")["params"] == 0 and phase(on, "step")["optimizer"] == 0
    assert on.host["offloaded_states"] > 0 and off.host.get("offloaded_states", 0) == 0


def test_zero3_without_zero_init_builds_the_whole_model_on_every_gpu():
    """Without zero.Init each rank materialises the full model before DeepSpeed partitions it."""
    psi = model("Llama-3-8B").param_count()
    kw = dict(model="Llama-3-8B", zero_stage=3, gpus=8, gpu="A100-40GB", offload_optimizer="cpu")
    init = estimate(Setup(**kw))
    no = estimate(Setup(**kw, zero3_init=False))
    runtime = phase(no, "setup")["runtime"]
    setup_init = sum(phase(init, "setup").values()) - runtime
    setup_no = sum(phase(no, "setup").values()) - runtime
    # the load's peak is the whole bf16 model, unless the partitioned states set up later are larger
    assert setup_no == pytest.approx(max(2 * psi, setup_init), rel=1e-9) and setup_no > setup_init
    assert phase(init, "setup")["params"] == pytest.approx(2 * psi / 8, rel=1e-9)
    assert no.host["model_loading"] > init.host["model_loading"]


def test_unknown_values_are_rejected():
    for k, v in (("framework", "horovod"), ("optimizer", "lion"), ("loss_kernel", "fast"), ("quantization", "3bit")):
        with pytest.raises(ValueError, match=k):
            estimate(Setup(model="Qwen2.5-0.5B", lora_rank=8, **{k: v}))


# --- catalogs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,published_billions,digits", [
    # parameter counts as the model cards round them (huggingface.co/<org>/<name>)
    ("Qwen3-8B", 8.2, 1), ("Qwen2.5-72B", 72.7, 1), ("Qwen2.5-0.5B", 0.49, 2), ("Qwen2.5-1.5B", 1.54, 2),
    ("Qwen2.5-3B", 3.09, 2),
    ("Llama-3.1-8B", 8.03, 2), ("Llama-3.2-1B", 1.24, 2), ("Llama-3.2-3B", 3.21, 2),
    ("Mistral-7B-v0.3", 7.25, 2), ("Gemma-3-1B", 1.0, 1), ("Gemma-3-4B", 4.3, 1), ("Gemma-3-12B", 12.2, 1),
    ("MiniCPM-V-2_6", 8.1, 1), ("Qwen3-0.6B", 0.6, 1), ("Qwen3-1.7B", 1.7, 1), ("Qwen3-4B", 4.0, 1),
    ("Qwen3-14B", 14.8, 1), ("Qwen3-32B", 32.8, 1), ("DeepSeek-R1-Distill-Qwen-1.5B", 1.78, 2),
    ("Qwen2.5-Math-1.5B", 1.54, 2), ("Qwen1.5-7B", 7.72, 2), ("Qwen1.5-14B", 14.2, 1), ("Qwen1.5-4B", 3.95, 2),
    ("Qwen2-VL-7B", 8.29, 2), ("Qwen2.5-VL-7B", 8.29, 2), ("Qwen2.5-VL-3B", 3.75, 2),
    ("Llama-2-13B", 13.0, 1), ("Llama-2-70B", 69.0, 1), ("Llama-3.1-70B", 70.6, 1), ("Mistral-Nemo-2407", 12.2, 1),
    ("Gemma-2B", 2.51, 2), ("Gemma-7B", 8.54, 2), ("Gemma-2-2B", 2.61, 2), ("Gemma-2-9B", 9.24, 2),
    ("Gemma-2-27B", 27.2, 1), ("Gemma-3-27B", 27.4, 1), ("TinyLlama-1.1B", 1.1, 1), ("SmolLM2-1.7B", 1.71, 2),
])
def test_model_catalog_matches_published_sizes(name, published_billions, digits):
    assert round(model(name).param_count() / 1e9, digits) == published_billions


@pytest.mark.parametrize("hub_id,shape", [
    # the ids trainers' own examples load (LLaMA-Factory examples/, ms-swift examples/, TRL docs)
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen3-4B"), ("meta-llama/Llama-2-7b-hf", "Llama-2-7B"),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7B"), ("mistralai/Mistral-7B-Instruct-v0.2", "Mistral-7B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-v0.3"), ("Qwen/Qwen2-1.5B-Instruct", "Qwen2.5-1.5B"),
    ("Qwen/Qwen3-8B-Base", "Qwen3-8B"), ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    # local folders as LLaMA-Factory YAMLs name them (LlamaFactory#5070: "model_name_or_path: qwen2-7B-Instruct/")
    ("qwen2-7B-Instruct/", "Qwen2-7B"), ("C:\\models\\Qwen2.5-7B-Instruct\\", "Qwen2.5-7B"),
    # releases that keep a base model's architecture (their config.json copies, cited in catalog.py)
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen2.5-7B"), ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "Llama-3.1-8B"),
    ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen2.5-7B"), ("Qwen/Qwen2.5-Math-7B", "Qwen2.5-7B"), ("Qwen/QwQ-32B", "Qwen2.5-32B"),
    ("meta-llama/Llama-3.3-70B-Instruct", "Llama-3.1-70B"), ("meta-llama/Meta-Llama-3-70B-Instruct", "Llama-3.1-70B"),
    ("google/gemma-2-9b-it", "Gemma-2-9B"), ("mistralai/Mistral-Nemo-Instruct-2407", "Mistral-Nemo-2407"),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama-1.1B"), ("Qwen/Qwen1.5-7B-Chat", "Qwen1.5-7B"),
])
def test_fine_tuned_releases_take_their_base_models_shape(hub_id, shape):
    got, want = model(hub_id), model(shape)
    assert (got.param_count(), got.vocab_size, got.hf_config.get("head_dim")) == (
        want.param_count(), want.vocab_size, want.hf_config.get("head_dim"))


def test_a_name_that_only_resembles_a_catalog_model_is_unknown():
    for hub_id in ("Qwen/Qwen2.5-Math-72B", "Qwen/Qwen3-4B-Thinking-2507-FP8", "Org/Llama-2-7b-32k", "01-ai/Yi-1.5-9B",
                   "microsoft/phi-4-mini-instruct"):
        with pytest.raises(KeyError, match="unknown model"):
            model(hub_id)


def _hf(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_two_matrix_mlp_decoder_is_counted_as_one(tmp_path):
    """bigscience/bloom-7b1's config.json (n_layer, n_head, no intermediate_size): BloomMLP has
    dense_h_to_4h and dense_4h_to_h, no gate, and ALiBi instead of position embeddings. Read as
    Llama's gated MLP it counted 9.08B parameters; the checkpoint holds 7,069,016,064 (the
    embedding LayerNorm's 8,192 are not counted here)."""
    bloom = model(_hf(tmp_path, {"model_type": "bloom", "hidden_size": 4096, "n_layer": 30, "n_head": 32,
                                 "vocab_size": 250880, "tie_word_embeddings": True}))
    assert abs(bloom.param_count() - 7_069_016_064) < 10_000


def test_chatglm_names_and_grouped_kv_heads_are_read(tmp_path):
    """THUDM/glm-4-9b-chat's config.json names its counts num_layers, ffn_hidden_size (the fused
    gate and up projection's half) and multi_query_group_num (with multi_query_attention on);
    9,399,951,360 is the sum worked out by hand from those counts (untied head, q/k/v bias)."""
    glm = model(_hf(tmp_path, {"model_type": "chatglm", "hidden_size": 4096, "num_layers": 40,
                               "num_attention_heads": 32, "ffn_hidden_size": 13696, "multi_query_attention": True,
                               "multi_query_group_num": 2, "kv_channels": 128, "padded_vocab_size": 151552,
                               "vocab_size": 151552, "add_qkv_bias": True, "attention_bias": True}))
    assert (glm.num_hidden_layers, glm.intermediate_size, glm.num_key_value_heads) == (40, 13696, 2)
    assert glm.param_count() == 9_399_951_360


def test_a_mixture_of_experts_config_is_refused_at_its_key(tmp_path):
    cfg = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8}
    with pytest.raises(UserError, match="num_local_experts.*mixture-of-experts"):
        model(_hf(tmp_path, cfg))


def test_an_unknown_model_is_one_short_line_with_the_closest_names():
    # the whole catalog (about 100 names) used to follow "known:", which made the line unreadable
    with pytest.raises(KeyError) as e:
        model("qwen2.5-7b-instrukt")
    msg = e.value.args[0]
    assert "closest: Qwen2.5-7B-Instruct" in msg and len(msg) < 300
    with pytest.raises(KeyError, match="no such file or folder"):
        model("models/missing/config.json")


@pytest.mark.parametrize("name,marketed_gb,bf16", [
    ("RTX-3090", 24, True), ("RTX-4090", 24, True), ("RTX-5090", 32, True), ("A10G", 24, True),
    ("A6000", 48, True), ("L40S", 48, True), ("A800-40GB", 40, True), ("A800-80GB", 80, True),
    ("H20", 96, True), ("H200", 141, True), ("B200", 180, True), ("MI300X", 192, True),
])
def test_gpu_catalog_sizes_are_close_to_the_marketed_ones(name, marketed_gb, bf16):
    g = GPUS[name]
    # usable totals (nvidia-smi) are a few percent under the marketed figure, never above it + 10%
    assert 0.9 * marketed_gb * GB < g.memory_bytes < 1.1 * marketed_gb * GB
    assert g.bf16 is bf16 and g.generation


def test_vlm_config_json_gives_the_same_tower_as_the_catalog(tmp_path):
    """openbmb/MiniCPM-V-2_6 config.json's vision_config (SigLIP so400m), query_num and slices."""
    cfg = {"model_type": "minicpmv", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151666, "query_num": 64,
           "image_size": 448, "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
           "vision_config": {"hidden_size": 1152, "image_size": 980, "intermediate_size": 4304,
                             "model_type": "siglip", "num_attention_heads": 16, "num_hidden_layers": 27,
                             "patch_size": 14}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert model(str(p)).vision == model("MiniCPM-V-2_6").vision
    # SigLIP so400m is ~0.4B parameters; with MiniCPM's resampler ~0.49B
    assert 0.40e9 < model("MiniCPM-V-2_6").vision.param_count() < 0.5e9


# Qwen2.5-VL-7B-Instruct's vision_config as the Qwen team published it (config.json on
# huggingface.co) and Qwen2-VL-7B-Instruct's, which names the tower width embed_dim and uses
# hidden_size for the LLM width the merger projects into.
QWEN25_VL_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                    "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
QWEN2_VL_VISION = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}


@pytest.mark.parametrize("vision,tower,merger", [
    # parameter counts of transformers 5.6.0's Qwen2_5_VisionTransformerPretrainedModel and
    # Qwen2VisionTransformerPretrainedModel built from these vision configs on the meta device
    # (blocks + patch_embed, and merger), counted with sum(p.numel())
    (QWEN25_VL_VISION, 631_975_680, 44_574_464), (QWEN2_VL_VISION, 631_183_360, 44_575_744),
])
def test_qwen_vl_config_json_gives_the_towers_transformers_builds(tmp_path, vision, tower, merger):
    cfg = {"model_type": "qwen2_5_vl", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "vision_config": vision}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    v = model(str(p)).vision
    assert (v.tower_params(), v.projector_params()) == (tower, merger)
    # LLaMA-Factory's default image_max_pixels 768 * 768 -> 756 x 756 = 54 x 54 patches, 2 x 2 per token
    assert (v.patches_per_slice, v.tokens_per_slice) == (54 * 54, 27 * 27)


def test_a_vision_count_that_is_not_an_integer_names_its_key(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 4096, "vocab_size": 32000, "num_hidden_layers": 32, "num_attention_heads": 32,\n'
                 ' "vision_config": {"depth": 32, "embed_dim": "wide"}}')
    with pytest.raises(UserError) as e:
        model(str(p))
    assert (e.value.line, e.value.key) == (2, "vision_config.embed_dim")


def test_llamafactory_freezes_a_vlms_tower_and_projector_in_full_fine_tuning(tmp_path):
    """LLaMA-Factory FinetuningArguments freeze_vision_tower and freeze_multi_modal_projector default
    to true (hparams/finetuning_args.py at ff6d4d12e); get_forbidden_modules then takes them out of
    full fine-tuning: no gradients or optimizer states for the 0.68B tower + merger."""
    v = model("Qwen2-VL-7B").vision
    y = tmp_path / "full.yaml"
    y.write_text("model_name_or_path: Qwen/Qwen2-VL-7B-Instruct\nstage: sft\nfinetuning_type: full\n"
                 "deepspeed: ds_z3.json\nbf16: true\n")
    (tmp_path / "ds_z3.json").write_text('{"zero_optimization": {"stage": 3}}')
    _ds, fields = read([str(y)])
    assert fields["freeze_vision_tower"] is True and fields["freeze_projector"] is True
    base = dict(model="Qwen2-VL-7B", zero_stage=3, gpus=8)
    frozen = estimate(Setup(**base, freeze_vision_tower=True, freeze_projector=True))
    trained = estimate(Setup(**base))
    assert trained.trainable_params - frozen.trainable_params == v.tower_params() + v.projector_params()
    assert frozen.params == trained.params  # the weights are still there
    y.write_text(y.read_text() + "freeze_vision_tower: false\n")
    assert read([str(y)])[1]["freeze_vision_tower"] is False


def test_a_frozen_tower_saves_no_activations_for_backward():
    """With the tower frozen, pixel inputs need no gradient, so autograd records nothing in it;
    a trained projector still keeps its inputs."""
    base = dict(model="Qwen2.5-VL-7B", zero_stage=3, gpus=2, gpu="A100-80GB", image_slices=2)
    acts = {k: phase(estimate(Setup(**{**base, **kw})), "forward")["activations"] for k, kw in (
        ("text", {"image_slices": 0}), ("trained", {}), ("tower", {"freeze_vision_tower": True}),
        ("both", {"freeze_vision_tower": True, "freeze_projector": True}))}
    assert acts["both"] == acts["text"]
    assert acts["text"] < acts["tower"] < acts["trained"]


def test_vision_tower_trained_next_to_lora_is_trainable_in_place():
    """MiniCPM-V's finetune.py with LoRA and tune_vision: the SigLIP tower trains in place (no
    copy) and the resampler is a PEFT modules_to_save copy."""
    v = model("MiniCPM-V-2_6").vision
    a = estimate(Setup(model="MiniCPM-V-2_6", lora_rank=64, zero_stage=2, gpus=2))
    b = estimate(Setup(model="MiniCPM-V-2_6", lora_rank=64, zero_stage=2, gpus=2, modules_to_save=["vpm", "resampler"]))
    assert b.trainable_params - a.trainable_params == v.tower_params() + v.projector_params()
    assert b.params - a.params == v.projector_params()
    with pytest.raises(ValueError, match="vision-language"):
        estimate(Setup(model="Qwen2.5-7B", lora_rank=8, modules_to_save=["vpm"]))


def test_image_slices_add_vision_activations_linearly():
    """Each 448-pixel slice is 32 x 32 = 1024 patches through 27 SigLIP layers."""
    base = dict(model="MiniCPM-V-2_6", zero_stage=3, gpus=2, gpu="A100-40GB")
    a = [phase(estimate(Setup(**base, image_slices=k)), "forward")["activations"] for k in (0, 1, 10)]
    per_slice = a[1] - a[0]
    assert a[2] - a[0] == pytest.approx(10 * per_slice, rel=1e-9)
    # without checkpointing a SigLIP layer keeps >= 8 hidden-sized and 2 MLP-sized bf16 tensors a patch
    assert per_slice > 27 * 1024 * 2 * (8 * 1152 + 2 * 4304)


# --- estimate --config ----------------------------------------------------------------------------

def test_llamafactory_yaml_maps_to_setup(tmp_path):
    p = tmp_path / "qlora.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: dpo\nfinetuning_type: lora\n"
                 "lora_rank: 32\nadditional_target: embed_tokens\nquantization_bit: 4\ncutoff_len: 4096\n"
                 "per_device_train_batch_size: 2\npure_bf16: true\noptim: paged_adamw_8bit\n"
                 "enable_liger_kernel: true\ntemplate: qwen\nflash_attn: fa2\n")
    ds, f = read([str(p)])
    assert ds == {}
    assert f == {**f, "model": "Qwen/Qwen2.5-7B-Instruct", "method": "dpo", "lora_rank": 32,
                 "modules_to_save": ["embed_tokens"], "quantization": "4bit", "double_quant": True,
                 "seq_len": 4096, "micro_batch": 2, "master_weights": False, "optimizer": "paged_adamw_8bit",
                 "loss_kernel": "liger", "attn_implementation": "flash_attention_2", "framework": "ddp",
                 "gradient_checkpointing": True, "trainer": "llamafactory"}


def test_trl_and_accelerate_fsdp_files_combine(tmp_path):
    (tmp_path / "sft.yaml").write_text("model_name_or_path: meta-llama/Llama-3.1-8B\noutput_dir: o\n"
                                       "per_device_train_batch_size: 1\nmax_length: 8192\nbf16: true\n"
                                       "use_liger_kernel: true\nload_in_4bit: true\nuse_peft: true\nlora_r: 8\n")
    (tmp_path / "acc.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\n"
                                       "fsdp_config:\n  fsdp_version: 2\n  fsdp_offload_params: true\n"
                                       "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 4\n")
    _ds, f = read([str(tmp_path / "sft.yaml"), str(tmp_path / "acc.yaml")])
    assert (f["framework"], f["fsdp_offload"], f["gpus"], f["seq_len"], f["quantization"], f["lora_rank"],
            f["loss_kernel"], f["method"]) == ("fsdp2", True, 4, 8192, "4bit", 8, "liger", "sft")


def test_openrlhf_recipe_script_maps_to_post_mortem_settings():
    """The rendered llama8b-sft-a100x1 launch script: ZeRO-2, Adam offload, 2048 tokens."""
    ds, f = read(["recipes/llama8b-sft-a100x1/rendered/launch.sh"])
    assert (f["zero_stage"], f["offload_optimizer"], f["seq_len"], f["micro_batch"], f["method"],
            f["gradient_checkpointing"], f["precision"]) == (2, "cpu", 2048, 1, "sft", True, "bf16")


@pytest.mark.parametrize("flag", ["--model.gradient_checkpointing_reentrant", "--gradient_checkpointing_use_reentrant"])
def test_openrlhf_reentrant_flags_are_read(tmp_path, flag):
    """OpenRLHF checkpoints non-reentrant unless its store_true flag is given (dotted from 0.10.2,
    schemas/key_history/openrlhf.json); a LoRA ZeRO-3 run's will-not-run verdict turns on it."""
    text = (ROOT / "recipes/llama8b-sft-a100x1/rendered/launch.sh").read_text()
    (tmp_path / "plain.sh").write_text(text)
    (tmp_path / "re.sh").write_text(text.replace("  --model.gradient_checkpointing_enable \\\n",
                                                 f"  --model.gradient_checkpointing_enable \\\n  {flag} \\\n"))
    assert read([str(tmp_path / "re.sh")])[1]["checkpoint_reentrant"] is True
    assert "checkpoint_reentrant" not in read([str(tmp_path / "plain.sh")])[1]


@pytest.mark.parametrize("dotted", [True, False])
def test_openrlhf_accumulation_and_defaults_follow_its_strategy(tmp_path, dotted):
    """OpenRLHF has no accumulation flag: DeepspeedStrategy.setup_distributed works it out as
    train_batch_size // micro_train_batch_size // world size; micro batch 8, global batch 128 and
    max_len 2048 (SFT) / 512 (DPO) are its argparse defaults in every release 0.7.5-0.11.2. Ring
    attention and DeepSpeed tensor parallelism split a sequence or a layer, which the model does not."""
    from ftrecipes.memory.configs import setup_from_files

    names = (("train.batch_size", "train.micro_batch_size", "ds.ring_attn_size") if dotted
             else ("train_batch_size", "micro_train_batch_size", "ring_attn_size"))
    head = "deepspeed --module openrlhf.cli.{} --pretrain meta-llama/Meta-Llama-3-8B --zero_stage 2 --bf16"
    (tmp_path / "sft.sh").write_text(head.format("train_sft") + f" --{names[0]} 256 --{names[1]} 2\n")
    (tmp_path / "dpo.sh").write_text(head.format("train_dpo") + "\n")
    (tmp_path / "ring.sh").write_text(head.format("train_sft") + f" --{names[2]} 2\n")
    s, _ = setup_from_files([str(tmp_path / "sft.sh")], given={"gpus": 8})
    assert (s.micro_batch, s.grad_accum, s.seq_len) == (2, 16, 2048)
    s, _ = setup_from_files([str(tmp_path / "sft.sh")], given={"gpus": 8, "grad_accum": 3})
    assert s.grad_accum == 3  # a stated accumulation wins
    s, _ = setup_from_files([str(tmp_path / "dpo.sh")], given={"gpus": 4})
    assert (s.micro_batch, s.grad_accum, s.seq_len, s.method) == (8, 4, 512, "dpo")
    with pytest.raises(UserError) as e:
        read([str(tmp_path / "ring.sh")])
    assert e.value.key == names[2]


def test_training_args_fsdp_and_settings_the_model_cannot_express(tmp_path):
    """TrainingArguments' fsdp (LLaMA-Factory's fp8 FSDP example writes `fsdp: [full_shard,
    auto_wrap]`) shards the run; optimizer switches and training modes the model lacks are errors
    at their key rather than a different estimate."""
    lf = "model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: full\ncutoff_len: 1024\n"
    cases = {"fsdp.yaml": lf + "fsdp:\n  - full_shard\n  - auto_wrap\n",
             "off.yaml": lf + "fsdp: full_shard offload auto_wrap\nfsdp_config:\n  version: 2\n",
             "grad_op.yaml": lf + "fsdp: shard_grad_op\n", "galore.yaml": lf + "use_galore: true\n",
             "fp8.yaml": lf + "fp8: true\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    f = read([str(tmp_path / "fsdp.yaml")])[1]
    assert (f["framework"], f["fsdp_offload"]) == ("fsdp", False)
    f = read([str(tmp_path / "off.yaml")])[1]
    assert (f["framework"], f["fsdp_offload"]) == ("fsdp2", True)
    for name, key in (("grad_op.yaml", "fsdp"), ("galore.yaml", "use_galore"), ("fp8.yaml", "fp8")):
        with pytest.raises(UserError) as e:
            read([str(tmp_path / name)])
        assert e.value.key == key, name
    ax = tmp_path / "ax.yaml"
    ax.write_text("base_model: Qwen/Qwen2.5-7B\nqat:\n  weight_dtype: int4\n")
    with pytest.raises(UserError, match="quantization-aware"):
        read([str(ax)])
    sh = tmp_path / "dschat.sh"
    sh.write_text("deepspeed main.py --model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size 4 "
                  "--zero_stage 3 --gradient_checkpointing\n")
    with pytest.raises(UserError, match="its own DeepSpeed config"):
        read([str(sh)])


def test_llamafactory_file_names_its_deepspeed_json():
    ds, f = read(["recipes/qwen7b-dpo-v100x8/rendered/dpo.yaml"])
    # ZeRO settings can only come from the ds.json that dpo.yaml names (the YAML itself has none).
    named = json.loads((ROOT / "recipes/qwen7b-dpo-v100x8/rendered/ds.json").read_text())
    assert ds == named
    assert f["framework"] == "deepspeed" and f["method"] == "dpo"


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", *argv], capture_output=True, text=True)


def test_cli_config_errors_name_file_line_and_key(tmp_path):
    p = tmp_path / "lf.yaml"
    p.write_text("stage: ppo\nfinetuning_type: lora\ntemplate: qwen\ncutoff_len: 1024\n")
    proc = _cli("--config", str(p), "--model", "Qwen2.5-7B")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{p}:1:1: stage:" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_model_id_the_catalog_lacks_is_named_with_its_file_and_line(tmp_path):
    """LLaMA-Factory's own examples name hub ids (Qwen/Qwen3-4B-Instruct-2507) that nothing here can
    download: the error points at the key that named it, and --model then completes the run."""
    lf = tmp_path / "lf.yaml"
    lf.write_text("stage: sft\nmodel_name_or_path: Org/NoSuchModel-9B\nfinetuning_type: lora\nbf16: true\n")
    sh = tmp_path / "run.sh"
    sh.write_text("torchrun --nproc_per_node 2 finetune.py \\\n  --model_name_or_path Org/NoSuchModel-9B --bf16 True\n")
    for path, where in ((lf, f"{lf}:2:1: model_name_or_path:"), (sh, f"{sh}:2: model_name_or_path:")):
        proc = _cli("--config", str(path))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert where in proc.stderr and "'Org/NoSuchModel-9B'" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert _cli("--config", str(path), "--model", "Qwen2.5-7B").returncode in (0, 3)
    # a second file that names a known model settles it
    known = tmp_path / "known.yaml"
    known.write_text("stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-7B-Instruct\nfinetuning_type: lora\n")
    assert _cli("--config", str(lf), "--config", str(known)).returncode in (0, 3)


def test_cli_recipe_mode_takes_memory_keys_beside_recipe_values():
    a = json.loads(_cli("qwen7b-lora-zero2-a100x2", "--json").stdout)
    b = json.loads(_cli("qwen7b-lora-zero2-a100x2", "--json", "--set", "quantization=4bit",
                        "--set", "seq_len=1024").stdout)
    assert b["setup"]["quantization"] == "4bit" and b["setup"]["seq_len"] == 1024
    assert b["gpu_peak_bytes"] < a["gpu_peak_bytes"]
    bad = _cli("qwen7b-lora-zero2-a100x2", "--set", "optimizer=lion")
    assert bad.returncode == 2 and "optimizer must be one of" in bad.stderr


def test_files_that_leave_keys_out_get_the_frameworks_defaults(tmp_path):
    """LLaMA-Factory 0.9.5: lora_rank 8, cutoff_len 2048, checkpointing on; transformers'
    per_device_train_batch_size 8. TRL 1.x: max_length 1024, checkpointing on, lora_r 16, PEFT's
    default targets q_proj,v_proj (test_framework_defaults_match_the_installed_frameworks checks
    these against the installed code)."""
    (tmp_path / "lf.yaml").write_text("stage: sft\nfinetuning_type: lora\ntemplate: qwen\ndataset: x\n")
    (tmp_path / "trl.yaml").write_text("model_name_or_path: x\noutput_dir: o\nuse_peft: true\nlearning_rate: 1e-5\n")
    _ds, lf = read([str(tmp_path / "lf.yaml")])
    _ds, trl = read([str(tmp_path / "trl.yaml")])
    assert (lf["lora_rank"], lf["seq_len"], lf["micro_batch"], lf["gradient_checkpointing"], lf["lora_target"]) == \
        (8, 2048, 8, True, "all")
    assert (trl["seq_len"], trl["micro_batch"], trl["gradient_checkpointing"], trl["lora_rank"], trl["lora_target"]) == \
        (1024, 8, True, 16, "q_proj,v_proj")


@pytest.mark.framework
def test_framework_defaults_match_the_installed_frameworks():
    """The defaults configs.py assumes, read from the dataclasses of the installed LLaMA-Factory and
    TRL (their own venvs) rather than from their docs."""
    from ftrecipes import devenv

    probes = {
        "llamafactory": "from llamafactory.hparams import DataArguments, FinetuningArguments, ModelArguments\n"
                        "from transformers import Seq2SeqTrainingArguments as T\n"
                        "import dataclasses as d, json\n"
                        "f = lambda c, n: next(x.default for x in d.fields(c) if x.name == n)\n"
                        "print(json.dumps([f(FinetuningArguments, 'lora_rank'), f(DataArguments, 'cutoff_len'),"
                        " f(T, 'per_device_train_batch_size'), f(ModelArguments, 'disable_gradient_checkpointing'),"
                        " f(FinetuningArguments, 'lora_target'), f(ModelArguments, 'double_quantization')]))",
        "trl": "from trl import SFTConfig, DPOConfig, ModelConfig\nimport dataclasses as d, json\n"
               "f = lambda c, n: next(x.default for x in d.fields(c) if x.name == n)\n"
               "from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as M\n"
               "print(json.dumps([f(SFTConfig, 'max_length'), f(DPOConfig, 'max_length'),"
               " f(SFTConfig, 'gradient_checkpointing'), f(SFTConfig, 'per_device_train_batch_size'),"
               " f(ModelConfig, 'lora_r'), f(ModelConfig, 'use_bnb_nested_quant'), ','.join(M['qwen2'])]))",
    }
    expected = {"llamafactory": [8, 2048, 8, False, "all", True],
                "trl": [1024, 1024, True, 8, 16, False, "q_proj,v_proj"]}
    for stack, code in probes.items():
        if not devenv.is_complete(stack):
            pytest.skip(f"the {stack} stack venv is not built")
        proc = subprocess.run([str(devenv.env_python(stack)), "-c", code], env=devenv.run_env(stack),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected[stack]


def test_flash_attention_keeps_no_square_mask_under_checkpointing():
    """transformers' flash_attention_mask returns None or the 2D padding mask: no b*s*s tensor."""
    s = 16384
    kw = dict(model="Llama-3-8B", seq_len=s, gradient_checkpointing=True, framework="torch", gpu="H200")
    sdpa = phase(estimate(Setup(**kw, attn_implementation="sdpa")), "forward")["activations"]
    fa2 = phase(estimate(Setup(**kw, attn_implementation="flash_attention_2")), "forward")["activations"]
    assert sdpa - fa2 == s * s


def test_a_missing_deepspeed_file_named_by_a_trainer_config_is_an_error(tmp_path):
    p = tmp_path / "lf.yaml"
    p.write_text("stage: sft\nfinetuning_type: full\ntemplate: qwen\ndeepspeed: nowhere/ds_z3.json\n")
    proc = _cli("--config", str(p), "--model", "Qwen2.5-7B")
    assert proc.returncode == 2 and f"{p}:4:1: deepspeed:" in proc.stderr and "not found" in proc.stderr


def test_trl_loads_fp32_weights_unless_told_otherwise(tmp_path):
    """TRL 1.x ModelConfig.dtype and create_model_from_path default to float32: full fine-tuning
    then holds fp32 weights, gradients and AdamW states (16 bytes a parameter) under bf16 autocast;
    `dtype: bfloat16` makes it pure bf16 (8 bytes). A LoRA base loaded in fp32 is 4 bytes a weight."""
    psi = QWEN.param_count()
    for dtype_line, per_param in (("", 16), ("dtype: bfloat16\n", 8)):
        p = tmp_path / "sft.yaml"
        p.write_text("model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: o\nbf16: true\n" + dtype_line)
        _ds, f = read([str(p)])
        r = estimate(Setup(**{k: v for k, v in f.items() if k != "trainer"}, trainer="trl", gpu="H200"))
        step = phase(r, "step")
        # no `optim:` -> transformers' adamw_torch_fused (torch >= 2.8): no update temporaries
        assert f["adam_impl"] == "fused"
        assert step["params"] + step["grads"] + step["optimizer"] == pytest.approx(per_param * psi, rel=1e-3)
    lora32 = estimate(Setup(model="Qwen2.5-7B", lora_rank=8, framework="torch", load_dtype="fp32"))
    lora16 = estimate(Setup(model="Qwen2.5-7B", lora_rank=8, framework="torch"))
    frozen = QWEN.param_count()
    assert phase(lora32, "setup")["params"] - phase(lora16, "setup")["params"] == pytest.approx(2 * frozen, rel=1e-9)


@pytest.mark.parametrize("name", ["llama8b-sft-a100x1", "llama8b-sft-a10gx4", "qwen7b-dpo-v100x8", "minicpmv-full-a100-40gx2",
                                  "qwen7b-lora-zero2-a100x2", "qwen7b-lora-h100x8"])
def test_a_recipes_rendered_files_estimate_like_the_recipe(name):
    """Real material: `estimate --config` over a recipe's rendered files (launch script, trainer
    YAML, accelerate YAML, DeepSpeed JSON) reads the settings recipe mode derives from its values.
    The model, GPU and process count come from flags, as a user would give them (a launch script
    does not name the card). For GRPO the sequence is bounded by `vllm serve --max-model-len` in
    launch.sh (TRL 1.x does not cut prompts), which the recipe renders as seq_len + completion."""
    recipe = json.loads(_cli(name, "--json").stdout)["setup"]
    argv = [a for f in sorted((ROOT / "recipes" / name / "rendered").iterdir()) for a in ("--config", str(f))]
    files = json.loads(_cli(*argv, "--model", recipe["model"], "--gpu", recipe["gpu"], "--gpus", str(recipe["gpus"]),
                            "--json").stdout)["setup"]
    keys = ["zero_stage", "offload_optimizer", "offload_param", "precision", "micro_batch", "gradient_checkpointing",
            "lora_rank", "method", "image_slices", "seq_len"]
    assert {k: files[k] for k in keys} == {k: recipe[k] for k in keys}


def test_fsdp1_lora_keeps_gradients_for_frozen_weights_fsdp2_does_not():
    """torch FullyShardedDataParallel docs: mixing frozen and non-frozen parameters in one unit
    (use_orig_params=True) gives higher than expected gradient memory; FSDP2 shards per parameter.
    The transformers Trainer's PEFT wrap policy keeps them apart, so there FSDP1 is like FSDP2."""
    kw = dict(model="Llama-2-7B", lora_rank=8, lora_target="q_proj,v_proj", gpus=2, gpu="A100-40GB")
    f1 = estimate(Setup(**kw, framework="fsdp", mixed_precision="no"))
    f2 = estimate(Setup(**kw, framework="fsdp2", mixed_precision="no"))
    shape = model("Llama-2-7B")
    frozen_in_layers = shape.num_hidden_layers * shape.layer_params()
    assert phase(f1, "step")["grads"] - phase(f2, "step")["grads"] == pytest.approx(2 * frozen_in_layers / 2, rel=1e-9)
    # under mixed precision accelerate casts those units to fp32, and FSDP1 casts the reduced
    # gradient shard to the parameter's dtype (not keep_low_precision_grads): 4 bytes each
    cast = estimate(Setup(**kw, framework="fsdp", trainer="accelerate", accelerate_version="0.30.0"))
    assert phase(cast, "step")["grads"] == pytest.approx(4 * (frozen_in_layers + cast.trainable_params) / 2, rel=1e-9)
    mixed, apart = (estimate(Setup(**kw, framework="fsdp", trainer="trl", transformers_version=v, mixed_precision="no"))
                    for v in ("4.38.2", "4.39.3"))
    assert phase(apart, "step")["grads"] == phase(f2, "step")["grads"]
    # torchtune's lora_fsdp_wrap_policy (torchtune/utils/_distributed.py, April 2024) wraps every
    # module whose weight requires grad apart, "to work around FSDP allocating extra gradient
    # memory when wrapped with other modules"
    tune = estimate(Setup(**kw, framework="fsdp", trainer="torchtune", mixed_precision="no"))
    # (torchtune builds the adapters in bf16, its training dtype: 2 bytes, sharded over the 2 ranks)
    assert phase(tune, "step")["grads"] == pytest.approx(2 * tune.trainable_params / 2, rel=1e-9)
    # and in backward only the adapters' unsharded gradient is the reduce-scatter input, not the layer's
    assert phase(mixed, "backward")["temporaries"] - phase(apart, "backward")["temporaries"] == pytest.approx(
        2 * (shape.layer_params() - f1.trainable_params / shape.num_hidden_layers), rel=1e-9)


def test_fsdp1_lora_without_use_orig_params_wraps_the_adapters_apart(tmp_path):
    """FlatParameter refuses tensors of mixed requires_grad unless use_orig_params is on
    (torch/distributed/fsdp/_flat_param.py: "Must flatten tensors with uniform `requires_grad`
    when `use_orig_params=False`"), and False is FSDP's own default. A LoRA loop on raw FSDP that
    runs at all (Answer.AI's fsdp_qlora train.py, llama-recipes) therefore has its adapters in
    units of their own, and the frozen weights get no gradient; with use_orig_params on (Lightning,
    accelerate) the decoder-layer unit holds both and its gradient covers the frozen weights.
    accelerate's fsdp_use_orig_params says which."""
    kw = dict(model="Llama-2-7B", lora_rank=8, lora_target="q_proj,v_proj", gpus=2, gpu="A100-40GB",
              framework="fsdp", mixed_precision="no")
    together, raw = (estimate(Setup(**kw, use_orig_params=v)) for v in (None, False))
    # only the adapters' gradient, sharded (PEFT keeps the adapters in fp32: 4 bytes)
    assert phase(raw, "step")["grads"] == pytest.approx(4 * raw.trainable_params / 2, rel=1e-9)
    shape = model("Llama-2-7B")
    assert phase(together, "step")["grads"] - phase(raw, "step")["grads"] == pytest.approx(
        2 * shape.num_hidden_layers * shape.layer_params() / 2, rel=1e-9)
    acc = tmp_path / "acc.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n"
                   "  fsdp_use_orig_params: false\nmixed_precision: bf16\nnum_machines: 1\nnum_processes: 2\n")
    _ds, f = read([str(acc)])
    assert f["use_orig_params"] is False and f["framework"] == "fsdp"


def test_fsdp_qlora_shards_the_packed_weights_and_keeps_the_constants_whole():
    """FSDP QLoRA stores the packed 4-bit weights in a float dtype (bnb_4bit_quant_storage), so
    they are parameters FSDP shards and gathers per unit; the absmax constants live in the
    weight's quant_state (bitsandbytes nn/modules.py Params4bit), not a parameter, and stay whole
    on every rank, also with CPU offload. 4-bit: n/2 bytes of data, one fp32 absmax per 64 weights."""
    shape = model("Llama-2-70B")
    n = decoder_linear_weights(shape)
    kw = dict(model="Llama-2-70B", lora_rank=8, lora_target="q_proj,v_proj", gpu="H100", framework="fsdp",
              trainer="trl", quantization="4bit", double_quant=False)
    two, four = (estimate(Setup(**kw, gpus=g)) for g in (2, 4))
    consts = 4 * n / 64
    rest = phase(two, "setup")["params"] - consts  # everything that is sharded, over 2
    assert phase(four, "setup")["params"] == pytest.approx(consts + rest / 2, rel=1e-9)
    assert rest > n / 2 / 2
    off = estimate(Setup(**kw, gpus=2, fsdp_offload=True))
    assert phase(off, "setup")["params"] == pytest.approx(consts, rel=1e-9)
    # the gathered unit is the packed layer, a quarter of its bf16 size
    full = estimate(Setup(**{**kw, "quantization": "none"}, gpus=2))
    layer_lin = n / shape.num_hidden_layers
    gap = phase(full, "forward")["temporaries"] - phase(two, "forward")["temporaries"]
    dequantized = 2 * max(i * o for i, o in shape.linear_shapes().values())
    assert gap == pytest.approx(2 * (2 * layer_lin - layer_lin / 2) - dequantized, rel=1e-9)


def test_trl_torch_dtype_null_is_the_default_load_dtype(tmp_path):
    """alignment-handbook's DPO recipes write `torch_dtype: null`; the script passes that None to
    from_pretrained, which is ModelConfig's default. A dtype TRL does not know names its own key."""
    base = "model_name_or_path: Qwen/Qwen2.5-7B\nbeta: 0.1\nmax_prompt_length: 512\nloss_type: sigmoid\n"
    none, absent, bad = (tmp_path / n for n in ("none.yaml", "absent.yaml", "bad.yaml"))
    none.write_text(base + "torch_dtype: null\n")
    absent.write_text(base)
    bad.write_text(base + "torch_dtype: float8\n")
    assert read([str(none)])[1]["load_dtype"] == read([str(absent)])[1]["load_dtype"]
    proc = _cli("--config", str(bad))
    assert proc.returncode == 2 and f"{bad}:5:1: torch_dtype:" in proc.stderr


def test_fused_and_family_specific_lora_target_names():
    """PEFT matches target names as module-name suffixes. Qwen v1's c_attn is one fused q/k/v
    linear with one adapter: rank 8 on Qwen-7B-Chat trains 0.0543 % of the model, the figure
    ms-swift's maintainers gave for that setting (modelscope/ms-agent issue #198, comment of
    2023-12-15: "qwen-7b-chat，lora rank=8，alpha=32，target module=[c_attn]，可训练的参数量占比0.0543%").
    Its finetune.py default, c_attn,c_proj,w1,w2, adapts every linear layer: c_proj is both
    attn.c_proj and mlp.c_proj (modeling_qwen.py), w1/w2 the two hidden -> intermediate ones."""
    r8 = estimate(Setup(model="Qwen-7B-Chat", lora_rank=8, lora_target="c_attn"))
    assert round(100 * r8.trainable_params / r8.params, 4) == 0.0543
    h, i, L = 4096, 11008, 32
    every = estimate(Setup(model="Qwen-7B-Chat", lora_rank=64, lora_target="c_attn,c_proj,w1,w2"))
    assert every.trainable_params == L * 64 * ((h + 3 * h) + (h + h) + 2 * (h + i) + (i + h))
    # the same names mean nothing for a Llama-style model: unknown there, as before
    assert lora_targets("c_proj,w1", "llama") == ALL_LINEAR and lora_targets("c_attn", "llama") == ("qkv_proj",)
    proc = _cli("--model", "Qwen-7B-Chat", "--lora-rank", "8", "--lora-target", "c_attn,c_proj,w1,w2", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["trainable_params"] == every.trainable_params // 8


def test_the_gpu_and_its_count_are_said_to_be_assumed_when_nothing_names_them(tmp_path):
    lf = tmp_path / "lf.yaml"
    lf.write_text("stage: sft\nmodel_name_or_path: Qwen/Qwen2.5-7B-Instruct\nfinetuning_type: lora\nbf16: true\n")
    said = _cli("--config", str(lf)).stdout
    assert "assumed: gpu A100-80GB, gpus 1" in said
    assert "assumed" not in _cli("--config", str(lf), "--gpu", "H100", "--gpus", "2").stdout
    assert "assumed: gpus 1" in _cli("--config", str(lf), "--gpu", "H100").stdout


def test_gradients_accumulate_across_micro_batches_outside_deepspeed():
    """With grad_accum > 1 one process (or DDP) adds each micro batch's gradient into .grad and
    frees nothing before the step's zero_grad, so the second micro batch's forward runs with all
    gradients allocated; with one micro batch per step zero_grad(set_to_none) freed them first.
    LitGPT's TinyLlama full fine-tuning row (micro 4 x accum 8, held out) read -21 % without it."""
    base = dict(model="TinyLlama-1.1B", gpu="A10G", framework="torch", seq_len=512, micro_batch=4,
                master_weights=False, load_dtype="bf16", loss_kernel="chunked")
    one, eight = estimate(Setup(**base, grad_accum=1)), estimate(Setup(**base, grad_accum=8))
    grads = phase(one, "step")["grads"]
    assert grads > 1.5 * 2 ** 30  # bf16 gradients of 1.1B parameters
    assert phase(one, "forward")["grads"] == 0
    assert phase(eight, "forward")["grads"] == pytest.approx(grads)
    assert eight.gpu_allocated_bytes > one.gpu_allocated_bytes + 0.9 * grads
    # DeepSpeed keeps its own gradient buffers (kept_grads, ZeRO's partitions): not this rule
    ds = estimate(Setup(**{**base, "framework": "deepspeed", "master_weights": None}, zero_stage=2, grad_accum=8))
    assert phase(ds, "forward")["grads"] == 0


def test_grpo_loads_a_reference_model_while_trls_beta_defaults_to_a_kl_term():
    """TRL's GRPOConfig.beta is 0.04 up to 0.18.2 and 0.0 from 0.19.0 (grpo_config.py in the
    wheels); with beta > 0 GRPOTrainer builds a frozen copy of a fully trained policy
    (create_reference_model), sharded only under ZeRO-3, and none under LoRA (adapters disabled).
    The tenth blind round's GRPO OOMs (Qwen2.5-7B, TRL 0.15, H20s) were called fits / tight without it."""
    base = dict(model="Qwen2.5-7B", gpu="H20", framework="torch", trainer="trl", method="grpo", seq_len=768,
                micro_batch=4, load_dtype="bf16")
    old, new = estimate(Setup(**base, trl_version="0.18.2")), estimate(Setup(**base, trl_version="0.19.0"))
    weights = phase(new, "setup")["params"]
    assert phase(old, "setup")["params"] == pytest.approx(2 * weights)
    assert phase(estimate(Setup(**base, trl_version="0.18.2", dpo_reference="precomputed")), "setup")["params"] == \
        pytest.approx(weights)  # beta 0 stated
    lora = dict(base, lora_rank=16)
    assert phase(estimate(Setup(**lora, trl_version="0.18.2")), "setup")["params"] == \
        pytest.approx(phase(estimate(Setup(**lora, trl_version="0.19.0")), "setup")["params"])
    z3 = dict(base, framework="deepspeed", zero_stage=3, gpus=4, trl_version="0.18.2")
    z3_new = dict(z3, trl_version="0.19.0")
    assert phase(estimate(Setup(**z3)), "setup")["params"] == pytest.approx(
        2 * phase(estimate(Setup(**z3_new)), "setup")["params"], rel=0.01)


def test_a_grpo_config_states_its_reference_model_by_beta(tmp_path):
    """A GRPOConfig YAML that states beta decides the reference whatever the TRL release: 0 loads
    none, a KL term loads a copy of a fully trained policy (in its load dtype: create_reference_model
    deep-copies it) or, under PEFT, disables the adapters; a negative beta is refused at its line."""
    base = "model_name_or_path: Qwen/Qwen2.5-7B\nnum_generations: 4\nmax_completion_length: 512\n"
    for beta, lora, want in (("0.0", "", "precomputed"), ("0.04", "", "model"),
                             ("0.04", "use_peft: true\nlora_r: 16\n", "adapter")):
        p = tmp_path / f"g{beta}{bool(lora)}.yaml"
        p.write_text(base + f"beta: {beta}\n" + lora)
        assert read([str(p)])[1]["dpo_reference"] == want, (beta, lora)
    p = tmp_path / "neg.yaml"
    p.write_text(base + "beta: -0.1\n")
    with pytest.raises(UserError, match="beta"):
        read([str(p)])
    fp32 = dict(model="Qwen2.5-7B", framework="torch", trainer="trl", method="grpo", load_dtype="fp32")
    ref = phase(estimate(Setup(**fp32, dpo_reference="model")), "setup")["params"]
    none = phase(estimate(Setup(**fp32, dpo_reference="precomputed")), "setup")["params"]
    assert ref == pytest.approx(2 * none)  # the copy is fp32 too, not the compute dtype


def test_a_reference_copy_is_sharded_where_the_trainer_prepares_it_with_fsdp():
    """TRL's DPOTrainer / GRPOTrainer hand the reference to prepare_fsdp (accelerate's
    prepare_model(evaluation_mode=True) in older releases, and LLaMA-Factory's DPO trainer too), so
    under FSDP it is sharded like the policy, as under ZeRO-3; under DDP each GPU holds it whole."""
    kw = dict(model="Qwen2.5-7B", trainer="trl", method="dpo", gpus=4, load_dtype="bf16")
    weights = 2 * model("Qwen2.5-7B").param_count()  # the bf16 copy
    for framework, share in (("fsdp", 4), ("fsdp2", 4), ("ddp", 1)):
        ref = phase(estimate(Setup(**kw, framework=framework, dpo_reference="model")), "setup")["params"]
        none = phase(estimate(Setup(**kw, framework=framework, dpo_reference="precomputed")), "setup")["params"]
        assert ref - none == pytest.approx(weights / share, rel=0.01), framework


def test_a_deepspeed_batch_key_left_null_or_out_is_derived_as_deepspeed_does(tmp_path):
    """DeepSpeed fills a missing or null micro batch from train_batch_size / (accumulation x world
    size) (DeepSpeedConfig._set_batch_related_parameters), as lint accepts; estimate --config
    refused the null and assumed a micro batch of 1 when the key was absent."""
    for micro in ('"train_micro_batch_size_per_gpu": null, ', ""):
        p = tmp_path / f"ds{bool(micro)}.json"
        p.write_text('{"train_batch_size": 64, ' + micro + '"gradient_accumulation_steps": 4, '
                     '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
        out = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--config", str(p), "--model", "Qwen2.5-7B",
                              "--gpus", "8", "--json"], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode in (0, 3), out.stderr
        assert json.loads(out.stdout)["setup"]["micro_batch"] == 2, micro


def test_frozen_fp32_weights_under_autocast_leave_a_saved_copy_per_linear():
    """LoRA over fp32 base weights in bf16 autocast (LitGPT's bf16-mixed, TRL without a dtype):
    autocast caches no cast of a frozen weight, and autograd saves each new low-precision copy
    for the input's gradient (bench/autocast_casts.md: 4 of 4 linears without checkpointing, 0
    kept past a checkpointed layer). Weights loaded in bf16 are used as they are."""
    shape = model("Llama-2-7B")
    per_layer = sum(i * o for i, o in shape.linear_shapes().values())
    head = shape.vocab_size * shape.hidden_size
    base = dict(model="Llama-2-7B", gpu="A100-40GB", framework="torch", lora_rank=8, lora_target="q_proj,v_proj",
                seq_len=1024, precision="bf16", master_weights=False)

    def temps(**kw):
        return phase(estimate(Setup(**{**base, **kw})), "forward")["temporaries"]

    for ckpt, kept in ((False, head + shape.num_hidden_layers * per_layer), (True, head)):
        extra = temps(load_dtype="fp32", gradient_checkpointing=ckpt) - temps(load_dtype="bf16", gradient_checkpointing=ckpt)
        assert extra == pytest.approx(2 * kept), ckpt
    assert temps(load_dtype="fp32", quantization="4bit") == temps(load_dtype="bf16", quantization="4bit")


def test_zero3_without_zero_init_loads_a_quantized_model_packed():
    """transformers builds a bitsandbytes model outside zero.Init, whole on every GPU, before
    DeepSpeed partitions it: what that load holds is the packed 4-bit linears plus constants and
    the bf16 rest, not a bf16 copy of every weight (philschmid's ZeRO-3 Q-LoRA runs on 24 GB L4s)."""
    from ftrecipes.memory.model_states import whole_model_bytes

    shape = model("Llama-3.1-8B")
    kw = dict(model="Llama-3.1-8B", gpu="L4", gpus=4, zero_stage=3, zero3_init=False, lora_rank=16,
              gradient_checkpointing=True, checkpoint_reentrant=True, seq_len=1024)
    q = Setup(**kw, quantization="4bit")
    total = estimate(q).params
    packed = whole_model_bytes(q, shape, total, 2)
    lin = shape.num_hidden_layers * sum(i * o for i, o in shape.linear_shapes().values())
    # + constants: an fp32 absmax per 64 weights (no double quantization asked)
    assert 2 * (total - lin) + lin / 2 < packed <= 2 * (total - lin) + lin / 2 + lin / 16 + 2**20
    assert whole_model_bytes(Setup(**kw), shape, total, 2) == 2 * total
    setup = phase(estimate(q), "setup")
    assert sum(setup.values()) < packed + 4 * GiB < 2 * total  # far below a bf16 copy of the model


def test_the_zero3_recompute_failure_is_claimed_for_bf16_frozen_weights_only():
    """DeepSpeed 0.14.4-0.19.2 ZeRO-3 with non-reentrant checkpointing fails on a LoRA model's
    bf16 base (run on CPU ranks); a 4-bit base on 0.15.4 trained (philschmid's Q-LoRA runs), so no
    error is claimed there."""
    kw = dict(model="Llama-3.1-8B", gpus=4, zero_stage=3, lora_rank=16, gradient_checkpointing=True,
              checkpoint_reentrant=False, deepspeed_version="0.15.4")
    assert estimate(Setup(**kw)).errors
    assert not estimate(Setup(**kw, quantization="4bit")).errors


def test_a_slurm_launch_of_a_trainer_script_counts_its_tasks(tmp_path):
    """`srun --ntasks=N python train.py` (InternVL's scripts) runs N training processes; a count
    left to the job's environment is refused at its line, with --gpus named as the way to give it."""
    from ftrecipes.memory.configs import setup_from_files

    run = "python -u train.py --model_name_or_path Qwen/Qwen2.5-7B --per_device_train_batch_size 1 --bf16 True --output_dir o\n"
    (tmp_path / "a.sh").write_text("GPUS=16\nsrun -p llm --ntasks=${GPUS} --ntasks-per-node=8 " + run)
    (tmp_path / "b.sh").write_text("srun --ntasks=$NGPU " + run)
    s, _ = setup_from_files([str(tmp_path / "a.sh")])
    assert (s.gpus, s.framework) == (16, "ddp")
    with pytest.raises(UserError) as e:
        setup_from_files([str(tmp_path / "b.sh")])
    assert e.value.key == "ntasks" and "--gpus" in str(e.value)
    s, _ = setup_from_files([str(tmp_path / "b.sh")], given={"gpus": 4})
    assert s.gpus == 4
