"""Turn recipe values or a DeepSpeed JSON into a Setup, and run estimate + remedies."""
from __future__ import annotations

import math
from dataclasses import fields

from .. import sources
from ..errors import UserError, clip
from .estimate import Result, Setup, estimate
from .remedies import remedies

_DS_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_max_live_parameters",
            "stage3_prefetch_bucket_size", "sub_group_size", "contiguous_gradients", "overlap_comm")
_DS_FLAGS = ("contiguous_gradients", "overlap_comm")


def _bucket(v):
    """A bucket size as DeepSpeed reads it; "auto" is kept for memory.deepspeed_transients.resolve,
    which fills it the way the HF Trainer and Accelerate do (from the hidden size)."""
    return "auto" if v == "auto" else _num(v)


def _num(v):
    """DeepSpeed accepts 5e8 as a number or string; "auto" means a trainer fills it."""
    if v is None or v == "auto":
        return None
    if isinstance(v, bool):
        return v
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- reading a DeepSpeed JSON

INT64_MAX = 2**63 - 1  # what DeepSpeed and torch hold a count or a size in
_MISSING = object()
_OR_AUTO = ' or "auto"'


def _describe(value):
    return "null" if value is None else f"{type(value).__name__} {clip(repr(value))}"


def _mapping(value, nullable=False):
    if isinstance(value, dict) or (nullable and value is None):
        return None
    return f"must be a mapping, not {_describe(value)}"


def _count(value, minimum=1, auto=True):
    """A batch size or step count: an integer (not a bool, not 2.0), or "auto" for a trainer to fill."""
    if auto and value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT64_MAX:
        return f"must be an integer from {minimum} to {INT64_MAX}{_OR_AUTO if auto else ''}, not {_describe(value)}"
    return None


def _size(value):
    """A bucket size: DeepSpeed's pydantic models take 5e8 as well as 500000000."""
    if value == "auto":
        return None
    if isinstance(value, str) and value.strip().isdecimal() and len(value) < 20:
        value = int(value)  # pydantic's lax mode reads "500000000" as an int
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value != int(value) or not 0 <= value <= INT64_MAX:
        return f"must be a whole number from 0 to {INT64_MAX}{_OR_AUTO}, not {_describe(value)}"
    return None


def _choice(*allowed):
    def check(value):
        if value in allowed and not isinstance(value, (bool, float)):
            return None
        return f"must be one of {', '.join(map(repr, allowed))}, not {_describe(value)}"
    return check


def _boolean(value, auto=False):
    if isinstance(value, bool) or (auto and value == "auto"):
        return None
    return f"must be true or false{_OR_AUTO if auto else ''}, not {_describe(value)}"


_Z = "zero_optimization"
# What the estimate reads from a DeepSpeed config, with the types DeepSpeed itself accepts
# (deepspeed/runtime/zero/config.py, runtime/config.py in DeepSpeed 0.19.8).
DEEPSPEED_FIELDS = [
    ((_Z,), _mapping),
    (("bf16",), _mapping),
    (("fp16",), _mapping),
    (("bf16", "enabled"), lambda v: _boolean(v, auto=True)),
    (("fp16", "enabled"), lambda v: _boolean(v, auto=True)),
    # null is a batch key DeepSpeed derives from the other two, as when absent
    # (DeepSpeedConfig._set_batch_related_parameters; get_scalar_param's default is None too)
    (("train_micro_batch_size_per_gpu",), lambda v: None if v is None else _count(v)),
    (("train_batch_size",), lambda v: None if v is None else _count(v)),
    (("gradient_accumulation_steps",), lambda v: None if v is None else _count(v)),
    ((_Z, "stage"), _choice(0, 1, 2, 3)),
    ((_Z, "offload_optimizer"), lambda v: _mapping(v, nullable=True)),
    ((_Z, "offload_param"), lambda v: _mapping(v, nullable=True)),
    ((_Z, "offload_optimizer", "device"), _choice("none", "cpu", "nvme")),
    ((_Z, "offload_param", "device"), _choice("none", "cpu", "nvme")),
    ((_Z, "offload_optimizer", "pin_memory"), _boolean),
    ((_Z, "offload_param", "pin_memory"), _boolean),
] + [((_Z, k), _boolean if k in _DS_FLAGS else _size) for k in _DS_KEYS]


