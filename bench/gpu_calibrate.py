#!/usr/bin/env python3
"""Real training steps of full-size, random-weight models on one GPU: peak allocated and reserved
memory per phase (setup, forward, backward, optimizer step), next to `ftrecipes estimate`.

Cases (issue 10, part 4): post-mortem 4's exact setting (OpenRLHF's Llama-3-8B SFT: ZeRO-2, bf16,
micro batch 1, 2,048 tokens, gradient checkpointing, one 80 GB card) without and with Adam offload;
ZeRO-3 with parameter and optimizer offload; LoRA, LoRA DPO and QLoRA under plain PyTorch; ZeRO
with LoRA under a trainer's zero_optimization settings; reported OOMs rerun as stated.

On a GPU machine (torch, transformers, deepspeed, peft; bitsandbytes for QLoRA):
    python bench/gpu_calibrate.py [--cases pm4-zero2,lora-r16] [--out bench/gpu_calibrate.md]
DeepSpeed builds FusedAdam on first use; set TORCH_CUDA_ARCH_LIST to the GPU's plain architecture
(9.0 on an H100): on the H100 machine 0.19.8's builder failed on an arch named "9.0a" (int("0a")).
Every case runs in its own process (a fresh CUDA context; an OOM ends only that case) and is
recorded as measured or as "OOM in <phase>". Without a GPU:
    python -m ftrecipes.devenv run trl -- python bench/gpu_calibrate.py --self-test
runs the same code (model build, DeepSpeed / PyTorch step, per-phase meter, estimate, report) on
the CPU with a tiny Llama config; its "memory" is the process's resident set, which proves the
plumbing, not the model. The estimate is compared with max_memory_allocated (the CUDA context is
outside the allocator, so the estimate is taken without it); reserved shows the allocator's cache.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

GiB = 1024 ** 3
PHASES = ("setup", "forward", "backward", "step")


@dataclass
class Case:
    name: str
    model: str
    engine: str                 # deepspeed | torch (one process, no wrapper; PEFT for LoRA) | fsdp2 (accelerate)
    zero_stage: int = 0
    offload_optimizer: str = "none"
    offload_param: str = "none"
    seq_len: int = 2048
    micro_batch: int = 1
    gradient_checkpointing: bool = True
    lora_rank: int = 0
    method: str = "sft"
    quantization: str = "none"
    layers: int = 0             # 0: the model's own depth; fewer where host RAM cannot hold the offloaded states
    grad_accum: int = 1         # micro-batches per optimizer step (DeepSpeed cases)
    accelerate: str = ""        # fsdp2 cases: the accelerate release that prepares the model
    transformers: str = ""      # a transformers release other than the installed one (with the peft of its time)
    deepspeed: str = ""         # a DeepSpeed release other than the installed one
    dtype: str = "bf16"         # the weights' dtype (LoRA adapters are fp32, as PEFT and the trainers cast them)
    autocast: bool = False      # forward under torch.autocast(dtype), as a Trainer's native AMP (fp16: GradScaler)
    optimizer: str = "adamw"    # adamw (torch) | adamw_8bit (bitsandbytes AdamW, optim_bits 8, as the Trainer builds it)
    reentrant: bool = False     # torch.utils.checkpoint's reentrant variant (LLaMA-Factory, axolotl, transformers 4.x)
    trainer: str = ""           # the trainer this case imitates, for the estimate (its defaults; "" none)
    lengths: tuple = ()         # one sequence length per step (the longest is seq_len); (): two steps at seq_len
    zero: tuple = ()            # (key, value) pairs of a trainer's zero_optimization section ("auto" filled as
                                # the HF Trainer fills it); (): DeepSpeed's defaults


# Offloading an 8B model's optimizer keeps 16 bytes per parameter in host RAM (fp32 master,
# momentum, variance, fp32 gradient partition): 128 GB for Llama-3-8B, all a 128 GB GPU host has.
# The offload cases therefore keep Llama-3-8B's width and vocabulary with 16 of its 32 layers;
# the estimate is taken for that same config, so the comparison is like for like.
# zero_optimization of LLaMA-Factory's examples/deepspeed/ds_z3_offload_config.json and ds_z2_config.json
# (hiyouga/LlamaFactory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30), offload stated by the case
LF_Z3 = (("overlap_comm", False), ("contiguous_gradients", True), ("sub_group_size", 10 ** 9),
         ("reduce_bucket_size", "auto"), ("stage3_prefetch_bucket_size", "auto"),
         ("stage3_param_persistence_threshold", "auto"), ("stage3_max_live_parameters", 10 ** 9),
         ("stage3_max_reuse_distance", 10 ** 9))
LF_Z2 = (("allgather_partitions", True), ("allgather_bucket_size", 5 * 10 ** 8), ("overlap_comm", False),
         ("reduce_scatter", True), ("reduce_bucket_size", 5 * 10 ** 8), ("contiguous_gradients", True),
         ("round_robin_gradients", True))
TWELVE_LENGTHS = (1536, 4096, 640, 2816, 3968, 1024, 3456, 2048, 4096, 768, 3200, 2304)
CASES = [
    Case("pm4-zero2", "Llama-3-8B", "deepspeed", zero_stage=2),
    Case("pm4-zero2-adam-offload", "Llama-3-8B", "deepspeed", zero_stage=2, offload_optimizer="cpu", layers=16),
    Case("zero3-offload", "Llama-3-8B", "deepspeed", zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
         layers=16),
    Case("zero3-offload-s8192", "Llama-3-8B", "deepspeed", zero_stage=3, offload_optimizer="cpu",
         offload_param="cpu", layers=16, seq_len=8192),
    Case("lora-r16", "Llama-3-8B", "torch", lora_rank=16),
    Case("lora-r16-s8192", "Llama-3-8B", "torch", lora_rank=16, seq_len=8192),
    Case("lora-r16-no-ckpt", "Llama-3-8B", "torch", lora_rank=16, gradient_checkpointing=False),
    Case("dpo-lora-r16", "Llama-3-8B", "torch", lora_rank=16, method="dpo"),
    Case("qlora-r16", "Llama-3-8B", "torch", lora_rank=16, quantization="4bit"),
    Case("qwen2.5-7b-lora-r16", "Qwen2.5-7B", "torch", lora_rank=16),
    # full fine-tuning under ZeRO-3 without offload, Qwen2.5-7B's width and vocabulary on 8 of its
    # 28 layers (16 bytes per parameter must fit one card): how the peak grows with tokens
    Case("qwen2.5-7b-8l-full-zero3", "Qwen2.5-7B", "deepspeed", zero_stage=3, layers=8),
    Case("qwen2.5-7b-8l-full-zero3-s8192", "Qwen2.5-7B", "deepspeed", zero_stage=3, layers=8, seq_len=8192),
    # ZeRO-1/2 on the same config (their setup transients, bench/gpu_calibrate.md), and Adam
    # offload with gradient accumulation (the host-side accumulation between boundaries)
    Case("qwen2.5-7b-8l-full-zero2", "Qwen2.5-7B", "deepspeed", zero_stage=2, layers=8),
    Case("qwen2.5-7b-8l-full-zero1", "Qwen2.5-7B", "deepspeed", zero_stage=1, layers=8),
    Case("qwen2.5-7b-8l-zero2-offload-ga2", "Qwen2.5-7B", "deepspeed", zero_stage=2, offload_optimizer="cpu",
         layers=8, grad_accum=2),
    # accelerate's FSDP2 preparation casts parameters to fp32 under mixed precision: up to 1.12
    # the whole model, from 1.14 the trainable ones only (model_states.fsdp_upcast, read in the
    # wheels); a LoRA run on one GPU shows which (the frozen base in fp32 doubles its bytes)
    Case("fsdp2-lora-r16-accelerate-1.12", "Llama-3-8B", "fsdp2", lora_rank=16, accelerate="1.12.0"),
    Case("fsdp2-lora-r16-accelerate-1.15", "Llama-3-8B", "fsdp2", lora_rank=16, accelerate="1.15.0"),
    # Two reported OOMs the estimate does not flag (bench/published_memory.md), rerun as stated on
    # one 80 GB card. axolotl#2412: SmolLM2-1.7B full fine-tuning in bf16 weights (no fp32 master),
    # bitsandbytes 8-bit AdamW, one packed 16,384-token row, no checkpointing, on one H100; its
    # transformers 4.49 computes the loss as 5.x does (loss_utils.ForCausalLMLoss), so the
    # installed release stands in, and SDPA's flash kernel for flash-attn's varlen one.
    Case("axolotl-2412-smollm2-1.7b-16k", "SmolLM2-1.7B", "torch", seq_len=16384, gradient_checkpointing=False,
         autocast=True, optimizer="adamw_8bit", trainer="axolotl"),
    Case("axolotl-2412-smollm2-1.7b-16k-tf4.49", "SmolLM2-1.7B", "torch", seq_len=16384,
         gradient_checkpointing=False, autocast=True, optimizer="adamw_8bit", trainer="axolotl", transformers="4.49.0"),
    # LlamaFactory#4026, one of its 8 DDP ranks (DDP adds the 21M LoRA gradients' buckets): Llama-3-8B
    # in fp16 with fp32 rank-8 adapters on all linear layers, AMP with a GradScaler, micro batch 2
    # x 8,192 tokens, reentrant checkpointing; with the transformers of the report's day (4.41:
    # logits.float() and a shifted fp32 copy in the model) and with the installed one
    Case("llamafactory-4026-rank-tf4.41", "Llama-3-8B", "torch", seq_len=8192, micro_batch=2, lora_rank=8,
         dtype="fp16", autocast=True, reentrant=True, trainer="llamafactory", transformers="4.41.2"),
    Case("llamafactory-4026-rank", "Llama-3-8B", "torch", seq_len=8192, micro_batch=2, lora_rank=8,
         dtype="fp16", autocast=True, reentrant=True, trainer="llamafactory"),
    # transformers 4.46-4.48 compute that loss in loss_utils while the model holds its p-byte
    # logits (activations.SHIFTED_COPY_UNTIL): the same rank, and Qwen2.5-7B's 152k vocabulary
    Case("llamafactory-4026-rank-tf4.46", "Llama-3-8B", "torch", seq_len=8192, micro_batch=2, lora_rank=8,
         dtype="fp16", autocast=True, reentrant=True, trainer="llamafactory", transformers="4.46.3"),
    Case("qwen2.5-7b-lora-r16-s8192-tf4.46", "Qwen2.5-7B", "torch", lora_rank=16, seq_len=8192,
         transformers="4.46.3"),
    # Steps of different lengths (unpacked data padded per batch): what the allocator keeps
    # reserved beyond the allocated peak when the V-wide logits blocks change size every step
    # (estimate.ALLOCATOR_VARYING, fitted on published figures only). Lengths drawn once, fixed.
    Case("lora-r16-varying-4k", "Llama-3-8B", "torch", lora_rank=16, seq_len=4096, lengths=TWELVE_LENGTHS),
    Case("qwen2.5-7b-lora-r16-varying-4k", "Qwen2.5-7B", "torch", lora_rank=16, seq_len=4096,
         lengths=TWELVE_LENGTHS),
    # the same over 60 steps (every 16-token length from 512 to 4,096 equally likely, a fixed
    # sequence), to see whether that cache keeps growing with the run's length
    Case("lora-r16-varying-4k-60", "Llama-3-8B", "torch", lora_rank=16, seq_len=4096,
         lengths=tuple([4096] + [512 + 16 * ((i * 2654435761) % 225) for i in range(1, 59)] + [4096])),
    # ZeRO with a LoRA model as LLaMA-Factory runs it (its examples/deepspeed configs, its reentrant
    # checkpointing): under ZeRO-3 with param offload every gathered weight is a GPU copy, so the
    # run shows what a reentrant recompute leaves gathered (deepspeed_transients.recompute_pinned:
    # the whole base from DeepSpeed 0.19.3 with transformers before 5.23) against non-reentrant
    Case("qwen2.5-7b-lora-r16-zero3-offload-reentrant", "Qwen2.5-7B", "deepspeed", zero_stage=3, lora_rank=16,
         offload_optimizer="cpu", offload_param="cpu", reentrant=True, trainer="llamafactory", zero=LF_Z3),
    # the same under DeepSpeed 0.16.9 (before 0.19.3's recompute attribution: nothing stays gathered)
    Case("qwen2.5-7b-lora-r16-zero3-offload-reentrant-ds0.16.9", "Qwen2.5-7B", "deepspeed", zero_stage=3,
         lora_rank=16, offload_optimizer="cpu", offload_param="cpu", reentrant=True, trainer="llamafactory",
         zero=LF_Z3, deepspeed="0.16.9"),
    Case("qwen2.5-7b-lora-r16-zero3-offload", "Qwen2.5-7B", "deepspeed", zero_stage=3, lora_rank=16,
         offload_optimizer="cpu", offload_param="cpu", trainer="llamafactory", zero=LF_Z3),
    Case("lora-r16-zero2-reentrant", "Llama-3-8B", "deepspeed", zero_stage=2, lora_rank=16, reentrant=True,
         trainer="llamafactory", zero=LF_Z2),
]
# where a case finds a release other than the installed one (pip install --no-deps --target DIR
# accelerate==X; transformers==X with the tokenizers, huggingface_hub and peft of its time)
SITE = "/tmp/{package}-{version}"


def other_releases(case: Case) -> list[tuple[str, str]]:
    return [(pkg, v) for pkg, v in (("accelerate", case.accelerate), ("transformers", case.transformers),
                                    ("deepspeed", case.deepspeed)) if v]
# The self-test's stand-in: a Llama config small enough for a CPU step in seconds.
TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-5)


class Meter:
    """Peak memory of one phase: CUDA allocator statistics, or the process RSS on the CPU."""

    def __init__(self, device: str):
        import torch

        self.torch, self.cuda = torch, device == "cuda"
        self.kind = "cuda" if self.cuda else "cpu-rss"

    def start(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def stop(self) -> dict:
        if self.cuda:
            self.torch.cuda.synchronize()
            free, total = self.torch.cuda.mem_get_info()
            # card: what nvidia-smi would show now (context, NCCL, cuBLAS workspaces, reserve)
            return {"allocated": self.torch.cuda.max_memory_allocated(), "reserved": self.torch.cuda.max_memory_reserved(),
                    "card_now": total - free, "reserved_now": self.torch.cuda.memory_reserved()}
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return {"allocated": rss, "reserved": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def hf_config(case: Case, tiny: bool) -> dict:
    if tiny:
        return dict(TINY)
    from ftrecipes.memory.catalog import model

    shape = model(case.model)
    cfg = dict(shape.hf_config, num_key_value_heads=shape.num_key_value_heads)
    if case.layers:
        cfg["num_hidden_layers"] = case.layers
    return cfg


# transformers' HfTrainerDeepSpeedConfig.trainer_config_finalize fills these "auto" values from the
# model's hidden size (integrations/deepspeed.py, read in 5.23.0); the estimate resolves the same keys
HF_AUTO = {"reduce_bucket_size": lambda h: h * h, "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
           "stage3_param_persistence_threshold": lambda h: 10 * h}


def ds_config(case: Case, device: str, hidden: int) -> dict:
    zero = {k: HF_AUTO[k](hidden) if v == "auto" else v for k, v in case.zero}
    zero["stage"] = case.zero_stage
    if case.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": case.offload_optimizer, "pin_memory": True}
    if case.offload_param != "none":
        zero["offload_param"] = {"device": case.offload_param, "pin_memory": True}
    # FusedAdam needs CUDA; on the CPU accelerator (self-test) torch's AdamW runs instead
    adam = {"lr": 1e-5, "torch_adam": device == "cpu" and case.offload_optimizer == "none"}
    return {"train_micro_batch_size_per_gpu": case.micro_batch, "gradient_accumulation_steps": case.grad_accum,
            "train_batch_size": case.micro_batch * case.grad_accum, "bf16": {"enabled": True}, "zero_optimization": zero,
            "optimizer": {"type": "AdamW", "params": adam}, "steps_per_print": 10 ** 9}


def torch_dtype(case: Case):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[case.dtype]


def dtype_kwarg(case: Case) -> dict:
    """from_config's dtype argument: `dtype` from transformers 4.56, `torch_dtype` before."""
    import transformers
    from ftrecipes.pep440 import parse

    return {"dtype" if parse(transformers.__version__) >= parse("4.56.0") else "torch_dtype": torch_dtype(case)}


