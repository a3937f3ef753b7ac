"""Generate schemas/deepspeed.schema.json from the installed DeepSpeed's config code.

Run inside the scratch venv that has deepspeed 0.19.8:
    DS_ACCELERATOR=cpu /tmp/scratch-schemas/trl/bin/python tools/schemagen/deepspeed_schema.py

Sections backed by pydantic models (DeepSpeedConfigModel, extra="forbid") are walked field by field
(types, bounds, defaults, aliases and attribute docstrings come from the source). Sections DeepSpeed
reads with plain dict look-ups (get_scalar_param) are listed by hand below from the 0.19.8 source.
"""
import enum
import json
import os
import pathlib
import sys
import typing

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import annotated_types  # noqa: E402
import deepspeed  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

from common import attribute_docstrings, closed_object, short, write  # noqa: E402

from deepspeed.runtime.config import HybridEngineConfig, _REMOVED_TOP_LEVEL_CONFIG_KEYS, _REMOVED_ZERO_CONFIG_KEYS  # noqa: E402
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # noqa: E402
from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config  # noqa: E402
from deepspeed.comm.config import CommsLoggerConfig  # noqa: E402
from deepspeed.monitor.config import TensorBoardConfig, WandbConfig, CSVConfig, CometConfig  # noqa: E402
from deepspeed.compile.config import CompileConfig  # noqa: E402
from deepspeed.utils.config import DeepSpeedThroughputTimerConfig  # noqa: E402
from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig  # noqa: E402
from deepspeed.inference.config import WeightQuantConfig  # noqa: E402

INT64_MAX = 2**63 - 1
AUTO = {"const": "auto", "description": "Filled in by the HF Trainer / accelerate integration."}
AUTO_DEFAULT = {"const": "auto", "description": "Dropped by DeepSpeedConfigModel: the field keeps its default."}

# dotted path -> who fills "auto" there (transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig,
# accelerate.utils.dataclasses.DeepSpeedPlugin). DeepSpeed itself rejects "auto" in the scalar keys.
AUTO_FILLED = {
    "train_batch_size": "HF Trainer / accelerate (world_size × per_device_train_batch_size × gradient_accumulation_steps)",
    "train_micro_batch_size_per_gpu": "HF Trainer (per_device_train_batch_size) / accelerate (dataloader batch size)",
    "gradient_accumulation_steps": "HF Trainer / accelerate (gradient_accumulation_steps)",
    "gradient_clipping": "HF Trainer (max_grad_norm) / accelerate (gradient_clipping)",
    "bf16.enabled": "HF Trainer (bf16) / accelerate (mixed_precision)",
    "fp16.enabled": "HF Trainer (fp16) / accelerate (mixed_precision)",
    "zero_optimization.stage": "accelerate (zero_stage)",
    "zero_optimization.reduce_bucket_size": "HF Trainer / accelerate (hidden_size²)",
    "zero_optimization.stage3_prefetch_bucket_size": "HF Trainer / accelerate (0.9 × hidden_size², ZeRO-3)",
    "zero_optimization.prefetch_bucket_size": "HF Trainer / accelerate only under its alias stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold": "HF Trainer / accelerate (10 × hidden_size, ZeRO-3)",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "accelerate (zero3_save_16bit_model)",
    "zero_optimization.offload_optimizer.device": "accelerate (offload_optimizer_device)",
    "zero_optimization.offload_optimizer.nvme_path": "accelerate (offload_optimizer_nvme_path)",
    "zero_optimization.offload_param.device": "accelerate (offload_param_device)",
    "zero_optimization.offload_param.nvme_path": "accelerate (offload_param_nvme_path)",
    "optimizer.params.lr": "HF Trainer (learning_rate)",
    "optimizer.params.betas": "HF Trainer (adam_beta1, adam_beta2)",
    "optimizer.params.eps": "HF Trainer (adam_epsilon)",
    "optimizer.params.weight_decay": "HF Trainer (weight_decay)",
    "scheduler.params.warmup_min_lr": "HF Trainer (0)",
    "scheduler.params.warmup_max_lr": "HF Trainer (learning_rate)",
    "scheduler.params.warmup_num_steps": "HF Trainer (warmup steps)",
    "scheduler.params.total_num_steps": "HF Trainer (number of training steps)",
}
# HF only fills these under the alias spelling; the field-name spelling would reach DeepSpeed as "auto".
AUTO_FILLED.pop("zero_optimization.prefetch_bucket_size")


