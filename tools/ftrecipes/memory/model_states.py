"""Parameters, gradients, fp32 master weights and Adam states, placed by ZeRO stage and offload.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(arXiv:1910.02054), sec. 3.1 and Figure 1: mixed-precision Adam keeps 2Ψ (fp16/bf16 params)
+ 2Ψ (grads) + KΨ (fp32 master, momentum, variance; K = 12) bytes. Stage 1 partitions the KΨ
optimizer states over N data-parallel ranks, stage 2 also the gradients, stage 3 also the
parameters. ZeRO-Offload (arXiv:2101.06840) moves the optimizer states (and, for CPU Adam, an fp32
copy of the gradient partition) to host memory; ZeRO-Infinity's offload_param moves the stage-3
parameter partition to host memory.
"""
from __future__ import annotations

from dataclasses import dataclass


def zero_paper_model_states(psi: int, n: int, stage: int, k: int = 12) -> float:
    """Per-GPU model-state bytes exactly as the ZeRO paper's Figure 1 counts them."""
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / n
    if stage == 2:
        return 2 * psi + (2 + k) * psi / n
    if stage == 3:
        return (2 + 2 + k) * psi / n
    raise ValueError(f"ZeRO stage must be 0-3, got {stage}")


@dataclass
class ModelStates:
    # bytes per GPU
    params: float = 0.0
    grads: float = 0.0
    master: float = 0.0      # fp32 master weights
    optimizer: float = 0.0   # Adam momentum + variance
    # bytes in host RAM per training process
    host_params: float = 0.0
    host_grads: float = 0.0
    host_master: float = 0.0
    host_optimizer: float = 0.0
    # of host_optimizer, bytes bitsandbytes pages in CUDA unified memory (paged optimizers): the
    # driver migrates them, so unlike DeepSpeed's and FSDP's offloaded states they are not pinned
    host_paged: float = 0.0
    # gradient communication buffers that live as long as the model (DDP's buckets)
    comm_buffers: float = 0.0

    @property
    def gpu(self) -> float:
        return self.params + self.grads + self.master + self.optimizer

    @property
    def host(self) -> float:
        return self.host_params + self.host_grads + self.host_master + self.host_optimizer


def model_states(total_params: int, trainable: int, n: int, stage: int, p: int, *,
                 offload_optimizer: str = "none", offload_param: str = "none",
                 master_weights: bool = True, trainable_bytes: int | None = None,
                 frozen_bytes: float | None = None, optimizer: str = "adamw",
                 embed_trainable: int = 0) -> ModelStates:
    """Steady-state model states of one training process.

    total_params includes frozen ones (LoRA base); only `trainable` get grads and optimizer states.
    master_weights=False is plain PyTorch training in the parameter dtype (what trace.py measures):
    AdamW's two states then have the parameter dtype and no fp32 copy exists.
    frozen_bytes: bytes of the frozen weights when they are not p each (quantized base weights).
    optimizer: states per trainable parameter as optimizer_bytes_per_param counts them.
    """
    pt = trainable_bytes or p  # PEFT keeps LoRA adapters in fp32 unless DeepSpeed casts them
    frozen = total_params - trainable
    s = ModelStates()
    # Parameters (frozen LoRA base weights too): only stage 3 partitions them.
    param_bytes = (p * frozen if frozen_bytes is None else frozen_bytes) + pt * trainable
    if stage >= 3:
        param_bytes /= n
    if stage >= 3 and offload_param in ("cpu", "nvme"):
        if offload_param == "cpu":
            s.host_params = param_bytes
    else:
        s.params = param_bytes
    grads = pt * trainable / (n if stage >= 2 else 1)
    if not master_weights:
        s.grads = grads
        s.optimizer = optimizer_states(optimizer, trainable, pt, embed_trainable) / (n if stage >= 1 else 1)
        return s
    master = 4 * trainable / (n if stage >= 1 else 1)
    adam = optimizer_states(optimizer, trainable, 4, embed_trainable) / (n if stage >= 1 else 1)
    if offload_optimizer in ("cpu", "nvme"):
        if offload_optimizer == "cpu":
            s.host_master, s.host_optimizer = master, adam
        # CPU Adam updates from an fp32 gradient partition kept in host memory
        s.host_grads = 4 * trainable / (n if stage >= 1 else 1)
        # stage 2 keeps its reduced low-precision gradient partition on GPU before the copy out
        s.grads = grads if stage <= 2 else 0.0
    else:
        s.master, s.optimizer, s.grads = master, adam, grads
    return s


# --- Settings beyond ZeRO: quantized base weights, other optimizers, DDP and FSDP -------------

# bitsandbytes (bitsandbytes/functional.py quantize_4bit / quantize_blockwise): 4-bit NF4/FP4
# packs two weights per byte and keeps one fp32 absmax per block of 64 weights; double
# quantization (compress_statistics) stores those absmax values as 8-bit codes, blocks of 256
# with one fp32 scale each. LLM.int8 (Int8Params) keeps int8 weights and one fp32 scale per row.
QUANT_BLOCK = 64
QUANT_BLOCK2 = 256


def quantized_bytes(n_weights: int, quantization: str, *, double_quant: bool = False, rows: int = 0) -> float:
    """Bytes of n_weights base weights held by bitsandbytes, quantization constants included."""
    return quantized_data_bytes(n_weights, quantization) + quant_constant_bytes(
        n_weights, quantization, double_quant=double_quant, rows=rows)


def quantized_data_bytes(n_weights: int, quantization: str) -> float:
    """Bytes of the packed weights alone: what a parameter's storage holds (FSDP shards this)."""
    _check_quantization(quantization)
    return n_weights / 2 if quantization == "4bit" else n_weights


def quant_constant_bytes(n_weights: int, quantization: str, *, double_quant: bool = False, rows: int = 0) -> float:
    """Bytes of the quantization constants (absmax, nested scales, row scales). bitsandbytes keeps
    them in the weight's quant_state (Params4bit) or SCB attribute, not as parameters, so FSDP
    leaves them whole on every rank."""
    _check_quantization(quantization)
    if quantization == "4bit":
        blocks = n_weights / QUANT_BLOCK
        return blocks * 1 + 4 * blocks / QUANT_BLOCK2 if double_quant else 4 * blocks
    return 4 * rows


def _check_quantization(quantization: str) -> None:
    if quantization in ("4bit", "8bit"):
        return
    if quantization in ("none", "", None):
        raise ValueError("quantized_bytes needs quantization 4bit or 8bit")
    raise ValueError(f"quantization must be none, 4bit or 8bit, got {quantization!r}")


