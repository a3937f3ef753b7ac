"""Test-only probe: records what the running DeepSpeed engine really does.

Smoke tests launch recipes the way users do (accelerate launch, torchrun,
llamafactory-cli, deepspeed); the training code is the framework's, not ours. To
assert on the engine itself - ZeRO stage, offload devices, precision, optimizer
class, LoRA adapters, loss at every step - this module wraps DeepSpeedEngine when
`deepspeed.runtime.engine` is first imported and appends JSON lines to
$FTRECIPES_PROBE/rank<R>.jsonl. It is activated by sitecustomize only when
FTRECIPES_PROBE is set, and changes no behaviour - except where a test sets
FTRECIPES_INJECT_OVERFLOW to make chosen steps' gradients non-finite (loss scaling tests).
"""

import importlib.abc
import importlib.machinery
import json
import math
import os
import sys

TARGET = "deepspeed.runtime.engine"


def _out(record):
    directory = os.environ["FTRECIPES_PROBE"]
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(directory, f"rank{rank}.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def record(rec):
    """Append a record for another test-only aid (cpu_fp16); nothing when no probe runs."""
    if os.environ.get("FTRECIPES_PROBE"):
        _out(rec)


def _device(cfg):
    dev = getattr(cfg, "device", None) if cfg is not None else None
    return str(getattr(dev, "value", dev) or "none")


def _facts(engine):
    module = engine.module
    names = [n for n, _ in module.named_parameters()]
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    checkpointing = any(getattr(m, "gradient_checkpointing", False) is True for m in module.modules())
    checkpointing = checkpointing or bool(getattr(module, "is_gradient_checkpointing", False))
    off_opt = engine.zero_offload_optimizer() if engine.zero_optimization() else None
    off_par = engine.zero_offload_param() if engine.zero_optimization() else None
    first = next(module.parameters())
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    return {
        "event": "engine",
        "zero_stage": int(engine.zero_optimization_stage()),
        "offload_optimizer": _device(off_opt),
        "offload_optimizer_pin_memory": bool(getattr(off_opt, "pin_memory", False)) if off_opt else False,
        "offload_param": _device(off_par),
        "offload_param_pin_memory": bool(getattr(off_par, "pin_memory", False)) if off_par else False,
        "bf16": bool(engine.bfloat16_enabled()),
        "fp16": bool(engine.fp16_enabled()),
        "loss_scale": _scale(engine),
        "param_dtype": str(first.dtype),
        # The loss scaler follows the dtype of the trainable parameters (CreateLossScaler in
        # deepspeed/runtime/fp16/loss_scaler.py), so both are recorded.
        "trainable_dtypes": sorted({str(p.dtype) for p in module.parameters() if p.requires_grad}),
        "loss_scaler": type(scaler).__name__ if scaler is not None else None,
        "dynamic_loss_scale": bool(getattr(engine.optimizer, "dynamic_loss_scale", False)),
        "optimizer": type(engine.optimizer).__name__ if engine.optimizer is not None else None,
        "basic_optimizer": type(engine.basic_optimizer).__name__ if getattr(engine, "basic_optimizer", None) is not None else None,
        "lora_params": sum("lora_" in n for n in names),
        "trainable_params": len(trainable),
        "trainable_lora_only": bool(trainable) and all("lora_" in n for n in trainable),
        "gradient_checkpointing": bool(checkpointing),
        "world_size": int(engine.world_size),
        "micro_batch": int(engine.train_micro_batch_size_per_gpu()),
        "grad_accum": int(engine.gradient_accumulation_steps()),
        "train_batch": int(engine.train_batch_size()),
        "module_class": type(module).__name__,
        **_zero3_partition(module),
        **engine.__dict__.get("_ftrecipes_at_init", {}),
    }


def _zero3_partition(module):
    """ZeRO-3's own bookkeeping on each parameter (deepspeed/runtime/zero/partition_parameters.py):
    ds_numel is the full size, ds_tensor this rank's shard. Zeros when the model is not partitioned."""
    params = [p for p in module.parameters() if hasattr(p, "ds_id")]
    return {
        "zero3_params": len(params),
        "zero3_full_numel": int(sum(p.ds_numel for p in params)),
        "zero3_local_numel": int(sum(p.ds_tensor.numel() for p in params if getattr(p, "ds_tensor", None) is not None)),
    }


def _scale(engine):
    opt = engine.optimizer
    return float(getattr(opt, "cur_scale", 0) or getattr(getattr(opt, "loss_scaler", None), "cur_scale", 0) or 0)


def _first_tensor(value):
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    return value if hasattr(value, "dtype") else None


def _watch_forward(module):
    """One `forward` record: the dtypes the first decoder layer, a LoRA base layer and the
    LM head really compute in (inputs and outputs), seen by forward hooks on the first pass."""
    picks = {}
    for name, sub in module.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "lm_head":
            picks.setdefault("lm_head", sub)
        elif leaf == "base_layer":
            picks.setdefault("lora_base_layer", sub)
        elif name.endswith("layers.0"):
            picks.setdefault("decoder_layer", sub)
    seen, handles = {}, []

    def hook_for(key):
        def hook(_mod, args, output):
            if key in seen:
                return
            inp, out = _first_tensor(args), _first_tensor(output)
            seen[key] = {"input": str(inp.dtype) if inp is not None else None,
                         "output": str(out.dtype) if out is not None else None}
            if len(seen) == len(picks):
                _out({"event": "forward", **seen})
                for handle in handles:
                    handle.remove()
        return hook

    handles.extend(sub.register_forward_hook(hook_for(key)) for key, sub in picks.items())


def _inject_steps():
    """FTRECIPES_INJECT_OVERFLOW=2,3: optimizer steps (1-based) whose gradients are made non-finite."""
    raw = os.environ.get("FTRECIPES_INJECT_OVERFLOW", "")
    return {int(x) for x in raw.split(",") if x.strip()}


def _patch(mod):
    engine_cls = mod.DeepSpeedEngine
    if getattr(engine_cls, "_ftrecipes_probed", False):
        return
    engine_cls._ftrecipes_probed = True
    forward, backward, step = engine_cls.forward, engine_cls.backward, engine_cls.step
    state = {"reported": set(), "watched": set(), "injected": set(), "inject": _inject_steps()}

    def probed_forward(self, *args, **kwargs):
        if id(self) not in state["watched"]:
            state["watched"].add(id(self))
            try:
                _watch_forward(self.module)
            except Exception as exc:
                _out({"event": "probe-error", "error": repr(exc)})
        return forward(self, *args, **kwargs)

    def probed_backward(self, loss, *args, **kwargs):
        # Engine facts once the optimizer exists (some are lazily built before the first backward).
        if id(self) not in state["reported"]:
            state["reported"].add(id(self))
            try:
                _out(_facts(self))
            except Exception as exc:  # a probe must never break training
                _out({"event": "probe-error", "error": repr(exc)})
        value = float(loss.detach().float().item())
        _out({"event": "loss", "value": value if math.isfinite(value) else str(value), "dtype": str(loss.dtype)})
        target = int(self.global_steps) + 1
        if target in state["inject"] and target not in state["injected"]:
            # An overflow on demand: an infinite loss gives this micro-batch non-finite
            # gradients, as an fp16 overflow of the scaled loss would.
            state["injected"].add(target)
            _out({"event": "inject-overflow", "step": target})
            loss = loss * float("inf")
        return backward(self, loss, *args, **kwargs)

    def probed_step(self, *args, **kwargs):
        boundary = self.is_gradient_accumulation_boundary()
        result = step(self, *args, **kwargs)
        if boundary:
            skipped = int(getattr(self, "skipped_steps", 0))
            _out({"event": "step", "global_steps": int(self.global_steps), "skipped": bool(skipped),
                  "skipped_steps": skipped, "loss_scale": _scale(self)})
        return result

    init = engine_cls.__init__

    def probed_init(self, *args, **kwargs):
        # Parameters that already carry ZeRO-3's ds_id when the engine is built were partitioned
        # as the model was constructed (deepspeed.zero.Init, e.g. from_pretrained under
        # HfDeepSpeedConfig), not afterwards by the engine: each process never held the whole model.
        model = kwargs.get("model", args[1] if len(args) > 1 else None)
        try:
            params = list(model.parameters()) if model is not None else []
            seen = {"params_at_engine_init": len(params),
                    "partitioned_at_engine_init": sum(hasattr(p, "ds_id") for p in params)}
        except Exception as exc:
            seen = {}
            _out({"event": "probe-error", "error": repr(exc)})
        init(self, *args, **kwargs)
        self.__dict__["_ftrecipes_at_init"] = seen

    engine_cls.__init__ = probed_init
    engine_cls.forward = probed_forward
    engine_cls.backward = probed_backward
    engine_cls.step = probed_step


class _Finder(importlib.abc.MetaPathFinder):
    """Runs hooks right after a named module is first imported (no import of it here), in the
    order they were registered: several aids may patch one module (fsdp2_probe and
    fsdp2_layer_probe both wrap accelerate.accelerator)."""

    hooks = {}

    def find_spec(self, name, path, target=None):
        hooks = self.hooks.get(name)
        if not hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            for hook in hooks:
                hook(module)

        spec.loader.exec_module = exec_module
        return spec


def on_import(name, hook):
    registered = _Finder.hooks.setdefault(name, [])
    if hook not in registered:
        registered.append(hook)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install():
    on_import(TARGET, _patch)


def read(directory):
    """Parse every rank's records: {rank: [record, ...]} (used by the pytest side)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("rank") and name.endswith(".jsonl"):
            with open(os.path.join(directory, name), encoding="utf-8") as fh:
                out[int(name[4:-6])] = [json.loads(line) for line in fh if line.strip()]
    return out