def build_model(case: Case, cfg: dict, device: str, ds: dict | None, checkpoint: str | None = None):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model(**cfg)
    conf._attn_implementation = attn_implementation(device)
    if checkpoint:
        model = quantized_model(checkpoint, device)
    elif ds is not None and case.zero_stage == 3:
        import deepspeed

        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = AutoModelForCausalLM.from_config(conf, **dtype_kwarg(case))
    else:
        # every case builds on the device, FSDP2 too, although a Trainer run loads it on the CPU
        # first: a random 8B init on the CPU outlasted a 4-minute device call. So the FSDP2 cases'
        # setup also holds the original bf16 model while prepare() makes its shards; forward,
        # backward and step are as in a Trainer run
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(conf, **dtype_kwarg(case))
    # from_pretrained (the QLoRA path) returns the model in eval mode, where transformers skips
    # gradient checkpointing; a trainer calls train() before its first step
    model.train()
    if case.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": case.reentrant})
        model.config.use_cache = False
    if case.lora_rank:
        from peft import LoraConfig, get_peft_model

        if case.gradient_checkpointing:
            model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(r=case.lora_rank, lora_alpha=2 * case.lora_rank,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
        # peft from 0.12 makes adapters fp32 itself (autocast_adapter_dtype); LLaMA-Factory and
        # TRL cast every trainable parameter to fp32 whatever the peft release
        for param in model.parameters():
            if param.requires_grad:
                param.data = param.data.float()
    return model


def save_random_checkpoint(cfg: dict, device: str, folder: str) -> str:
    """QLoRA's base: random bf16 weights saved once (quantization happens in from_pretrained
    only), built before the meter starts and freed, so no phase counts the bf16 copy."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return folder


def quantized_model(checkpoint: str, device: str):
    """The saved base reloaded through bitsandbytes: NF4 weights, bf16 compute. Like TRL's
    SFTTrainer (1.x), no prepare_model_for_kbit_training: norms, embeddings and LM head stay bf16."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(checkpoint, quantization_config=q, dtype=torch.bfloat16,
                                                device_map={"": device})