# bitsandbytes 8-bit optimizers (bitsandbytes/optim/optimizer.py Optimizer8bit.init_state): two
# uint8 states plus one fp32 absmax per block of 256 values each. transformers' Trainer keeps
# nn.Embedding weights on 32-bit states (register_module_override(..., {"optim_bits": 32})) only
# when its optimizer class is named Adam8bit: optim adamw_bnb_8bit up to 4.29 (read in the 4.26.1
# to 4.29.2 wheels). From 4.30 adamw_8bit and adamw_bnb_8bit build bnb.optim.AdamW(optim_bits=8)
# (read in 4.30.2, 4.36.2 and 4.49.0), so embeddings get 8-bit states like every other weight
# (measured: bench/gpu_calibrate h100-run5, axolotl-2412's step).
EMBEDDING_32BIT_UNTIL = "4.30.0"
OPTIMIZERS = ("adamw", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "sgd", "adafactor")


def optimizer_bytes_per_param(optimizer: str, state_bytes: int) -> float:
    """Optimizer-state bytes per trainable parameter. state_bytes: dtype of torch AdamW's states
    (they follow the parameter's dtype; DeepSpeed's optimizers keep them in fp32)."""
    if optimizer == "adamw":
        return 2 * state_bytes
    if optimizer == "paged_adamw_32bit":
        return 8.0
    if optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return 2 + 2 * 4 / QUANT_BLOCK2
    if optimizer == "sgd":
        return 0.0  # torch.optim.SGD as the Trainer builds it: momentum 0, no state
    if optimizer == "adafactor":
        # factored second moment (one row and one column vector per matrix) and no first moment
        # (transformers' Adafactor, beta1=None): negligible next to Adam's 2 states per weight
        return 0.0
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")


def optimizer_states(optimizer: str, trainable: float, state_bytes: int, embed_trainable: float = 0) -> float:
    b = optimizer_bytes_per_param(optimizer, state_bytes) * (trainable - embed_trainable)
    if optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        return b + 8 * embed_trainable
    return b + optimizer_bytes_per_param(optimizer, state_bytes) * embed_trainable


def wrapper_model_states(*, framework: str, frozen_bytes: float, trainable: int, n: int, pt: int,
                         optimizer: str, fsdp_offload: bool = False, embed_trainable: int = 0,
                         saved_params: int = 0, saved_bytes: int | None = None,
                         frozen_grad_bytes: float = 0.0, unsharded_bytes: float = 0.0) -> ModelStates:
    """Model states of one process under plain PyTorch ("torch"), DDP, or FSDP/FSDP2 full shard.

    pt: bytes of a trainable parameter as the optimizer sees it (4 with fp32 master weights:
    the model keeps trainable weights in fp32 and autocast computes in bf16; 2 for pure bf16).
    frozen_bytes: frozen base weights (quantized or not), whole model.
    saved_params / saved_bytes: LoRA modules_to_save copies, part of `trainable`, held at
    saved_bytes each (PEFT upcasts only its adapter layers to fp32, cast_adapter_dtype, so the
    copies keep the model's dtype unless the trainer casts every trainable parameter).
    frozen_grad_bytes: gradient FSDP1 keeps for frozen weights that share a FlatParameter with
    trainable ones (LoRA): torch's FullyShardedDataParallel docs warn that mixing frozen and
    non-frozen parameters in one unit (use_orig_params=True) gives "higher than expected gradient
    memory usage": the flat gradient covers the whole unit. FSDP2 shards per parameter and
    allocates gradients for trainable parameters only.
    unsharded_bytes: the part of frozen_bytes that is not a parameter (quantization constants),
    which FSDP leaves whole on every rank.
    - DDP (torch/nn/parallel/distributed.py): the Reducer copies gradients into flat buckets that
      cover every trainable parameter; transformers' Trainer does not set gradient_as_bucket_view,
      so those buckets are a second full copy of the gradients ("gradient_as_bucket_view ... the
      saved memory size will be equal to the total gradients size").
    - FSDP full shard (FSDP1 FlatParameter per wrapped unit; FSDP2 fully_shard per parameter):
      parameters, gradients and optimizer states are split over the n ranks; fsdp_offload
      (CPUOffload(offload_params=True)) keeps all three in host memory and steps on the CPU.
    """
    s = ModelStates()
    shard = n if framework in ("fsdp", "fsdp2") else 1
    pm = saved_bytes or pt
    adapters = trainable - saved_params
    params = (frozen_bytes - unsharded_bytes + pt * adapters + pm * saved_params) / shard + unsharded_bytes
    grads = (pt * adapters + pm * saved_params + frozen_grad_bytes) / shard
    if saved_params:
        opt = optimizer_states(optimizer, adapters, pt) + optimizer_states(optimizer, saved_params, pm, embed_trainable)
    else:
        opt = optimizer_states(optimizer, trainable, pt, embed_trainable)
    opt /= shard
    paged = optimizer.startswith("paged_")
    if framework in ("fsdp", "fsdp2") and fsdp_offload:
        # CPUOffload moves the FlatParameters' shards; the constants stay where bitsandbytes put them
        s.host_params, s.host_grads, s.host_optimizer = params - unsharded_bytes, grads, opt
        s.params = unsharded_bytes
        return s
    s.params, s.grads = params, grads
    if paged:
        # bitsandbytes allocates paged states in CUDA unified memory (F.get_paged): they stay on
        # the GPU only while it has room and are evicted to host RAM instead of failing
        s.host_optimizer = s.host_paged = opt
    else:
        s.optimizer = opt
    if framework == "ddp" and n > 1:
        s.comm_buffers = grads
    return s


FRAMEWORKS = ("deepspeed", "ddp", "fsdp", "fsdp2", "torch")
# How torch's AdamW runs its update (torch/optim/adam.py): "foreach" (_multi_tensor_adam, what
# torch picks on CUDA when neither foreach nor fused is given: _default_to_fused_or_foreach, and
# what the HF Trainer's "adamw_torch" asks for), "fused" (one kernel, adamw_torch_fused) or
# "single" (_single_tensor_adam, torch < 2.0's default); "auto": foreach outside DeepSpeed, and
# under DeepSpeed the optimizer DeepSpeed builds from its config (updates in place).
ADAM_IMPLS = ("auto", "foreach", "fused", "single")
QUANTIZATIONS = ("none", "4bit", "8bit")
# whose quirks the model knows ("": none in particular; hf: a script on the plain HF Trainer,
# swift: ms-swift, deepspeed: a script driving DeepSpeed itself); another name would be ignored
TRAINERS = ("", "hf", "trl", "llamafactory", "openrlhf", "accelerate", "axolotl", "torchtune", "swift", "deepspeed")


