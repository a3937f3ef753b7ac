"""Test-only probe: records what the running DeepSpeed engine really does.

Smoke tests launch recipes the way users do (accelerate launch, torchrun,
llamafactory-cli, deepspeed); the training code is the framework's, not ours. To
assert on the engine itself - ZeRO stage, offload devices, precision, optimizer
class, LoRA adapters, loss at every step - this module wraps DeepSpeedEngine when
`deepspeed.runtime.engine` is first imported and appends JSON lines to
$FTRECIPES_PROBE/rank<R>.jsonl. It is activated by sitecustomize only when
FTRECIPES_PROBE is set, and changes no behaviour.
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
    return {
        "event": "engine",
        "zero_stage": int(engine.zero_optimization_stage()),
        "offload_optimizer": _device(off_opt),
        "offload_optimizer_pin_memory": bool(getattr(off_opt, "pin_memory", False)) if off_opt else False,
        "offload_param": _device(off_par),
        "offload_param_pin_memory": bool(getattr(off_par, "pin_memory", False)) if off_par else False,
        "bf16": bool(engine.bfloat16_enabled()),
        "fp16": bool(engine.fp16_enabled()),
        "loss_scale": float(getattr(engine.optimizer, "cur_scale", 0) or getattr(getattr(engine.optimizer, "loss_scaler", None), "cur_scale", 0) or 0),
        "param_dtype": str(first.dtype),
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
    }


def _patch(mod):
    engine_cls = mod.DeepSpeedEngine
    if getattr(engine_cls, "_ftrecipes_probed", False):
        return
    engine_cls._ftrecipes_probed = True
    backward, step = engine_cls.backward, engine_cls.step
    state = {"reported": set()}

    def probed_backward(self, loss, *args, **kwargs):
        # Engine facts once the optimizer exists (some are lazily built before the first backward).
        if id(self) not in state["reported"]:
            state["reported"].add(id(self))
            try:
                _out(_facts(self))
            except Exception as exc:  # a probe must never break training
                _out({"event": "probe-error", "error": repr(exc)})
        value = float(loss.detach().float().item())
        _out({"event": "loss", "value": value if math.isfinite(value) else str(value)})
        return backward(self, loss, *args, **kwargs)

    def probed_step(self, *args, **kwargs):
        boundary = self.is_gradient_accumulation_boundary()
        result = step(self, *args, **kwargs)
        if boundary:
            _out({"event": "step", "global_steps": int(self.global_steps), "skipped": bool(getattr(self, "skipped_steps", 0))})
        return result

    engine_cls.backward = probed_backward
    engine_cls.step = probed_step


class _Finder(importlib.abc.MetaPathFinder):
    """Runs a hook right after a named module is first imported (no import of it here)."""

    hooks = {}

    def find_spec(self, name, path, target=None):
        hook = self.hooks.get(name)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            hook(module)

        spec.loader.exec_module = exec_module
        return spec


def on_import(name, hook):
    _Finder.hooks[name] = hook
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