def attn_implementation(device: str) -> str:
    if device != "cuda":
        return "sdpa"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "sdpa"
    return "flash_attention_2"


def batch(case: Case, cfg: dict, device: str, length: int):
    import torch

    rows = case.micro_batch * (2 if case.method == "dpo" else 1)
    return torch.randint(0, cfg["vocab_size"], (rows, length), device=device)


def step_lengths(case: Case) -> list[int]:
    return list(case.lengths) or [case.seq_len, case.seq_len]


def phase_key(phase: str, step: int, steps: int) -> str:
    """Step 1's phases by name; every later step's merged into one row (the states are resident)."""
    if step == 1:
        return phase
    return f"{phase} (step 2)" if steps == 2 else f"{phase} (steps 2-{steps})"


def fsdp2_prepare(case: Case, model, opt):
    """accelerate's FSDP2 path as an accelerate config with fsdp_version 2 sets it up: one
    FSDP unit per decoder layer, bf16 mixed precision, prepare(model, optimizer) together."""
    import accelerate
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    if case.accelerate and accelerate.__version__ != case.accelerate:
        raise RuntimeError(f"case wants accelerate {case.accelerate}, found {accelerate.__version__}")
    layer = next(type(m).__name__ for m in model.modules() if type(m).__name__.endswith("DecoderLayer"))
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=[layer], reshard_after_forward=True,
                                            state_dict_type="SHARDED_STATE_DICT")
    accelerator = Accelerator(mixed_precision="bf16", fsdp_plugin=plugin)
    model, opt = accelerator.prepare(model, opt)
    return accelerator, model, opt


