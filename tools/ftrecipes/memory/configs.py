"""The files users train with, as estimate inputs: `estimate --config FILE` (repeatable) and the
memory-only `--set KEY=V` keys.

Each file is read and classified by the readers lint uses (ftrecipes.lint.load: sources +
detect), and the files it names (LLaMA-Factory / TRL `deepspeed:`, accelerate's
`deepspeed_config_file`, configs a launch script passes) are read with it. Each framework's keys
map to Setup fields here, with that framework's defaults where a file leaves a key out; a
setting the memory model cannot express is an error naming the file, line and key rather than
a silently different estimate.

Precedence: command-line flags > memory --set keys > the files (in the order given; a later
file wins for a field two files set, but mixed precision is on when any file turns it on, as
TrainingArguments decides, and a trainer file's default DDP does not undo an accelerate
config's FSDP) > Setup's defaults.
"""
from __future__ import annotations

import os
import re
from dataclasses import fields

from .. import sources
from ..errors import UserError, clip
from .inputs import DEEPSPEED_FIELDS, check_fields
from . import catalog, trl_head
from .activations import SAVED_MODULES  # what modules_to_save_split counts

# transformers' OptimizerNames (training_args.py) -> Setup.optimizer
_HF_OPTIM = {
    "adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "adamw_apex_fused": "adamw",
    "adamw_torch_xla": "adamw", "adamw_torch_npu_fused": "adamw",
    "adamw_bnb_8bit": "adamw_8bit", "adamw_8bit": "adamw_8bit", "paged_adamw_8bit": "paged_adamw_8bit",
    "paged_adamw_32bit": "paged_adamw_32bit", "paged_adamw": "paged_adamw_32bit",
    "sgd": "sgd", "adafactor": "adafactor",
    # torchao's AdamW8bit (transformers OptimizerNames.ADAMW_TORCH_8BIT): both moments in 8 bits
    # with a scale per block, as bitsandbytes' 8-bit AdamW keeps them
    "adamw_torch_8bit": "adamw_8bit",
}
# LLaMA-Factory ModelArguments.flash_attn -> attn_implementation ("auto" lets transformers pick SDPA)
_LF_ATTN = {"auto": "sdpa", "sdpa": "sdpa", "fa2": "flash_attention_2", "fa3": "flash_attention_2",
            "disabled": "eager"}
# PEFT's default LoRA targets when none are named (peft/utils/constants.py
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama, mistral, qwen2 -> q_proj, v_proj)
_PEFT_DEFAULT_TARGETS = "q_proj,v_proj"
_TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": ""}
# rm is DPO's pair of sequences without a reference (from_llamafactory)
_LF_STAGE = {"sft": "sft", "pt": "sft", "rm": "dpo", "dpo": "dpo", "kto": "dpo"}

# Setup fields a recipe does not render but `estimate NAME --set` may change (what-if keys)
MEMORY_KEYS = ("quantization", "double_quant", "master_weights", "optimizer", "loss_kernel", "modules_to_save",
               "framework", "fsdp_offload", "zero3_init", "image_slices", "freeze_vision_tower", "freeze_projector",
               "adapter_fp32", "trainer", "load_dtype", "sync_each_batch", "checkpoint_reentrant",
               "varying_lengths", "checkpoint_offload", "optimizer_in_backward", "adam_impl", "mixed_precision",
               "accelerate_version", "trl_version", "transformers_version", "loss_type", "lora_dropout",
               "torchao_version", "use_orig_params", "bitsandbytes_version", "layer_kernels", "expandable_segments",
               "kbit_prepared")


_MAX_INT = 2**31 - 1  # the largest count the CLI's own flags take
MAX_SCRIPT_BYTES = 1024 * 1024  # a launched script read for its argument parser


class _File:
    """One config's data with positions, so an error names file, line and key."""

    def __init__(self, cfg, data=None, lines=None, versions=None):
        self.cfg = cfg
        self.data = data if data is not None else (cfg.data if isinstance(cfg.data, dict) else {})
        self.lines = lines or {}  # launch scripts: the line of each flag
        self.versions = versions or {}  # {framework: release} the file runs with, where known
        self.unknown_model = None  # the error for a model id the catalog lacks (_model)
        self.paths = {}  # keys a launch's key=value words set: the launch script's path (lines: its lines)

    def get(self, *names, default=None):
        for n in names:
            if n in self.data:
                return self.data[n]
        return default

    def int(self, *names, default=None, minimum=0):
        """An integer setting (a count or a size, so from minimum to 2**31 - 1); shell words and
        YAML strings convert, anything else is an error."""
        def convert(v):
            if isinstance(v, bool) or float(v) != int(float(v)) or not minimum <= int(float(v)) <= _MAX_INT:
                raise ValueError
            return int(float(v))
        return self._typed(names, default, convert, f"an integer from {minimum} to {_MAX_INT}")

    def probability(self, *names, default=0.0):
        """A probability in [0, 1) (a dropout rate): numbers and numeric strings, else an error."""
        def convert(v):
            if isinstance(v, bool) or not 0 <= float(v) < 1:
                raise ValueError
            return float(v)
        return self._typed(names, default, convert, "a probability in [0, 1)")

    def fraction(self, *names, default=None):
        """A share of GPU memory in (0, 1] (vLLM's gpu_memory_utilization), as a number or numeric string."""
        def convert(v):
            if isinstance(v, bool) or not 0 < float(v) <= 1:
                raise ValueError
            return float(v)
        return self._typed(names, default, convert, "a fraction in (0, 1]")

    def choice(self, key, allowed, default=None):
        """One of allowed (strings); a list or mapping here is an error at the key, not a crash."""
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, str) or v not in allowed:
            raise self.error(key, f"{key} {clip(repr(v))}; known: {', '.join(allowed)}")
        return v

    def names(self, *keys, known=None):
        """Module names: a comma-separated string or a list of strings, as PEFT and the trainers
        take them ([] when unset). Anything else would reach the estimate as a name it cannot
        place, so it is refused here, where the file and line are known; so is a name outside
        known (the modules the memory model counts), when given."""
        for n in keys:
            v = self.data.get(n)
            if v is None:
                continue
            items = [v] if isinstance(v, str) else v
            if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
                raise self.error(n, f"expected a name or a list of names, got {clip(repr(v))}")
            out = _split(v)
            bad = next((x for x in out if known is not None and x not in known), None)
            if bad is not None:
                raise self.error(n, f"unknown module {bad!r}; known: {', '.join(known)}")
            return out
        return []

    def _typed(self, names, default, convert, expected):
        """The first of names the file sets, through convert; an error at its line if that fails."""
        for n in names:
            if n in self.data and self.data[n] is not None:
                v = self.data[n]
                try:
                    return convert(v)
                except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("1e400"))
                    raise self.error(n, f"expected {expected}, got {clip(repr(v))}") from None
        return default

    def line(self, key):
        return self.where(key)[0]

    def where(self, key):
        return (self.lines[key], None) if key in self.lines else self.cfg.doc.where((key,))

    def path(self, key):
        return self.paths.get(key, self.cfg.path)

    def error(self, key, message):
        line, col = self.where(key)
        return UserError(f"not expressible in the memory model: {message}", path=self.path(key), line=line,
                         column=col, key=key)


class NotTraining(UserError):
    """A file that holds no training step (an inference, export or helper run): refused when it
    is given, skipped when a launch script names it beside the run it trains (`llamafactory-cli
    export merge.yaml` after `llamafactory-cli train sft.yaml`)."""

    def __init__(self, what, path, line=None, key=None):
        super().__init__(f"not a training run: {what}", path=path, line=line, key=key)


def _optimizer(f: _File, key="optim"):
    name = f.get(key)
    if name is None:
        return None
    if str(name) not in _HF_OPTIM:
        raise f.error(key, f"optimizer {name!r}; known: {', '.join(_HF_OPTIM)}")
    return _HF_OPTIM[str(name)]


def _adam_impl(f: _File, key="optim"):
    """How the trainer's torch AdamW updates. transformers (training_args.py) defaults `optim` to
    adamw_torch_fused where torch >= 2.8, which the stacks these schemas come from have; the
    *_fused names run the fused kernel; adamw_torch leaves the choice to torch, which takes
    foreach on CUDA (optim/optimizer.py _default_to_fused_or_foreach)."""
    name = str(f.get(key) or "adamw_torch_fused")
    if name not in _HF_OPTIM or _HF_OPTIM[name] != "adamw":
        return None
    return "fused" if name.endswith("_fused") else "foreach"


def _precision(f: _File):
    if f.get("bf16") is True:
        return "bf16"
    if f.get("fp16") is True:
        return "fp16"
    return None


def _model(f: _File, *keys):
    """A catalog shape for the file's model id, else None (then --model must name it). An id the
    catalog lacks is kept as the error to raise if nothing else names the model: nothing is
    downloaded, so its config.json has to come from the user."""
    key = next((k for k in keys if k in f.data), None)
    name = f.data.get(key) if key else None
    if name is not None and not isinstance(name, str):
        raise f.error(key, f"expected a model id or path, got {clip(repr(name))}")
    if key and (name is None or not name.strip()):
        # The key is there but names nothing: the file and line say where to fill it in, which
        # the general "names no model" error (raised only if no flag or other file names one) cannot.
        f.unknown_model = f.error(key, f"{key} is {'null' if name is None else 'empty'}, so no model is named; "
                                       "fill it in, or pass --model NAME|config.json or --params N")
        return None
    if not isinstance(name, str):
        return None
    try:
        catalog.model(name)
    except (KeyError, OSError, ValueError):
        f.unknown_model = f.error(key, f"model {name!r} is not in the catalog and nothing is downloaded; "
                                       "pass --model with a catalog name or the path of its config.json")
        return None
    return name