def check_fields(doc, table, under=()):
    """Raise a UserError naming file, line, column and key for the first value the table refuses.
    under: where in the document the checked mapping sits (a trainer file's inline `deepspeed:`)."""
    data = doc.data
    for part in under:
        data = data.get(part) if isinstance(data, dict) else None
    if not isinstance(data, dict):
        raise UserError(f"must be a JSON object at the top level, not {_describe(doc.data)}", path=doc.path, line=1, column=1)
    dup = next((d for d in doc.duplicates if tuple(d[0][:len(under)]) == tuple(under)), None)
    if dup:
        key, line, col = dup
        raise UserError("duplicate key (DeepSpeed's loader rejects it)", path=doc.path, line=line, column=col,
                        key=".".join(map(str, key)))
    for path, check in table:
        value = data
        for part in path:
            value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
        problem = None if value is _MISSING else check(value)
        if problem:
            line, col = doc.where(tuple(under) + tuple(path))
            raise UserError(problem, path=doc.path, line=line, column=col, key=".".join(tuple(under) + tuple(path)))


def setup_from_deepspeed(ds: dict, **overrides) -> Setup:
    """ZeRO stage, offload and precision from a DeepSpeed config; keyword overrides win."""
    z = ds.get("zero_optimization") or {}
    oo = (z.get("offload_optimizer") or {})
    op = (z.get("offload_param") or {})
    if (ds.get("bf16") or {}).get("enabled") in (True, "auto") and (ds.get("bf16") or {}).get("enabled") is not False:
        precision = "bf16"
    elif (ds.get("fp16") or {}).get("enabled") in (True, "auto"):
        precision = "fp16"
    elif ds:
        precision = "fp32"  # DeepSpeed trains in fp32 when neither section is enabled
    else:
        precision = None  # no config at all: keep Setup's default
    kw = dict(
        zero_stage=int(_num(z.get("stage")) or 0),
        offload_optimizer=oo.get("device") or "none",
        offload_param=op.get("device") or "none",
        pin_memory=bool(oo.get("pin_memory", op.get("pin_memory", False))),
        precision=precision,
        ds={k: _bucket(z.get(k)) if k not in _DS_FLAGS else z.get(k) for k in _DS_KEYS if k in z},
    )
    mb = _num(ds.get("train_micro_batch_size_per_gpu"))
    if not mb:
        mb = _derived_micro_batch(ds, overrides.get("gpus"))
    if mb:
        kw["micro_batch"] = mb
    kw.update({k: v for k, v in overrides.items() if v is not None})
    kw = {k: v for k, v in kw.items() if v is not None}
    return Setup(**kw)