def with_auto(schema, path, pydantic_field=False):
    """Allow "auto" where HF Trainer / accelerate fill it, and in every pydantic-model field:
    DeepSpeedConfigModel.__init__ drops "auto" values (non-strict mode), i.e. "auto" means the default
    there (OpenRLHF's generated configs rely on this)."""
    if path not in AUTO_FILLED and not pydantic_field:
        return schema
    schema = dict(schema)
    desc = schema.pop("description", "")
    out = {"anyOf": [schema, AUTO if path in AUTO_FILLED else AUTO_DEFAULT]}
    if path in AUTO_FILLED:
        note = f'May be "auto": filled by {AUTO_FILLED[path]}.'
    else:
        note = '"auto" is dropped by DeepSpeed (= default).'
    out["description"] = (desc + " " if desc else "") + note
    return out


def type_schema(tp, path):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is typing.Any or tp is object:
        return {}
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        non_none = [a for a in args if a is not type(None)]
        parts = [type_schema(a, path) for a in non_none]
        if len(parts) == 1 and "properties" in parts[0] and type(None) in args:
            # Optional[Model]: keep one object schema (no anyOf) so nested key errors stay visible.
            return dict(parts[0], type=["object", "null"])
        if type(None) in args:
            parts.append({"type": "null"})
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, typing.List, typing.Tuple, typing.Set):
        item = type_schema(args[0], path) if args and args[0] is not Ellipsis else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (dict, typing.Dict):
        return {"type": "object"}
    if isinstance(tp, type):
        if issubclass(tp, BaseModel):
            return model_schema(tp, path)
        if issubclass(tp, enum.Enum):
            vals = []
            for m in tp:
                if m.value not in vals:
                    vals.append(m.value)
            return {"enum": vals}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            # pydantic-core converts a JSON float (1e30) to int only within int64.
            return {"type": "integer", "maximum": INT64_MAX}
        if tp is float:
            return {"type": "number"}
        if tp is str or issubclass(tp, os.PathLike) or tp.__name__ in ("Path", "PosixPath"):
            return {"type": "string"}
        if tp.__name__ == "dtype":
            return {"type": "string", "description": "torch dtype name, e.g. bfloat16"}
        if issubclass(tp, dict):
            return {"type": "object"}
        if issubclass(tp, (list, tuple)):
            return {"type": "array"}
    return {}


def jsonable(v):
    try:
        json.dumps(v)
        return True
    except TypeError:
        return False


def _is_object(s):
    return "properties" in s or any("properties" in a for a in s.get("anyOf", []))