def _inline_bool(f: _File, key: str, *path: str):
    """A true/false setting at `key`, or inside the mapping written inline at `key` (a JSON file
    it names is not followed); None when unset."""
    v = f.get(key)
    for name in path:
        v = v.get(name) if isinstance(v, dict) else None
    if v is not None and not isinstance(v, bool):
        raise f.error(key, f"{'.'.join((key,) + path)} {v!r}: expected true or false")
    return v


def _sync_each_batch(f: _File):
    """TrainingArguments.accelerator_config: gradient_accumulation_kwargs.sync_each_batch."""
    return _inline_bool(f, "accelerator_config", "gradient_accumulation_kwargs", "sync_each_batch")


def _use_reentrant(f: _File):
    """TrainingArguments.gradient_checkpointing_kwargs (activation_checkpointing_kwargs from
    transformers 5.23): its use_reentrant, else unset (the trainer's default)."""
    key = "activation_checkpointing_kwargs" if f.get("activation_checkpointing_kwargs") is not None \
        else "gradient_checkpointing_kwargs"
    return _inline_bool(f, key, "use_reentrant")


def _split(v):
    if v is None:
        return []
    return [x.strip() for x in (v if isinstance(v, list) else str(v).split(",")) if x.strip()]


# LLaMA-Factory switches that replace the optimizer or the training arithmetic with something the
# memory model does not express (FinetuningArguments / ModelArguments of 0.9.x): GaLore and APOLLO
# project gradients to low rank, BAdam trains one block at a time, Adam-mini shares second
# moments, Muon is another optimizer, fp8 trains through torchao / Transformer Engine.
_LF_NOT_MODELLED = ("use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon", "fp8")


def _hf_fsdp(f: _File, out: dict) -> None:
    """TrainingArguments.fsdp ("full_shard auto_wrap", or a list; transformers FSDPOption) and
    fsdp_config.version: the HF Trainer shards through accelerate's FSDP plugin. Only full
    sharding is modelled; "offload" moves parameters, gradients and optimizer to the CPU."""
    raw = f.get("fsdp")
    opts = [o for x in f.names("fsdp") for o in x.split()] if raw else []
    if not opts or f.get("deepspeed"):
        return
    if "full_shard" not in opts:
        raise f.error("fsdp", f"fsdp {raw!r} (only full_shard is modelled)")
    fc = f.get("fsdp_config") if isinstance(f.get("fsdp_config"), dict) else {}
    out["framework"] = "fsdp2" if str(fc.get("version", fc.get("fsdp_version", 1))) == "2" else "fsdp"
    out["fsdp_offload"] = "offload" in opts
    orig = fc.get("use_orig_params", fc.get("fsdp_use_orig_params"))
    if orig is not None:
        out["use_orig_params"] = _true(orig)


def _llamafactory_trains(f: _File) -> None:
    """LLaMA-Factory 0.9.5 trains only under TrainingArguments.do_train (default false): each
    train/<stage>/workflow.py calls trainer.train() inside `if training_args.do_train`. Files for
    `llamafactory-cli chat / api / webchat` (model and template: no stage, no do_train) and
    `llamafactory-cli export` (export_dir) and do_predict / do_eval runs hold no training step,
    and were estimated as LoRA SFT. A file naming a stage without do_train is still read as the
    training it describes (lint's memory-fit rule passes over it instead)."""
    if f.get("do_train") is True:
        return
    if f.get("export_dir") is not None:
        raise NotTraining("an export config (export_dir, no do_train)", f.path("export_dir"), f.line("export_dir"),
                          "export_dir")
    runs = {"do_train": "do_train false", "do_predict": "a prediction run (no do_train)",
            "do_eval": "an evaluation run (no do_train)"}
    for key, what in runs.items():
        if key in f.data:
            raise NotTraining(what, f.path(key), f.line(key), key)
    if "stage" not in f.data:
        raise NotTraining("an inference config (no stage or do_train)", f.cfg.path)


def from_llamafactory(f: _File) -> dict:
    """llamafactory/hparams (model_args, data_args, finetuning_args) as of LLaMA-Factory 0.9.5."""
    _llamafactory_trains(f)
    stage = f.get("stage", default="sft")
    if not isinstance(stage, str) or stage not in _LF_STAGE:
        raise f.error("stage", f"LLaMA-Factory stage {stage!r} (the memory model covers sft, pt, rm, dpo, kto)")
    ftype = f.get("finetuning_type", default="lora")
    if ftype not in ("lora", "full"):
        raise f.error("finetuning_type", f"finetuning_type {ftype!r} (lora and full are modelled)")
    out = {"trainer": "llamafactory", "method": _LF_STAGE[stage], "framework": "ddp",
           "lora_rank": f.int("lora_rank", default=8, minimum=1) if ftype == "lora" else 0,
           "lora_target": ",".join(f.names("lora_target")) or "all",
           # FinetuningArguments.lora_dropout defaults to 0.0
           "lora_dropout": f.probability("lora_dropout") if ftype == "lora" else 0.0,
           "modules_to_save": f.names("additional_target", known=SAVED_MODULES),
           "seq_len": f.int("cutoff_len", default=2048, minimum=1),
           "micro_batch": f.int("per_device_train_batch_size", default=8, minimum=1),  # transformers' default
           "grad_accum": f.int("gradient_accumulation_steps", default=1, minimum=1),
           "sync_each_batch": _sync_each_batch(f),
           # LLaMA-Factory checkpoints by default (disable_gradient_checkpointing: false)
           "gradient_checkpointing": not f.get("disable_gradient_checkpointing", default=False),
           "checkpoint_reentrant": _inline_bool(f, "use_reentrant_gc"),
           "attn_implementation": _LF_ATTN.get(str(f.get("flash_attn", default="auto")), "sdpa"),
           "precision": _precision(f), "optimizer": _optimizer(f), "adam_impl": _adam_impl(f), "model": _model(f, "model_name_or_path")}
    if stage == "rm":
        # train/rm (0.9.5): PairwiseDataCollatorWithPadding batches each pair's chosen and rejected
        # sequences (2n rows) and PairwiseTrainer runs no reference model; read as sft it was half
        # the activations. "precomputed": no reference weights and no reference forward.
        out["dpo_reference"] = "precomputed"
    if stage == "dpo" and f.get("pref_loss") in ("orpo", "simpo"):
        # FinetuningArguments.__post_init__ (0.9.5): use_ref_model = stage == "dpo" and pref_loss
        # not in ["orpo", "simpo"]; train/dpo/workflow.py then builds no reference model and
        # CustomDPOTrainer.compute_reference_log_probs returns (None, None). Read as DPO, full
        # fine-tuning carried a second frozen copy of the weights and every step a reference forward.
        out["dpo_reference"] = "precomputed"
    if f.get("flash_attn") is not None and str(f.get("flash_attn")) not in _LF_ATTN:
        raise f.error("flash_attn", f"flash_attn {f.get('flash_attn')!r}; known: {', '.join(_LF_ATTN)}")
    bits = f.int("quantization_bit")
    if bits is not None:
        if str(f.get("quantization_method", default="bnb")) != "bnb" or bits not in (4, 8):
            raise f.error("quantization_bit", "only bitsandbytes 4-bit and 8-bit base weights are modelled")
        out["quantization"] = f"{bits}bit"
        out["double_quant"] = bool(f.get("double_quantization", default=True))
    if f.get("pure_bf16") is True:
        # hparams/parser.py: compute_dtype is bf16 with bf16 or pure_bf16; the model loads in it
        out["master_weights"] = False
        out["precision"] = "bf16"
    if f.get("enable_liger_kernel") is True:
        # model_utils/liger_kernel.py: apply_liger_kernel with rms_norm and swiglu at their defaults (on)
        out["loss_kernel"], out["layer_kernels"] = "liger", "liger"
    elif f.get("use_unsloth") is True:
        out["loss_kernel"] = "chunked"
    if f.get("use_unsloth") is True and out["lora_rank"]:
        # model/adapter.py hands LoRA to FastLanguageModel.get_peft_model, which installs
        # Unsloth's own autograd functions in the decoder layers
        out["layer_kernels"] = "unsloth"
    # use_unsloth hands Unsloth use_gradient_checkpointing="unsloth" (model_utils/unsloth.py);
    # use_unsloth_gc installs the same offloading checkpointer without Unsloth
    if f.get("use_unsloth_gc") is True or (f.get("use_unsloth") is True and out["gradient_checkpointing"]):
        out["gradient_checkpointing"] = True
        out["checkpoint_offload"] = True
    for key in _LF_NOT_MODELLED:
        if f.get(key) is True:
            raise f.error(key, f"{key}: true (not modelled)")
    if f.get("deepspeed"):
        out["framework"] = "deepspeed"
    _hf_fsdp(f, out)
    # FinetuningArguments: a VLM's tower and projector stay frozen unless these say otherwise
    # (model_utils/visual.py get_forbidden_modules; LoRA leaves them out of its targets)
    out["freeze_vision_tower"] = f.get("freeze_vision_tower", default=True) is not False
    out["freeze_projector"] = f.get("freeze_multi_modal_projector", default=True) is not False
    # TrainingArguments' own bf16/fp16 (default false); pure_bf16 is not one of them
    out["mixed_precision"] = _precision(f) or "no"
    return out


