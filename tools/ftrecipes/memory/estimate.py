"""Per-GPU memory by phase (setup, forward, backward, step) and category, and the verdict.

Phases follow the first training step, as a profiler sees it: torch and DeepSpeed create Adam's
states lazily inside the first step, so "setup" holds no optimizer states (ZeRO-3 before
DeepSpeed 0.14 created them in its constructor; see _resident). gpu_peak_bytes also covers the steady state (later
steps run forward/backward with those states resident). Phase totals are allocated memory plus
the CUDA context; the verdict is about the card figure, which adds the allocator's reserve.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from . import catalog
from .activations import (ALL_LINEAR, activations, bnb_kept_input_bytes, lora_params_per_layer, lora_targets,
                          modules_to_save_split)
from . import trl_head
from .deepspeed_transients import (Transients, gathers_allocate, recompute_fails, recompute_pinned, resolve,
                                   transients)
from .host import GiB, host_bytes
from .model_states import (accelerate_native_amp, accumulated_grads, adapters_in_fp32, check_expressed,
                           checkpoint_reentrant, expressed_states, expressed_transients, hooks_inside_checkpoint,
                           kbit_note, kbit_prepared, load_bytes, rope_table_bytes, stale_optimizer_copy,
                           uses_master_weights, zero_paper_model_states)

PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
TIGHT_HEADROOM = 0.10
# CUDA context of one process: not visible to torch's allocator but taken from the GPU.
# ~0.5-1 GiB on A100/H100 (NOTES.md); we use 0.75 GiB for every GPU generation.
CUDA_CONTEXT = int(0.75 * GiB)
# The caching allocator's reserved-but-unallocated memory (see _reserved): a fixed part and a
# part per byte of short-lived tensors at the peak. Both fitted by bench/fit_allocator.py on
# bench/published_memory's train split, never on its held-out part. Fitted on nvidia-smi and
# max_memory_reserved figures, the fixed part also absorbs what no term names (cuBLAS
# workspaces, a context larger than CUDA_CONTEXT).
ALLOCATOR_FIXED = int(0.50 * GiB)
ALLOCATOR_SLACK = 0.30
# With samples of different lengths every step frees and re-allocates its largest blocks, the
# V-wide logits and loss tensors, in a size set by its token count; a larger step cannot reuse
# the cached smaller ones and a smaller one splits the larger ones, so about this many times
# those blocks stay cached beside the live ones. Fitted like the two above. Torch frees unused
# cached segments and retries before it raises OOM (c10/cuda/CUDACachingAllocator.cpp,
# DeviceCachingAllocator::malloc: release_cached_blocks, then alloc_block again), so this part
# counts in reserved and nvidia-smi figures, never in the verdict.
ALLOCATOR_VARYING = 1.80
# Without gradient checkpointing, the share of the saved activations that counts in the churn
# above. Our own H100 runs put it near 0.1 (stack-ordered blocks leave few free pieces), but the
# constants those runs give flag fewer of the published train split's reported OOMs, so the
# published fit, which counted them in full, stays (bench/fit_allocator_gpu.md).
ALLOCATOR_SAVED = 1.0
# Under expandable segments, the share of the two cached parts above (fragmented and varying)
# that reserved and nvidia-smi figures still show. Fitted on the train split's runs that used
# them (bench/fit_allocator.py --expandable; output in bench/fit_allocator_expandable.md).
ALLOCATOR_EXPANDABLE = 0.10
# NCCL's own buffers (per peer and channel, NCCL_BUFFSIZE) are cudaMalloc'ed by NCCL, outside
# torch's caching allocator: nvidia-smi shows them, max_memory_reserved does not, and a process
# alone in its communicator has no peers. Fitted like the constants above.
NCCL_BUFFERS = int(2.00 * GiB)
CATEGORIES = ("params", "grads", "master", "optimizer", "activations", "temporaries", "runtime", "generation")


@dataclass
class Setup:
    """Everything the estimate depends on. Built by estimate_from_values / from_deepspeed_config."""

    model: str | None = None          # catalog name or config.json path
    params: int | None = None         # used when no model shape is known
    gpu: str = "A100-80GB"
    gpus: int = 1                      # training processes (one GPU each) = data-parallel size
    gpus_per_node: int | None = None   # physical GPUs per node (default: what the jobs need)
    nodes: int = 1
    seq_len: int = 2048
    micro_batch: int = 1
    grad_accum: int = 1                # micro batches per optimizer step
    sync_each_batch: bool = False      # accelerate's GradientAccumulationPlugin(sync_each_batch=True):
                                       # FSDP reduce-scatters every micro batch instead of no_sync
    precision: str = "bf16"
    zero_stage: int = 0
    offload_optimizer: str = "none"
    offload_param: str = "none"
    pin_memory: bool = True
    gradient_checkpointing: bool = False
    checkpoint_reentrant: bool | None = None  # torch.utils.checkpoint use_reentrant as the config
                                              # states it; None: the trainer's default
                                              # (model_states.checkpoint_reentrant)
    attn_implementation: str = "sdpa"
    lora_rank: int = 0
    lora_target: str = "all"
    lora_dropout: float = 0.0          # PEFT's LoRA dropout probability (its default: 0, no dropout)
    method: str = "sft"                # sft | dpo | grpo
    framework: str = "deepspeed"       # deepspeed | ddp | fsdp | fsdp2 | torch (one process, no wrapper)
    trainer: str = ""                  # hf | trl | llamafactory | openrlhf | accelerate | axolotl | torchtune | swift |
                                       # deepspeed: whose quirks apply (model_states.TRAINERS; "": none in particular)
    adapter_fp32: bool | None = None   # LoRA adapter weights in fp32 (PEFT default); None: fp32
                                       # unless DeepSpeed casts the module to the compute dtype
    ds: dict = field(default_factory=dict)  # DeepSpeed bucket / live-parameter settings
    # GRPO generation (TRL): "server" = trl vllm-serve on vllm_gpus GPUs; "colocate" = vLLM inside
    # each training process; "none" = transformers generate.
    vllm_mode: str = "none"
    vllm_gpus: int = 0
    vllm_gpu_memory_utilization: float | None = None
    dpo_reference: str = "auto"        # auto | model (separate ref copy) | adapter (LoRA disabled) | precomputed
                                       # (no reference model: precomputed log-probs, GRPO with beta 0)
    host_ram_bytes: int | None = None  # per node, for the host verdict
    cuda_context_bytes: int = CUDA_CONTEXT
    deepspeed_version: str = ""       # e.g. "0.19.8"; see deepspeed_transients.py for what depends on it
    accelerate_version: str = ""      # e.g. "1.11.0"; "": the newest the trainer accepts (model_states.accelerate_version)
    mixed_precision: str = ""         # accelerate's mixed_precision: no | bf16 | fp16; "": on for bf16/fp16
                                      # training unless master_weights is false (model_states.mixed_precision_on)
    # Settings beyond DeepSpeed's (model_states.expressed_states / activations.loss_terms)
    quantization: str = "none"         # none | 4bit | 8bit: bitsandbytes base weights (QLoRA)
    double_quant: bool | None = None   # 4-bit absmax quantised again; None: LLaMA-Factory and torchtune yes, others no
    master_weights: bool | None = None  # fp32 trainable weights; None: DeepSpeed/LLaMA-Factory yes, else no
    optimizer: str = "adamw"           # adamw | adamw_8bit | paged_adamw_8bit | paged_adamw_32bit | sgd | adafactor
    adam_impl: str = "auto"            # how torch's AdamW updates: foreach | fused | single; auto:
                                       # foreach outside DeepSpeed, DeepSpeed's own optimizer under it
    loss_kernel: str = "none"          # none | liger | chunked (fused / chunked cross-entropy)
    modules_to_save: list = field(default_factory=list)  # LoRA: modules trained in full (embed_tokens, lm_head)
    fsdp_offload: bool = False         # FSDP CPU offload of parameters, gradients and optimizer
    zero3_init: bool = True            # ZeRO-3 model built under zero.Init (false: whole model per GPU first)
    image_slices: int = 0              # VLM: image slices per sample through the vision tower
    # VLM full fine-tuning: parts left frozen (LLaMA-Factory freeze_vision_tower and
    # freeze_multi_modal_projector, both true by default; MiniCPM-V's finetune.py trains them)
    freeze_vision_tower: bool = False
    freeze_projector: bool = False
    load_dtype: str = ""               # bf16 | fp16 | fp32: dtype the weights are loaded in without
                                       # DeepSpeed ("": the compute precision; TRL loads fp32)
    varying_lengths: bool = False      # steps see different sequence lengths (dynamic padding of
                                       # unpacked data); false: packed or padded to seq_len
    checkpoint_offload: bool = False   # gradient checkpointing that parks each layer's input in host
                                       # RAM (Unsloth's "unsloth" mode, LLaMA-Factory use_unsloth_gc)
    layer_kernels: str = "hf"          # hf | unsloth | liger: what runs the norms, MLP activation and LoRA
                                       # layers (Unsloth's and Liger's own autograd functions keep less for
                                       # backward; activations.LAYER_KERNELS)
    optimizer_in_backward: bool = False  # each parameter stepped and its gradient freed as soon as it
                                         # is accumulated (torchtune optimizer_in_bwd)
    transformers_version: str = ""     # e.g. "4.40.2"; "": a current release (model_states.ROPE_TABLES_UNTIL)
    trl_version: str = ""              # trainer trl: the release ("": trl_head.TRL_DEFAULT), which decides
                                       # the LM-head / loss path (trl_head.loss_path)
    loss_type: str = ""                # TRL SFTConfig.loss_type as the config states it ("": unset)
    torchao_version: str = ""          # trainer torchtune, 4bit: torchao's release, which decides how NF4
                                       # quantization at load allocates ("": a current one; model_states.nf4_load_bytes)
    bitsandbytes_version: str = ""     # quantization: the bitsandbytes release ("": a current one), which
                                       # decides what its layers keep for backward (activations.bnb_kept_input_bytes)
    use_orig_params: bool | None = None  # FSDP1's use_orig_params (None: the trainer's default; False forces
                                         # LoRA adapters into FSDP units of their own, model_states.adapters_wrapped_apart)
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set by the user, by
                                       # `import unsloth`, by llamafactory-cli >= 0.9.3's torchrun launch):
                                       # the allocator can hand back the free pages of partly used segments
    kbit_prepared: bool | None = None  # PEFT's prepare_model_for_kbit_training (prepare_model_for_int8_training from
                                       # PEFT 0.3.0) ran on the bitsandbytes model: norms in fp32, so the hidden
                                       # states between and inside the layers are fp32 (activations.activations'
                                       # stream_bytes); None: as the trainer does it (model_states.kbit_prepared)

    def shape(self):
        return catalog.model(self.model) if self.model else None


@dataclass
class Phase:
    name: str
    by_category: dict

    @property
    def total_bytes(self) -> float:
        return sum(self.by_category.values())


@dataclass
class Result:
    setup: Setup
    gpu_name: str
    gpu_bytes: int
    params: int
    trainable_params: int
    phases: list
    gpu_peak_bytes: float
    peak_phase: str
    host: dict
    host_peak_bytes: float
    verdict: str
    host_verdict: str | None
    notes: list
    saved_activation_bytes: float
    model_states_bytes: float | None = None
    remedies: list = field(default_factory=list)
    # settings the run fails with whatever memory it has (the verdict is about memory only)
    errors: list = field(default_factory=list)
    # torch.cuda.max_memory_allocated / max_memory_reserved of a training process, and what the
    # card holds besides (CUDA context, NCCL, a generation engine): card = what nvidia-smi shows,
    # the figure the verdict is about. gpu_peak_bytes = allocated + context + generation.
    gpu_allocated_bytes: float = 0.0
    gpu_reserved_bytes: float = 0.0
    cuda_context_bytes: float = 0.0
    gpu_card_bytes: float = 0.0
    # the card's figure had the allocator kept every cached block: above the card, the run fits
    # only because PyTorch frees its cache and retries a failed cudaMalloc (slow, and fragile)
    gpu_demand_bytes: float = 0.0
    # what the verdict is about: the card's figure less the cached blocks PyTorch hands back and
    # retries with before it raises OOM (equal to gpu_card_bytes when there are none)
    gpu_needed_bytes: float = 0.0

    def to_json(self) -> dict:
        return {
            "gpu": self.gpu_name, "gpu_bytes": self.gpu_bytes,
            "params": self.params, "trainable_params": self.trainable_params,
            "gpu_peak_bytes": round(self.gpu_peak_bytes), "peak_phase": self.peak_phase,
            "gpu_allocated_bytes": round(self.gpu_allocated_bytes),
            "gpu_reserved_bytes": round(self.gpu_reserved_bytes),
            "cuda_context_bytes": round(self.cuda_context_bytes), "gpu_card_bytes": round(self.gpu_card_bytes),
            "gpu_demand_bytes": round(self.gpu_demand_bytes), "gpu_needed_bytes": round(self.gpu_needed_bytes),
            "host_peak_bytes": round(self.host_peak_bytes), "verdict": self.verdict,
            "host_verdict": self.host_verdict,
            "phases": [{"name": p.name, "total_bytes": round(p.total_bytes),
                        "by_category": {k: round(v) for k, v in p.by_category.items() if v}} for p in self.phases],
            "host": {k: round(v) for k, v in self.host.items()},
            "saved_activation_bytes": round(self.saved_activation_bytes),
            "remedies": self.remedies, "notes": self.notes, "errors": self.errors,
            "setup": asdict(self.setup),
        }


def verdict(peak: float, capacity: float) -> str:
    if peak > capacity:
        return "oom"
    return "tight" if capacity - peak < TIGHT_HEADROOM * capacity else "fits"


def _counts(s: Setup):
    shape = s.shape()
    if shape is None:
        if not s.params:
            raise ValueError("need a model (catalog name or config.json) or a parameter count")
        return None, s.params, s.params if not s.lora_rank else 0
    total = shape.param_count()
    if s.lora_rank:
        trainable = shape.num_hidden_layers * lora_params_per_layer(shape, s.lora_rank, lora_targets(s.lora_target, shape.model_type))
        copied, in_place = modules_to_save_split(shape, s.modules_to_save)
        return shape, total + trainable + copied, trainable + copied + in_place
    v = shape.vision
    frozen = (v.tower_params() if v and s.freeze_vision_tower else 0) + (
        v.projector_params() if v and s.freeze_projector else 0)
    return shape, total, total - frozen


@dataclass
class _Plan:
    """A Setup resolved into what every phase needs: counts, placement, model states, buffers."""

    s: Setup
    gpu: object
    p: int
    shape: object
    total: int
    trainable: int
    n: int
    deepspeed: bool
    stage: int
    off_opt: str
    off_param: str
    pt: int                   # bytes per trainable parameter (fp32 LoRA adapters)
    adapter_fp32: bool
    ms: object
    notes: list
    errors: list = field(default_factory=list)
    ref_mode: str = "auto"
    ref_params: float = 0.0
    act: object = None
    largest_tensor: int = 0   # elements of the biggest trainable tensor (optimizer temporaries)
    tr: Transients = None
    ds: dict = field(default_factory=dict)  # DeepSpeed's effective bucket settings
    base: dict = field(default_factory=dict)
    resident: dict = field(default_factory=dict)  # states allocated before the first forward
    xt: dict = field(default_factory=dict)  # temporaries of the non-DeepSpeed settings, by phase
    loss_kernel: str = "none"  # the LM-head / loss path the trainer really runs (trl_head.loss_path)
    setup_cache: float = 0.0   # freed in setup but kept reserved by the allocator (_setup_transient)
    accum_grads: float = 0.0   # gradients held between micro batches (model_states.accumulated_grads)
    output_copy: float = 0.0   # accelerate's fp32 copy of the returned logits (_forward_extra)

    def phase(self, name, **cats) -> Phase:
        d = {c: 0.0 for c in CATEGORIES}
        d.update(self.base)
        for k, v in cats.items():
            d[k] = d.get(k, 0.0) + v
        # a phase never holds less of a state than was allocated up front
        for k, v in self.resident.items():
            d[k] = max(d[k], v)
        return Phase(name, d)


def _resolve(s: Setup) -> _Plan:
    """Setup: where each model state lives, and the warnings about settings DeepSpeed ignores."""
    gpu = catalog.gpu(s.gpu)
    p = PRECISION_BYTES[s.precision]
    shape, total, trainable = _counts(s)
    deepspeed = s.framework == "deepspeed"
    stage = s.zero_stage if deepspeed else 0
    notes: list[str] = check_expressed(s)
    if s.precision == "bf16" and not gpu.bf16:
        notes.append(f"{gpu.name} has no bf16 support (needs compute capability >= 8.0): use fp16")
    if stage < 3 and s.offload_param != "none":
        notes.append("offload_param only applies to ZeRO stage 3; DeepSpeed ignores it here")
    off_param = s.offload_param if stage == 3 else "none"
    off_opt = s.offload_optimizer if stage >= 1 else "none"
    if s.offload_optimizer != "none" and stage == 0:
        notes.append("offload_optimizer needs ZeRO stage >= 1; ignored")
    adapter_fp32 = adapters_in_fp32(s)
    pt = 4 if (s.lora_rank and adapter_fp32) or (not deepspeed and not s.lora_rank and uses_master_weights(s)) else p
    n = max(1, s.gpus)
    ms = expressed_states(s, shape, total, trainable, n, stage, p, offload_optimizer=off_opt,
                          offload_param=off_param, pt=pt)
    if deepspeed and s.precision == "fp32":
        ms.optimizer = 8 * trainable / (n if stage >= 1 else 1) if off_opt == "none" else 0
    if deepspeed and stage in (1, 2) and off_opt != "none":
        # stage_1_and_2.py copy_grads_in_partition(): with offload_optimizer every reduced gradient
        # goes straight to the fp32 partition in host memory and is cleared on the GPU
        # (clear_grad_attribute); no low-precision gradient partition stays there. What remains on
        # the GPU (ipg buckets, the staging buffer) is in deepspeed_transients.
        ms.grads = 0.0
        if s.grad_accum > 1:
            # async_accumulate_grad_in_cpu_via_gpu(): between accumulation boundaries each gradient
            # of the partition is summed in a host buffer of the parameter dtype
            # (accumulated_grads_in_cpu, pinned with pin_memory), kept for the run
            ms.host_grads += p * trainable / n
    c = _Plan(s=s, gpu=gpu, p=p, shape=shape, total=total, trainable=trainable, n=n, deepspeed=deepspeed,
              stage=stage, off_opt=off_opt, off_param=off_param, pt=pt, adapter_fp32=adapter_fp32, ms=ms,
              notes=notes)
    _reference_model(c)
    return c


# the DeepSpeed an unstated deepspeed_version stands for: the one the stacks pin
DEEPSPEED_DEFAULT = "0.19.8"


def _version(v: str) -> tuple:
    """"0.14.4" -> (0, 14, 4); an unstated version is DEEPSPEED_DEFAULT."""
    parts = []
    for x in (v or DEEPSPEED_DEFAULT).split(".")[:3]:
        digits = "".join(ch for ch in x if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts + [0] * (3 - len(parts)))


def _resident(c: _Plan) -> dict:
    """States ZeRO-3 allocates before the first forward (deepspeed/runtime/zero/stage3.py): since
    0.6.0 (PR #1453) grad_partitions_flat_buffer holds the whole gradient partition, allocated in
    __init__ on the optimizer's device and kept for the run. Adam's states: before PR #5104
    (released in 0.14) initialize_optimizer_states() stepped Adam once on zero gradients in
    __init__, so they existed from setup on; from then on (read in 0.15.4 to 0.19.8) it only
    attaches a zero gradient and the states are created lazily in the first step, like ZeRO-1/2
    (stage_1_and_2.py) and torch. Measured on an H100 (bench/gpu_calibrate.md, DeepSpeed 0.19.8):
    full ZeRO-3 holds parameters, fp32 master and the gradient buffer after setup, and Adam's
    states appear in the first step."""
    if not (c.deepspeed and c.stage == 3 and c.off_opt == "none"):
        return {}
    version = _version(c.s.deepspeed_version)
    resident = {} if version >= (0, 14, 0) else {"optimizer": c.ms.optimizer}
    if version >= (0, 6, 0):
        resident["grads"] = c.ms.grads
    return resident


def _setup_transient(c: _Plan) -> tuple[float, float]:
    """(transient, cache): GPU bytes DeepSpeed ZeRO-1/2 holds for a moment in __init__ (stage_1_and_2.py), on top of
    the parameters and the fp32 master partition that stay:
    - from 0.19.0 the bit16 parameters are flattened on the GPU when the card has room for a second
      copy (flatten_on_accelerator: available_memory() >= the flat buffer), else on the CPU as
      before: a second p * trainable while the originals still exist;
    - the fp32 master partition is made by clone() of the bit16 partition, then .to(fp32);
    - initialize_optimizer_states() gives the fp32 partition a zero gradient of its own size,
      dropped again at the end of __init__ unless the optimizer is offloaded (then it lives in
      host memory).
    Measured on an H100 with 0.19.8 (bench/gpu_calibrate.md): Llama-3-8B, one GPU, 2P + 8P
    after setup's peak (74.8 GiB), and with Adam offload 2 x 2P for the flatten."""
    if not (c.deepspeed and c.stage in (1, 2)):
        return 0.0, 0.0
    flat = c.p * c.trainable
    version = _version(c.s.deepspeed_version)
    # the bit16 partition is cloned before the fp32 cast; with offload, releases before 0.18.4
    # moved it to the CPU first (.to(self.device).clone()), later ones clone on the GPU
    # (.detach().clone().to(device=self.device)), read in 0.18.0 and 0.18.4
    clone = c.p * c.trainable / c.n if c.off_opt == "none" or version >= (0, 18, 4) else 0.0
    zero_grad = 4 * c.trainable / c.n if c.off_opt == "none" else 0.0
    candidates = [clone, zero_grad, c.tr.offload_staging]  # the staging buffer is made last
    # Every one of these is a single block larger than any parameter, so none fits in the blocks
    # the allocator keeps from freed tensors: each takes a new segment and all stay reserved
    # (measured: Adam offload, 3 x 2P reserved after setup). The cache returned is what the allocator
    # then holds beyond setup's allocated peak; it frees that before it would raise an OOM.
    cache = clone + zero_grad
    if version >= (0, 19, 0):
        free = c.gpu.memory_bytes - c.s.cuda_context_bytes - c.ms.params
        if free >= flat:
            # the master partition does not exist yet while the flat copy is made; afterwards
            # the originals' blocks (freed when the parameters become views of the copy) stay cached
            candidates.append(flat - c.ms.master)
            cache += flat
    return max(candidates), max(0.0, cache - max(candidates))


# TRL's GRPOConfig.beta defaults to 0.04 up to 0.18.2 and to 0.0 from 0.19.0 (grpo_config.py, read
# in the wheels); with beta 0 GRPOTrainer loads no reference model (self.ref_model = None)
GRPO_NO_REFERENCE_SINCE = "0.19.0"


def _reference_model(c: _Plan) -> None:
    """DPO, and GRPO with a KL term: the reference model. With LoRA the reference is the base model
    with adapters disabled (TRL and LLaMA-Factory), so it costs no extra weights; otherwise a
    second frozen copy, sharded where the trainer prepares it with ZeRO-3 or FSDP (TRL's
    prepare_deepspeed / accelerator.prepare_model(evaluation_mode=True)), whole per GPU otherwise."""
    s = c.s
    c.ref_mode = s.dpo_reference
    if s.method == "dpo" and c.ref_mode == "auto":
        c.ref_mode = "adapter" if s.lora_rank else "model"
    if s.method == "grpo" and c.ref_mode == "auto":
        c.ref_mode = ("precomputed" if trl_head.at_least(trl_head.release(s), GRPO_NO_REFERENCE_SINCE)
                      else "adapter" if s.lora_rank else "model")
    if s.method in ("dpo", "grpo") and c.ref_mode == "model":
        sharded = c.stage == 3 or s.framework in ("fsdp", "fsdp2")
        # a copy of the policy as loaded (create_reference_model deep-copies it, from_pretrained
        # reads the same model_init_kwargs); DeepSpeed's engine casts it to the compute dtype
        c.ref_params = load_bytes(s, c.p) * c.total / (c.n if sharded else 1)
        if c.stage == 3 and c.off_param != "none":
            c.ms.host_params += c.ref_params
            c.ref_params = 0.0


def _buffers(c: _Plan) -> None:
    """Activations per token and DeepSpeed's transient buffers, which the phases then combine."""
    s, shape = c.s, c.shape
    c.loss_kernel, note = trl_head.loss_path(s.trainer, s.method, trl_head.release(s), s.loss_kernel, s.loss_type)
    if note:
        c.notes.append(note)
    if s.layer_kernels == "unsloth" and c.loss_kernel == "none":
        # Unsloth's causal-LM forward computes the loss itself (fast_cross_entropy_loss,
        # unsloth/kernels/cross_entropy_loss.py: the p-byte logits and a logsumexp saved, the
        # gradient written into the logits): transformers' loss never runs
        c.loss_kernel = "chunked"
    if shape is not None:
        prepared = kbit_prepared(s)
        c.act = activations(shape, s.seq_len, s.micro_batch, c.p, lora_rank=s.lora_rank,
                            lora_target=s.lora_target, gradient_checkpointing=s.gradient_checkpointing,
                            attn_implementation=s.attn_implementation,
                            sequences_per_sample=2 if s.method == "dpo" else 1, adapter_fp32=c.adapter_fp32,
                            loss_kernel=c.loss_kernel, image_slices=s.image_slices,
                            vision_frozen=(s.freeze_vision_tower, s.freeze_projector),
                            checkpoint_offload=s.checkpoint_offload, head_weight_bytes=_head_weight_bytes(c),
                            lora_dropout=s.lora_dropout > 0,
                            transformers_loss=s.transformers_version if _model_computes_loss(s) else None,
                            quantized_keeps=bnb_kept_input_bytes(s.quantization, s.bitsandbytes_version, c.p),
                            layer_kernels=s.layer_kernels, stream_bytes=4 if prepared else 0)
        note = kbit_note(s, prepared)
        if note:
            c.notes.append(note)
    else:
        c.notes.append("no architecture given (--params only): activations not modelled")
    largest_gather = 0  # elements ZeRO-3 must gather at once
    if shape is not None:
        largest_gather = max(shape.layer_params(), shape.vocab_size * shape.hidden_size)
        c.largest_tensor = shape.vocab_size * shape.hidden_size if not s.lora_rank else max(
            s.lora_rank * (i + o) for (i, o) in shape.linear_shapes().values())
    if s.optimizer_in_backward:
        # torchtune's register_optim_in_bwd_hooks (training/memory.py): a post-accumulate-grad hook
        # per parameter runs that parameter's optimizer step and zero_grad(set_to_none), so one
        # gradient, at most the largest, exists at a time instead of all of them
        c.ms.grads = min(c.ms.grads, c.pt * (c.largest_tensor or c.trainable))
    c.ds, ds_notes = resolve(s.ds, shape.hidden_size if shape is not None else None, s.trainer)
    if c.deepspeed:
        c.notes.extend(ds_notes)
        c.tr = transients(c.ds, stage=c.stage, n=c.n, p=c.p, trainable=c.trainable,
                          largest_gather=largest_gather, largest_param=c.largest_tensor,
                          offload_optimizer=c.off_opt, adam_impl=s.adam_impl if s.optimizer == "adamw" else "fused",
                          offload_param=c.off_param)
        if s.gradient_checkpointing and shape is not None:
            _recompute_holds(c, shape)
    else:
        c.tr = Transients()
    c.accum_grads = accumulated_grads(s, shape, c.total, c.trainable, c.n, c.p, c.ms.grads)
    c.xt = expressed_transients(s, shape, c.total, c.trainable, c.n, c.p, c.pt, c.ms, c.largest_tensor,
                                accum_grads=c.accum_grads)


# how each trainer is told to checkpoint reentrant, for the CheckpointError's fix
_REENTRANT_SETTING = {"llamafactory": "use_reentrant_gc: true",
                      "openrlhf": "--model.gradient_checkpointing_reentrant, --gradient_checkpointing_use_reentrant "
                                  "before OpenRLHF 0.10.2",
                      "": "gradient_checkpointing_kwargs: {use_reentrant: true}"}


def _recompute_holds(c: _Plan, shape) -> None:
    """ZeRO-3 weights a checkpoint's recompute leaves gathered through backward, and the
    recompute that cannot run at all (deepspeed_transients.recompute_pinned / recompute_fails)."""
    s = c.s
    if c.stage != 3:
        return
    version = _version(s.deepspeed_version)
    reentrant = checkpoint_reentrant(s, shape.model_type)
    frozen = bool(s.lora_rank)
    # the failure was run with bf16 frozen weights only; a 4-bit base under ZeRO-3 with
    # non-reentrant checkpointing on 0.15.4 trained to the end (philschmid's "fine-tune LLMs in
    # 2025" Q-LoRA runs on 4 and 8 L4s), so the rule claims nothing for a quantized base
    if s.quantization == "none" and recompute_fails(version, reentrant=reentrant, frozen=frozen):
        c.errors.append(f"DeepSpeed {s.deepspeed_version or DEEPSPEED_DEFAULT} ZeRO-3 with frozen base weights and "
                        "non-reentrant gradient checkpointing raises CheckpointError in the first backward (the "
                        "frozen weights are partitioned again before the recompute): use reentrant checkpointing "
                        f"({_REENTRANT_SETTING.get(s.trainer, _REENTRANT_SETTING[''])}) or DeepSpeed >= 0.19.3")
        return
    if not gathers_allocate(c.n, c.off_param) or (frozen and s.quantization != "none"):
        # nothing is held where nothing is gathered (one GPU, partitions used in place); a
        # quantized base's packing under ZeRO-3 was not measured
        return
    c.tr.recompute_pinned = recompute_pinned(
        # hooks_inside_checkpoint resolves the transformers release from the key histories, which the
        # framework venvs that run bench/gpu_calibrate.py lack: asked only where the answer matters
        version, reentrant=reentrant, hooks_inside=reentrant and frozen and hooks_inside_checkpoint(s),
        frozen=frozen,
        layer_bytes=c.p * shape.num_hidden_layers * shape.layer_params())
    if not c.tr.recompute_pinned:
        return
    held = f"({c.tr.recompute_pinned / GiB:.1f} GiB per GPU)"
    if reentrant:
        c.notes.append(f"DeepSpeed {s.deepspeed_version or DEEPSPEED_DEFAULT} under reentrant checkpointing keeps every "
                       f"layer's frozen weights gathered until backward ends {held}; non-reentrant checkpointing "
                       "(LLaMA-Factory use_reentrant_gc: false, elsewhere gradient_checkpointing_kwargs "
                       "use_reentrant: false; not under TRL >= 1.9 with PEFT), "
                       "DeepSpeed < 0.19.3 or transformers >= 5.23 avoids it")
    else:
        c.notes.append(f"DeepSpeed {s.deepspeed_version} under non-reentrant checkpointing keeps every layer's "
                       f"weights gathered until backward ends {held} (DeepSpeed#7116, fixed in 0.16.8): "
                       "use DeepSpeed >= 0.16.8 or reentrant checkpointing")


def _head_weight_bytes(c: _Plan) -> int:
    """Bytes per element of the LM head's weight when it trains, else 0 (LoRA leaves it frozen
    unless modules_to_save names it, or names the embedding it is tied to)."""
    s, shape = c.s, c.shape
    if not s.lora_rank:
        return c.pt
    heads = {"lm_head", "output", "score"} | ({"embed_tokens", "wte", "word_embeddings"}
                                              if shape is not None and shape.tie_word_embeddings else set())
    return c.p if heads & {m.strip() for m in s.modules_to_save or ()} else 0


def _runtime_reserve(c: _Plan) -> dict:
    """Memory held outside training's tensors in every phase: CUDA context and a generation engine."""
    s, gpu = c.s, c.gpu
    generation = 0.0
    if s.method == "grpo" and s.vllm_mode == "server":
        per_node = s.gpus_per_node or (s.gpus + s.vllm_gpus)
        if s.gpus + s.vllm_gpus > per_node * s.nodes:
            util = 0.9 if s.vllm_gpu_memory_utilization is None else s.vllm_gpu_memory_utilization
            generation = util * gpu.memory_bytes
            c.notes.append(f"trl vllm-serve reserves {util:.0%} of every GPU it runs on and shares GPUs with "
                           f"training ({s.vllm_gpus} serving + {s.gpus} training > {per_node * s.nodes} GPUs)")
    elif s.method == "grpo" and s.vllm_mode == "colocate":
        util = 0.3 if s.vllm_gpu_memory_utilization is None else s.vllm_gpu_memory_utilization
        generation = util * gpu.memory_bytes
        c.notes.append(f"colocated vLLM reserves {util:.0%} of each training GPU")
    tables, note = rope_table_bytes(s, c.shape, c.p)
    if note:
        c.notes.append(note)
    stale = 0.0
    if stale_optimizer_copy(s):
        stale = (c.pt if s.lora_rank else load_bytes(s, c.p)) * c.trainable
        c.notes.append(f"transformers {s.transformers_version} builds the optimizer before FSDP wraps the model: the "
                       f"first optimizer keeps {stale / GiB:.2f} GiB of unwrapped weights on every GPU "
                       "(transformers#25580; fixed in 4.32 and again in 4.38)")
    return {"params": c.ms.params + c.ref_params + tables + stale, "runtime": s.cuda_context_bytes, "generation": generation,
            "grads": c.ms.comm_buffers}


def _model_computes_loss(s: Setup) -> bool:
    """The causal-LM loss is transformers' own (the model gets labels): SFT outside OpenRLHF, whose
    trainer computes GPTLMLoss from the returned logits. DPO/GRPO trainers compute log-probs."""
    return s.method == "sft" and s.trainer != "openrlhf"


def _tokens(s: Setup) -> int:
    """Tokens of one micro batch through the model (DPO runs chosen and rejected together)."""
    return s.seq_len * s.micro_batch * (2 if s.method == "dpo" else 1)


def _forward_extra(c: _Plan) -> float:
    """Forward temporaries on top of the saved activations (logits, a reference model's outputs)."""
    s, act = c.s, c.act
    if act is None:
        return 0.0
    extra = act.forward_transient
    if s.method == "dpo" and c.ref_mode != "precomputed":
        # TRL/LLaMA-Factory compute the reference log-probs after the policy forward, under
        # no_grad: its logits (p*V), their fp32 copy (4V) and log-probs (4V) per token then sit on
        # top of the policy's saved activations (which already include the policy's log-probs).
        tokens = _tokens(s)
        extra = act.forward_transient + 4 * c.shape.vocab_size * tokens
        if c.loss_kernel in trl_head.TRL_KERNELS:
            # TRL's reference forward runs the same chunked head under no_grad, after the policy's
            # tiles are freed: its own tiles are all it adds
            extra = act.forward_transient
        if s.trainer == "llamafactory":
            # CustomDPOTrainer.concatenated_forward returns the policy's fp32 logits for its
            # metrics, so they are still alive while the reference model runs
            extra += 4 * c.shape.vocab_size * tokens
    if c.loss_kernel == "chunked" and accelerate_native_amp(s):
        # accelerate's native AMP (bf16/fp16 outside DeepSpeed) wraps the model's forward in
        # convert_outputs_to_fp32 (accelerator.py prepare_model, read in 0.30.1 and 1.12.0), so the
        # p-byte logits a chunked kernel keeps and returns get an fp32 copy at the end of forward,
        # alive until the Trainer's compute_loss returns. transformers' own loss returns logits
        # too, but its fp32 copy of them is freed by then, so "none" peaks no higher.
        c.output_copy = 4 * c.shape.vocab_size * _tokens(s)
        extra = max(extra, c.output_copy)
    if s.gradient_checkpointing:
        # a checkpointed layer still materialises its activations while it runs (upper bound:
        # all of them at once); matters when they outgrow the logits, e.g. eager attention's s*s
        extra = max(extra, act.recompute_layer)
    return extra


def _forward(c: _Plan) -> Phase:
    saved = c.act.saved if c.act else 0.0
    # from the second micro batch of a step on, FSDP's accumulated unsharded gradients are held
    return c.phase("forward", master=c.ms.master, activations=saved, grads=c.accum_grads,
                   temporaries=_forward_extra(c) + c.tr.gathered_params + c.tr.offload_staging + c.xt["forward"])


def _backward(c: _Plan) -> Phase:
    """Walks the layers top-down; saved activations shrink while gradients grow, so the peak is at
    the start (activations + loss gradients), at a layer (plus its temporaries and, with
    checkpointing, its recomputed activations) or at the end (all gradients)."""
    s, act, shape, p = c.s, c.act, c.shape, c.p
    # Gradients in flight: stage 0/1 accumulate full grads (p*trainable); stage 2/3 keep a
    # partition plus the reduce bucket. ms.grads already holds the steady value.
    grads_full = c.ms.grads
    buffers = c.tr.backward_buckets + c.tr.gathered_params + c.tr.offload_staging + c.xt["backward"]
    # weights a recompute pins (ZeRO-3: reentrant with frozen weights from 0.19.3, non-reentrant in
    # 0.16.0-0.16.7) pile up layer by layer; by the bottom layer every one is gathered, with the LM
    # head still held from the top (measured: layers + head, 93 % of the model), which outgrows
    # the usual live window
    pinned = c.tr.recompute_pinned + (p * shape.vocab_size * shape.hidden_size if c.tr.recompute_pinned else 0.0)
    late = buffers + max(0.0, pinned - c.tr.gathered_params)
    if act is None:
        return c.phase("backward", master=c.ms.master, temporaries=late, grads=grads_full)
    L = shape.num_hidden_layers
    T = _tokens(s)
    head_grad = _head_grad(c)
    layer_grad = grads_full / L
    # the embedding's dense gradient is written last; until then it is a temporary
    last_grad = p * c.largest_tensor if not s.lora_rank and c.stage < 2 else 0.0
    layer_work = act.layer_backward_transient + act.recompute_layer
    cands = [  # (activations, temporaries, grads)
        (act.saved, act.backward_loss_transient + buffers, 0.0),
        (act.saved - act.loss_saved, layer_work + buffers, head_grad),
        (act.saved_layers / L, layer_work + late, max(0.0, grads_full - layer_grad - last_grad)),
        (0.0, p * shape.hidden_size * T + last_grad + late, grads_full - last_grad),
    ]
    # a gradient buffer allocated up front (ZeRO-3) is full all through backward, so the start of
    # backward, with every saved activation, is then its peak
    # so are FSDP's accumulated unsharded gradients (the sync micro batch turns them into shards
    # unit by unit)
    floor = max(c.resident.get("grads", 0.0), c.accum_grads)
    best = max(cands, key=lambda cand: cand[0] + cand[1] + max(cand[2], floor))
    return c.phase("backward", master=c.ms.master, activations=best[0], temporaries=best[1],
                   grads=max(best[2], c.accum_grads))


def _head_grad(c: _Plan) -> float:
    """GPU bytes of the LM head's gradient while the top layer's backward runs."""
    s, shape = c.s, c.shape
    N = shape.vocab_size * shape.hidden_size
    if s.lora_rank:
        return 0.0
    if c.deepspeed and c.stage in (1, 2) and c.off_opt != "none":
        # with Adam offloaded no gradient partition stays on the GPU, but each reduced gradient is
        # cast to fp32 on the GPU before it is copied to the host partition (stage_1_and_2.py
        # async_inplace_copy_grad_to_fp32_buffer_from_gpu: src_tensor.to(fp32), read in 0.18.4 to
        # 0.19.8), and a gradient larger than the reduce bucket (the LM head) bypasses the bucket
        # and stays whole until then. The head's is the first and the largest: it comes while the
        # top layer is worked on. Measured backward (bench/gpu_calibrate.md) was 13 % above the
        # estimate without this and is 9-11 % above with it.
        return (c.p * N if N > c.ds["reduce_bucket_size"] else 0.0) + 4 * N / c.n
    return 0.0 if shape.tie_word_embeddings or c.stage >= 2 else c.p * N


def _step(c: _Plan) -> Phase:
    ms, tr = c.ms, c.tr
    if not c.deepspeed:
        # states in the parameter dtype (or fp32 master weights); the optimizer's own temporaries
        # (torch AdamW's sqrt and denominator per tensor) come from expressed_transients
        return c.phase("step", grads=ms.grads, optimizer=ms.optimizer + c.xt["step"])
    if c.off_opt != "none":
        # CPU Adam: gradients are copied out, parameters copied back in swap buffers
        return c.phase("step", grads=ms.grads, temporaries=tr.step_allgather + tr.offload_staging)
    if c.stage == 3:
        # the fp32 gradient is built one sub_group_size block at a time (deepspeed_transients)
        return c.phase("step", master=ms.master, grads=ms.grads, optimizer=ms.optimizer,
                       temporaries=max(tr.step_grad_cast, tr.step_update))
    if c.stage in (1, 2):
        step = c.phase("step", master=ms.master, grads=ms.grads, optimizer=ms.optimizer,
                       temporaries=max(tr.step_grad_cast, tr.step_allgather, tr.step_update))
        before_adam = step.total_bytes - step.by_category["optimizer"]
        if before_adam > c.gpu.memory_bytes:
            c.notes.append("runs out of memory at the first optimizer step, while DeepSpeed casts the gradient "
                           "partition to fp32 (before Adam's states even exist)")
        elif step.total_bytes > c.gpu.memory_bytes:
            c.notes.append("runs out of memory at the first optimizer step, when Adam's fp32 states are created")
        return step
    return c.phase("step", master=ms.master, grads=ms.grads, optimizer=ms.optimizer)


def _peak(c: _Plan, phases: list) -> tuple[float, str, Phase]:
    """The first step's highest phase, unless later steps (optimizer states resident) go higher.
    Also returns the phase whose short-lived tensors make that peak."""
    peak_phase = max(phases, key=lambda ph: ph.total_bytes)
    gpu_peak, name = peak_phase.total_bytes, peak_phase.name
    steady_extra = c.ms.optimizer if (not c.deepspeed or c.off_opt == "none") and "optimizer" not in c.resident else 0
    forward, backward = phases[1], phases[2]
    # ZeRO-1/2 keep the gradient partition (grads_in_partition) allocated after the first backward
    kept_grads = c.p * c.trainable / c.n if c.deepspeed and c.stage in (1, 2) and c.off_opt == "none" else 0.0
    busiest = max((forward, backward), key=lambda ph: ph.total_bytes + (kept_grads if ph is forward else 0.0))
    steady = busiest.total_bytes + steady_extra + (kept_grads if busiest is forward else 0.0)
    if steady > gpu_peak * 1.005:
        return steady, "forward/backward of later steps, optimizer states resident", busiest
    return max(gpu_peak, steady), name, peak_phase


def _reserved(c: _Plan, gpu_peak: float, at: Phase, setup: Phase, step: Phase) -> dict:
    """What torch's allocator reserves and what the card holds outside it.

    The caching allocator keeps freed blocks for reuse; tensors that live for the whole run
    (weights, master copy, optimizer states) are allocated once and fit their blocks, while
    activations and temporaries are freed and re-allocated in changing sizes every step, and the
    free pieces they leave between live blocks are what reserved-but-unallocated memory is
    (post-mortem 5: 5.5 GiB on a 32 GiB card). So the reserve grows with the short-lived part
    of the peak (ALLOCATOR_SLACK of it), on top of a fixed part (ALLOCATOR_FIXED: cuBLAS
    workspaces and blocks the allocator rounds up); both fitted on the published-measurements
    benchmark's train split (bench/fit_allocator.md).
    """
    context = c.base["runtime"]
    generation = c.base["generation"]
    allocated = gpu_peak - context - generation
    saved = at.by_category["activations"]
    if not c.s.gradient_checkpointing:
        # without checkpointing the saved activations are allocated layer by layer in forward and
        # freed in the reverse order in backward: stack order, which leaves the allocator few free
        # pieces between live blocks (ALLOCATOR_SAVED)
        saved *= ALLOCATOR_SAVED
    churn = saved + at.by_category["temporaries"]
    if at.name == "forward" and at.by_category["temporaries"] >= c.output_copy:
        # accelerate's fp32 copy of the logits is the last allocation of forward and the first
        # thing freed after it: one block, a segment of its own, full at the peak, so it leaves
        # no free pieces between live blocks (the fitted slack was fitted without such a block)
        churn -= min(churn, c.output_copy)
    # the V-wide logits and loss tensors are the largest blocks a step frees and re-allocates in
    # a size set by its token count
    logits = c.act.forward_transient + c.act.backward_loss_transient + c.output_copy if c.act else 0.0
    reclaimable = ALLOCATOR_VARYING * logits if c.s.varying_lengths else 0.0
    fragmented = ALLOCATOR_SLACK * churn
    if c.s.expandable_segments:
        # Before it raises OOM the allocator runs release_cached_blocks; without expandable
        # segments that frees only segments with nothing live in them, so the free pieces between
        # live blocks still count. With them release_blocks unmaps the whole pages of every free
        # block, split or not (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::
        # release_blocks and unmap_block), and the pages are mapped again where the allocation
        # needs them: the fragmented part no longer counts in what the run needs. What of it
        # max_memory_reserved and nvidia-smi still show is smaller too, since a larger block
        # extends the one segment instead of opening another (ALLOCATOR_EXPANDABLE).
        reclaimable = ALLOCATOR_EXPANDABLE * (reclaimable + fragmented)
        fragmented = 0.0
    reserved = allocated + ALLOCATOR_FIXED + fragmented + reclaimable
    recast = _step_recast(c)
    if recast:
        # from the second step on the allocator holds a second fp32 cast block beside the step's
        # own (_step_recast); it is not released before an OOM, so it counts like allocated memory
        reserved = max(reserved, step.total_bytes - context - generation + ALLOCATOR_FIXED + recast)
    # blocks freed during setup (DeepSpeed's __init__, or the whole model ZeRO-3 partitioned
    # without zero.Init) stay reserved unless training's own reserve is larger; the allocator
    # releases them before an OOM, so they never count in the verdict
    floor = _whole_model_cache(c, allocated)
    if c.setup_cache:
        floor = max(floor, min(setup.total_bytes - context - generation + c.setup_cache + ALLOCATOR_FIXED,
                               c.gpu.memory_bytes - context - generation))
    if floor > reserved:
        reclaimable += floor - reserved
        reserved = floor
    nccl = NCCL_BUFFERS if c.n > 1 and c.s.framework != "torch" else 0
    # torch never holds more than the card has left: when cudaMalloc fails the allocator releases
    # its wholly free cached segments and retries (DeviceCachingAllocator::malloc), so a run whose
    # reclaimable cache would outgrow the card shows a reserved figure at the card's limit instead
    ceiling = _ceiling(c, context + nccl + generation)
    released = min(reclaimable, max(0.0, reserved - ceiling))
    demand = reserved + context + nccl + generation  # what the card would hold had nothing been released
    reserved, reclaimable = reserved - released, reclaimable - released
    return {"gpu_allocated_bytes": allocated, "gpu_reserved_bytes": reserved, "cuda_context_bytes": context,
            "gpu_card_bytes": reserved + context + nccl + generation, "gpu_demand_bytes": demand,
            "reclaimable": reclaimable}


def _whole_model_cache(c: _Plan, allocated: float) -> float:
    """The reserve ZeRO-3 without zero.Init keeps at least (0 otherwise). DeepSpeedEngine moves
    the whole module to the GPU (_configure_distributed_model: module.to(device)) before ZeRO-3
    partitions it parameter by parameter; the full parameters' blocks stay cached beside what
    training allocates (Giles Thomas' per-rank Llama-3-8B peaks, with and without expandable
    segments: reserved - active is about the model's bytes). Whether training splits them so
    that they cannot be released before an OOM those runs do not settle."""
    if not (c.deepspeed and c.stage == 3 and not c.s.zero3_init):
        return 0.0
    return allocated + c.xt["load"] + ALLOCATOR_FIXED


def _ceiling(c: _Plan, outside_torch: float) -> float:
    """The most torch's allocator can reserve: the card less what is held outside it."""
    return c.gpu.memory_bytes - outside_torch


def _step_recast(c: _Plan) -> float:
    """Bytes of the extra block DeepSpeed's step leaves reserved from the second step on.

    ZeRO-1/2/3 with the optimizer on the GPU build the fp32 gradient of a partition (ZeRO-1/2) or
    of a sub-group (ZeRO-3) in two allocations: a low-precision flatten, then its fp32 copy
    (deepspeed_transients: step_grad_cast). In the first step both are new segments. From the
    second step on, the flatten is placed in the cached block the first step's fp32 copy left, so
    the fp32 copy cannot reuse that block and takes a new segment of its own: reserved memory
    then stands one fp32 block above the step's allocated peak. Measured on an H100 with
    DeepSpeed 0.19.8 (bench/gpu_calibrate.md, Qwen2.5-7B width, 8 layers, one GPU): ZeRO-1 and
    ZeRO-2 step 2 reserved 71.62 GiB for 60.60 allocated (the fp32 partition is 11.0 GiB),
    ZeRO-3 at 2,048 tokens 57.30 for 50.78 (sub-group of 1e9: 3.7 GiB). At 8,192 tokens ZeRO-3
    grew no further: the freed fp32 logits (4.6 GiB) already offered a block that large. So the
    block counts only when no short-lived block at least its size is freed before the step."""
    if not c.deepspeed or c.off_opt != "none" or c.stage == 0 or not c.tr.step_grad_cast:
        return 0.0
    fp32 = 4 * c.tr.step_grad_cast / (c.p + 4)
    freed = 4 * c.shape.vocab_size * _tokens(c.s) if c.shape is not None and c.loss_kernel == "none" else 0.0
    return fp32 if freed < fp32 else 0.0


def _host(c: _Plan) -> tuple[dict, float]:
    """Host RAM per node: offloaded states, pinned bounce buffers, model loading."""
    s, ms = c.s, c.ms
    procs = min(c.n, s.gpus_per_node or c.n)
    pinned = 0.0
    if c.off_opt == "cpu" or c.off_param == "cpu":
        # DeepSpeed's CPU Adam swaps gradients/parameters through pinned bounce buffers of
        # reduce_bucket_size elements
        pinned = c.p * min(c.ds["reduce_bucket_size"], c.trainable)
    host = host_bytes(states_host_per_process=ms.host, processes_per_node=procs, model_load_bytes=c.p * c.total,
                      zero3_init=c.stage == 3 and s.zero3_init, pinned_buffer_bytes=pinned)
    host_peak = host["process_overhead"] + max(host["model_loading"], host["offloaded_states"] + host["pinned_buffers"])
    pinned_states = (ms.host - ms.host_paged) * procs
    if pinned_states >= 0.05 * GiB and s.pin_memory:
        c.notes.append(f"{pinned_states / GiB:.1f} GiB of offloaded states are pinned: pinned memory cannot be "
                       "swapped out, the node needs that much free RAM")
    return host, host_peak


def estimate(s: Setup) -> Result:
    c = _resolve(s)
    _buffers(c)
    c.base = _runtime_reserve(c)
    c.resident = _resident(c)
    # ZeRO-3's initialize_optimizer_states() steps Adam on an fp32 zero-gradient buffer of the
    # largest sub-group, freed again before training starts
    transient, c.setup_cache = (c.tr.init_grad_buffer, 0.0) if c.resident else _setup_transient(c)
    setup = c.phase("setup", master=c.ms.master, temporaries=transient)
    held = setup.total_bytes - c.base["runtime"] - c.base["generation"]
    setup.by_category["temporaries"] += max(0.0, c.xt["load"] - held)  # a whole model loaded per GPU
    phases = [setup, _forward(c), _backward(c), _step(c)]
    gpu_peak, peak_name, at = _peak(c, phases)
    card = _reserved(c, gpu_peak, at, setup, phases[3])
    reclaimable = card.pop("reclaimable")
    if card["gpu_demand_bytes"] > c.gpu.memory_bytes and card["gpu_card_bytes"] - reclaimable <= c.gpu.memory_bytes:
        c.notes.append(f"at the card's limit: with its cache kept the allocator would hold "
                       f"{card['gpu_demand_bytes'] / GiB:.1f} GiB of {c.gpu.memory_bytes / GiB:.1f}; the run fits only "
                       "because PyTorch frees cached blocks and retries" + (
                           ", which with expandable segments includes the free pages between live blocks"
                           if s.expandable_segments else
                           ", and fragmentation can still end it (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                           "lets it hand back the free pages between live blocks too)"))
    host, host_peak = _host(c)
    return Result(
        setup=s, gpu_name=c.gpu.name, gpu_bytes=c.gpu.memory_bytes, params=c.total, trainable_params=c.trainable,
        phases=phases, gpu_peak_bytes=gpu_peak, peak_phase=peak_name, host=host, host_peak_bytes=host_peak,
        verdict=verdict(card["gpu_card_bytes"] - reclaimable, c.gpu.memory_bytes),
        gpu_needed_bytes=card["gpu_card_bytes"] - reclaimable,
        host_verdict=verdict(host_peak, s.host_ram_bytes) if s.host_ram_bytes else None, notes=c.notes,
        errors=c.errors, saved_activation_bytes=c.act.saved if c.act else 0.0, **card,
    )


def model_states_only(params: int, gpus: int, stage: int, k: int = 12) -> float:
    """ZeRO paper accounting (Figure 1): 2Ψ + 2Ψ + KΨ, partitioned by stage."""
    return zero_paper_model_states(params, gpus, stage, k)


__all__ = ["ALL_LINEAR", "Result", "Setup", "estimate", "model_states_only", "replace", "verdict"]