def loss_of(model, ids, case: Case):
    """SFT: the model's own causal-LM loss. DPO: TRL's sigmoid loss on chosen/rejected halves,
    the reference being the same model with its LoRA adapter disabled (TRL and LLaMA-Factory)."""
    import torch
    import torch.nn.functional as F

    if case.method != "dpo":
        return model(input_ids=ids, labels=ids).loss

    def logps(m):
        logits = m(input_ids=ids).logits[:, :-1].float()
        return torch.gather(logits.log_softmax(-1), 2, ids[:, 1:, None]).squeeze(2).sum(-1)

    policy = logps(model)
    with torch.no_grad(), model.disable_adapter():
        ref = logps(model)
    half = ids.shape[0] // 2
    margin = (policy[:half] - ref[:half]) - (policy[half:] - ref[half:])
    return -F.logsigmoid(0.1 * margin).mean()


def optimizer_for(case: Case, params: list):
    """The case's optimizer on its trainable parameters: torch AdamW (for-loop), or bitsandbytes'
    AdamW with optim_bits 8, which is what transformers' Trainer builds for optim adamw_8bit."""
    import torch

    if case.optimizer == "adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW(params, lr=1e-5, optim_bits=8, is_paged=False)
    return torch.optim.AdamW(params, lr=1e-5, foreach=False)