def from_trl(f: _File, method: str | None = None) -> dict:
    """TRL's SFTConfig / DPOConfig / GRPOConfig + ModelConfig (trl 1.x: gradient checkpointing on
    by default, max_length 1024 for SFT and DPO, max_completion_length 512 for GRPO). method: the
    trainer a launch names (its script's config class); a YAML alone is known by its keys."""
    keys = set(f.data)
    method = method or ("grpo" if keys & {"num_generations", "reward_funcs", "use_vllm"} else (
        "dpo" if keys & {"beta", "max_prompt_length", "rpo_alpha", "ref_model_init_kwargs", *_NO_REFERENCE_KEYS}
        and "dataset_text_field" not in keys else "sft"))
    if method == "grpo":
        # prompt + completion; TRL 1.x has no max_prompt_length, and a vLLM engine caps the total
        # at vllm_max_model_length
        seq = f.int("max_prompt_length", default=512, minimum=1) + f.int("max_completion_length", default=512, minimum=1)
        cap = f.int("vllm_max_model_length", minimum=1) if f.get("use_vllm") is True else None
        if cap and (cap < seq or f.get("max_prompt_length") is None):
            seq = cap
        elif f.get("max_prompt_length") is None and f.get("use_vllm") is True:
            # Prompts are not cut (TRL 1.x has no max_prompt_length): a `vllm serve
            # --max-model-len` among the files bounds prompt + completion (read() applies it).
            out_bound = {"_unbounded_prompt": True}
            seq = f.int("max_completion_length", default=512, minimum=1) + 512
            return {**_trl_fields(f, method, seq), **out_bound}
    else:
        seq = f.int("max_length", default=1024, minimum=1)
    out = _trl_fields(f, method, seq)
    if method == "dpo" and (keys & _NO_REFERENCE_KEYS or f.get("loss_type") in _NO_REFERENCE_LOSSES):
        out["dpo_reference"] = "precomputed"  # no reference weights and no reference forward
    if method == "grpo" and f.get("beta") is not None:
        out["dpo_reference"] = _grpo_reference(f, out)
    return out


def _grpo_reference(f: _File, out: dict) -> str:
    """GRPOTrainer's reference model as a stated beta decides it (its default changed in TRL 0.19,
    estimate.GRPO_NO_REFERENCE_SINCE): none at beta 0; with a KL term the base with adapters
    disabled under PEFT, else a frozen copy of the policy."""
    def convert(v):
        if isinstance(v, bool) or not 0 <= float(v) < float("inf"):
            raise ValueError
        return float(v)
    beta = f._typed(("beta",), None, convert, "a KL coefficient >= 0")
    if beta == 0:
        return "precomputed"
    return "adapter" if out.get("lora_rank") else "model"


# Pair trainers that keep no reference model, told from DPOConfig by keys only their configs
# define. TRL's CPOTrainer and ORPOTrainer (trl/experimental/cpo, orpo in trl 1.16; trl/trainer in
# 0.x) take no ref_model and compute their losses from the policy's log-probs alone; CPOConfig
# adds cpo_alpha, simpo_gamma and loss_type "simpo" / "alphapo" (SimPO is CPO with cpo_alpha 0).
# princeton-nlp/SimPO's SimPOTrainer (scripts/simpo_trainer.py) is a Trainer with no reference
# either; its SimPOConfig adds gamma_beta_ratio and sft_weight. ORPOConfig adds no key of its
# own: an ORPO file is known by the script a launch runs (_NO_REFERENCE_CONFIGS).
_NO_REFERENCE_KEYS = {"cpo_alpha", "simpo_gamma", "gamma_beta_ratio", "sft_weight"}
_NO_REFERENCE_LOSSES = ("simpo", "alphapo")
_NO_REFERENCE_CONFIGS = ("CPOConfig", "ORPOConfig")


def _trl_fields(f: _File, method: str, seq: int) -> dict:
    version = f.versions.get("trl", "")
    out = {"trainer": "trl", "method": method, "trl_version": version or None, "framework": "deepspeed" if f.get("deepspeed") else "ddp",
           "seq_len": seq, "micro_batch": f.int("per_device_train_batch_size", default=8, minimum=1),
           "grad_accum": f.int("gradient_accumulation_steps", default=1, minimum=1), "sync_each_batch": _sync_each_batch(f),
           # transformers 5.23 renamed gradient_checkpointing to activation_checkpointing (old name an alias)
           "gradient_checkpointing": bool(f.get("activation_checkpointing", "gradient_checkpointing", default=True)),
           "checkpoint_reentrant": _use_reentrant(f),
           "precision": _precision(f), "optimizer": _optimizer(f), "adam_impl": _adam_impl(f), "model": _model(f, "model_name_or_path"),
           "attn_implementation": f.get("attn_implementation")}
    if f.get("use_peft") is True or f.get("lora_r") is not None:
        out["lora_rank"] = f.int("lora_r", default=16, minimum=1)
        targets = f.names("lora_target_modules")
        out["lora_target"] = "all" if targets == ["all-linear"] else ",".join(targets) or _PEFT_DEFAULT_TARGETS
        out["modules_to_save"] = f.names("lora_modules_to_save", known=SAVED_MODULES)
        # trl ModelConfig.lora_dropout defaults to 0.05 (trl/trainer/model_config.py), not PEFT's 0
        out["lora_dropout"] = f.probability("lora_dropout", default=0.05)
    if f.get("load_in_4bit") is True or f.get("load_in_8bit") is True:
        out["quantization"] = "4bit" if f.get("load_in_4bit") is True else "8bit"
        out["double_quant"] = bool(f.get("use_bnb_nested_quant", default=False))
    if f.get("use_liger_kernel") is True:
        # transformers' Trainer: _apply_liger_kernel_to_instance, rope, rms_norm and swiglu on by default
        out["loss_kernel"], out["layer_kernels"] = "liger", "liger"
    _hf_fsdp(f, out)
    if method == "sft" and f.get("loss_type") is not None:
        # SFTConfig's, which picks the LM-head path (trl_head.loss_path); DPO's names its objective
        if str(f.get("loss_type")) not in trl_head.LOSS_TYPES[1:]:
            raise f.error("loss_type", f"loss_type {f.get('loss_type')!r}; known: {', '.join(trl_head.LOSS_TYPES[1:])}")
        out["loss_type"] = str(f.get("loss_type"))
    # ModelConfig.dtype (default "float32") or SFTConfig.model_init_kwargs.dtype. `torch_dtype: null`
    # (alignment-handbook's DPO recipes) is the default: the scripts pass None to from_pretrained
    init = f.get("model_init_kwargs") if isinstance(f.get("model_init_kwargs"), dict) else {}
    key = next((k for k in ("dtype", "torch_dtype") if f.get(k) is not None), "model_init_kwargs")
    dtype = str(f.get(key) if key != "model_init_kwargs" else init.get("dtype") or init.get("torch_dtype") or "float32")
    if dtype not in _TORCH_DTYPES:
        raise f.error(key, f"dtype {dtype!r}; known: {', '.join(_TORCH_DTYPES)}")
    out["load_dtype"] = _TORCH_DTYPES[dtype]
    # TRL's configs default bf16 to true unless fp16 is set ("bf16: Defaults to True if fp16 is not set")
    out["mixed_precision"] = "fp16" if f.get("fp16") is True else ("no" if f.get("bf16") is False else "bf16")
    if method == "grpo":
        # GRPOConfig.vllm_mode: "colocate" by default since TRL 1.0, "server" before
        out["vllm_mode"] = "none"
        if f.get("use_vllm"):
            # GRPOTrainer refuses any other vllm_mode; without use_vllm it reads neither key
            out["vllm_mode"] = f.choice("vllm_mode", ("server", "colocate"), default=trl_head.vllm_mode_default(version))
            out["vllm_gpu_memory_utilization"] = f.fraction("vllm_gpu_memory_utilization")
    return out


# axolotl's `rl:` values whose trainer is TRL's DPO-style pair trainer or its GRPO trainer
_AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "grpo": "grpo"}
_AXOLOTL_ATTN = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "eager_attention": "eager",
                 # xformers' memory-efficient kernel, like flash attention, never holds the scores
                 "xformers_attention": "flash_attention_2"}
_AXOLOTL_ATTN_NAMES = {"flash_attention_2": "flash_attention_2", "flash_attention_3": "flash_attention_2",
                       "sdpa": "sdpa", "eager": "eager", "xformers": "flash_attention_2"}