def check_expressed(s) -> list[str]:
    """Reject values of the non-DeepSpeed settings the model does not know; return notes for
    combinations a framework accepts but ignores. s: a Setup (read by attribute)."""
    from .activations import ATTN_IMPLEMENTATIONS, LAYER_KERNELS, LOSS_KERNELS

    for name, allowed in (("framework", FRAMEWORKS), ("quantization", QUANTIZATIONS), ("adam_impl", ADAM_IMPLS),
                          ("optimizer", OPTIMIZERS), ("loss_kernel", LOSS_KERNELS), ("trainer", TRAINERS),
                          ("layer_kernels", LAYER_KERNELS), ("attn_implementation", ATTN_IMPLEMENTATIONS),
                          ("load_dtype", ("",) + tuple(_DTYPE_BYTES))):
        if getattr(s, name) not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(a or repr(a) for a in allowed)}, got {getattr(s, name)!r}")
    if s.image_slices < 0:
        raise ValueError(f"image_slices must be >= 0, got {s.image_slices}")
    if isinstance(s.lora_dropout, bool) or not isinstance(s.lora_dropout, (int, float)) \
            or not 0 <= s.lora_dropout < 1:
        # torch's Dropout refuses p outside [0, 1]; p = 1 zeroes the adapters' input entirely
        raise ValueError(f"lora_dropout must be a probability in [0, 1), got {s.lora_dropout!r}")
    if s.layer_kernels == "unsloth" and not s.lora_rank:
        # the functions patch_peft_model installs exist for LoRA layers only
        raise ValueError("layer_kernels unsloth needs LoRA (lora_rank > 0): Unsloth's own autograd functions "
                         "replace LoRA layers")
    if s.quantization != "none" and not s.lora_rank:
        # peft/LLaMA-Factory refuse it too: "Quantized models can only be used for the LoRA"
        raise ValueError(f"quantization {s.quantization} needs LoRA (lora_rank > 0): quantized base "
                         "weights cannot be trained in full")
    if s.optimizer_in_backward and s.framework == "deepspeed":
        raise ValueError("optimizer_in_backward needs a PyTorch training loop (framework torch, ddp or fsdp): "
                         "DeepSpeed runs its optimizer after backward")
    if s.optimizer_in_backward and s.grad_accum > 1:
        # torchtune refuses it too: the gradient is consumed before the next micro batch adds to it
        raise ValueError("optimizer_in_backward cannot accumulate gradients (grad_accum must be 1)")
    if s.mixed_precision not in MIXED_PRECISIONS:
        raise ValueError(f"mixed_precision must be one of no, bf16, fp16, got {s.mixed_precision!r}")
    from ..pep440 import parse

    for name in ("accelerate_version", "transformers_version", "torchao_version", "bitsandbytes_version", "trl_version",
                 "deepspeed_version"):
        if getattr(s, name):
            try:
                parse(getattr(s, name))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    notes = []
    if fsdp_upcast(s) == "all":
        assumed = "" if s.accelerate_version else " (assumed: no accelerate version given)"
        notes.append(f"accelerate {accelerate_version(s)}{assumed} casts the whole model to fp32 under FSDP2 with "
                     "mixed precision, frozen weights included; accelerate >= 1.14 casts trainable parameters only")
    if s.fsdp_offload and s.framework not in ("fsdp", "fsdp2"):
        notes.append("fsdp_offload only applies to framework fsdp/fsdp2; ignored")
    if not s.zero3_init and not (s.framework == "deepspeed" and s.zero_stage == 3):
        notes.append("zero3_init only matters for DeepSpeed ZeRO-3; ignored")
    if s.framework == "deepspeed" and s.master_weights is False and s.precision != "fp32":
        notes.append("DeepSpeed keeps fp32 master weights and Adam states for bf16/fp16 training "
                     "whatever the trainer does with the module (master_weights=false has no effect)")
    if s.modules_to_save and not s.lora_rank:
        notes.append("modules_to_save only applies to LoRA; full fine-tuning trains every module already")
    return notes


def uses_master_weights(s) -> bool:
    """fp32 trainable weights? Unset: DeepSpeed always builds fp32 masters; LLaMA-Factory casts
    trainable parameters to fp32 unless pure_bf16 (llamafactory/model/adapter.py
    cast_trainable_params_to_fp32); TRL / the HF Trainer keep the dtype the model was loaded in.
    accelerate's FSDP cast (fsdp_upcast) comes after all of them and overrides a pure_bf16."""
    if s.precision == "fp32":
        return False
    if fsdp_upcast(s) != "none":
        return True
    if s.master_weights is not None:
        return bool(s.master_weights)
    return s.framework == "deepspeed" or s.trainer == "llamafactory" or load_bytes(s, 2) == 4


_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}

# The last transformers release, by model_type, whose attention layers each build their own
# rotary embedding with cos and sin tables for all max_position_embeddings positions, registered
# as module buffers in the default dtype of model construction (from_pretrained sets it to
# torch_dtype). Read in the released wheels: modeling_llama.py has `cos_cached` up to 4.37 and
# `_cos_cached` "for BC" in 4.38-4.40, none from 4.41; modeling_mistral.py none from 4.42;
# modeling_qwen2.py none from 4.45, when one model-level rotary_emb computes them per forward.
# Buffers are not partitioned by ZeRO-3 or FSDP: every GPU holds all of them.
ROPE_TABLES_UNTIL = {"llama": (4, 40), "mistral": (4, 41), "qwen2": (4, 44)}


def rope_table_bytes(s, shape, p: int) -> tuple[float, str]:
    """(GPU bytes, note) of the per-layer RoPE tables that transformers_version keeps, if any.
    Models whose max_position_embeddings is large (long-context fine-tunes with 1M positions)
    pay for every position in every layer, whatever the sequence length trained."""
    if not s.transformers_version or shape is None:
        return 0.0, ""
    from ..pep440 import parse

    release = parse(s.transformers_version).release  # check_expressed has refused a malformed one
    until = ROPE_TABLES_UNTIL.get(shape.model_type)
    if until is None or tuple(release[:2]) > until:
        return 0.0, ""
    positions = shape.hf_config.get("max_position_embeddings")
    if not positions:
        return 0.0, (f"transformers {s.transformers_version} keeps cos/sin tables of all positions in every "
                     f"{shape.model_type} attention layer; not counted: the model's max_position_embeddings is "
                     "unknown (pass its config.json)")
    per_layer = 2 * positions * shape.head_dim * load_bytes(s, p)
    total = shape.num_hidden_layers * per_layer
    return total, (f"transformers {s.transformers_version} keeps cos/sin tables of all {positions:,} positions in "
                   f"every attention layer: {shape.num_hidden_layers} x {per_layer / 2**20:,.0f} MiB = "
                   f"{total / 2**30:.2f} GiB, counted with the parameters")