class Stepper:
    """forward / backward / step of one engine: DeepSpeed, accelerate's FSDP2, or plain PyTorch,
    the last optionally under autocast with a GradScaler for fp16 (a Trainer's native AMP)."""

    def __init__(self, case: Case, device: str, engine, opt=None, accelerator=None, deepspeed_engine=False):
        import torch

        self.case, self.engine, self.opt, self.accelerator, self.ds = case, engine, opt, accelerator, deepspeed_engine
        amp = case.autocast and not deepspeed_engine
        self.autocast = torch.autocast(device, dtype=torch_dtype(case), enabled=amp)
        self.scaler = torch.amp.GradScaler(enabled=amp and case.dtype == "fp16" and device == "cuda")

    def forward(self, ids):
        with self.autocast:
            return loss_of(self.engine, ids, self.case)

    def backward(self, loss):
        if self.ds:
            self.engine.backward(loss)
        elif self.accelerator is not None:
            self.accelerator.backward(loss)
        else:
            self.scaler.scale(loss).backward()

    def step(self):
        if self.ds:
            self.engine.step()
            return
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)


def prepare(case: Case, device: str, model, ds: dict | None) -> Stepper:
    params = [p for p in model.parameters() if p.requires_grad]
    if ds is not None:
        import deepspeed

        engine, *_ = deepspeed.initialize(model=model, model_parameters=params, config=ds)
        return Stepper(case, device, engine, deepspeed_engine=True)
    opt = optimizer_for(case, params)
    if case.engine == "fsdp2":
        accelerator, engine, opt = fsdp2_prepare(case, model, opt)
        return Stepper(case, device, engine, opt, accelerator)
    return Stepper(case, device, model, opt)