def from_axolotl(f: _File) -> dict:
    """axolotl's config (src/axolotl/utils/schemas: AxolotlInputConfig) as of 0.13: sequence_len
    512, micro_batch_size 1, optimizer adamw_torch_fused, gradient_checkpointing off, lora_dropout
    0.0, bf16 "auto" (bf16 where the GPU has it) unless the file says otherwise. The weights load
    in the training dtype (normalize_config: torch_dtype bf16 with bf16, fp16 with fp16 or 8-bit).
    QLoRA loads NF4 with double quantisation (bnb_4bit_use_double_quant True in its loader)."""
    if f.get("qat"):
        # quantization-aware training's fake-quantised copies are not modelled
        raise f.error("qat", "qat (quantization-aware training) is not modelled")
    rl = f.get("rl")
    if rl is not None and str(rl) not in _AXOLOTL_RL:
        raise f.error("rl", f"axolotl rl {rl!r} (dpo, ipo and grpo are modelled)")
    for key in ("tensor_parallel_size", "context_parallel_size", "sequence_parallel_degree"):
        if f.int(key, default=1) > 1:
            raise f.error(key, f"{key} {f.get(key)} (tensor, context and sequence parallelism are not modelled)")
    adapter = f.get("adapter")
    if adapter not in (None, "lora", "qlora"):
        raise f.error("adapter", f"adapter {adapter!r} (lora and qlora are modelled)")
    out = {"trainer": "trl" if rl else "axolotl", "method": _AXOLOTL_RL.get(str(rl), "sft"), "framework": "ddp",
           "model": _model(f, "base_model"), "seq_len": f.int("sequence_len", default=512, minimum=1),
           "micro_batch": f.int("micro_batch_size", default=1, minimum=1),
           "grad_accum": f.int("gradient_accumulation_steps", default=1, minimum=1),
           "optimizer": _optimizer(f, "optimizer"), "adam_impl": _adam_impl(f, "optimizer"),
           # `axolotl train` sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA
           # starts unless the variable is set (cli/main.py set_pytorch_cuda_alloc_conf, from
           # 8ddc18ec8 of 2024-12-17, torch >= 2.2); read() keeps a launch script's own value
           "expandable_segments": True}
    ckpt = f.get("gradient_checkpointing", default=False)
    out["gradient_checkpointing"] = bool(ckpt)
    out["checkpoint_offload"] = str(ckpt).startswith("offload")
    out["checkpoint_reentrant"] = _use_reentrant(f)
    attn = f.get("attn_implementation")
    if attn is not None and str(attn) not in _AXOLOTL_ATTN_NAMES:
        raise f.error("attn_implementation", f"attn_implementation {attn!r}; known: {', '.join(_AXOLOTL_ATTN_NAMES)}")
    out["attn_implementation"] = _AXOLOTL_ATTN_NAMES[str(attn)] if attn else next(
        (v for k, v in _AXOLOTL_ATTN.items() if f.get(k) is True), None)
    if adapter:
        out["lora_rank"] = f.int("lora_r", default=8, minimum=1)  # PEFT LoraConfig's r
        targets = f.names("lora_target_modules")
        out["lora_target"] = "all" if f.get("lora_target_linear") is True or targets == ["all-linear"] else (
            ",".join(targets) or _PEFT_DEFAULT_TARGETS)
        out["lora_dropout"] = f.probability("lora_dropout")
        out["modules_to_save"] = f.names("lora_modules_to_save", known=SAVED_MODULES)
    if adapter == "qlora" or f.get("load_in_4bit") is True:
        out["quantization"], out["double_quant"] = "4bit", True
    elif f.get("load_in_8bit") is True:
        out["quantization"] = "8bit"
    if f.get("chunked_cross_entropy") is True or f.get("cut_cross_entropy") is True:
        out["loss_kernel"] = "chunked"
    elif f.get("liger_fused_linear_cross_entropy") is True:
        out["loss_kernel"] = "liger"
    if f.get("liger_rms_norm") is True and f.get("liger_glu_activation") is True:
        # axolotl's LigerPlugin patches each kernel only when its own flag is set
        out["layer_kernels"] = "liger"
    bf16, fp16 = f.get("bf16", default="auto"), f.get("fp16") is True
    precision = "bf16" if bf16 is True or (bf16 == "auto" and not fp16) else ("fp16" if fp16 else "fp32")
    if bf16 == "auto" and not fp16:
        # utils/config resolve_dtype: fp16 instead where the GPU has no bf16 (cli decides, knowing the GPU)
        out["_bf16_auto"] = True
    out["precision"] = precision
    out["load_dtype"] = "fp16" if precision != "bf16" and f.get("load_in_8bit") is True else precision
    out["mixed_precision"] = "no" if precision == "fp32" else precision
    if f.get("deepspeed"):
        out["framework"] = "deepspeed"
    elif f.get("fsdp") or f.get("fsdp_config"):
        fc = f.get("fsdp_config") if isinstance(f.get("fsdp_config"), dict) else {}
        version = fc.get("fsdp_version", fc.get("version", f.get("fsdp_version", 1)))
        out["framework"] = "fsdp2" if str(version) == "2" else "fsdp"
        out["fsdp_offload"] = _true(fc.get("offload_params", fc.get("fsdp_offload_params", False)))
        if _true(fc.get("activation_checkpointing", fc.get("fsdp_activation_checkpointing", False))):
            out["gradient_checkpointing"] = True
    return out


def from_accelerate(f: _File) -> dict:
    """accelerate's ClusterConfig (commands/config/config_args.py): distributed_type and its
    deepspeed_config / fsdp_config sections."""
    dist = f.get("distributed_type", default="NO")
    # a value that is not text (YAML's `no` is false) stays as it is and runs as NO (formats.ACCELERATE_PARSING)
    dist = dist.upper() if isinstance(dist, str) else "NO"
    out = {"gpus": f.int("num_processes", minimum=1), "nodes": f.int("num_machines", minimum=1)}
    mp = f.get("mixed_precision")
    if mp in ("bf16", "fp16"):
        out["precision"] = mp
    if mp in ("bf16", "fp16", "no"):
        # "no" trains in the dtype the weights have: fp32 unless a trainer file loads them in
        # bf16 (read() decides once every file is in); FSDP's cast depends on it (fsdp_upcast)
        out["mixed_precision"] = mp
    if dist == "DEEPSPEED":
        from . import accelerate_ds

        out.update(framework="deepspeed", **accelerate_ds.read(f.cfg, f.data))
    elif dist == "FSDP":
        fc = f.get("fsdp_config") or {}
        if not isinstance(fc, dict):
            raise f.error("fsdp_config", f"must be a mapping of FSDP settings, got {type(fc).__name__}")
        strategy = str(fc.get("fsdp_sharding_strategy", fc.get("fsdp_reshard_after_forward", "FULL_SHARD"))).upper()
        if strategy not in ("FULL_SHARD", "1", "TRUE"):
            raise f.error("fsdp_config", f"FSDP sharding {strategy} (only full shard is modelled)")
        out["framework"] = "fsdp2" if str(fc.get("fsdp_version", 1)) == "2" else "fsdp"
        out["fsdp_offload"] = bool(fc.get("fsdp_offload_params", False))
        if fc.get("fsdp_use_orig_params") is not None:
            out["use_orig_params"] = _true(fc["fsdp_use_orig_params"])
        # FSDP's own checkpointing of each wrapped layer (accelerate's fsdp2_apply_ac / FSDP1's
        # apply_activation_checkpointing): a trainer file may leave its own off; read() merges
        out["_fsdp_checkpointing"] = str(fc.get("fsdp_activation_checkpointing", False)).lower() == "true"
    elif dist in ("MULTI_GPU", "NO"):
        out["framework"] = "ddp" if dist == "MULTI_GPU" else "torch"
    else:
        raise f.error("distributed_type", f"distributed_type {dist} (DEEPSPEED, FSDP, MULTI_GPU and NO are modelled)")
    return out


def from_openrlhf(f: _File) -> dict:
    """OpenRLHF flags, dotted (>= 0.10.2) and the older flat names (see schemas/versions.json)."""
    module = getattr(f.cfg.doc, "module", "") or ""
    method = "dpo" if "train_dpo" in module else ("sft" if "train_sft" in module else None)
    if method is None:
        raise UserError(f"not expressible in the memory model: OpenRLHF {module or 'command'} "
                        "(train_sft and train_dpo are modelled)", path=f.cfg.path)
    for names in (("ds.ring_attn_size", "ring_attn_size"), ("ds.tensor_parallel_size", "ds_tensor_parallel_size")):
        if f.int(*names, default=1) > 1:
            raise f.error(names[0] if f.get(names[0]) is not None else names[1],
                          "ring attention and DeepSpeed tensor parallelism are not modelled")
    dtype = f.get("ds.param_dtype", "param_dtype")
    # OpenRLHF's own defaults (cli/train_sft.py, train_dpo.py, unchanged 0.7.5 to 0.11.2): micro
    # batch 8, global batch 128, max_len 2048 for SFT and 512 for DPO; the accumulation is not a
    # flag but train_batch_size // micro // world size (DeepspeedStrategy.setup_distributed),
    # worked out once the world size is known (setup_from_files)
    out = {"trainer": "openrlhf", "method": method, "framework": "deepspeed",
           "_global_batch": f.int("train.batch_size", "train_batch_size", default=128, minimum=1),
           "zero_stage": f.int("ds.zero_stage", "zero_stage"),
           "offload_optimizer": "cpu" if f.get("ds.adam_offload", "adam_offload") is True else None,
           "seq_len": f.int("data.max_len", "max_len", default=512 if method == "dpo" else 2048, minimum=1),
           "micro_batch": f.int("train.micro_batch_size", "micro_train_batch_size", default=8, minimum=1),
           "gradient_checkpointing": bool(f.get("model.gradient_checkpointing_enable", "gradient_checkpointing",
                                                default=False)),
           # store_true flags: reentrant only when given (OpenRLHF's default is non-reentrant)
           "checkpoint_reentrant": True if f.get("model.gradient_checkpointing_reentrant",
                                                 "actor.gradient_checkpointing_reentrant",
                                                 "gradient_checkpointing_use_reentrant") is True else None,
           "lora_rank": f.int("ds.lora.rank", "lora_rank"),
           "lora_dropout": f.probability("ds.lora.dropout", "lora_dropout"),  # its flag defaults to 0
           "attn_implementation": f.get("ds.attn_implementation", "attn_implementation")
           or ("flash_attention_2" if f.get("flash_attn") is True else None),
           "precision": dtype if dtype in ("bf16", "fp16") else ("bf16" if f.get("bf16") is True else None),
           "model": _model(f, "model.model_name_or_path", "pretrain")}
    if f.get("ds.load_in_4bit", "load_in_4bit") is True:
        out["quantization"] = "4bit"
    if f.get("ds.use_liger_kernel", "use_liger_kernel") is True:
        # AutoLigerKernelForCausalLM: every kernel of the model type at its default (on)
        out["loss_kernel"], out["layer_kernels"] = "liger", "liger"
    targets = f.names("ds.lora.target_modules", "target_modules")
    if targets:
        out["lora_target"] = ",".join(targets)
    return out