def load_bytes(s, p: int) -> int:
    """Bytes per weight as loaded: DeepSpeed casts the module to its compute dtype; otherwise the
    from_pretrained dtype (TRL's ModelConfig / create_model_from_path default to float32, so
    without `dtype:` a TRL run keeps fp32 weights and autocasts to bf16)."""
    if s.framework == "deepspeed" or not s.load_dtype:
        return p
    if s.load_dtype not in _DTYPE_BYTES:
        raise ValueError(f"load_dtype must be one of {', '.join(_DTYPE_BYTES)}, got {s.load_dtype!r}")
    return _DTYPE_BYTES[s.load_dtype]


def held_bytes(s, p: int) -> int:
    """Bytes per frozen weight while training: as loaded, unless accelerate's FSDP2 preparation
    casts the whole model to fp32 (fsdp_upcast "all")."""
    return 4 if fsdp_upcast(s) == "all" else load_bytes(s, p)


# accelerate's fsdp2_prepare_model (accelerate/utils/fsdp_utils.py), when accelerate's
# mixed_precision is not "no" and the model is not fp32 already, read in the release wheels:
# - 1.6.0 (first FSDP2 release) to 1.12.0: `model = model.to(torch.float32)` after fully_shard,
#   so every parameter, the frozen base of a LoRA run included, is sharded in fp32
#   (accelerate#3844: FSDP2 LoRA held more memory than FSDP1, which casts trainable FlatParameters only);
# - 1.13.0: accelerate#3848 casts only parameters with requires_grad, but #3905 in the same
#   release wrote it as `param = param.to(torch.float32)`, which changes no parameter (accelerate#3979);
# - 1.14.0 on: trainable parameters are cast (`param.data = ...`) before fully_shard.
_FSDP2_UPCAST = (("1.13.0", "all"), ("1.14.0", "none"), (None, "trainable"))
# The accelerate a run uses when nothing names one: the newest release the trainer's current
# release accepts. LLaMA-Factory 0.9.5 requires accelerate>=1.3.0,<=1.11.0 (its METADATA
# Requires-Dist), so its users run 1.11.0; TRL 1.16 (accelerate>=1.10.1), transformers and a
# plain accelerate install take the newest release, 1.15.0 as schemas/key_history knows it.
_ACCELERATE_REQUIRED = {"llamafactory": ">=1.3.0,<=1.11.0"}
_ACCELERATE_ANY = ">=1.6.0"


def accelerate_version(s) -> str:
    """The accelerate release the estimate assumes: Setup.accelerate_version, else the default above."""
    if s.accelerate_version:
        return s.accelerate_version
    from ..pins import resolve

    # without the key-history table (a broken install) the newest release it listed when written
    return resolve("accelerate", _ACCELERATE_REQUIRED.get(s.trainer, _ACCELERATE_ANY)) or "1.15.0"


# TRL forces reentrant checkpointing for PEFT under ZeRO-3 with checkpointing from 1.9.0 (PR #6356,
# "Force use_reentrant=True for PEFT + ZeRO-3 + gradient checkpointing in all trainers"; read in
# 1.16.0's sft/dpo/grpo trainers); from 0.27.0 it defaults to non-reentrant otherwise (PR #4811).
_TRL_FORCES_REENTRANT = "1.9.0"
_TRL_NON_REENTRANT = "0.27.0"


def checkpoint_reentrant(s, model_type: str = "") -> bool:
    """Whether gradient checkpointing runs torch.utils.checkpoint with use_reentrant=True.

    The trainers' own defaults, read in their source: LLaMA-Factory's use_reentrant_gc is true
    (hparams/model_args.py) except under FSDP2, where model_utils/checkpointing.py sets it false;
    ms-swift takes reentrant under DeepSpeed and FSDP when nothing is stated (trainers/mixin.py
    _fix_gradient_checkpointing, 3602360); OpenRLHF passes gradient_checkpointing_reentrant, off
    unless asked for (cli/train_sft.py); axolotl and the offloading checkpointers below; TRL as
    above; anything else gets transformers' default, {"use_reentrant": True} in 4.x and False in
    5.x (modeling_utils gradient_checkpointing_enable, read in 5.6 and 5.23; TRL's trainers name
    5.0.0 as the switch). model_type: the model's config.json model_type (axolotl's Gemma 4 rule)."""
    from ..pep440 import parse
    from .trl_head import at_least, release

    if (s.trainer == "trl" and s.lora_rank and s.framework == "deepspeed" and s.zero_stage == 3
            and at_least(release(s), _TRL_FORCES_REENTRANT)):
        return True
    if s.checkpoint_offload:
        # the offloading checkpointers (LLaMA-Factory's use_unsloth_gc, axolotl's offload and
        # offload_disk) are autograd Functions that recompute the layer inside their backward,
        # as the reentrant checkpoint does, and ignore use_reentrant; under ZeRO-3 they pin the
        # same way (tests/frameworks/zero3_recompute_pins.py --unsloth-gc)
        return True
    if s.checkpoint_reentrant is not None:
        return s.checkpoint_reentrant
    if s.trainer == "llamafactory":
        return s.framework != "fsdp2"
    if s.trainer == "swift":
        return s.framework in ("deepspeed", "fsdp", "fsdp2") or s.gpus * s.nodes <= 1
    if s.trainer == "openrlhf":
        return False
    if s.trainer == "axolotl":
        # normalize_config sets {"use_reentrant": True} when checkpointing is on and the config
        # names neither gradient_checkpointing_kwargs nor rl (an `rl:` config runs as trainer trl
        # here); Gemma 4 is switched to non-reentrant (utils/config/__init__.py, since cc3cebfa7,
        # read at 067b021c8). unfrozen_parameters, which also skips it, is not read.
        return not model_type.startswith("gemma4")
    if s.trainer == "trl" and at_least(release(s), _TRL_NON_REENTRANT):
        return False
    return bool(s.transformers_version) and parse(s.transformers_version).release[0] < 5


# transformers 5.23.0 checkpoints a decoder layer's `forward` so that module hooks stay outside
# the checkpoint (modeling_layers.GradientCheckpointingLayer.__init_subclass__); up to 5.22 it
# checkpointed `__call__` (partial(super().__call__)), and 4.x passed decoder_layer.__call__ to the
# checkpoint function, so the hooks ran inside it. Read in the 5.6, 5.15, 5.22 and 5.23 wheels.
_HOOKS_OUTSIDE_CHECKPOINT = "5.23.0"
# The transformers a trainer's current release runs when none is named: LLaMA-Factory 0.9.5
# requires transformers<=5.6.0 (its METADATA Requires-Dist); the others take the newest release.
_TRANSFORMERS_REQUIRED = {"llamafactory": ">=4.55.0,<=5.6.0"}