def _derived_micro_batch(ds: dict, gpus) -> int | None:
    """The micro batch DeepSpeed works out when a config gives the global batch and the
    accumulation but not the micro batch: train_batch_size / (gradient_accumulation_steps x world
    size), which DeepSpeed asserts is whole (DeepSpeedConfig._set_batch_related_parameters)."""
    total, accum = _num(ds.get("train_batch_size")), _num(ds.get("gradient_accumulation_steps"))
    world = gpus or 1
    if total and accum and total % (accum * world) == 0:
        return int(total // (accum * world))
    return None


def setup_from_values(values: dict, meta: dict) -> Setup:
    """Recipe mode. values: resolved recipe values (CONTRACT.md vocabulary); meta: model, gpu,
    method (sft|dpo|grpo), framework, optionally world_size, vllm_mode, host_ram_gb, deepspeed
    (the rendered DeepSpeed dict, whose bucket settings are then used)."""
    v = dict(values)
    nodes = int(v.get("nodes") or 1)
    per_node = int(v.get("gpus_per_node") or meta.get("gpus_per_node") or 1)
    method = (meta.get("method") or "sft").lower()
    vllm_gpus = int(v.get("vllm_gpus") or 0)
    vllm_mode = meta.get("vllm_mode") or v.get("vllm_mode") or ("server" if method == "grpo" and vllm_gpus else "none")
    if meta.get("world_size"):
        world = int(meta["world_size"])
    elif vllm_mode == "server" and vllm_gpus:
        # TRL server mode: on one node the server takes vllm_gpus GPUs and training the rest;
        # on more nodes the server has a node of its own and the other nodes train on every GPU.
        world = max(1, (nodes - 1) * per_node if nodes > 1 else per_node - vllm_gpus)
    else:
        world = nodes * per_node
    seq = int(v.get("seq_len") or 2048)
    if method == "grpo" and v.get("max_completion_length"):
        seq += int(v["max_completion_length"])  # seq_len is the prompt budget in GRPO recipes
    precision = v.get("precision") or "bf16"
    util = v.get("vllm_gpu_memory_utilization")
    s = Setup(
        model=meta.get("model") or v.get("model"), gpu=meta.get("gpu") or meta.get("gpu_type") or "A100-80GB",
        gpus=world, gpus_per_node=per_node, nodes=nodes, seq_len=seq,
        micro_batch=int(v.get("micro_batch_size") or 1), grad_accum=int(v.get("grad_accum") or 1),
        precision=precision,
        zero_stage=int(v.get("zero_stage") or 0), offload_optimizer=v.get("offload_optimizer") or "none",
        offload_param=v.get("offload_param") or "none", pin_memory=bool(v.get("pin_memory", True)),
        gradient_checkpointing=bool(v.get("gradient_checkpointing", False)),
        attn_implementation=v.get("attn_implementation") or "sdpa",
        lora_rank=int(v.get("lora_rank") or 0), lora_target=v.get("lora_target") or "all",
        lora_dropout=float(v.get("lora_dropout") or 0.0), method=method, framework="deepspeed", trainer=(meta.get("framework") or "").lower(), vllm_mode=vllm_mode, vllm_gpus=vllm_gpus,
        vllm_gpu_memory_utilization=float(util) if util is not None else None,
        host_ram_bytes=int(float(meta["host_ram_gb"]) * 1024 ** 3) if meta.get("host_ram_gb") else None,
        expandable_segments=bool(v.get("expandable_segments", False)),
    )
    if meta.get("deepspeed"):
        ds = setup_from_deepspeed(meta["deepspeed"]).ds
        s.ds = ds
    if v.get("max_slice_nums"):
        # MiniCPM-V: up to max_slice_nums slices of a large image plus its downscaled overview
        s.image_slices = int(v["max_slice_nums"]) + 1
    for k, val in (meta.get("setup") or {}).items():
        setattr(s, k, val)
    return s


def run(setup: Setup, with_remedies: bool = True, allowed=None) -> Result:
    r = estimate(setup)
    if with_remedies and r.verdict != "fits":
        r.remedies = remedies(setup, r.gpu_peak_bytes, allowed=allowed)
    return r


def estimate_from_values(values: dict, meta: dict, allowed=None) -> Result:
    """Recipe mode entry point: `ftrecipes estimate RECIPE` hands over resolved values + metadata.
    allowed(values) -> bool: whether the recipe accepts these values (remedies it refuses are not
    offered)."""
    setup = setup_from_values(values, meta)
    if allowed is None:
        return run(setup)
    return run(setup, allowed=lambda s2: allowed(values_after(values, setup, s2)))


# Setup fields a remedy changes -> the recipe value that renders them
_REMEDY_VALUES = {"zero_stage": "zero_stage", "offload_optimizer": "offload_optimizer",
                  "offload_param": "offload_param", "gradient_checkpointing": "gradient_checkpointing",
                  "micro_batch": "micro_batch_size", "grad_accum": "grad_accum", "lora_rank": "lora_rank",
                  "lora_target": "lora_target", "expandable_segments": "expandable_segments"}


def values_after(values: dict, before: Setup, after: Setup) -> dict:
    """The recipe values a remedy amounts to: `values` with the Setup fields it changed."""
    out = dict(values)
    for field_name, key in _REMEDY_VALUES.items():
        if getattr(after, field_name) != getattr(before, field_name):
            out[key] = getattr(after, field_name)
    if after.seq_len != before.seq_len and "seq_len" in values:
        # GRPO recipes' seq_len is the prompt budget; the estimate adds the completion to it
        out["seq_len"] = values["seq_len"] - (before.seq_len - after.seq_len)
    return out


def estimate_from_config(ds: dict, **overrides) -> Result:
    """Config mode: a DeepSpeed JSON dict plus Setup field overrides (model=, gpu=, gpus=, ...)."""
    return run(setup_from_deepspeed(ds, **overrides))


SETUP_FIELDS = {f.name for f in fields(Setup)}