# The Setup field each flag from_launch reads feeds, and the estimate flag that can give it instead.
_LAUNCH_FIELDS = {"nproc_per_node": "gpus", "num_gpus": "gpus", "num_processes": "gpus", "nnodes": "gpus", "ntasks": "gpus",
                  "num_machines": "gpus", "per_device_train_batch_size": "micro_batch", "model_max_length": "seq_len", "max_seq_length": "seq_len",
                  "gradient_accumulation_steps": "grad_accum", "gradient_checkpointing": "gradient_checkpointing",
                  "bf16": "precision", "fp16": "precision", "optim": "optimizer", "use_lora": "lora_rank",
                  "lora_r": "lora_rank", "lora_dropout": "lora_dropout", "q_lora": "quantization",
                  "max_slice_nums": "image_slices", "model_name_or_path": "model", "lora_enable": "lora_rank",
                  "use_peft": "lora_rank", "lora_rank": "lora_rank", "bits": "quantization",
                  "deepspeed": "deepspeed_config", "grad_checkpoint": "gradient_checkpointing",
                  "use_llm_lora": "lora_rank"}
_FIELD_FLAGS = {"gpus": "--gpus", "micro_batch": "--micro-batch", "seq_len": "--seq-len", "grad_accum": "--grad-accum",
                "gradient_checkpointing": "--gradient-checkpointing", "precision": "--precision",
                "lora_rank": "--lora-rank", "model": "--model", "deepspeed_config": "--config with that DeepSpeed JSON"}
# The flag that turns LoRA on in a Trainer script's own dataclasses: QwenLM/Qwen's and MiniCPM-V's
# use_lora, LLaVA's lora_enable (and the LLaVA-derived trainers), MedicalGPT's use_peft; the rank is
# lora_r or lora_rank
_LORA_SWITCHES = ("use_lora", "lora_enable", "use_peft")


def _shell_filled(value) -> bool:
    """A launch word the shell fills in when the job runs: a variable the script does not set
    (`--nproc_per_node $GPUS_PER_NODE` after `GPUS_PER_NODE=$(python -c ...)`, Slurm's
    ${SLURM_NNODES}, a script argument $1) or a command substitution."""
    words = value if isinstance(value, list) else [value]
    return any(isinstance(w, str) and "$" in w for w in words)


def _unresolved(f: _File, unset: dict) -> dict:
    """{field: error} for the flags whose value only the running shell knows. Read as written they
    were an error even next to `--gpus 8` (or, for the model, "'$1' is not in the catalog"); the
    estimate's own flag, which beats the files, gives the value instead, and without one the error
    says which flag that is."""
    out = {}
    for key, value in unset.items():
        field = _LAUNCH_FIELDS.get(key)
        if field and field not in out:
            flag = _FIELD_FLAGS.get(field, f"--set {field}=VALUE")
            out[field] = f.error(key, f"--{key} {clip(str(value))} is set by the shell when the job runs; "
                                      f"pass {flag}")
    return out


def _true(v) -> bool:
    return v is True or str(v).lower() in ("true", "1", "yes")


# TRL's trainer configs, by the `trl` CLI command that runs each (trl/cli.py runs
# trl/scripts/<command>.py) and the method the memory model gives it (None: not modelled; CPO and
# ORPO batch pairs as DPO does, without its reference: _NO_REFERENCE_CONFIGS)
_TRL_CONFIGS = {"SFTConfig": "sft", "DPOConfig": "dpo", "GRPOConfig": "grpo", "KTOConfig": None, "RewardConfig": None,
                "RLOOConfig": None, "ORPOConfig": "dpo", "CPOConfig": "dpo", "PPOConfig": None, "OnlineDPOConfig": None,
                "BCOConfig": None, "GKDConfig": None, "PRMConfig": None, "XPOConfig": None, "NashMDConfig": None}
_TRL_COMMANDS = {"sft": "SFTConfig", "dpo": "DPOConfig", "grpo": "GRPOConfig", "kto": "KTOConfig",
                 "reward": "RewardConfig", "rloo": "RLOOConfig"}
_PARSER_CALL = re.compile(r"\b(?:TrlParser|HfArgumentParser)\s*\(")
_PARSER_TUPLE = re.compile(r"\b(?:TrlParser|HfArgumentParser)\s*\(\s*\(([^)]*)\)")


def _trl_config_of(cfg, cmd, script) -> str | None:
    """The TRL trainer config a launch runs: `trl <command>`, or a script whose TrlParser /
    HfArgumentParser tuple names one (TRL's examples/scripts and trl/scripts, and scripts written
    after them). Such flags fill the same dataclasses as a TRL YAML, so they are read as one."""
    words = cmd.words
    if script is None:
        at = next((i for i, w in enumerate(words) if os.path.basename(w) == "trl"), None)
        return _TRL_COMMANDS.get(words[at + 1]) if at is not None and at + 1 < len(words) else None
    if _script_path(cfg, words[script]) is None:
        # TRL's documentation launches its scripts from a checkout of TRL (accelerate launch
        # trl/scripts/dpo.py ...): the path names the command even where no such file is at hand
        parts = words[script].replace("\\", "/").split("/")
        return _TRL_COMMANDS.get(parts[-1][:-3]) if parts[-3:-1] == ["trl", "scripts"] else None
    text = _script_text(cfg, words[script])
    if text is None:
        return None  # an unreadable script says nothing about its trainer; the flags are read as TrainingArguments'
    for group in _PARSER_TUPLE.findall(text):
        hit = next((n for n in re.findall(r"\w+", group) if n in _TRL_CONFIGS), None)
        if hit:
            return hit
    if not _PARSER_CALL.search(text):
        return None
    # the tuple built beforehand (trl/scripts/dpo.py: dataclass_types = (ScriptArguments, DPOConfig, ...)):
    # the one trainer config the script names, if it names one
    named = {n for n in re.findall(r"\b\w+Config\b", re.sub(r"#[^\n]*", "", text)) if n in _TRL_CONFIGS}
    return named.pop() if len(named) == 1 else None


# Flags a launched script takes to train (TrainingArguments', the finetune scripts' from_launch
# reads, and the usual hand-written ones): a plain `python x.py` given one is read as a trainer.
_TRAINING_FLAGS = (set(_LAUNCH_FIELDS) - {"model_name_or_path", "nproc_per_node", "num_gpus", "num_processes", "nnodes", "ntasks",
                                          "num_machines"}) | {"do_train", "learning_rate", "num_train_epochs", "max_steps",
                                                              "deepspeed", "fsdp", "lr", "epochs", "batch_size",
                                                              "micro_batch_size", "train_batch_size"}
_DISTRIBUTED = ("torchrun", "deepspeed", "accelerate", "trl")
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?$")


# A script that trains by itself, with every setting at its default (alpaca-lora's finetune.py
# run with --base_model and --data_path alone): a Trainer, its train() or a backward pass.
_TRAINS = re.compile(r"\.train\(|Trainer\(|\.backward\(")


_CONFIG_NAMES = (".yaml", ".yml", ".json")
_LF_CLI = ("llamafactory-cli", "lmf")


def _program(words) -> str:
    """The program a command runs, without its folder (`/usr/bin/python3` -> python3)."""
    return words[0].rsplit("/", 1)[-1] if words else ""


def _script_path(cfg, name):
    """A script a launch runs, found where the launch finds it (its working directory, the launch
    script's folder, the estimate's), else None."""
    for base in (cfg.root, os.path.dirname(str(cfg.path)), ""):
        path = os.path.join(base or "", name)
        if base is not None and os.path.isfile(path):
            return path
    return None


def _script_text(cfg, name):
    """The text of that script, else None (not at hand, or unreadable: it then says nothing)."""
    path = _script_path(cfg, name)
    try:
        return sources.read_text(path, max_bytes=MAX_SCRIPT_BYTES) if path else None
    except UserError:
        return None


def _launch_trains(cfg) -> None:
    """Refuse a launch script none of whose commands trains. LLaMA-Factory's
    examples/extras/llama_pro/expand.sh and pissa/init.sh run `python scripts/llama_pro.py
    --model_name_or_path ... --output_dir ...`: helpers that write a model once (fire.Fire, no
    Trainer), estimated as full fine-tuning of the model they name. `llamafactory-cli export |
    chat | api | webchat` train nothing either (launcher.py: only `train` reaches run_exp). A
    command trains when it goes through a distributed launcher, `llamafactory-cli train` or a TRL
    trainer script, passes a config file or a training flag, or runs a script at hand that trains
    (_TRAINS); a script with no Python command at all is left to the readers, as before."""
    from ..shellcmd import flags_after

    first = None
    for cmd in cfg.commands:
        words = cmd.words
        head = _program(words)
        module = words[words.index("-m") + 1] if "-m" in words[:-1] else None
        script = next((j for j, w in enumerate(words) if w.endswith(".py")), None)
        if head in _LF_CLI:
            if words[1:2] == ["train"]:
                return
            first = first or (cmd.line, f"runs {head} {' '.join(words[1:2])}, not train")
        elif head in _DISTRIBUTED or (module or "").startswith("torch.distributed."):
            return
        elif _PYTHON.match(head) and (script is not None or module):
            text = _script_text(cfg, words[script]) if script is not None else None
            if any(w.endswith(_CONFIG_NAMES) for w in words[1:]) or _trl_config_of(cfg, cmd, script) \
                    or set(flags_after(cmd, 1)[0]) & _TRAINING_FLAGS or (text and _TRAINS.search(text)):
                return
            ran = words[script] if script is not None else f"-m {module}"
            first = first or (cmd.line, f"runs python {ran} with no launcher, trainer config or training flag "
                                        "(a helper script, not a trainer)")
    if first:
        raise NotTraining(first[1], cfg.path, first[0])