def hooks_inside_checkpoint(s) -> bool:
    """The checkpointed decoder layer's own module hooks (DeepSpeed ZeRO-3's among them) run
    inside torch.utils.checkpoint, i.e. transformers before 5.23.0."""
    from ..pep440 import parse

    version = s.transformers_version
    if not version:
        from ..pins import resolve  # the key histories (and jsonschema) only when no release is named

        version = resolve("transformers", _TRANSFORMERS_REQUIRED.get(s.trainer, ">=5.0.0"))
    return bool(version) and parse(version) < parse(_HOOKS_OUTSIDE_CHECKPOINT)


MIXED_PRECISIONS = ("", "no", "bf16", "fp16")


def mixed_precision_on(s) -> bool:
    """accelerate's mixed_precision is bf16/fp16. Unset: on for bf16/fp16 training unless the
    trainer trains in pure low precision (master_weights false: LLaMA-Factory's pure_bf16)."""
    if s.mixed_precision:
        return s.mixed_precision != "no"
    return s.precision != "fp32" and s.master_weights is not False


def accelerate_native_amp(s) -> bool:
    """The trainer runs the model through accelerate's prepare_model with native AMP (bf16/fp16
    mixed precision outside DeepSpeed, accelerator.py)."""
    # AxolotlTrainer is a transformers Trainer, which prepares the model with accelerate too
    return s.trainer in ("llamafactory", "trl", "accelerate", "axolotl") and s.framework != "deepspeed" and mixed_precision_on(s)


# accelerate's prepare_model for FSDP1 (accelerator.py) from 0.30.0 (absent in 0.29.3; read in
# 0.30.0, 0.33.0 and 1.15.0): with mixed precision on, every FlatParameter that requires grad and
# is not fp32 is cast to fp32 ("we follow DeepSpeed's strategy to hold the parameters in full
# precision"). A FlatParameter requires grad when any of its parameters does (torch
# fsdp/_flat_param.py, use_orig_params=True), so a decoder-layer unit that mixes LoRA adapters
# with frozen weights is cast whole.
_FSDP1_UPCAST_SINCE = "0.30.0"


def accelerate_prepares(s) -> bool:
    """accelerate's FSDP preparation wraps the model: not in torchtune, whose recipes call torch's
    fully_shard / FullyShardedDataParallel themselves."""
    return s.trainer != "torchtune"


def fsdp_upcast(s) -> str:
    """What accelerate's FSDP preparation casts to fp32: "all" | "trainable" | "none", or
    "units" (FSDP1: the trainable parameters and the frozen weights of decoder layers that hold
    adapters)."""
    if s.framework not in ("fsdp", "fsdp2") or s.precision == "fp32" or not mixed_precision_on(s) \
            or not accelerate_prepares(s):
        return "none"
    from ..pep440 import parse

    v = parse(accelerate_version(s))  # check_expressed has refused a malformed one
    if s.framework == "fsdp":
        if v < parse(_FSDP1_UPCAST_SINCE):
            return "none"
        return "units" if frozen_in_lora_units(s) else "trainable"
    return next(cast for before, cast in _FSDP2_UPCAST if before is None or v < parse(before))


def adapters_in_fp32(s) -> bool:
    """LoRA adapter weights in fp32? PEFT upcasts them (get_peft_model's autocast_adapter_dtype)
    unless: DeepSpeed casts the whole module to the compute dtype (ZeRO-1/2; a model built under
    ZeRO-3's zero.Init it leaves alone, but TRL then asks PEFT for bf16 adapters itself,
    autocast_adapter_dtype=False, which the GRPO smoke test checks; LLaMA-Factory keeps fp32
    ones there, which this does not model); TRL's SFTTrainer casts a
    quantized model's adapters to bf16 (QLoRA paper's recommendation, trl/trainer/sft_trainer.py);
    torchtune builds every parameter in the training dtype (set_default_dtype). adapter_fp32
    overrides all but DeepSpeed's cast."""
    if s.framework == "deepspeed":
        return False
    if fsdp_upcast(s) != "none":
        return True
    if s.adapter_fp32 is not None:
        return bool(s.adapter_fp32)
    if s.trainer == "torchtune" or (s.trainer == "trl" and s.quantization != "none"):
        return False
    return True


# TRL releases whose trainers call PEFT's prepare_model_for_kbit_training on a bitsandbytes model
# they wrap themselves (read in the release wheels: trl/trainer/sft_trainer.py from 0.4 (as
# prepare_model_for_int8_training, for 8-bit and 4-bit alike) up to 0.25.x, trl/models/utils.py
# prepare_peft_model for SFT and GRPO from 0.22.0 to 0.25.x; 0.26.0's SFTTrainer and GRPOTrainer
# and 0.29.0's DPOTrainer call get_peft_model alone). (since, until): since <= release < until.
_TRL_KBIT_PREPARE = {"sft": ("0.4.0", "0.26.0"), "dpo": ("0.0", "0.29.0"), "grpo": ("0.22.0", "0.26.0")}


def kbit_prepared(s) -> bool:
    """Did PEFT's prepare_model_for_kbit_training run? It casts every fp16/bf16 parameter that
    bitsandbytes did not quantize (embeddings, norms, LM head) to fp32 (peft/utils/other.py from
    PEFT 0.3.0); TRL's peft_module_casting_to_bf16 casts embeddings and head back but keeps the
    norms fp32. A norm's `weight * x` with an fp32 weight is fp32, and bitsandbytes' Linear4bit and
    MatMul8bitLt return their output in the input's dtype (`out.to(inp_dtype)`, bitsandbytes 0.39
    nn/modules.py and autograd/_functions.py), so the residual stream and the MLP's i-wide tensors
    are fp32 from the first norm on. Under DeepSpeed they are not: its engine casts the whole
    module to the compute dtype (DeepSpeedEngine._configure_distributed_model: module.half() or
    .bfloat16()), norms included. Setup.kbit_prepared states whether the preparation ran;
    otherwise only TRL's own trainers decide, by release (_TRL_KBIT_PREPARE), for a model they
    wrap themselves: not an Unsloth model (already a PeftModel) nor sharded QLoRA (FSDP), which
    they skip."""
    from ..pep440 import parse
    from .trl_head import TRL_DEFAULT, release

    if s.quantization == "none" or not s.lora_rank or s.framework == "deepspeed":
        return False
    if s.kbit_prepared is not None:
        return bool(s.kbit_prepared)
    if s.trainer != "trl" or s.layer_kernels == "unsloth" or s.framework in ("fsdp", "fsdp2"):
        return False
    since, until = _TRL_KBIT_PREPARE.get(s.method, ("0.0", "0.0"))
    return parse(since) <= parse(release(s) or TRL_DEFAULT) < parse(until)