def check_releases(case: Case) -> None:
    """A case that names a release runs with it (its site folder is on PYTHONPATH), or not at all."""
    for pkg, version in other_releases(case):
        found = __import__(pkg).__version__
        if found != version:
            raise RuntimeError(f"case wants {pkg} {version}, found {found}")


def measure(case: Case, device: str, tiny: bool) -> dict:
    """One case, this process: {phase: {allocated, reserved}} for the first step and the second
    step's forward/backward peak (optimizer states resident). An OOM ends the case; the phase it
    hit keeps what was allocated up to the failed request, and the message is kept."""
    import torch

    check_releases(case)
    torch.manual_seed(0)
    cfg = hf_config(case, tiny)
    meter, out = Meter(device), {}
    ds = ds_config(case, device, cfg["hidden_size"]) if case.engine == "deepspeed" else None
    if ds is not None:
        import deepspeed

        deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
    key = "setup"
    scratch = tempfile.TemporaryDirectory()
    checkpoint = save_random_checkpoint(cfg, device, scratch.name) if case.quantization != "none" else None
    try:
        meter.start()
        stepper = prepare(case, device, build_model(case, cfg, device, ds, checkpoint), ds)
        out["setup"] = meter.stop()
        lengths = step_lengths(case)
        for step, length in enumerate(lengths, 1):
            ids = batch(case, cfg, device, length)
            # DeepSpeed's engine.step() is called after every micro-batch and updates at the boundary
            for _micro in range(case.grad_accum if ds is not None else 1):
                for phase in ("forward", "backward", "step"):
                    key = phase_key(phase, step, len(lengths))
                    meter.start()
                    if phase == "forward":
                        loss = stepper.forward(ids)
                    elif phase == "backward":
                        stepper.backward(loss)
                    else:
                        stepper.step()
                    peak = meter.stop()
                    out[key] = {k: max(v, out.get(key, {}).get(k, 0)) for k, v in peak.items()}
    except torch.OutOfMemoryError as exc:
        out["oom"] = key
        out["oom_message"] = " ".join(str(exc).split())[:600]
        out[key] = {k: max(v, out.get(key, {}).get(k, 0)) for k, v in meter.stop().items()}
    out["meter"] = meter.kind
    return out


def estimate_phases(case: Case, env: dict, model_path: str | None) -> dict:
    """The estimate for the case as run (env: the run's environment(), whose GPU and transformers
    release it names): per phase and overall, allocated / reserved / card.
    The CUDA context is left out of the allocator figures (torch does not count it) and kept
    in the card figure, which is what nvidia-smi would show."""
    from ftrecipes.memory import estimate
    from ftrecipes.memory.estimate import CUDA_CONTEXT

    s = setup_for(case, env, model_path)
    r = estimate(s)
    card = estimate(replace(s, cuda_context_bytes=CUDA_CONTEXT)).gpu_card_bytes
    return {"phases": {p.name: p.total_bytes for p in r.phases}, "peak": r.gpu_peak_bytes, "verdict": r.verdict,
            "gpu_bytes": r.gpu_bytes, "allocated": r.gpu_allocated_bytes, "reserved": r.gpu_reserved_bytes,
            "card": card}


def setup_for(case: Case, env: dict, model_path: str | None):
    """The estimate's Setup for the case as run, without the CUDA context (see estimate_phases)."""
    from ftrecipes.memory import Setup

    # the loss is transformers' own whatever the trainer named (its defaults only fill the rest);
    # outside DeepSpeed the weights are loaded in the case's dtype and stepped by a for-loop AdamW
    torch_engine = case.engine != "deepspeed"
    s = Setup(model=model_path or case.model, gpu=env.get("gpu", "A100-80GB"), gpus=1, seq_len=case.seq_len, micro_batch=case.micro_batch,
              precision=case.dtype, zero_stage=case.zero_stage, offload_optimizer=case.offload_optimizer,
              offload_param=case.offload_param, gradient_checkpointing=case.gradient_checkpointing,
              checkpoint_reentrant=case.reentrant, attn_implementation="sdpa", lora_rank=case.lora_rank,
              method=case.method, framework=case.engine, quantization=case.quantization,
              accelerate_version=case.accelerate, trainer=case.trainer,
              transformers_version=case.transformers or env.get("transformers", ""),
              deepspeed_version=case.deepspeed or (env.get("deepspeed", "") if case.engine == "deepspeed" else ""),
              mixed_precision=(case.dtype if case.autocast else "no") if case.trainer else "",
              load_dtype=case.dtype if torch_engine else "", optimizer=case.optimizer,
              adam_impl="single" if torch_engine and case.optimizer == "adamw" else "auto",
              cuda_context_bytes=0, grad_accum=case.grad_accum, varying_lengths=bool(case.lengths),
              ds=dict(case.zero))
    return s