def _llamafactory_args(cfg, cmd):
    """(config name or None, {key: value}, {key: line}) of a command that runs LLaMA-Factory's
    trainer, else None. llamafactory-cli's launcher (0.9.5) hands the words after `train` to
    run_exp unchanged (also through torchrun on several GPUs), and hparams/parser.py read_args
    takes them as a YAML / JSON file followed by OmegaConf.from_cli key=value words (their values
    parsed as YAML, merged over the file), or else as HfArgumentParser flags. A script run with a
    config file first (src/train.py x.yaml key=value) reads its words alike; whether that file is
    LLaMA-Factory's is known when it is read."""
    import yaml

    from ..shellcmd import flags_after

    words = cmd.words
    cli = _program(words) in _LF_CLI and words[1:2] == ["train"]
    script = next((j for j, w in enumerate(words) if w.endswith(".py")), None)
    at = 2 if cli else (script + 1 if script is not None else len(words))
    if at >= len(words) or not (cli or words[at].endswith(_CONFIG_NAMES)):
        return None
    if not words[at].endswith(_CONFIG_NAMES):
        flags = flags_after(cmd, at)[0]
        return None, _argparse_bools({k: v for k, (v, _line) in flags.items()}), {k: n for k, (_v, n) in flags.items()}
    data, lines = {}, {}
    for j in range(at + 1, len(words)):
        key, eq, value = words[j].partition("=")
        if not eq or key.startswith("-"):
            if cli:  # read_args would hand `--key` to HfArgumentParser.parse_dict, which refuses it
                raise UserError(f"{clip(words[j])!r} after {words[at]}: llamafactory-cli train takes key=value words "
                                "there (OmegaConf.from_cli)", path=cfg.path, line=cmd.word_lines[j])
            continue
        try:
            data[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            data[key] = value
        lines[key] = cmd.word_lines[j]
    return words[at], data, lines


def _llamafactory_gpus(env: dict):
    """The processes `llamafactory-cli train` starts (launcher.py, 0.9.5): torchrun with
    NPROC_PER_NODE, by default every visible GPU (CUDA_VISIBLE_DEVICES), times NNODES."""
    n = env.get("NPROC_PER_NODE") or (len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
                                      if env.get("CUDA_VISIBLE_DEVICES") else None)
    nodes = env.get("NNODES", "1")
    if not (str(n).isdigit() and str(nodes).isdigit()) or int(n) < 1 or int(nodes) < 1:
        return {}
    return {"gpus": int(n) * int(nodes), "nodes": int(nodes)}


def _env_on(env: dict, name: str, default: str = "0") -> bool:
    """LLaMA-Factory's is_env_enabled (extras/misc.py): the value lowered is true, y or 1."""
    return str(env.get(name, default)).lower() in ("true", "y", "1")


def _expandable_segments(env: dict):
    """What PYTORCH_ALLOC_CONF (torch >= 2.9) or else PYTORCH_CUDA_ALLOC_CONF says of
    expandable_segments: True, False, or None when neither names it. torch's parser takes the
    words between ',' and ':' and accepts only "True" and "False" (CUDAAllocatorConfig)."""
    conf = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF")
    if not conf:
        return None
    words = re.split(r"[,:\[\]]", str(conf))
    for key, value in zip(words, words[1:]):
        if key.strip() == "expandable_segments":
            return value.strip() == "True"
    return None


def _launch_env(cfg) -> dict:
    """The environment of a launch script's commands: what it exports and what a command sets
    for itself, later assignments winning."""
    from ..shellcmd import exported

    env: dict = {}
    for cmd in cfg.commands:
        env.update(exported(cmd), **cmd.env)
    return env


def _llamafactory_launch(cfg, out: dict) -> dict:
    """LLaMA-Factory training commands of a launch script: `llamafactory-cli train --flags` read
    as the YAML the flags stand for; the key=value words after a config file kept for that file
    (read() merges them over it: {config path: (launch, data, lines)})."""
    from .. import lint
    from ..shellcmd import exported

    overrides, env = {}, {}
    for cmd in cfg.commands:
        # `export CUDA_VISIBLE_DEVICES=0,1` (or a bare assignment) on a line of its own
        env.update(exported(cmd) if cmd.words else cmd.env)
        found = _llamafactory_args(cfg, cmd)
        if found is None:
            continue
        name, data, lines = found
        if _program(cmd.words) in _LF_CLI:
            here = {**env, **cmd.env}
            out.update(_llamafactory_gpus(here))
            if _env_on(here, "FORCE_TORCHRUN") or out.get("gpus", 1) > 1:
                # llamafactory-cli >= 0.9.3 (cli.py, 7c61b3510) starts torchrun with
                # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, over the user's own, unless OPTIM_TORCH=0
                out["expandable_segments"] = _env_on(here, "OPTIM_TORCH", "1") or _expandable_segments(here)
        if name is None:
            f = _File(cfg, data, lines)
            out.update(from_llamafactory(f), _unknown_model=f.unknown_model)
        elif lint.resolve(cfg, name):
            overrides[os.path.realpath(lint.resolve(cfg, name))] = (cfg, data, lines)
    return overrides


def from_launch(cfg, versions=None) -> dict:
    """A torchrun / deepspeed / accelerate launch of a Hugging Face Trainer script: its
    TrainingArguments flags (per_device_train_batch_size, gradient_checkpointing, bf16, optim)
    and the flags QwenLM/Qwen's and OpenBMB/MiniCPM-V's finetune.py add (model_max_length,
    use_lora / lora_r / lora_dropout / q_lora, max_slice_nums). Both scripts' LoraArguments default
    lora_r to 64 and lora_dropout to 0.05 (QwenLM/Qwen finetune.py, OpenBMB/MiniCPM-V finetune/finetune.py)."""
    from ..shellcmd import Command, flags_after

    flags: dict = {}
    trl_config, trl_line = None, 0
    for cmd in cfg.commands:
        # the script's command line, or a bash array of its arguments (ARGS=( --flag value ... ))
        script = next((j for j, w in enumerate(cmd.words) if w.endswith(".py")), None)
        found = _trl_config_of(cfg, cmd, script)
        if found:
            trl_config, trl_line = found, cmd.line
            if script is None:  # `trl sft --flags`: the command's own flags
                flags.update(flags_after(cmd, 0)[0])
        if script is not None:
            # the script ends the launcher's flags: `torchrun --nproc_per_node 2 finetune.py` gives
            # nproc_per_node the one word 2, not [2, finetune.py]
            flags.update(flags_after(Command(cmd.line, cmd.words[:script], cmd.word_lines), 0)[0])
            flags.update(flags_after(cmd, script + 1)[0])
            if cmd.tasks:
                # `srun --ntasks=16 python train.py`: one process per task
                flags.setdefault("ntasks", cmd.tasks)
        elif cmd.words[:1] and cmd.words[0].startswith("--"):
            flags.update(flags_after(cmd, 0)[0])
    out: dict = {}
    for cmd in cfg.commands:
        if cmd.words[:2] == ["vllm", "serve"]:
            # The GRPO generation server: its --max-model-len bounds prompt + completion.
            served = flags_after(cmd, 2)[0]
            hit = served.get("max-model-len") or served.get("max_model_len")
            if hit:
                f = _File(cfg, {"max_model_len": hit[0]}, {"max_model_len": hit[1]})
                out["vllm_max_model_len"] = f.int("max_model_len", minimum=1)
    if flags:
        lines = {k: line for k, (_v, line) in flags.items()}
        unset = {k: v for k, (v, _line) in flags.items() if _shell_filled(v)}
        f = _File(cfg, {k: v for k, (v, _line) in flags.items() if k not in unset}, lines)
        if unset:
            out["_unresolved"] = _unresolved(f, unset)
        _deepspeed_found(cfg, f)
        if trl_config:
            return {**out, **_trl_launch(cfg, f, trl_config, trl_line, versions)}
        for key in ("zero_stage", "offload"):
            if key in flags:
                # a training script that builds its own DeepSpeed config from flags (DeepSpeed-Chat's
                # main.py), not a TrainingArguments script: its ZeRO stage is not read here
                raise f.error(key, f"--{key}: the script builds its own DeepSpeed config (pass it with --config as JSON)")
        out.update({"micro_batch": f.int("per_device_train_batch_size", minimum=1), "seq_len": f.int("model_max_length", "max_seq_length", minimum=1),
                    "grad_accum": f.int("gradient_accumulation_steps", minimum=1),
                    "gradient_checkpointing": _launch_checkpointing(f),
                    "precision": "bf16" if _true(f.get("bf16")) else ("fp16" if _true(f.get("fp16")) else None),
                    "optimizer": _optimizer(f), "adam_impl": _adam_impl(f), "model": _model(f, "model_name_or_path", "model_id"),
                    **_processes(f), **_launch_lora(f),
                    # a Trainer script launched without --deepspeed trains under DDP (read() keeps an
                    # accelerate config's FSDP, and a DeepSpeed config named elsewhere wins in _settle)
                    "framework": None if "deepspeed" in flags else "ddp"})
        slices = f.int("max_slice_nums")
        if slices:
            out["image_slices"] = slices + 1  # the slices plus the downscaled overview image
        out["_unknown_model"] = f.unknown_model
    return out


def _launch_lora(f: _File) -> dict:
    """LoRA as a Trainer script's own dataclasses turn it on: a switch (_LORA_SWITCHES) with the
    rank in lora_r / lora_rank, or InternVL's use_llm_lora, which is the rank itself (0: off).
    A script whose language model is frozen outright trains only what sits around it, which the
    memory model does not express; read as full fine-tuning it was several times too high."""
    frozen = next((k for k in ("tune_mm_mlp_adapter", "freeze_llm") if _true(f.get(k, default=False))), None)
    if "use_llm_lora" in f.data:
        rank = f.int("use_llm_lora", minimum=0)
        lora = {"lora_rank": rank, "lora_dropout": 0.05 if rank else None}  # InternVL's wrap_llm_lora
    else:
        switch = next((k for k in _LORA_SWITCHES if k in f.data), None)
        on = bool(switch) and _true(f.get(switch))
        # LLaVA's TrainingArguments default lora_r to 64 as well; both finetune.py's LoraArguments
        # default lora_dropout to 0.05, and so does LLaVA
        lora = {"lora_rank": (f.int("lora_r", "lora_rank", default=64, minimum=1) if on else 0) if switch else None,
                "lora_dropout": f.probability("lora_dropout", default=0.05) if on else None,
                "quantization": _launch_quantization(f) if on else None}
    if frozen and not lora["lora_rank"]:
        # LLaVA's pretraining stage (tune_mm_mlp_adapter: requires_grad_(False) on the model, then
        # the projector alone), InternVL's freeze_llm without use_llm_lora
        raise f.error(frozen, f"--{frozen} {f.get(frozen)}: the language model is frozen and only the "
                              "modules around it train (projector, vision tower), which is not modelled")
    return lora


def _launch_checkpointing(f: _File):
    """TrainingArguments' gradient_checkpointing, or InternVL's grad_checkpoint (ModelArguments,
    default True: the language model's own _set_gradient_checkpointing)."""
    for key in ("gradient_checkpointing", "grad_checkpoint"):
        if key in f.data:
            return _true(f.get(key))
    return None


def _deepspeed_found(cfg, f: _File) -> None:
    """A --deepspeed JSON the launch names and neither the working directory nor the script's
    folder holds: the Trainer stops at start-up on it. Passed over, the run was estimated without
    its ZeRO settings (Deep-Agent/R1-V's run_grpo_vllm_qwen25vl.sh names
    src/r1-v/local_scripts/zero1_no_optimizer.json but runs src/open_r1/grpo.py from src/r1-v)."""
    from .. import lint

    name = f.get("deepspeed")
    if isinstance(name, str) and name.endswith(".json") and lint.resolve(cfg, name) is None:
        raise f.error("deepspeed", f"DeepSpeed config {name!r} not found (relative to the working directory "
                                   "or the script's folder)")


def _launch_quantization(f: _File):
    """QwenLM/Qwen's --q_lora, or LLaVA's --bits 4|8 (TrainingArguments.bits, default 16: the base
    weights loaded through bitsandbytes at that width)."""
    if _true(f.get("q_lora", default=False)):
        return "4bit"
    bits = f.int("bits", minimum=1)
    return {4: "4bit", 8: "8bit"}.get(bits)


def _processes(f: _File) -> dict:
    """gpus and nodes from the launcher's flags (torchrun / deepspeed / accelerate launch); None where unsaid."""
    procs, nodes = f.int("nproc_per_node", "num_gpus", "num_processes", minimum=1), f.int("nnodes", "num_machines", minimum=1)
    if procs is None and nodes is None:
        procs = f.int("ntasks", minimum=1)  # srun / mpirun, one process a task (shellcmd._job_tasks)
    return {"gpus": procs * (nodes or 1) if procs else None, "nodes": nodes}


def _argparse_bools(data: dict) -> dict:
    """HfArgumentParser's spellings of a boolean flag (`--use_peft true`, `--bf16 no`) as booleans."""
    return {k: (str(v).lower() in ("true", "yes")) if str(v).lower() in ("true", "yes", "false", "no") else v
            for k, v in data.items()}


def _trl_launch(cfg, f: _File, config: str, line: int, versions) -> dict:
    """A launch of a TRL trainer script: its flags read as the TRL YAML they stand for, with
    HfArgumentParser's boolean spellings (`--use_peft true`) and the launcher's process counts."""
    method = _TRL_CONFIGS[config]
    if method is None:
        raise UserError(f"not expressible in the memory model: TRL's {config} trainer "
                        "(sft, dpo, cpo, orpo and grpo are modelled)", path=cfg.path, line=line)
    spelled = _argparse_bools(f.data)
    g = _File(cfg, spelled, {k: f.lines.get(k) for k in spelled}, versions=versions)
    out = {**from_trl(g, method), **_processes(f), "_unknown_model": g.unknown_model}
    if config in _NO_REFERENCE_CONFIGS:
        out["dpo_reference"] = "precomputed"  # CPOTrainer / ORPOTrainer: no reference model
    return out


_MAPPERS = {"llamafactory": from_llamafactory, "trl": from_trl, "accelerate": from_accelerate,
            "openrlhf": from_openrlhf, "axolotl": from_axolotl}


# the kinds of file read() maps to Setup fields
KINDS = ("deepspeed", "launch", *_MAPPERS)
# estimate has no --kind: what it can read instead of lint's "pass --kind"
_KIND_HINT = ("estimate --config reads DeepSpeed JSON, accelerate, TRL, LLaMA-Factory and axolotl "
              "configs and launch scripts, told apart by their keys and commands")


def read(paths_or_configs, framework_versions=None) -> tuple[dict, dict]:
    """(DeepSpeed config dict, Setup fields) from the given files and the files they name.
    paths_or_configs: file paths, or configs lint has already loaded (its memory-fit rule). A given file of
    a kind the memory model does not read is an error; a file one of them names is skipped.
    framework_versions: `--framework-version` ({name: release}); TRL files are otherwise read at
    the release their repository pins (as lint judges them), else trl_head.TRL_DEFAULT."""
    from .. import lint

    paths = [getattr(p, "path", p) for p in paths_or_configs]
    loaded = {c.path: c for c in paths_or_configs if hasattr(c, "kind")}
    trl = (framework_versions or {}).get("trl") or _pinned(paths, "trl")

    ds: dict = {}
    out: dict = {}
    mixed: list = []  # (kind, mixed_precision) of each trainer and accelerate file
    kinds: set = set()  # kinds of the trainer and accelerate files read so far
    seen: set = set()
    unknown = None  # the first file's model id the catalog lacks
    overrides: dict = {}  # {config path: (launch, data, lines)}: a launch's key=value words after it
    loose: set = set()  # files only a bare word or a non-config flag names (lint._undeclared)
    queue = [(p, True) for p in paths]
    while queue:
        path, explicit = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        cfg = loaded.get(path) or _load(path, path not in loose)
        if cfg is None or (cfg.kind not in KINDS and not explicit):
            continue
        if not cfg.root:
            cfg.root = _launch_dir(path)
        if cfg.kind == "deepspeed":
            check_fields(cfg.doc, DEEPSPEED_FIELDS)  # what the estimate reads, typed as DeepSpeed reads it
            ds = {**ds, **cfg.data}
        elif cfg.kind in _MAPPERS:
            f = _File(cfg, versions={"trl": trl} if trl else None)
            queue += _override(f, overrides.get(os.path.realpath(path)), seen)
            try:
                found = _MAPPERS[cfg.kind](f)
            except NotTraining:
                if explicit:
                    raise
                continue  # an export or chat config a launch script names beside its training run
            if isinstance(f.get("deepspeed"), dict):
                # TrainingArguments and axolotl take the DeepSpeed config inline as well as a path
                check_fields(cfg.doc, DEEPSPEED_FIELDS, under=("deepspeed",))
                ds = {**ds, **f.get("deepspeed")}
            unknown = unknown or f.unknown_model
            mixed.append((cfg.kind, found.pop("mixed_precision", None)))
            if cfg.kind in ("llamafactory", "trl") and found.get("framework") == "ddp" and "accelerate" in kinds:
                # a trainer file's "ddp" is its default, not a statement: the accelerate config
                # read before it says how the run is distributed (FSDP, DDP or one process)
                found.pop("framework")
            kinds.add(cfg.kind)
            if out.get("expandable_segments") is not None:
                found.pop("expandable_segments", None)  # the launch's environment states it
            out.update({k: v for k, v in found.items() if v is not None})
        elif cfg.kind == "launch":
            if explicit:
                _launch_trains(cfg)
            found = from_launch(cfg, {"trl": trl} if trl else None)
            found["expandable_segments"] = _expandable_segments(_launch_env(cfg))
            overrides.update(_llamafactory_launch(cfg, found))
            mixed.append(("launch", found.pop("mixed_precision", None)))  # `llamafactory-cli train --bf16`
            unknown = unknown or found.pop("_unknown_model", None)
            if found.get("framework") == "ddp" and "accelerate" in kinds:
                found.pop("framework")  # as for a trainer file: the accelerate config read before decides
            if "_unresolved" in found:
                found["_unresolved"] = {**out.get("_unresolved", {}), **found["_unresolved"]}
            out.update({k: v for k, v in found.items() if v is not None})
        else:
            raise UserError(f"not expressible in the memory model: a {cfg.kind} file "
                            f"(known: deepspeed, {', '.join(_MAPPERS)})", path=path)
        refs = lint.references(cfg)
        loose |= lint._undeclared(cfg, refs)
        queue += [(ref, False) for ref in refs] + _deepspeed_from_cwd(cfg, refs)
    _settle(ds, out, mixed, paths)
    if unknown and not out.get("model"):
        out["_unknown_model"] = unknown
    return ds, out


def _load(path, declared: bool):
    """A file given or named by a config key or flag (--deepspeed, --config_file) must be a config
    of a kind we read. One only a bare word or another flag names is an input of the script:
    InternVL's `--meta_path ./shell/data/internvl_1_2_finetune_custom.json` lists data sets, and
    was refused as a config of no kind. As lint does for such words (lint._undeclared), its
    content decides: a file that is no config, or does not parse and names none of our keys
    (lint._not_ours), is passed over."""
    from .. import lint

    try:
        return lint.load(path, declared, hint=_KIND_HINT)
    except UserError:
        if declared or not lint._not_ours(path):
            raise
        return None


def _override(f: _File, hit, seen: set) -> list:
    """A launch's key=value words over the LLaMA-Factory config they follow (read_args:
    OmegaConf.merge, the words win), each key placed at the launch's line. A `deepspeed=` word
    replaces the file's own DeepSpeed config: [(that file, explicit)] to read instead."""
    from .. import lint

    if hit is None or f.cfg.kind != "llamafactory":
        return []
    launch, data, lines = hit
    f.data, f.lines, f.paths = {**f.data, **data}, {**f.lines, **lines}, {k: launch.path for k in data}
    name = data.get("deepspeed")
    if not isinstance(name, str) or not name:
        return []
    given = lint.resolve(launch, name)
    if given is None:
        raise f.error("deepspeed", f"DeepSpeed config {name!r} not found (relative to the working directory)")
    own = lint.resolve(f.cfg, f.cfg.data.get("deepspeed"))
    if own and own != given:
        seen.add(own)
    return [(given, False)]


def _settle(ds, out, mixed, paths) -> None:
    """What the files decide together, once all are read."""
    if ds and out.get("framework") not in (None, "deepspeed"):
        out["framework"] = "deepspeed"
    if ds and "_unresolved" in out:
        # `--deepspeed ${REPO_HOME}/x.json`: the DeepSpeed config was given with another --config
        out["_unresolved"].pop("deepspeed_config", None)
    if ds.get("optimizer"):
        # DeepSpeed builds the optimizer its config names (FusedAdam, CPU Adam); the trainer's
        # `optim` is then not used
        out.pop("adam_impl", None)
    _mixed_precision(out, mixed)
    version = _pinned(paths, "accelerate")
    if version:
        out.setdefault("accelerate_version", version)
    bound = out.pop("vllm_max_model_len", None)
    if out.pop("_unbounded_prompt", False) and bound:
        out["seq_len"] = bound
    if out.pop("_fsdp_checkpointing", False) and out.get("framework") in ("fsdp", "fsdp2"):
        out["gradient_checkpointing"] = True  # whatever the trainer file says for its own


def setup_from_files(paths_or_configs, framework_versions=None, given=None, defaults=None):
    """The Setup a run's files give (read()), with `given` over them (flags, --set keys) and
    `defaults` under them, and the fields nobody named (gpu, gpus), which the answer depends on.
    `estimate --config` and lint's memory-fit both come here, so they judge a file alike."""
    from .catalog import gpu as gpu_spec
    from .estimate import Setup
    from .inputs import setup_from_deepspeed

    given = dict(given or {})
    ds, found = read(paths_or_configs, framework_versions)
    unknown_model = found.pop("_unknown_model", None)
    unresolved = found.pop("_unresolved", {})
    bf16_auto = found.pop("_bf16_auto", False)
    global_batch = found.pop("_global_batch", None)
    # a release named by --framework-version wins over the same release given with --set
    merged = {**(defaults or {}), **found, **given, **setup_version_fields(framework_versions or {})}
    if global_batch and "grad_accum" not in merged:
        # OpenRLHF: the global batch over micro batch x world size (at least one micro batch)
        world = merged.get("gpus") or Setup.gpus
        merged["grad_accum"] = max(1, global_batch // (merged.get("micro_batch") or 1) // world)
    if bf16_auto and "precision" not in given and not gpu_spec(merged.get("gpu") or Setup.gpu).bf16:
        # axolotl's bf16: auto trains in fp16, weights loaded in fp16, on a GPU without bf16
        merged.update(precision="fp16", load_dtype="fp16", mixed_precision="fp16")
    for field, err in unresolved.items():
        if field not in given and not (field == "model" and given.get("params")):
            raise err
    if unknown_model and not (merged.get("model") or merged.get("params")):
        raise unknown_model
    s = setup_from_deepspeed(ds, **merged)
    return s, [f"{k} {getattr(s, k)}" for k in ("gpu", "gpus") if k not in merged]


def _mixed_precision(out, mixed):
    """accelerate's mixed precision for the run, whatever order the files came in: transformers'
    TrainingArguments takes bf16/fp16 when the trainer's file sets them and otherwise
    ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets from the accelerate config, so
    any file that turns it on wins. An accelerate config saying "no" without a trainer file
    naming a precision trains in the weights' dtype: fp32 unless they load in bf16/fp16."""
    said = [mp for _kind, mp in mixed if mp]
    on = [mp for mp in said if mp != "no"]
    if on:
        out["mixed_precision"] = on[-1]
    elif said:
        out["mixed_precision"] = "no"
    if ("accelerate", "no") in mixed and "precision" not in out:
        out["precision"] = out.get("load_dtype") or "fp32"


def _pinned(paths, framework):
    """The release of a framework the files' repository pins (requirements, pyproject, ...), found
    as lint finds pins (ftrecipes.pins): the first given file with one wins."""
    from .. import pins

    for path in paths:
        hit = pins.pinned(path).get(framework)
        if hit:
            return hit[0]
    return None


def _launch_dir(path):
    """The directory a launch of this file starts in, where the names it passes resolve first.
    The trainers open them from the process's working directory, so the estimate's working
    directory stands for it when the file is inside it (as lint's --root does), else the file's
    repository top (lint.launch_root). lint.load leaves it unset, and from the script's own
    folder `accelerate launch --config_file examples/accelerate/fsdp_config.yaml src/train.py
    examples/extras/fsdp_qlora/x.yaml` (LLaMA-Factory's examples/extras/fsdp_qlora/train.sh)
    names two files that do not exist."""
    import os

    from .. import lint

    return lint.launch_root(path, os.getcwd())


def _deepspeed_from_cwd(cfg, found) -> list:
    """A trainer file's `deepspeed:` path that lint's references() (relative to the file) did not
    find: the trainers resolve it from the working directory (LLaMA-Factory's examples say
    `deepspeed: examples/deepspeed/ds_z3_config.json`); missing in both places is an error rather
    than an estimate without the DeepSpeed settings."""
    import os

    data = cfg.data if isinstance(cfg.data, dict) else {}
    name = data.get("deepspeed") if cfg.kind in ("llamafactory", "trl", "axolotl") else None
    if not isinstance(name, str) or not name or found:
        return []
    if os.path.isfile(name):
        return [(name, True)]
    line, col = cfg.doc.where(("deepspeed",))
    raise UserError(f"DeepSpeed config {name!r} not found (relative to this file or the working directory)",
                    path=cfg.path, line=line, column=col, key="deepspeed")


def _field_types():
    from .estimate import Setup

    return {f.name: f for f in fields(Setup)}


def split_sets(recipe_keys, items) -> tuple[list, list]:
    """Recipe mode: `--set` items the recipe's values schema knows are rendered values (checked
    by its schema, as render does); memory-only Setup keys the schema lacks are what-if settings
    for the estimate alone. A key in both is the recipe's. Unknown keys stay with the recipe's
    parser, which reports them with a suggestion."""
    rendered, what_if = [], []
    for item in items:
        key = item.split("=", 1)[0].strip()
        (what_if if key in MEMORY_KEYS and key not in recipe_keys else rendered).append(item)
    return rendered, what_if


# `--framework-version NAME=VER` names whose release changes what the estimate models
_VERSION_FIELDS = {"accelerate": "accelerate_version", "deepspeed": "deepspeed_version", "trl": "trl_version",
                   "transformers": "transformers_version"}


def setup_version_fields(framework_versions: dict) -> dict:
    """Setup fields from {framework: release} (`--framework-version`, checked as lint checks them)."""
    return {_VERSION_FIELDS[fw]: v for fw, v in framework_versions.items() if fw in _VERSION_FIELDS}


def parse_sets(items, allowed=MEMORY_KEYS) -> dict:
    """`--set key=value` for memory-only Setup fields, typed by the field's annotation."""
    from ..values import coerce

    types = _field_types()
    out = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--set {item}: expected key=value")
        key, raw = (x.strip() for x in item.split("=", 1))
        if key not in allowed or key not in types:
            raise UserError(f"--set {item}: '{key}' is not a memory setting; known: {', '.join(allowed)}")
        try:
            kind = types[key].type.split(" | ")[0]  # the Setup field's annotation ("bool | None")
            if kind == "bool":
                out[key] = coerce(raw, "boolean")
            elif kind == "int":
                out[key] = coerce(raw, "integer")
                # a count (image_slices): the bounds of the CLI's own count flags; a 30-digit one
                # reached the estimate and overflowed float() there (a traceback)
                if not 0 <= out[key] <= _MAX_INT:
                    raise ValueError(f"must be an integer from 0 to {_MAX_INT}, not {clip(raw)}")
            elif kind == "float":
                out[key] = coerce(raw, "number")
            elif kind == "list":
                out[key] = _split(raw)
            else:
                out[key] = raw
        except ValueError as exc:
            raise UserError(f"--set {item}: {key}: {exc}") from None
    return out