def kbit_note(s, prepared: bool) -> str | None:
    """What the estimate says about the preparation: that it ran, or, for a TRL run that states no
    release, that the releases in _TRL_KBIT_PREPARE would have run it."""
    if prepared:
        return ("PEFT's prepare_model_for_kbit_training keeps the norms in fp32, so the hidden states "
                "and the MLP's tensors are fp32 (kbit_prepared)")
    if s.trl_version or s.kbit_prepared is not None or s.method not in _TRL_KBIT_PREPARE:
        return None
    from dataclasses import replace

    since, until = _TRL_KBIT_PREPARE[s.method]
    if not kbit_prepared(replace(s, trl_version=since)):
        return None
    return (f"TRL release not stated: estimated as a current one, which no longer calls PEFT's "
            f"prepare_model_for_kbit_training; TRL before {until} does for {s.method}, and its fp32 norms make "
            "the hidden states fp32 (--framework-version trl=X or --set kbit_prepared=true)")


def embedding_states_32bit(s) -> bool:
    """The Trainer gives the embedding 32-bit states under an 8-bit optimizer: a transformers
    release before EMBEDDING_32BIT_UNTIL, stated (unstated means a current one)."""
    from ..pep440 import parse

    return bool(s.transformers_version) and parse(s.transformers_version) < parse(EMBEDDING_32BIT_UNTIL)


def expressed_states(s, shape, total: int, trainable: int, n: int, stage: int, p: int, *,
                     offload_optimizer: str, offload_param: str, pt: int) -> ModelStates:
    """Model states of Setup s: DeepSpeed's ZeRO placement or a PyTorch wrapper's, with quantized
    base weights, the chosen optimizer and, for old Trainers, 32-bit embedding states under 8-bit Adam."""
    frozen = total - trainable
    frozen_bytes = None
    embed_trainable = 0
    saved = 0
    frozen_grads = 0.0
    whole = 0.0
    qn = 0
    units = fsdp_upcast(s) == "units"
    if shape is not None and frozen_in_lora_units(s):
        # the unit's flat gradient covers its frozen weights too
        frozen_grads = (4 if units else load_bytes(s, p)) * shape.num_hidden_layers * shape.layer_params()
    if shape is not None and s.lora_rank and s.modules_to_save:
        from .activations import modules_to_save_params

        saved = modules_to_save_params(shape, s.modules_to_save)  # copies and in-place towers alike
    if shape is not None:
        if (not s.lora_rank or "embed_tokens" in (s.modules_to_save or ())) and embedding_states_32bit(s):
            embed_trainable = shape.vocab_size * shape.hidden_size
        if s.quantization != "none":
            qn, packed, whole = quantized_linears(s, shape)
            frozen_bytes = held_bytes(s, p) * (frozen - qn) + packed + whole
    elif s.quantization != "none":
        raise ValueError("quantization needs a model shape (catalog name or config.json), not --params")
    if s.framework == "deepspeed":
        return model_states(total, trainable, n, stage, p, offload_optimizer=offload_optimizer,
                            offload_param=offload_param, master_weights=s.precision != "fp32",
                            trainable_bytes=pt, frozen_bytes=frozen_bytes, optimizer=s.optimizer,
                            embed_trainable=embed_trainable)
    wb = held_bytes(s, p)
    frozen_bytes = wb * frozen if frozen_bytes is None else frozen_bytes
    if units and shape is not None:
        # the decoder layers' frozen weights go to fp32 with their adapters (packed 4-bit ones aside)
        frozen_bytes += (4 - wb) * (shape.num_hidden_layers * shape.layer_params() - qn)
    return wrapper_model_states(framework=s.framework, frozen_bytes=frozen_bytes,
                                trainable=trainable, n=n, pt=pt, optimizer=s.optimizer,
                                fsdp_offload=s.fsdp_offload, embed_trainable=embed_trainable,
                                saved_params=saved, saved_bytes=4 if uses_master_weights(s) else wb,
                                frozen_grad_bytes=frozen_grads, unsharded_bytes=whole)


# transformers' Trainer replaces accelerate's auto-wrap policy for a PEFT LoRA model under FSDP
# with peft's fsdp_auto_wrap_policy (Trainer._fsdp_qlora_plugin_updates from 4.39.0; 5.x:
# distributed/fsdp.update_fsdp_plugin_peft). Its lambda policy makes every leaf module whose
# weight requires grad (lora_A/lora_B, modules_to_save copies) a unit of its own, so the decoder
# layers' FlatParameters hold frozen weights only and get no gradient. Read in the 4.38.2 wheel
# (absent), 4.39.3 and 5.x. LLaMA-Factory's and axolotl's trainers are Trainer subclasses.
_PEFT_WRAP_SINCE = "4.39.0"
_HF_TRAINERS = ("trl", "llamafactory", "axolotl")


def adapters_wrapped_apart(s) -> bool:
    """FSDP1 wraps the LoRA adapters apart from the frozen weights of their decoder layer."""
    from ..pep440 import parse

    if s.framework != "fsdp" or not s.lora_rank:
        return False
    if s.use_orig_params is False:
        # FlatParameter refuses tensors of mixed requires_grad unless use_orig_params is on
        # ("Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
        # torch/distributed/fsdp/_flat_param.py, read in torch 2.13): a LoRA run that starts at
        # all has its adapters in units of their own (llama-recipes' and Answer.AI's lambda policy)
        return True
    if s.trainer == "torchtune":
        # torchtune's lora_fsdp_wrap_policy (torchtune/utils/_distributed.py, read at fef3ed1,
        # April 2024, until its LoRA recipes moved to FSDP2) makes every module whose weight
        # requires grad, lora_a and lora_b, an FSDP unit of its own
        return True
    if s.trainer not in _HF_TRAINERS:
        return False
    return not s.transformers_version or parse(s.transformers_version) >= parse(_PEFT_WRAP_SINCE)


# transformers' Trainer builds the optimizer on the unwrapped model and only then has accelerate
# wrap it in FSDP in 4.30.0-4.31.x and 4.36.0-4.37.x (trainer.py _inner_training_loop,
# delay_optimizer_creation; 4.29.2 wraps FSDP itself after the optimizer exists, 4.32.0-4.35.2 and
# 4.38.2 on prepare the model first; read in those wheels). accelerate's _prepare_fsdp then makes
# a new optimizer over the FlatParameters (accelerator.py, read at v0.21.0) while the Trainer's
# unprepared lr_scheduler keeps the first one, whose parameters FSDP had moved to the GPU whole
# (module.to(device_id) before flattening): they are never freed (transformers#25580, 4.31.0,
# 8xA100). With use_orig_params=True FSDP keeps the original Parameter objects as views of its
# flat parameter, so nothing is left behind; the Trainer's default is false up to 4.35 and true
# from 4.36 (training_args.py, FSDP_USE_ORIG_PARAMS).
_STALE_OPTIMIZER = (("4.30.0", "4.32.0"), ("4.36.0", "4.38.0"))
_ORIG_PARAMS_DEFAULT_SINCE = "4.36.0"
_TRAINER_SUBCLASSES = ("hf", "swift", *_HF_TRAINERS)


