"""Activation memory of a Llama/Qwen2-style decoder, derived tensor by tensor.

Follows the method of Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198, sec. 4): count what autograd keeps for backward in each block. The
terms below are the tensors the Hugging Face implementation (transformers 5.x modeling_llama /
modeling_qwen2 with SDPA) saves, checked against MemTracker traces (bench/memory_vs_trace.py):

per decoder layer and token, p = bytes of the compute dtype, T = tokens in the micro batch
  RMSNorm (x2)      4h  fp32 upcast of the input (pow and mul need it) + 4 bytes rsqrt,
                    + p*h normalised input of the weight multiply (only if the weight trains)
                    + p*h output (only if a trainable linear reads it)
  attention (SDPA)  4 q-sized tensors and the fp32 log-sum-exp (4 bytes per head). The traces
                    show no kv-sized term for either Qwen2 (kv=512) or Llama-3 (kv=1024): the
                    kernel keeps q, K and V expanded to all heads (GQA repeat, so q-sized) and its
                    output, whose transpose is already contiguous so o_proj reads it without a copy.
  attention (FA2)   flash_attention_2 takes K/V un-expanded: 2 q-sized + 2 kv-sized tensors.
                    Derived, not traced (FA2 needs CUDA).
  MLP (SwiGLU)      gate, silu(gate), up (3*p*i) + their product (p*i) if down_proj trains
  LoRA (PEFT)       each adapted linear keeps an fp32 copy of its input (PEFT casts the input
                    to the adapter dtype, fp32 by default) and the rank-r output of lora_A;
                    under DeepSpeed the engine casts adapters to the compute dtype, so lora_A
                    reads (and autograd keeps once) the same p-byte input as the base layer
  LoRA dropout      lora_dropout > 0 makes each adapter an nn.Dropout of its own (peft
                    tuners/lora/layer.py: lora_B(lora_A(dropout(x)))); on CUDA that is
                    native_dropout, which keeps a 1-byte bool mask for backward, and lora_A keeps
                    the dropped copy instead of the input: +1 byte per input element over an fp32
                    cast, and no more sharing of one input by q/k/v or gate/up
Frozen weights (LoRA base) do not make autograd keep their inputs (bitsandbytes' quantized layers
can: BNB_4BIT_KEEPS_INPUT_UNTIL below): that is why LoRA drops the
p*h/p*i terms but adds the fp32 copies, which for all-linear targets end up larger.

The loss (transformers' ForCausalLMLoss) upcasts logits to fp32 and runs log_softmax: the forward
peak holds bf16 logits (p*V) + fp32 logits (4V) + log-probs (4V) per token; the log-probs (4V) stay
saved; the start of backward adds two fp32 V-wide gradients (8V). For 150k vocabularies this
logits/loss peak is larger than a whole decoder layer's activations. Releases before 4.49 also
made a shifted contiguous copy of the fp32 logits (SHIFTED_COPY_UNTIL).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import trl_head
from .catalog import ModelShape, VisionTower

LOSS_KERNELS = ("none", "liger", "chunked")
# What runs a decoder layer's norms, MLP activation, rotary embedding and LoRA projections: hf =
# transformers' modules with PEFT's LoRA layers; unsloth = Unsloth's hand-written autograd functions
# (unsloth_layer_bytes); liger = Liger-Kernel's RMSNorm, SwiGLU/GEGLU and RoPE functions (read in
# linkedin/Liger-Kernel 7e0f459, src/liger_kernel/ops: rms_norm.py saves (X, W, RSTD), swiglu.py and
# geglu.py save (a, b) and write their gradients over them, rope.py rotates q/k in place keeping cos/sin)
LAYER_KERNELS = ("hf", "unsloth", "liger")
# sdpa-math: torch's SDPA on its math backend, which no fused kernel took (attention_bytes_per_token);
# sdpa-cpu: the CPU path the FakeTensorMode traces run
ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "eager", "sdpa-math", "sdpa-cpu")
# transformers' own causal-LM loss by release, read in the 4.41.2, 4.44.2, 4.45.2, 4.46.3, 4.47.1,
# 4.48.3 and 4.49.0 wheels. Up to 4.45 the model itself runs `logits = logits.float()` (its p-byte
# logits freed by the rebinding) and CrossEntropyLoss on `logits[..., :-1, :].contiguous()`, a
# second V-wide fp32 tensor; 4.46 to 4.48 move that into loss_utils.ForCausalLMLoss while the model
# still holds its p-byte logits; from 4.49 the labels are shifted (nn.functional.pad) instead.
# The slice of a one-row batch is contiguous already, so only batches of several rows copy.
# Measured on an H100 (bench/gpu_calibrate h100-run5 and -run6): Llama-3-8B LoRA, 2 rows of 8,192
# tokens, forward 42.97 / 46.88 / 39.06 GiB under 4.41.2 / 4.46.3 / 5.17.0 (2V and 4V per token
# more), backward peaks equal; Qwen2.5-7B, one row under 4.46.3: no copy.
UPCAST_IN_MODEL_UNTIL = "4.46.0"
SHIFTED_COPY_UNTIL = "4.49.0"

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# bitsandbytes' autograd functions for a frozen quantized base layer keep the layer's input A for
# backward although grad_A needs only the weight (read in bitsandbytes/autograd/_functions.py):
# MatMul4Bit set ctx.tensors = (A, B) up to 0.43.1 and (None, B) from 0.43.2 (9e75374, #1270, "fix
# QLoRA mem bug: delete useless buffered activation"); MatMul8bitLt keeps (CAt, subA, A) in every
# release, where CAt, the int8 transposed copy of A (one byte per element), was made for every call
# up to 0.44.1 and only for a trainable weight from 0.45.0 (81e6345, #1401, the LLM.int8 refactor).
BNB_4BIT_KEEPS_INPUT_UNTIL = "0.43.2"
BNB_8BIT_KEEPS_INT8_COPY_UNTIL = "0.45.0"


def bnb_kept_input_bytes(quantization: str, bitsandbytes_version: str, p: int) -> tuple[int, int]:
    """(bytes per element of a quantized base layer's input kept for backward, bytes per element of
    the int8 copy each 8-bit layer call keeps) for a bitsandbytes release ("": a current one)."""
    from ..pep440 import parse

    old = (lambda until: bool(bitsandbytes_version) and parse(bitsandbytes_version) < parse(until))
    if quantization == "4bit":
        return (p if old(BNB_4BIT_KEEPS_INPUT_UNTIL) else 0), 0
    if quantization == "8bit":
        return p, (1 if old(BNB_8BIT_KEEPS_INT8_COPY_UNTIL) else 0)
    return 0, 0


# PEFT matches target names as suffixes of module names, and model families name their linear
# layers differently. c_attn, query_key_value and Phi-3's qkv_proj are one fused q/k/v projection
# (one adapter: "qkv_proj" here). QwenLM/Qwen v1 (modeling_qwen.py) has attn.c_proj and mlp.c_proj
# (so "c_proj" adapts both) and mlp.w1 / mlp.w2, its two hidden -> intermediate projections; GPT-2
# has attn.c_proj, mlp.c_fc and mlp.c_proj.
# InternLM2's wqkv and Baichuan's W_pack are fused q/k/v projections too; Phi-3's gate_up_proj
# and ChatGLM's dense_h_to_4h are one fused gate + up projection (one adapter, "gate_up_proj"
# here), while in the two-matrix families (BLOOM, Falcon, GPT-NeoX) dense_h_to_4h is the up
# projection. InternLM2 names its MLP w1 (gate), w3 (up), w2 (down) and its output wo.
_SHORT_NAMES = {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj",),
                "c_attn": ("qkv_proj",), "query_key_value": ("qkv_proj",), "qkv_proj": ("qkv_proj",),
                "wqkv": ("qkv_proj",), "W_pack": ("qkv_proj",), "gate_up_proj": ("gate_up_proj",)}
_TWO_MATRIX = {"dense": ("o_proj",), "dense_h_to_4h": ("up_proj",), "dense_4h_to_h": ("down_proj",)}
_FAMILY_NAMES = {
    "qwen": {"c_proj": ("o_proj", "down_proj"), "w1": ("gate_proj",), "w2": ("up_proj",)},
    "gpt2": {"c_proj": ("o_proj", "down_proj"), "c_fc": ("up_proj",)},
    "internlm2": {"wo": ("o_proj",), "w1": ("gate_proj",), "w3": ("up_proj",), "w2": ("down_proj",)},
    "chatglm": {"dense": ("o_proj",), "dense_h_to_4h": ("gate_up_proj",), "dense_4h_to_h": ("down_proj",)},
    "bloom": _TWO_MATRIX, "falcon": _TWO_MATRIX, "gpt_neox": _TWO_MATRIX,
}
_FUSED = ("qkv_proj", "gate_up_proj")
# What "all" / "all-linear" adapts where a family fuses projections: PEFT wraps the modules the
# model has, so a fused projection is one adapter, not three (or two)
_QKV_FUSED = ("qkv_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ALL_OF_FAMILY = {
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "chatglm": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "internlm2": _QKV_FUSED, "baichuan": _QKV_FUSED,
    "bloom": ("qkv_proj", "o_proj", "up_proj", "down_proj"), "falcon": ("qkv_proj", "o_proj", "up_proj", "down_proj"),
    "gpt_neox": ("qkv_proj", "o_proj", "up_proj", "down_proj"),
}


def known_target_names() -> set:
    """Every module name lora_targets maps for some model family."""
    return set(ALL_LINEAR) | set(_SHORT_NAMES) | {n for names in _FAMILY_NAMES.values() for n in names}


def lora_targets(spec: str | None, model_type: str = "") -> tuple[str, ...]:
    """The adapted linears of one layer, in this module's names, for a PEFT target list."""
    if not spec or spec.strip().lower() in ("all", "all-linear", "all_linear"):
        return _ALL_OF_FAMILY.get(model_type, ALL_LINEAR)
    family = _FAMILY_NAMES.get(model_type, {})
    names = []
    for t in spec.replace(" ", "").split(","):
        for n in family.get(t) or _SHORT_NAMES.get(t) or (t,):
            if n in ALL_LINEAR or n in _FUSED:
                names.append(n)
    return tuple(dict.fromkeys(names)) or ALL_LINEAR


