"""Turn recipe values or a DeepSpeed JSON into a Setup, and run estimate + remedies."""
from __future__ import annotations

from dataclasses import fields

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
    if mb:
        kw["micro_batch"] = mb
    kw.update({k: v for k, v in overrides.items() if v is not None})
    kw = {k: v for k, v in kw.items() if v is not None}
    return Setup(**kw)


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
        method=method, framework="deepspeed", trainer=(meta.get("framework") or "").lower(), vllm_mode=vllm_mode, vllm_gpus=vllm_gpus,
        vllm_gpu_memory_utilization=float(util) if util is not None else None,
        host_ram_bytes=int(float(meta["host_ram_gb"]) * 1024 ** 3) if meta.get("host_ram_gb") else None,
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


def run(setup: Setup, with_remedies: bool = True) -> Result:
    r = estimate(setup)
    if with_remedies and r.verdict != "fits":
        r.remedies = remedies(setup, r.gpu_peak_bytes)
    return r


def estimate_from_values(values: dict, meta: dict) -> Result:
    """Recipe mode entry point: `ftrecipes estimate RECIPE` hands over resolved values + metadata."""
    return run(setup_from_values(values, meta))


def estimate_from_config(ds: dict, **overrides) -> Result:
    """Config mode: a DeepSpeed JSON dict plus Setup field overrides (model=, gpu=, gpus=, ...)."""
    return run(setup_from_deepspeed(ds, **overrides))


SETUP_FIELDS = {f.name for f in fields(Setup)}