def stale_optimizer_copy(s) -> bool:
    """FSDP1 under a transformers Trainer whose first optimizer keeps the unwrapped trainable
    parameters alive on every GPU (only where the run states its transformers release)."""
    from ..pep440 import parse

    if s.framework != "fsdp" or s.trainer not in _TRAINER_SUBCLASSES or not s.transformers_version:
        return False
    v = parse(s.transformers_version)
    if not any(parse(lo) <= v < parse(hi) for lo, hi in _STALE_OPTIMIZER):
        return False
    orig = s.use_orig_params if s.use_orig_params is not None else v >= parse(_ORIG_PARAMS_DEFAULT_SINCE)
    return not orig


def frozen_in_lora_units(s) -> bool:
    """FSDP1 LoRA whose decoder-layer units (FlatParameters) hold frozen base weights and
    adapters together."""
    return s.framework == "fsdp" and bool(s.lora_rank) and not adapters_wrapped_apart(s)


# accelerate's fsdp2_prepare_model from 1.14.0 (absent in 1.13.0; read in the 1.14.0 wheel and
# 1.15.0): an untied input embedding becomes an FSDP2 unit of its own, resharded after forward,
# and the final norm with the LM head a unit kept unsharded from the head's forward to its
# backward. Before, both sat in the root unit, which stays unsharded through forward and backward.
_EMBEDDING_APART_SINCE = "1.14.0"


def embedding_apart(s) -> bool:
    """FSDP2 leaves the input embedding sharded while the decoder layers and the head run."""
    from ..pep440 import parse

    if s.framework != "fsdp2" or not accelerate_prepares(s):
        return False
    return parse(accelerate_version(s)) >= parse(_EMBEDDING_APART_SINCE)


def fsdp_accumulated_grads(s, shape, total: int, trainable: int, n: int, p: int) -> float:
    """GPU bytes of the unsharded gradients FSDP keeps between the micro batches of one optimizer
    step (0 when it reduce-scatters every micro batch). With grad_accum > 1 the transformers
    Trainer runs every micro batch but the last under accelerate's no_sync (trainer.py
    _inner_training_loop; not with accelerate's sync_each_batch), as Lightning Fabric's
    no_backward_sync does (fabric/strategies/fsdp.py _FSDPBackwardSyncControl, read in 2.1.0):
    - FSDP1, FullyShardedDataParallel.no_sync: "FSDP will accumulate the full model gradients
      (instead of gradient shards) until the eventual sync" (torch's docs): the unsharded gradient
      of every FlatParameter that requires grad, in the compute dtype, frozen weights included
      where a unit mixes them with LoRA adapters;
    - FSDP2, set_requires_gradient_sync(False): FSDPParamGroup.post_backward skips the
      reduce-scatter and each trainable parameter keeps its unsharded gradient
      (_fully_shard/_fsdp_param.py, read in torch 2.13); accelerate's policy reduces in the
      compute dtype, so that is the gradient's dtype too.
    torchtune's distributed recipes reduce-scatter every micro batch (no no_sync). accelerate's
    docs warn of this cost and name sync_each_batch as the way out (concept_guides/
    gradient_synchronization.md, accelerate#2531)."""
    if s.framework not in ("fsdp", "fsdp2") or s.grad_accum <= 1 or n <= 1 or s.sync_each_batch \
            or s.trainer == "torchtune":
        return 0.0
    if s.framework == "fsdp2" or shape is None or adapters_wrapped_apart(s):
        return p * trainable
    if not s.lora_rank:
        return p * total
    # LoRA under FSDP1: each decoder layer is a unit holding adapters; the root unit (embeddings,
    # LM head) requires grad only when modules_to_save trains one of them
    units = shape.num_hidden_layers * shape.layer_params() + trainable
    if s.modules_to_save:
        units += shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings else 2)
    return p * units


def accumulated_grads(s, shape, total: int, trainable: int, n: int, p: int, grads: float) -> float:
    """GPU bytes of gradients held from one micro batch's backward into the next micro batch's
    forward. FSDP: its unsharded gradients under no_sync (fsdp_accumulated_grads). One process or
    DDP: autograd adds each micro batch's gradient into .grad, and nothing frees it before the
    optimizer's step and zero_grad (the transformers Trainer's _inner_training_loop, Lightning
    Fabric, torchtune's single-device recipes), so with grad_accum > 1 every micro batch after
    the first runs its forward with all gradients (`grads`, as held after a backward) allocated;
    with one micro batch per step zero_grad(set_to_none) has freed them. optimizer_in_backward
    steps and frees each gradient as it is made."""
    if s.framework in ("fsdp", "fsdp2"):
        return fsdp_accumulated_grads(s, shape, total, trainable, n, p)
    if s.framework in ("torch", "ddp") and s.grad_accum > 1 and not s.optimizer_in_backward:
        return grads
    return 0.0


def adam_step_temporaries(s, pt: int, trainable: float, largest_tensor: int) -> float:
    """Bytes torch's AdamW allocates during its update, outside DeepSpeed (whose FusedAdam / CPU
    Adam update in place). s: a Setup; pt: bytes of a trainable parameter (= of its states).
    foreach: _multi_tensor_adam takes torch._foreach_sqrt(exp_avg_sqs) of every parameter of a
    device and dtype group at once, then divides and adds in place: one state-sized copy of all
    of them. single: exp_avg_sq.sqrt() and its quotient by bias_correction2_sqrt exist together,
    one tensor at a time. fused: no temporaries."""
    if s.optimizer == "paged_adamw_32bit":
        return 2 * pt * largest_tensor
    if s.optimizer != "adamw" or s.adam_impl == "fused":
        return 0.0
    return pt * trainable if s.adam_impl in ("foreach", "auto") else 2 * pt * largest_tensor


# torchao quantizes a weight to NF4 in chunks of 1,048,576 elements from 0.2.0 (CHUNK_SIZE in
# dtypes/nf4tensor.py, read in the 0.2.0 to 0.5.0 wheels); 0.1 compares the whole weight at once.
_NF4_CHUNKED_SINCE = "0.2.0"


def largest_linear(shape) -> int:
    """Elements of the model's largest linear weight."""
    return max(i * o for i, o in shape.linear_shapes().values())


def layer_linear_weights(shape) -> int:
    """Weights of one decoder layer's linear layers."""
    return sum(i * o for i, o in shape.linear_shapes().values())