def _adapted(shape: ModelShape, targets: tuple[str, ...]) -> list[tuple[int, int]]:
    """(in, out) of each adapted linear of one layer; a fused q/k/v adapter spans all three outputs,
    a fused gate/up adapter both MLP inputs."""
    lin = shape.linear_shapes()
    out = [lin[n] for n in lin if n in targets]
    if "qkv_proj" in targets:
        out.append((shape.hidden_size, lin["q_proj"][1] + 2 * shape.kv_dim))
    if "gate_up_proj" in targets:
        out.append((shape.hidden_size, 2 * shape.intermediate_size))
    return out


def lora_params_per_layer(shape: ModelShape, rank: int, targets: tuple[str, ...]) -> int:
    # each adapted (in, out) linear gets A (r x in) and B (out x r)
    return sum(rank * (i + o) for i, o in _adapted(shape, targets))


# PEFT's ModulesToSaveWrapper keeps the original module (frozen) and trains a full copy of it
# (peft/utils/other.py), so each name adds that module's parameters once more, all trainable.
# A VLM's vision tower is trained in place instead (MiniCPM-V finetune.py: tune_vision sets
# requires_grad on model.vpm next to the LoRA adapters): trainable, but no copy.
SAVED_MODULES = {"embed_tokens": "embed", "wte": "embed", "word_embeddings": "embed",
                  "lm_head": "head", "output": "head", "score": "head", "norm": "norm",
                  "resampler": "projector", "multi_modal_projector": "projector", "mm_projector": "projector",
                  "vpm": "tower", "vision_tower": "tower", "visual": "tower"}