def model_path_for(case: Case, folder: str, tiny: bool) -> str | None:
    """A config.json for cases the catalog has no name for (the tiny stand-in, fewer layers)."""
    if not (tiny or case.layers):
        return None
    path = Path(folder) / f"{case.name}.json"
    path.write_text(json.dumps(hf_config(case, tiny)))
    return str(path)


def gpu_name() -> str:
    """The catalog name of this machine's GPU (what the estimate's verdict is against)."""
    import torch

    name = torch.cuda.get_device_name(0).upper()
    for key, cat in (("H200", "H200"), ("H100", "H100-80GB"), ("H20", "H20"), ("B200", "B200"),
                     ("A100-SXM4-40GB", "A100-40GB"), ("A100-PCIE-40GB", "A100-40GB"), ("A100", "A100-80GB"),
                     ("L40S", "L40S"), ("A10G", "A10G"), ("4090", "RTX-4090"), ("MI300X", "MI300X")):
        if key in name:
            return cat
    return "A100-80GB"


def run_case(case: Case, device: str, tiny: bool, env: dict) -> dict:
    """Measure one case in a child process (fresh CUDA context; an OOM or crash ends only it)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "case.json"
        cmd = [sys.executable, __file__, "--run-case", json.dumps(asdict(case)), "--device", device, "--json", str(out)]
        if tiny:
            cmd.append("--tiny")
        sites = [SITE.format(package=pkg, version=v) for pkg, v in other_releases(case)]
        sites = [site for site in sites if Path(site).is_dir()]
        if sites:
            env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [*sites, env.get("PYTHONPATH")])))
        t0 = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0 or not out.exists():
            lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
            # the exception's own line, not a shutdown warning printed after it
            raised = [ln for ln in lines if re.match(r"(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b", ln)]
            return {"error": f"exit {proc.returncode}: {(raised or lines)[-1][:300]}", "seconds": time.time() - t0}
        res = json.loads(out.read_text())
        res["seconds"] = time.time() - t0
        return res


def skip_reason(case: Case, device: str) -> str | None:
    for pkg, version in other_releases(case):
        site = SITE.format(package=pkg, version=version)
        if __import__(pkg).__version__ != version and not Path(site).is_dir():
            return f"{pkg} {version} is not installed (nor in {site})"
    if case.quantization != "none" or case.optimizer == "adamw_8bit":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            return "bitsandbytes is not installed"
        if device != "cuda":
            return "bitsandbytes needs a GPU here"
    return None


def _gib(x) -> str:
    return f"{x / GiB:.2f}" if x else "-"


def _err(est, meas) -> str:
    return f"{est / meas - 1:+.1%}" if est and meas else "n/a"


def report(rows: list, header: str) -> str:
    """Per phase: measured allocated / reserved and the estimate's phase figure; per case: the
    overall peaks against the estimate's allocated, reserved and card figures and its verdict."""
    lines = ["# GPU calibration: measured peak memory per phase vs `ftrecipes estimate`", "", header, "",
             "GiB. Phase rows: torch's max_memory_allocated / max_memory_reserved during the phase and the "
             "estimate's phase total (CUDA context left out). Case rows: the run's peaks against the "
             "estimate's allocated / reserved figures; card = what the GPU held (mem_get_info) at the "
             "peak phase's end vs the estimate's card figure (context included).", "",
             "| case | phase | allocated | reserved | estimate | error |", "|---|---|---:|---:|---:|---:|"]
    for case, meas, est in rows:
        if "skipped" in meas or "error" in meas:
            lines.append(f"| {case.name} | - | {meas.get('skipped') or meas['error']} | | | |")
            continue
        cuda = meas.get("meter") == "cuda"
        phases = [p for p in meas if isinstance(meas[p], dict)]
        for ph in phases:
            e = est["phases"].get(ph.split(" ")[0])
            if "(step" in ph and ph.startswith(("forward", "backward")):
                e = est["peak"]
            a = meas[ph]["allocated"]
            # a CPU process's resident set is not what the estimate counts: no error figure then
            lines.append(f"| {case.name} | {ph} | {_gib(a)} | {_gib(meas[ph]['reserved'])} | {_gib(e)} | "
                         f"{_err(e, a) if cuda else 'n/a'} |")
        outcome = f"OOM in {meas['oom']}" if "oom" in meas else f"ran ({meas['seconds']:.0f} s)"
        if phases and cuda:
            alloc = max(meas[p]["allocated"] for p in phases)
            res = max(meas[p]["reserved"] for p in phases)
            card = max(meas[p].get("card_now", 0) for p in phases)
            lines.append(f"| {case.name} | **{outcome}**: peak allocated / reserved / card | {_gib(alloc)} | "
                         f"{_gib(res)} / {_gib(card)} | {_gib(est['allocated'])} / {_gib(est['reserved'])} / "
                         f"{_gib(est['card'])} | {_err(est['allocated'], alloc)} / {_err(est['reserved'], res)}; "
                         f"estimate: {est['verdict']} |")
        else:
            lines.append(f"| {case.name} | **{outcome}** | | | {_gib(est['peak'])} | estimate: {est['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true", help="tiny model on the CPU, same code path")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--out", help="markdown report (default: bench/gpu_calibrate.md; self-test: stdout only)")
    ap.add_argument("--measurements", help="JSON file the measurements are appended to, case by case")
    ap.add_argument("--from-json", nargs="+", metavar="JSON",
                    help="no runs: re-render the report from saved measurements with today's estimate")
    ap.add_argument("--run-case", help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.run_case:
        res = measure(Case(**json.loads(a.run_case)), a.device, a.tiny)
        Path(a.json).write_text(json.dumps(res))
        return 0
    if a.from_json:
        return rerender(a)
    import torch

    device = "cuda" if torch.cuda.is_available() and not a.self_test else "cpu"
    if device == "cpu" and not a.self_test:
        print("no GPU: run with --self-test (tiny model on the CPU)", file=sys.stderr)
        return 2
    return calibrate(a, device)


def environment(device: str) -> dict:
    import torch

    env = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__}
    for mod in ("deepspeed", "transformers", "peft", "bitsandbytes"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is recorded, not fatal
            env[mod] = "absent"
    if device == "cuda":
        env["gpu"] = gpu_name()
    return env


def header_of(env: dict, meter: str) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("device", "gpu"))
    return f"Device: {env['device']} (catalog: {env.get('gpu', 'n/a')}); {versions}; meter: {meter}."