def quantized_linears(s, shape) -> tuple[int, float, float]:
    """(weights, packed bytes, constant bytes) of the linears bitsandbytes quantizes: transformers'
    integration replaces every nn.Linear of the decoder; lm_head is skipped
    (get_keys_to_not_convert) and embeddings are not linear layers."""
    qn = shape.num_hidden_layers * layer_linear_weights(shape)
    rows = shape.num_hidden_layers * sum(o for _i, o in shape.linear_shapes().values())
    # LLaMA-Factory's default double_quantization; torchtune's NF4 is torchao's to_nf4, which
    # always quantises the block scales again to int8 (scaler_block_size 256)
    dq = s.double_quant if s.double_quant is not None else s.trainer in ("llamafactory", "torchtune")
    return (qn, quantized_data_bytes(qn, s.quantization),
            quant_constant_bytes(qn, s.quantization, double_quant=dq, rows=rows))


def whole_model_bytes(s, shape, total: int, p: int) -> float:
    """GPU bytes of the whole model as loaded: p per weight, bitsandbytes' linear weights packed
    with their quantization constants (the account expressed_states gives frozen weights)."""
    if shape is None or s.quantization == "none":
        return p * total
    qn, packed, constants = quantized_linears(s, shape)
    return p * (total - qn) + packed + constants


def nf4_load_bytes(s, shape, ms: ModelStates) -> float:
    """GPU bytes held while torchtune builds a QLoRA model with torchao 0.1 (0 otherwise).

    torchao 0.1's to_nf4 (dtypes/nf4tensor.py, quantize_tensor_nearest) compares every element
    with the 16 NF4 values at once: (value - nf4).abs() holds two [numel, 16] bf16 tensors next to
    the weight and its scaled copy, 2 + 2 + 32 + 32 = 68 bytes per element of the weight. torchtune
    quantizes each weight on the GPU as it builds the model (LoRALinear._create_weight_and_bias)
    and again in load_state_dict (its NF4 copy_ override moves the bf16 source to the GPU first);
    torchtune pinned torchao==0.1 from April to June 2024 (pyproject.toml). The last, largest
    weight is quantized with the rest of the model already built."""
    from ..pep440 import parse

    if s.trainer != "torchtune" or s.quantization != "4bit" or not s.torchao_version:
        return 0.0
    if parse(s.torchao_version) >= parse(_NF4_CHUNKED_SINCE):
        return 0.0
    return ms.params + 68 * largest_linear(shape)


def expressed_transients(s, shape, total: int, trainable: int, n: int, p: int, pt: int,
                         ms: ModelStates, largest_tensor: int, accum_grads: float = 0.0) -> dict:
    """GPU temporaries of the non-DeepSpeed settings, by phase {forward, backward, step}; "load":
    what loading the model holds on the GPU at once before training's own setup (a peak of its
    own, not added to the setup phase's states)."""
    t = {"load": 0.0, "forward": 0.0, "backward": 0.0, "step": 0.0}
    if shape is not None and s.quantization != "none":
        # bitsandbytes MatMul4Bit / MatMul8bitLt dequantize the weight of the running linear to
        # the compute dtype in forward and again in backward (F.dequantize_4bit(B, state))
        big = p * largest_linear(shape)
        t["forward"] += big
        t["backward"] += big
    if shape is not None and s.framework in ("fsdp", "fsdp2"):
        # one decoder layer is one FSDP unit (accelerate's TRANSFORMER_BASED_WRAP); the root unit
        # (embeddings, final norm, LM head) stays gathered through forward and backward, or only
        # the head where an untied embedding is a unit of its own (embedding_apart). The
        # running unit and the one prefetched next are unsharded in the compute dtype; in backward
        # the unit's unsharded gradient is the reduce-scatter input.
        unit = shape.layer_params()
        root = shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings or embedding_apart(s) else 2)
        unit_bytes = p * unit
        if s.quantization != "none":
            # the packed weights are what FSDP gathers (bnb_4bit_quant_storage), not p per weight
            lin = layer_linear_weights(shape)
            unit_bytes += quantized_data_bytes(lin, s.quantization) - p * lin
        gathered = 2 * unit_bytes + p * root
        t["forward"] += gathered
        # the unit's unsharded gradient (reduce-scatter input): the whole flat parameter under
        # FSDP1 (unless the adapters are units of their own), only trainable parameters under FSDP2
        whole_unit = not s.lora_rank or frozen_in_lora_units(s)
        unit_grad = unit if whole_unit else trainable / shape.num_hidden_layers
        if accum_grads:
            unit_grad = 0  # part of the accumulated unsharded gradients (fsdp_accumulated_grads)
        t["backward"] += gathered + p * unit_grad
        # FSDP1 (FlatParameter per unit) and FSDP2 (per-parameter DTensor shards) differ here only
        # by FSDP1's padding of each flat parameter to a multiple of the world size (< n elements)
    elif (shape is not None and s.framework in ("ddp", "torch") and s.lora_rank and s.quantization == "none"
          and s.precision != "fp32" and load_bytes(s, p) == 4):
        # frozen fp32 base weights under autocast: each linear's low-precision copy is made anew
        # (autocast caches casts of leaf tensors that require grad only) and autograd saves it for
        # its input's gradient, which LoRA needs from the first adapter on (bench/autocast_casts.py
        # measures both): without checkpointing every decoder linear and the head keep one; with
        # it, the head's (outside the checkpointed layers) and one recomputed layer's
        per_layer = layer_linear_weights(shape)
        head = shape.vocab_size * shape.hidden_size
        if s.gradient_checkpointing:
            t["forward"] += p * head
            t["backward"] += p * (head + per_layer)
        else:
            t["forward"] += p * (head + shape.num_hidden_layers * per_layer)
            t["backward"] += p * (head + shape.num_hidden_layers * per_layer)
    elif shape is not None and s.framework in ("ddp", "torch") and uses_master_weights(s) and not s.lora_rank:
        # fp32 weights under torch.autocast: every linear's low-precision weight copy is cached
        # for the forward and saved by autograd for backward (embedding lookups are not cast)
        emb = shape.vocab_size * shape.hidden_size
        t["forward"] += p * (trainable - emb)
        t["backward"] += p * (trainable - emb)
    if shape is not None:
        t["load"] = max(t["load"], nf4_load_bytes(s, shape, ms))
    if s.framework == "deepspeed" and s.zero_stage == 3 and not s.zero3_init:
        # without zero.Init every rank builds the whole model on its GPU before DeepSpeed
        # partitions it (and only then allocates the optimizer's partitions): in the compute
        # dtype, its linear weights packed where bitsandbytes quantizes them (transformers builds
        # a quantized model outside zero.Init, and bitsandbytes places it on the current device)
        t["load"] = whole_model_bytes(s, shape, total, p)
    if s.framework != "deepspeed" and not (s.framework in ("fsdp", "fsdp2") and s.fsdp_offload):
        shard = n if s.framework in ("fsdp", "fsdp2") else 1
        t["step"] += adam_step_temporaries(s, pt, trainable, largest_tensor) / shard
    return t