def modules_to_save_split(shape: ModelShape, names) -> tuple[int, int]:
    """(parameters copied by PEFT, parameters trained in place) for LoRA's fully trained modules."""
    copied = in_place = 0
    for name in names or ():
        kind = SAVED_MODULES.get(name.strip())
        if kind is None:
            raise ValueError(f"modules_to_save: unknown module {name!r}; known: {', '.join(SAVED_MODULES)}")
        if kind in ("projector", "tower") and shape.vision is None:
            raise ValueError(f"modules_to_save: {name!r} needs a vision-language model")
        if kind == "tower":
            in_place += shape.vision.tower_params()
        elif kind == "projector":
            copied += shape.vision.projector_params()
        else:
            copied += shape.hidden_size if kind == "norm" else shape.vocab_size * shape.hidden_size
    return copied, in_place


def modules_to_save_params(shape: ModelShape, names) -> int:
    """Trainable parameters the modules add (copies and in-place ones)."""
    return sum(modules_to_save_split(shape, names))


@dataclass
class Activations:
    """All values in bytes for one micro batch (T tokens) on one GPU."""

    saved_layers: int      # what the decoder layers keep for backward
    saved_other: int       # final norm, rotary tables, causal mask, loss log-probs
    forward_transient: int  # logits transients on top of what is saved, at the loss
    backward_loss_transient: int  # gradients of the loss/logits at the start of backward
    layer_backward_transient: int  # one layer's gradient temporaries while it runs backward
    recompute_layer: int   # one layer re-run during backward (gradient checkpointing), else 0
    layer_saved: int       # one decoder layer's saved bytes without checkpointing
    loss_saved: int = 0    # the part of saved_other the loss keeps (freed once its backward ran)

    @property
    def saved(self) -> int:
        return self.saved_layers + self.saved_other