def calibrate(a, device: str) -> int:
    names = a.cases.split(",") if a.cases else [c.name for c in CASES]
    unknown = [n for n in names if n not in {c.name for c in CASES}]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    env_info = environment(device)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29517"),
               RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    rows, saved = [], []
    with tempfile.TemporaryDirectory() as d:
        for case in CASES:
            if case.name not in names:
                continue
            if a.self_test:
                scaled = tuple(max(8, n * 32 // case.seq_len) for n in case.lengths)
                case = Case(**{**asdict(case), "model": "tiny-llama", "seq_len": 32, "layers": 0, "lengths": scaled})
            why = skip_reason(case, device)
            meas = {"skipped": f"skipped: {why}"} if why else run_case(case, device, a.self_test, env)
            rows.append((case, meas, estimate_phases(case, env_info, model_path_for(case, d, a.self_test))))
            saved.append({"case": asdict(case), "measured": meas})
            print(f"{case.name}: {json.dumps(meas)[:400]}", flush=True)
            if a.measurements:
                Path(a.measurements).write_text(json.dumps({"environment": env_info, "runs": saved}, indent=1))
    meters = {m.get("meter") for _c, m, _e in rows if m.get("meter")}
    text = report(rows, header_of(env_info, ", ".join(sorted(meters)) or "none"))
    print(text)
    out = a.out or (None if a.self_test else str(ROOT / "bench" / "gpu_calibrate.md"))
    if out:
        Path(out).write_text(text, encoding="utf-8")
    return 1 if any("error" in m for _c, m, _e in rows) else 0


def rerender(a) -> int:
    """Report from saved measurements (one or more runs on the same GPU), estimates recomputed."""
    rows, env_info, meters, notes = [], None, set(), []
    with tempfile.TemporaryDirectory() as d:
        for path in a.from_json:
            data = json.loads(Path(path).read_text())
            env_info = env_info or data["environment"]
            names = ", ".join(r["case"]["name"] for r in data["runs"])
            notes.append(f"- `{Path(path).name}`: {names}." + (f" {data['note']}." if data.get("note") else ""))
            for run in data["runs"]:
                case, meas = Case(**run["case"]), run["measured"]
                meters.add(meas.get("meter") or "none")
                rows.append((case, meas, estimate_phases(case, env_info, model_path_for(case, d, False))))
    header = header_of(env_info, ", ".join(sorted(meters)))
    text = report(rows, header + "\n\nMeasurements (kept as measured; the estimate is recomputed by "
                  "`python bench/gpu_calibrate.py --from-json FILES`):\n" + "\n".join(notes))
    print(text)
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