def model_schema(cls, path):
    docs = attribute_docstrings(cls)
    props = {}
    for name, field in cls.model_fields.items():
        s = dict(type_schema(field.annotation, f"{path}.{name}"))
        for m in field.metadata:
            if isinstance(m, annotated_types.Gt):
                s["exclusiveMinimum"] = m.gt
            elif isinstance(m, annotated_types.Ge):
                s["minimum"] = m.ge
            elif isinstance(m, annotated_types.Lt):
                s["exclusiveMaximum"] = m.lt
            elif isinstance(m, annotated_types.Le):
                s["maximum"] = m.le
        if "anyOf" in s and any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            bounds = {k: s.pop(k) for k in list(s) if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")}
            s["anyOf"] = [dict(p, **bounds) if p.get("type") in ("integer", "number") else p for p in s["anyOf"]]
        desc = docs.get(name) or field.description or ""
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("deprecated"):
            s["deprecated"] = True
            newp = extra.get("new_param")
            desc = f"Deprecated{'; use ' + newp if newp else ''}. " + (desc if not desc.lower().startswith("deprecated") else "")
        default = field.default
        if default is not PydanticUndefined and default is not None and jsonable(default) and "properties" not in s:
            s["default"] = default.value if isinstance(default, enum.Enum) else default
        s["description"] = short(desc or name.replace("_", " "))
        names = [name] + ([field.alias] if field.alias and field.alias != name else [])
        for key in names:
            entry = dict(s)
            if key != name:
                entry["description"] = short(f"Alias of {name}. " + entry["description"])
            elif field.alias and field.alias != name:
                entry["description"] = short(f"Field name for {field.alias} (both spellings accepted). " + entry["description"])
            props[key] = with_auto(entry, f"{path}.{key}", pydantic_field=not _is_object(entry))
    return {
        "type": "object",
        "description": short(cls.__doc__ or cls.__name__),
        "properties": props,
        "additionalProperties": False,
    }


def scalar(tp, desc, default=None, path=None, **kw):
    s = {"type": tp, "description": desc}
    if default is not None:
        s["default"] = default
    s.update(kw)
    return with_auto(s, path) if path else s


def closed(desc, props):
    return {"type": "object", "description": desc, "properties": props, "additionalProperties": False}


DTYPE = {"enum": ["fp32", "fp16", "bf16", None]}  # null = DeepSpeed's default (OpenRLHF writes it)
DTYPE_ANY = {"type": "string", "description": "dtype name: fp32/float32, fp16/float16/half, bf16/bfloat16"}


def params_schema(kind, keys):
    props = {k: with_auto({"description": d}, f"{kind}.params.{k}") for k, d in keys.items()}
    return {"type": "object", "description": f"Keyword arguments for the {kind} constructor (not validated by DeepSpeed's config parser).",
            "properties": props}


def scheduler_names():
    """Names engine._scheduler_from_config resolves: deepspeed.runtime.lr_schedules first, then torch."""
    import inspect

    import torch
    from deepspeed.runtime import lr_schedules
    names = list(lr_schedules.VALID_LR_SCHEDULES)
    base = getattr(torch.optim.lr_scheduler, "LRScheduler", torch.optim.lr_scheduler._LRScheduler)
    for name, obj in sorted(vars(torch.optim.lr_scheduler).items()):
        if (inspect.isclass(obj) and not name.startswith("_") and name not in names
                and (issubclass(obj, base) or name == "ReduceLROnPlateau") and name != "LRScheduler"):
            names.append(name)
    return names


def _when(desc, pattern):
    """A combination DeepSpeed refuses: {"not": pattern}, whose description lint prints."""
    return {"description": desc, "not": pattern}


def _is(key, value):
    return {"required": [key], "properties": {key: {"const": value}}}


# zero_optimization absent, false, without a stage, or stage 0: ZeRO is off.
ZERO_OFF = {"anyOf": [
    {"not": {"required": ["zero_optimization"]}},
    {"properties": {"zero_optimization": {"anyOf": [{"const": False}, {"type": "object", "not": {"required": ["stage"]}},
                                                     {"type": "object", "properties": {"stage": {"const": 0}}}]}}},
]}


def cross_checks():
    """DeepSpeedConfig._do_error_check and the precision models' validators, as schema constraints."""
    def section(name, inner):
        return {"required": [name], "properties": {name: inner}}

    return [
        _when("gradient_allreduce_op 'sum' is not supported with ZeRO stage 3 (DeepSpeedConfig raises).",
              {"allOf": [_is("gradient_allreduce_op", "sum"), section("zero_optimization", _is("stage", 3))]}),
        _when("gradient_allreduce_op 'sum' is not supported with DeepCompile (DeepSpeedConfig raises).",
              {"allOf": [_is("gradient_allreduce_op", "sum"), section("compile", _is("deepcompile", True))]}),
        _when("gradient_allreduce_op 'sum' is not supported with ZenFlow (DeepSpeedConfig raises).",
              {"allOf": [_is("gradient_allreduce_op", "sum"), section("zero_optimization", {
                  "required": ["zenflow"], "properties": {"zenflow": {"type": "object"}}})]}),
        _when("fp16.fp16_master_weights_and_grads needs ZeRO stage 1, 2 or 3 (DeepSpeedConfig asserts).",
              {"allOf": [section("fp16", _is("fp16_master_weights_and_grads", True)), ZERO_OFF]}),
        _when("bf16.bf16_master_weights_and_grads needs ZeRO stage 1, 2 or 3 (DeepSpeedConfig asserts).",
              {"allOf": [section("bf16", _is("bf16_master_weights_and_grads", True)), ZERO_OFF]}),
        _when("bf16.bf16_optimizer_states needs ZeRO stage 1, 2 or 3 (DeepSpeedConfig asserts).",
              {"allOf": [section("bf16", _is("bf16_optimizer_states", True)), ZERO_OFF]}),
    ]


def fp16_checks(fp16):
    """DeepSpeedFP16Config's validators: loss_scale >= 0; with dynamic scaling, window and floor > 0."""
    ls = fp16["properties"]["loss_scale"]
    ls["anyOf"][0]["minimum"] = 0
    positive = {"not": {"type": "number", "maximum": 0}}
    fp16["allOf"] = [{
        "if": {"required": ["enabled"], "properties": {"enabled": {"const": True}, "loss_scale": {"const": 0}}},
        "then": {"properties": {
            "loss_scale_window": dict(positive, description="must be > 0 with dynamic loss scaling (loss_scale 0)"),
            "min_loss_scale": dict(positive, description="must be > 0 with dynamic loss scaling (loss_scale 0)"),
        }},
    }]
    return fp16


def bf16_checks(bf16):
    bf16["allOf"] = [_when("bf16_optimizer_states requires bf16_master_weights_and_grads (DeepSpeedConfig asserts).",
                           {"allOf": [_is("bf16_optimizer_states", True), {"not": _is("bf16_master_weights_and_grads", True)}]})]
    return bf16


def build():
    zero = model_schema(DeepSpeedZeroConfig, "zero_optimization")
    zero["description"] = "ZeRO optimizer settings (pydantic DeepSpeedZeroConfig, unknown keys are errors)."
    for k, msg in _REMOVED_ZERO_CONFIG_KEYS.items():
        zero["properties"][k] = {"not": {}, "description": short("Removed: " + msg)}
    # Legacy boolean form (true = stage 1) is still read; a type list keeps nested errors visible.
    zero_schema = dict(zero, type=["object", "boolean"],
                       description=zero["description"] + " A bare boolean is the deprecated legacy form (true = stage 1).")

    props = {**_batch_and_engine_props(), **_optimizer_props(), **_precision_props(zero_schema),
             **_monitoring_props(), **_io_props()}
    for k, msg in _REMOVED_TOP_LEVEL_CONFIG_KEYS.items():
        props[k] = {"not": {}, "description": short("Removed in DeepSpeed 0.19.8 (DeepSpeedConfig raises): " + msg)}
    return _finish(props)


def derived_when_null(schema):
    """A batch key given as null is one DeepSpeed derives from the other two, as when it is absent:
    get_scalar_param returns the null, whose default is None too, and
    DeepSpeedConfig._set_batch_related_parameters fills every None it can (align-anything's
    configs write "gradient_accumulation_steps": null). The HF Trainer's fill_match and
    accelerate's DeepSpeedPlugin pass over a None without comparing it."""
    schema = dict(schema)
    schema["anyOf"] = schema["anyOf"] + [{"type": "null", "description": "Derived by DeepSpeed from the other batch keys, as when absent."}]
    return schema


def default_when_null(schema):
    """A key whose get_scalar_param default is None takes a null as its absence: DeepSpeed stores
    the None either way (activation_checkpointing's ACT_CHKPT_NUMBER_CHECKPOINTS_DEFAULT is None,
    and checkpointing.py needs a number only with contiguous_memory_optimization, where it asserts
    one). FlagAlpha/Llama2-Chinese's ds_config_zero2.json writes "number_checkpoints": null."""
    return {"description": schema["description"], "anyOf": [schema, {"type": "null", "description": "DeepSpeed's default (None), as when absent."}]}


def _batch_and_engine_props():
    # Split by theme only to keep each function short; order is irrelevant (closed_object sorts).
    return {
        "train_batch_size": derived_when_null(scalar("integer", "Global batch size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel world size (asserted).", path="train_batch_size", exclusiveMinimum=0)),
        "train_micro_batch_size_per_gpu": derived_when_null(scalar("integer", "Batch size per GPU per forward/backward step.", path="train_micro_batch_size_per_gpu", exclusiveMinimum=0)),
        "gradient_accumulation_steps": derived_when_null(scalar("integer", "Steps to accumulate gradients before an optimizer step.", path="gradient_accumulation_steps", exclusiveMinimum=0)),
        "managed_gradient_accumulation": scalar("boolean", "Let the engine manage gradient accumulation boundaries.", True),
        "steps_per_print": scalar("integer", "Print progress every N steps (null = never).", None, minimum=0),
        "wall_clock_breakdown": scalar("boolean", "Time forward/backward/step and print the breakdown.", False),
        "memory_breakdown": scalar("boolean", "Print memory usage at points of the engine's step.", False),
        "dump_state": scalar("boolean", "Print the engine state after initialization.", False),
        "disable_python_gc": scalar("boolean", "Disable Python's automatic cyclic garbage collection during training.", False),
        "disable_allgather": scalar("boolean", "Disable allgather (legacy).", False),
        "log_level": {"type": ["string", "integer", "null"], "description": "DeepSpeed logger level."},
        "vocabulary_size": scalar("integer", "Vocabulary size; only used to warn when not a multiple of 8.", minimum=1),
        "gradient_clipping": scalar("number", "Clip gradients to this global norm (0 = off).", 1.0, path="gradient_clipping", minimum=0),
        "prescale_gradients": scalar("boolean", "Scale gradients before allreduce.", False),
        "gradient_predivide_factor": scalar("number", "Divide gradients by this factor before allreduce.", 1.0, exclusiveMinimum=0),
        "gradient_allreduce_op": {"enum": ["mean", "sum"], "default": "mean", "description": "Reduction for gradients (sum not allowed with ZeRO-3, ZenFlow, DeepCompile)."},
        "communication_data_type": {"enum": ["fp32", "fp16", "bf16", "FP32", "FP16", "BF16", None], "description": "dtype used for gradient communication (default: model dtype)."},
        "seq_parallel_communication_data_type": {"enum": ["fp32", "fp16", "bf16", "FP32", "FP16", "BF16"], "default": "fp32", "description": "dtype for sequence-parallel communication."},
        "zero_allow_untested_optimizer": scalar("boolean", "Allow ZeRO with a client optimizer DeepSpeed has not tested.", False),
        "zero_force_ds_cpu_optimizer": scalar("boolean", "With optimizer offload, require DeepSpeed's CPU optimizer.", True),
        "use_data_before_expert_parallelism": scalar("boolean", "Create data-parallel groups before expert-parallel groups (MoE).", False),
        "dataloader_drop_last": scalar("boolean", "Drop the last incomplete batch in DeepSpeed's dataloader.", False),
        "sequence_parallel_size": scalar("integer", "Sequence-parallel degree (Ulysses); world size is divided by it.", minimum=1),
        "data_parallel_size": scalar("integer", "Data-parallel degree; with sequence_parallel_size builds a device mesh.", minimum=1),
    }


def _optimizer_props():
    return {
        "optimizer": {
            "type": "object",
            "description": "Optimizer built by DeepSpeed. Omit to use the client's (e.g. HF Trainer's) optimizer.",
            "properties": {
                "type": {"type": "string", "description": "Optimizer name: Adam, AdamW, Adagrad, Lamb, Lion, Muon, MuAdam, MuAdamW, MuSGD (case-insensitive) or a torch.optim class name.", "examples": ["AdamW", "Adam", "Lion"]},
                "params": params_schema("optimizer", {
                    "lr": "Learning rate.", "betas": "Adam betas [beta1, beta2].", "eps": "Adam epsilon.",
                    "weight_decay": "Weight decay.", "torch_adam": "Use torch's Adam instead of the fused one.",
                    "adam_w_mode": "Decoupled weight decay (AdamW) mode.", "max_grad_norm": "Ignored with a warning: use top-level gradient_clipping."}),
                "legacy_fusion": {"type": "boolean", "description": "Legacy fused-optimizer behaviour.", "default": False},
            },
            "required": ["type"],
            "additionalProperties": False,
        },
        "scheduler": {
            "type": "object",
            "description": "LR scheduler built by DeepSpeed (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest).",
            "properties": {
                "type": {"enum": scheduler_names(), "description": "Scheduler class: deepspeed.runtime.lr_schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest) or a torch.optim.lr_scheduler class name."},
                "params": params_schema("scheduler", {
                    "warmup_min_lr": "Start LR of warmup.", "warmup_max_lr": "LR at the end of warmup.",
                    "warmup_num_steps": "Warmup steps (must be > 0 since 0.19.6).", "total_num_steps": "Total steps (WarmupDecayLR, WarmupCosineLR).",
                    "warmup_type": "log or linear.", "warmup_min_ratio": "WarmupCosineLR start ratio.", "cos_min_ratio": "WarmupCosineLR end ratio."}),
            },
            "required": ["type"],
            "additionalProperties": False,
        },
    }


def _precision_props(zero_schema):
    return {
        "fp16": fp16_checks(model_schema(DeepSpeedFP16Config, "fp16")),
        "bf16": bf16_checks(model_schema(DeepSpeedBF16Config, "bf16")),
        "bfloat16": dict(model_schema(DeepSpeedBF16Config, "bfloat16"), description="Old spelling of bf16 (read only when bf16 is absent).", deprecated=True),
        "torch_autocast": closed("PyTorch autocast instead of DeepSpeed's fp16/bf16 engines.", {
            "enabled": scalar("boolean", "Enable torch.autocast.", False),
            "dtype": dict(DTYPE_ANY, description="Autocast dtype (bfloat16, float16, ...)."),
            "lower_precision_safe_modules": {"type": "array", "items": {"type": "string"}, "description": "Module class paths run in lower precision."},
        }),
        "data_types": closed("dtypes for gradient accumulation, parameters and buffers.", {
            "grad_accum_dtype": dict(DTYPE, description="dtype of gradient accumulation buffers."),
            "param_dtype": dict(DTYPE, description="dtype of parameters."),
            "buffer_dtype": dict(DTYPE, description="dtype of buffers."),
            "keep_in_fp32_modules": {"anyOf": [{"const": "auto"}, {"type": "array", "items": {"type": "string"}}], "default": "auto", "description": '"auto" or module-name patterns kept in fp32.'},
        }),
        "zero_optimization": zero_schema,
        "activation_checkpointing": closed("Settings for deepspeed.checkpointing (Megatron-style activation checkpointing).", {
            "partition_activations": scalar("boolean", "Partition activations across model-parallel GPUs.", False),
            "number_checkpoints": default_when_null(scalar("integer", "Number of checkpoints to allocate contiguous buffers for.", minimum=0)),
            "contiguous_memory_optimization": scalar("boolean", "Copy partitioned activations to a contiguous buffer.", False),
            "synchronize_checkpoint_boundary": scalar("boolean", "Synchronize at each checkpoint boundary.", False),
            "profile": scalar("boolean", "Profile forward/backward time of checkpointed functions.", False),
            "cpu_checkpointing": scalar("boolean", "Offload partitioned activations to CPU.", False),
        }),
    }


def _monitoring_props():
    return {
        "flops_profiler": closed("FLOPS profiler.", {
            "enabled": scalar("boolean", "Enable the profiler.", False),
            "recompute_fwd_factor": scalar("number", "Extra forward passes from activation recomputation (0.0 or 1.0).", 0.0, minimum=0),
            "profile_step": scalar("integer", "Training step at which to profile.", 1, minimum=0),
            "module_depth": scalar("integer", "Depth of the model tree to print (-1 = all).", -1),
            "top_modules": scalar("integer", "Number of top modules to print.", 1, minimum=0),
            "detailed": scalar("boolean", "Print the detailed per-module profile.", True),
            "output_file": {"type": ["string", "null"], "description": "File for the profile (null = stdout)."},
        }),
        "comms_logger": model_schema(CommsLoggerConfig, "comms_logger"),
        "tensorboard": model_schema(TensorBoardConfig, "tensorboard"),
        "wandb": model_schema(WandbConfig, "wandb"),
        "csv_monitor": model_schema(CSVConfig, "csv_monitor"),
        "comet": model_schema(CometConfig, "comet"),
        "compile": model_schema(CompileConfig, "compile"),
        "timers": model_schema(DeepSpeedThroughputTimerConfig, "timers"),
        "tensor_parallel": model_schema(TPTrainingConfig, "tensor_parallel"),
        "weight_quantization": model_schema(WeightQuantConfig, "weight_quantization"),
        "hybrid_engine": model_schema(HybridEngineConfig, "hybrid_engine"),
    }


def _io_props():
    return {
        "aio": closed("Async I/O settings for NVMe offload (ZeRO-Infinity).", {
            "block_size": scalar("integer", "I/O block size in bytes.", 1048576, minimum=1),
            "queue_depth": scalar("integer", "I/O queue depth.", 8, minimum=1),
            "intra_op_parallelism": scalar("integer", "I/O parallelism per operation.", 1, minimum=1),
            "single_submit": scalar("boolean", "Submit requests one at a time.", False),
            "overlap_events": scalar("boolean", "Overlap submission and completion.", True),
            "use_gds": scalar("boolean", "Use NVIDIA GPUDirect Storage (CUDA only).", False),
            "thread_count": scalar("integer", "Legacy name of intra_op_parallelism in older docs (ignored by 0.19.8).", deprecated=True),
        }),
        "checkpoint": closed("Checkpoint saving/loading behaviour.", {
            "tag_validation": {"enum": ["Warn", "Ignore", "Fail", "WARN", "IGNORE", "FAIL", "warn", "ignore", "fail"], "default": "Warn", "description": "Check that all ranks use the same checkpoint tag."},
            "load_universal": scalar("boolean", "Load a universal checkpoint.", False),
            "use_node_local_storage": scalar("boolean", "Each node saves to local storage (set by HF save_on_each_node).", False),
            "parallel_write": closed("Parallel checkpoint write.", {"pipeline_stage": scalar("boolean", "Write pipeline stages in parallel.", False)}),
            "checkpoint_serialization": scalar("boolean", "Serialize with torch.save's zipfile format.", True),
            "writer": closed("FastPersist checkpoint writer.", {
                "type": {"enum": ["mock", "python", "fast", "MOCK", "PYTHON", "FAST"], "description": "Writer implementation."},
                "io_buffer_size": scalar("integer", "I/O buffer size in bytes.", 64 * 1024 ** 2, minimum=1),
                "io_buffer_double": scalar("boolean", "Double-buffer I/O.", True),
                "io_multiplier": scalar("integer", "I/O multiplier.", 1, minimum=1),
                "show_statistics": scalar("boolean", "Print write statistics.", False),
                "data_parallel": {"type": ["string", "null"], "description": "Data-parallel write unit (socket, machine, replica)."},
                "decoupled": scalar("boolean", "Decouple writes from training.", False),
            }),
        }),
        "datastates_ckpt": {"type": "object", "description": "DataStates-LLM asynchronous checkpointing options (passed through)."},
        "autotuning": {"type": "object", "description": "DeepSpeed autotuner settings (used by the deepspeed --autotuning launcher).",
                       "properties": {k: {"description": f"autotuning {k}"} for k in [
                           "enabled", "fast", "results_dir", "exps_dir", "overwrite", "start_profile_step", "end_profile_step",
                           "metric_path", "metric", "tuner_type", "tuner_early_stopping", "tuner_num_trials", "arg_mappings",
                           "max_train_batch_size", "min_train_batch_size", "max_train_micro_batch_size_per_gpu",
                           "min_train_micro_batch_size_per_gpu", "num_tuning_micro_batch_sizes", "mp_size", "model_info",
                           "model_info_path"]}, "additionalProperties": False},
        "pipeline": {"type": "object", "description": "Pipeline-parallel engine options (PipelineModule only).",
                     "properties": {
                         "stages": {"description": 'Number of stages or "auto".'},
                         "partition": {"type": "string", "description": "Layer partition method (best, uniform, parameters, type:regex)."},
                         "seed_layers": {"type": "boolean", "description": "Seed each layer differently."},
                         "activation_checkpoint_interval": {"type": "integer", "minimum": 0, "description": "Checkpoint every N layers (0 = off)."},
                         "pipe_partitioned": {"type": "boolean", "description": "Partition activations sent between stages."},
                         "grad_partitioned": {"type": "boolean", "description": "Partition gradients sent between stages."},
                         "use_reentrant": {"type": "boolean", "description": "Use reentrant activation checkpointing."}},
                     "additionalProperties": False},
        "data_efficiency": {"type": "object", "description": "Data efficiency library (data_sampling incl. curriculum_learning, data_routing incl. random_ltd, dynamic_batching); nested keys not checked here."},
        "expert_parallel": {"type": "object", "description": "AutoEP (automatic expert parallelism for MoE) settings; nested keys not checked here."},
    }


def _finish(props):
    """The top-level object around the sections, with the checks that span sections."""
    schema = closed_object("deepspeed.schema.json", "DeepSpeed config",
                    f"DeepSpeed JSON config as parsed by deepspeed.runtime.config.DeepSpeedConfig, generated from deepspeed {deepspeed.__version__} "
                    "by tools/schemagen/deepspeed_schema.py. Unknown top-level keys are rejected here because DeepSpeed silently ignores them. "
                    '"auto" is allowed only where HF Trainer / accelerate fill it in before DeepSpeed sees the config.',
                           {"name": "deepspeed", "version": deepspeed.__version__}, dict(sorted(props.items())))
    # JSON has no comments, so configs carry them as keys such as "_comment" (LLaMA-Factory's
    # examples/deepspeed/ds_z2_autotp_config.json). DeepSpeedConfig ignores unknown top-level keys,
    # which for these is exactly what the author wants: not a finding.
    schema["patternProperties"] = {"^_": {"description": "A comment key: DeepSpeed ignores it, as intended."}}
    # DeepSpeedConfig asserts 'bfloat16 and fp16 modes cannot be simultaneously enabled'.
    schema["not"] = {
        "description": "bf16.enabled and fp16.enabled cannot both be true.",
        "required": ["bf16", "fp16"],
        "properties": {"bf16": {"required": ["enabled"], "properties": {"enabled": {"const": True}}},
                       "fp16": {"required": ["enabled"], "properties": {"enabled": {"const": True}}}},
    }
    schema["allOf"] = cross_checks()
    # get_bfloat16_config reads "bfloat16" only when "bf16" is absent.
    schema["dependentSchemas"] = {"bf16": {"properties": {"bfloat16": {
        "not": {}, "description": "bfloat16 is ignored: DeepSpeed reads the old spelling only when bf16 is absent."}}}}
    return schema


if __name__ == "__main__":
    write(build(), "deepspeed.schema.json")