def layer_bytes_per_token(shape: ModelShape, p: int, lora_rank: int, targets: tuple[str, ...],
                          input_requires_grad: bool = True, attn: str = "sdpa", seq_len: int = 0,
                          adapter_fp32: bool = True, lora_dropout: bool = False,
                          quantized_keeps: tuple[int, int] = (0, 0), kernels: str = "hf", stream: int = 0) -> int:
    """stream: bytes per element of the hidden states outside attention (0: p; 4 where fp32 norms
    make them fp32, model_states.kbit_prepared): the MLP's gate, up and product tensors."""
    h, i = shape.hidden_size, shape.intermediate_size
    lora = lora_rank > 0
    full = not lora
    if kernels == "unsloth" and lora and not shape.gpt2:
        return unsloth_layer_bytes(shape, p, lora_rank, targets, input_requires_grad, attn, seq_len, adapter_fp32,
                                   lora_dropout, quantized_keeps)

    liger = kernels == "liger"

    def norm(out_read_by_trainable: bool, inp_grad: bool) -> int:
        if not inp_grad and not full:
            return 0  # nothing upstream needs a gradient and the weight is frozen
        if liger:
            b = p * h + 4  # LigerRMSNormFunction keeps X and the fp32 RSTD; dW comes from both
        else:
            b = 4 * h + 4
            if full:
                b += p * h  # normalised input of `weight * x`
        if full and out_read_by_trainable:
            b += p * h
        return b

    if shape.gpt2:
        return gpt2_layer_bytes_per_token(shape, p, seq_len)
    total = norm(True, input_requires_grad) + norm(True, True) + attention_bytes_per_token(shape, p, attn, seq_len)
    # LigerSiLUMulFunction (and GEGLU) keeps gate and up outputs only, recomputing the activation
    total += (2 if liger else 3) * (stream or p) * i + (p * i if full else 0)
    if lora:
        total += _adapter_bytes_per_token(shape, p, lora_rank, targets, adapter_fp32, lora_dropout)
        total += _quantized_base_inputs(shape, targets, input_requires_grad, not (adapter_fp32 or lora_dropout),
                                        *quantized_keeps)
    return total


def attention_bytes_per_token(shape: ModelShape, p: int, attn: str, seq_len: int) -> int:
    """What one layer's attention keeps per token between its input projections and o_proj."""
    q, kv, nh = shape.num_attention_heads * shape.head_dim, shape.kv_dim, shape.num_attention_heads
    if attn == "eager":
        # HF eager attention keeps rotated q, K and V repeated to all heads (repeat_kv), the
        # transposed output copy read by o_proj (4 q-sized), the fp32 softmax probabilities (for
        # softmax backward) and their p-byte cast (for the matmul with V): nh*s per token each.
        return 4 * p * q + (4 + p) * nh * seq_len
    if attn == "flash_attention_2":
        return 2 * p * q + 2 * p * kv + 4 * nh
    if attn == "sdpa-math":
        # _scaled_dot_product_attention_math (torch 2.6 attention.cpp) upcasts p-byte q, k and v to
        # fp32 unless allowFP16BF16ReductionMathSDP is set (false by default), repeats K/V to all
        # heads for enable_gqa, and keeps the fp32 softmax probabilities for the matmul with V and
        # for softmax backward; the output comes back in the compute dtype. SDPA falls back to it
        # when no fused kernel takes the call, e.g. a float mask with enable_gqa (only the flash
        # kernel, which refuses masks, took GQA before pytorch#191085)
        return 3 * 4 * q + 4 * nh * seq_len + p * q
    if attn == "sdpa-cpu":
        # torch's CPU SDPA path (what FakeTensorMode traces run) keeps a 2-byte s*s term per
        # layer; CUDA flash / memory-efficient kernels recompute it in backward instead.
        return 4 * p * q + 4 * nh + 2 * seq_len
    return 4 * p * q + 4 * nh


QKV = ("q_proj", "k_proj", "v_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def unsloth_patched(shape: ModelShape, targets: tuple[str, ...], lora_dropout: bool) -> tuple[bool, bool, bool]:
    """(q/k/v, o, MLP): the groups Unsloth's patch_peft_model hands to its own autograd functions
    (unsloth/models/llama.py at 7e1c6a6, lines 1545-1603): only with lora_dropout 0 and bias none,
    and only where every projection of the group has LoRA and no bias (Qwen2's q/k/v biases keep
    its attention on PEFT's layers). The rest stays PEFT's."""
    if lora_dropout or shape.gpt2:
        return False, False, False
    return (all(t in targets for t in QKV) and not shape.qkv_bias, "o_proj" in targets,
            all(t in targets for t in MLP))


def unsloth_layer_bytes(shape: ModelShape, p: int, lora_rank: int, targets: tuple[str, ...],
                        input_requires_grad: bool, attn: str, seq_len: int, adapter_fp32: bool,
                        lora_dropout: bool, quantized_keeps: tuple[int, int]) -> int:
    """One LoRA decoder layer under Unsloth's fast path, per token (read in unslothai/unsloth at
    7e1c6a6, 2024-04-03, unsloth/kernels/): Fast_RMS_Layernorm keeps its p-byte input and the fp32
    inverse RMS; the rotary kernel rotates q and k in place keeping only cos/sin; LoRA_QKV keeps
    its input X alone; LoRA_W (o_proj) keeps its input, the attention output the attention keeps
    already; LoRA_MLP keeps X and the gate and up outputs e and g, recomputing the SwiGLU product
    and every lora_A output in backward, and dequantizes the base weights itself (bitsandbytes
    keeps nothing). No adapter keeps an fp32 copy of its input. Unpatched groups are PEFT's."""
    h, i = shape.hidden_size, shape.intermediate_size
    qkv, o, mlp = unsloth_patched(shape, targets, lora_dropout)
    total = (p * h + 4 if input_requires_grad else 0) + p * h + 4 + attention_bytes_per_token(shape, p, attn, seq_len)
    total += p * h if qkv else 0
    total += p * h + 2 * p * i if mlp else 3 * p * i
    patched = (QKV if qkv else ()) + (("o_proj",) if o else ()) + (MLP if mlp else ())
    rest = tuple(t for t in targets if t not in patched)
    if rest:
        total += _adapter_bytes_per_token(shape, p, lora_rank, rest, adapter_fp32, lora_dropout)
    return total + _quantized_base_inputs(shape, rest, input_requires_grad,
                                          not (adapter_fp32 or lora_dropout), *quantized_keeps, patched=patched)


def _quantized_base_inputs(shape: ModelShape, targets: tuple[str, ...], input_requires_grad: bool,
                           adapters_share_input: bool, input_bytes: int, int8_bytes: int,
                           patched: tuple[str, ...] = ()) -> int:
    """What bitsandbytes keeps per token for one layer's frozen quantized linears beyond the terms
    above (bnb_kept_input_bytes): each distinct input once, unless autograd keeps that tensor anyway
    (an adapter reading the base layer's own input; o_proj's input, the attention output), and the
    int8 copy once per layer call. The functions keep nothing where the input needs no gradient
    (the first layer's q/k/v under LoRA, whose input comes from the frozen embedding). patched:
    projections Unsloth's own functions run (they call no bitsandbytes autograd function)."""
    if not (input_bytes or int8_bytes):
        return 0
    lin = shape.linear_shapes()
    groups = [(("gate_proj", "up_proj", "gate_up_proj"), shape.hidden_size), (("down_proj",), shape.intermediate_size)]
    if input_requires_grad:
        groups.insert(0, (("q_proj", "k_proj", "v_proj", "qkv_proj"), shape.hidden_size))
    total = int8_bytes * lin["o_proj"][0] if input_requires_grad and "o_proj" not in patched else 0
    for names, width in groups:
        if any(n in patched for n in names):
            continue
        if not (adapters_share_input and any(t in targets for t in names)):
            total += input_bytes * width
        total += int8_bytes * width * sum(1 for n in names if n in lin)
    return total


def _adapter_bytes_per_token(shape: ModelShape, p: int, lora_rank: int, targets: tuple[str, ...],
                             adapter_fp32: bool, dropout: bool) -> int:
    """What the LoRA adapters of one layer keep per token for backward (see the module docstring)."""
    fan_ins = [fan_in for fan_in, _out in _adapted(shape, targets)]
    a = 4 if adapter_fp32 else p  # bytes of the adapter's input and of lora_A's rank-r output
    if adapter_fp32 or dropout:
        # every adapter keeps an input of its own: its fp32 cast, or its dropped copy (plus the mask)
        return sum((a + (1 if dropout else 0)) * f for f in fan_ins) + a * lora_rank * len(fan_ins)
    # adapters already in the compute dtype (DeepSpeed casts the whole module) and no dropout:
    # lora_A reads the same tensor as the base layer, kept once per distinct input; o_proj's input
    # (the attention output) is kept by the attention terms already
    h, i = shape.hidden_size, shape.intermediate_size
    total = 0
    for group in (("q_proj", "k_proj", "v_proj", "qkv_proj"), ("gate_proj", "up_proj", "gate_up_proj")):
        if any(t in targets for t in group):
            total += p * h
    if "down_proj" in targets:
        total += p * i
    return total + p * lora_rank * len(targets)


def gpt2_layer_bytes_per_token(shape: ModelShape, p: int, seq_len: int) -> int:
    """One Megatron-style GPT-2 layer, full training, per token: Korthikanti et al. (arXiv:2205.05198,
    sec. 4.1) count, with p = 2, 11h + 5as for attention (QKV input, Q and K, softmax output, its
    dropout mask and output, V, the projection input and its dropout mask), 19h for the MLP
    (input, GeLU input and fc2 input of width 4h, dropout mask) and 4h for the two LayerNorms'
    inputs: 34h + 5as. Written here with p and the MLP width i, 1-byte dropout masks.
    GPTBigCode (StarCoder) computes the softmax in fp32 (attention_softmax_in_fp32, default True;
    upcast_masked_softmax in transformers 4.28.1 modeling_gpt_bigcode.py), so the probabilities
    softmax backward keeps are 4 bytes, beside the dropout's mask and p-byte output."""
    h, i, a = shape.hidden_size, shape.intermediate_size, shape.num_attention_heads
    upcast = shape.model_type == "gpt_bigcode" and shape.hf_config.get("attention_softmax_in_fp32", True)
    softmax = 4 if upcast else p
    attention = (5 * p + 1) * h + (softmax + p + 1) * a * seq_len
    mlp = p * h + 2 * p * i + h
    return attention + mlp + 2 * p * h


def activations(shape: ModelShape, seq_len: int, micro_batch: int, p: int, *, lora_rank: int = 0,
                lora_target: str | None = None, gradient_checkpointing: bool = False,
                attn_implementation: str = "sdpa", sequences_per_sample: int = 1,
                adapter_fp32: bool = True, loss_kernel: str = "none", image_slices: int = 0,
                checkpoint_offload: bool = False, head_weight_bytes: int = 0,
                lora_dropout: bool = False, vision_frozen: tuple = (False, False),
                transformers_loss: str | None = None, quantized_keeps: tuple[int, int] = (0, 0),
                layer_kernels: str = "hf", stream_bytes: int = 0) -> Activations:
    """Activation memory for one micro batch; sequences_per_sample=2 for DPO's chosen+rejected.
    image_slices: image slices per sample run through shape.vision (their LLM tokens are part of
    seq_len already); vision_frozen: (tower, projector) frozen, which autograd then does not save
    for (pixel inputs need no gradient). checkpoint_offload: the checkpointed layer inputs wait in host RAM.
    head_weight_bytes: bytes per element of a trained LM head (0: frozen), for TRL's fused head.
    transformers_loss: the transformers release whose own loss the model computes ("": a current
    one; None: the trainer computes the loss from the logits). quantized_keeps: what a bitsandbytes
    base layer keeps per input element (bnb_kept_input_bytes). layer_kernels: LAYER_KERNELS.
    stream_bytes: bytes per element of the residual stream and the MLP's tensors (0: p; 4 after
    PEFT's prepare_model_for_kbit_training, model_states.kbit_prepared). Attention's own tensors
    stay p: autocast (or FlashAttention-2's cast) hands the kernel p-byte copies, and those are
    what it keeps."""
    b = micro_batch * sequences_per_sample
    T = b * seq_len
    h, L = shape.hidden_size, shape.num_hidden_layers
    targets = lora_targets(lora_target, shape.model_type) if lora_rank else ALL_LINEAR
    attn = attn_implementation or "sdpa"
    st = stream_bytes or p
    per_layer = layer_bytes_per_token(shape, p, lora_rank, targets, True, attn, seq_len, adapter_fp32, lora_dropout,
                                      quantized_keeps, layer_kernels, st)
    # LoRA: the first layer's input comes from a frozen embedding, so its first norm keeps nothing
    first_layer = layer_bytes_per_token(shape, p, lora_rank, targets, not lora_rank, attn, seq_len, adapter_fp32,
                                        lora_dropout, quantized_keeps, layer_kernels, st)
    layer_saved = per_layer * T
    if gradient_checkpointing:
        # transformers checkpoints each decoder layer (torch.utils.checkpoint, non-reentrant):
        # only its input hidden state stays; the traces also show a b*s*s bool causal mask
        # materialised for the checkpointed layers. FlashAttention-2 gets no such mask
        # (transformers masking_utils.flash_attention_mask: None, or the 2D padding mask).
        # Unsloth's own model forward drops the mask in training (LlamaModel_fast_forward at 7e1c6a6:
        # `elif self.training: attention_mask = None`) and runs causal kernels.
        mask = 0 if attn == "flash_attention_2" or layer_kernels == "unsloth" else b * seq_len * seq_len
        kept = L - (1 if lora_rank else 0)
        if checkpoint_offload:
            # Unsloth_Offloaded_Gradient_Checkpointer (unsloth/models/_utils.py; the same class is
            # LLaMA-Factory's use_unsloth_gc, model_utils/checkpointing.py) saves
            # hidden_states.to("cpu") for backward and copies it back to the GPU only when that
            # layer is recomputed: one layer input on the GPU at a time.
            kept = min(kept, 1)
        saved_layers = kept * st * h * T + mask
        recompute = layer_saved
    else:
        saved_layers = first_layer * T + (L - 1) * layer_saved
        recompute = 0
    final_norm = (4 * h + 4 + p * h) + (p * h if not lora_rank else 0)
    rotary = 2 * p * shape.head_dim  # cos and sin tables, shared by all layers
    loss_saved, forward_transient, loss_backward = loss_terms(shape, p, T, loss_kernel, head_weight_bytes,
                                                              transformers_loss, rows=b)
    saved_other = (final_norm + rotary) * T + loss_saved
    i = shape.intermediate_size
    # One layer's backward: the MLP gradients (d down-input, d product, d gate/up) are i-wide;
    # with a trainable MLP the weight gradients come on top (accounted for as gradients).
    mlp_grads = 3 * st * i
    if (layer_kernels == "unsloth" and lora_rank and unsloth_patched(shape, targets, lora_dropout)[2]) \
            or (layer_kernels == "liger" and not shape.gpt2):
        # Unsloth's LoRA_MLP.backward (swiglu.py _DWf_DW_dfg_kernel) and Liger's SwiGLU/GEGLU backward
        # write the gate and up gradients over the saved outputs: the down input's gradient is new
        mlp_grads = st * i
    layer_bwd = (mlp_grads + 2 * st * h) * T
    if attn == "eager":
        # softmax backward: gradient of the probabilities (p) and of the fp32 scores (4), nh*s each
        layer_bwd += (4 + p) * shape.num_attention_heads * seq_len * T
    elif attn == "sdpa-math":
        # the same two gradients, both fp32 on the math backend
        layer_bwd += 8 * shape.num_attention_heads * seq_len * T
    if image_slices and shape.vision is not None:
        v_saved, v_layer = vision_activations(shape.vision, image_slices * b, p, gradient_checkpointing,
                                              *vision_frozen)
        saved_other += v_saved
        recompute = max(recompute, v_layer)
    return Activations(saved_layers, saved_other, forward_transient, loss_backward, layer_bwd, recompute, layer_saved,
                       loss_saved)


def hf_loss_forward_transient(V: int, p: int, transformers_version: str = "", rows: int = 1) -> int:
    """Bytes per token transformers' loss holds in forward beside the saved log-probs: the p-byte
    logits, their fp32 upcast (none when they are fp32 already, `.float()` returns them) and,
    before SHIFTED_COPY_UNTIL with more than one row, the shifted copy. An unstated release is a
    current one."""
    from ..pep440 import parse

    upcast = 4 * V if p < 4 else 0
    release = parse(transformers_version) if transformers_version else None
    if release is None or release >= parse(SHIFTED_COPY_UNTIL) or rows < 2:
        return p * V + upcast
    if release >= parse(UPCAST_IN_MODEL_UNTIL):
        return p * V + upcast + 4 * V
    # the upcast rebinds `logits`: fp32 logits and their shifted copy, or p + 4 at the upcast itself
    return max(4 * V + 4 * V, p * V + upcast)


def loss_terms(shape: ModelShape, p: int, T: int, loss_kernel: str = "none",
               head_weight_bytes: int = 0, transformers_version: str | None = None,
               rows: int = 1) -> tuple[float, float, float]:
    """(saved, forward transient, backward transient) bytes of the LM head + cross-entropy.

    none:    transformers' ForCausalLMLoss, see the module docstring: log-probs (4V) saved, p*V
             logits + their 4V fp32 copy transient, 8V of loss gradients at the start of backward.
             transformers_version: the release when the model computes that loss itself ("": a
             current one; hf_loss_forward_transient), None when a trainer's own code takes the
             logits (DPO, GRPO, OpenRLHF), kept at p*V + 4V.
    liger:   Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py)
             never builds the T x V logits: it runs chunks of next_pow2(ceil(T / ceil(V/h)))
             tokens, computes the loss and the input gradient during forward (grad_input, p*h per
             token, kept for backward) and reuses one p-byte logits chunk; backward only scales it.
    chunked: a cross-entropy kernel over materialised logits (Unsloth's Fast_CrossEntropyLoss:
             saves the p-byte logits and a 4-byte logsumexp per token, writes the logits gradient
             in place) upcasting 1/8 of the tokens at a time (torchtune's CEWithChunkedOutputLoss,
             num_output_chunks=8): no V-wide fp32 tensor over the whole sequence.
    trl-*:   TRL's own chunked / fused LM heads, by release (trl_head.py).
    """
    V, h = shape.vocab_size, shape.hidden_size
    if loss_kernel in ("none", "", None):
        forward = hf_loss_forward_transient(V, p, transformers_version, rows) if transformers_version is not None \
            else p * V + 4 * V
        return 4 * V * T, forward * T, 8 * V * T
    if loss_kernel == "liger":
        inc = -(-V // h)
        chunk = 1 << max(0, (-(-T // inc) - 1).bit_length())
        return (p * h + 4) * T, p * min(chunk, T) * V, 0.0
    if loss_kernel == "chunked":
        return (p * V + 4) * T, 4 * V * -(-T // 8), 0.0
    if loss_kernel in trl_head.TRL_KERNELS:
        return trl_head.loss_terms(loss_kernel, V, h, p, T, head_weight_bytes)
    raise ValueError(f"loss_kernel must be one of {', '.join(LOSS_KERNELS)}, got {loss_kernel!r}")


def vision_activations(v: VisionTower, slices: int, p: int, gradient_checkpointing: bool,
                       frozen_tower: bool = False, frozen_projector: bool = False) -> tuple[float, float]:
    """(saved bytes, one recomputed layer) of a trained ViT tower + projector over `slices` slices.

    Per patch and SigLIP encoder layer (modeling_siglip.py, SDPA): LayerNorm 1 and 2 keep their
    input and output (p*h each) and fp32 mean/rstd (8 bytes); attention keeps q, k, v and its
    output (4*p*h) and the fp32 log-sum-exp per head; the MLP keeps fc1's output and the GELU
    output (2*p*i), a gated MLP (Qwen2.5-VL) its gate, up, activation and product (4*p*i). With
    gradient checkpointing (the tower's encoder honours the model's gradient_checkpointing_enable)
    only each layer's input stays. MiniCPM-V's resampler keeps, per patch, the tower output read by
    kv_proj (p*h) and kv_proj's output, its LayerNorm output, key + position embedding, and the
    key/value projections (5*p*e in the LLM width e). Qwen-VL's merger keeps its LayerNorm input
    and output and the first linear's output and GELU output, each h wide per patch (4*p*h).
    """
    P = v.patches_per_slice * slices
    h, i = v.hidden_size, v.intermediate_size
    layer = (p * (8 * h + (4 if v.gated else 2) * i) + 16 + 4 * v.num_attention_heads) * P
    tower = v.num_hidden_layers * (p * h * P if gradient_checkpointing else layer)
    proj = {"resampler": (p * h + 5 * p * v.text_hidden) * P, "merger": (4 * p * h + 8) * P}.get(
        v.projector, (p * h + 8) * P)
    if frozen_tower:
        # nothing before a trained module needs a gradient: the frozen tower runs without a graph
        return (0.0 if frozen_projector else proj), 0.0
    return tower + proj, layer if gradient_checkpointing else 0.0
