"""Test-only probe: records what accelerate's FSDP2 really built and ran (the DeepSpeed probe's twin).

ftrecipes_probe wraps DeepSpeedEngine; a recipe launched with an FSDP accelerate config never
builds one. This module wraps three methods of accelerate (1.11) when `accelerate.accelerator` is
first imported, and appends JSON lines to $FTRECIPES_PROBE/rank<R>.jsonl like that probe:
- `Accelerator._prepare_fsdp2` (the only path that calls fully_shard for FSDP2): one `fsdp2`
  record of the prepared model - FSDPModule classes, DTensor placements and shard sizes of every
  parameter, dtypes of frozen and trainable parameters, the LoRA config PEFT applied, the FSDP
  plugin's settings and the mixed-precision policy fully_shard got;
- `Accelerator.backward`: one `loss` record per micro-batch;
- `AcceleratedOptimizer.step`: one `step` record per optimizer step (which parameters carry a
  gradient, their dtypes and placements, and whether a frozen shard moved).
Records are written only when the accelerator runs FSDP2, so DeepSpeed runs through accelerate
keep their own probe's records alone. It changes no behaviour.
"""

import json
import math
import os

TARGET = "accelerate.accelerator"


def _out(record):
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(os.environ["FTRECIPES_PROBE"], f"rank{rank}.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _placements(param):
    spec = getattr(param, "placements", None)
    return [str(p) for p in spec] if spec is not None else None


def _lora_config(model):
    cfgs = getattr(model, "peft_config", None) or {}
    cfg = cfgs.get("default")
    if cfg is None:
        return None
    targets = cfg.target_modules
    return {"r": int(cfg.r), "lora_alpha": int(cfg.lora_alpha), "lora_dropout": float(cfg.lora_dropout),
            "target_modules": sorted(targets) if isinstance(targets, (set, list, tuple)) else targets}


def _checkpointing(model):
    on = any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    return on or bool(getattr(model, "is_gradient_checkpointing", False))


def _facts(accelerator, model):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    plugin = accelerator.state.fsdp_plugin
    params = list(model.named_parameters())
    trainable = [(n, p) for n, p in params if p.requires_grad]
    frozen = [(n, p) for n, p in params if not p.requires_grad]
    units = [type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)]
    mp = getattr(model._get_fsdp_state(), "_mp_policy", None) if isinstance(model, FSDPModule) else None
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for _, p in params)
    return {
        "event": "fsdp2",
        "fsdp_version": int(plugin.fsdp_version),
        "root_is_fsdp_module": isinstance(model, FSDPModule),
        "fsdp_units": sorted(set(units)),
        "fsdp_unit_count": len(units),
        "all_dtensor": all(isinstance(p, DTensor) for _, p in params),
        "placements": sorted({str(_placements(p)) for _, p in params}),
        "mesh_size": int(params[0][1].device_mesh.size()) if isinstance(params[0][1], DTensor) else 1,
        "full_numel": sum(p.numel() for _, p in params),
        "local_numel": local,
        "frozen_dtypes": sorted({str(p.dtype) for _, p in frozen}),
        "trainable_dtypes": sorted({str(p.dtype) for _, p in trainable}),
        "trainable_params": len(trainable),
        "lora_params": sum("lora_" in n for n, _ in params),
        "trainable_lora_only": bool(trainable) and all("lora_" in n for n, _ in trainable),
        "lora": _lora_config(model),
        "mixed_precision": str(accelerator.mixed_precision),
        "mp_param_dtype": str(getattr(mp, "param_dtype", None)),
        "mp_reduce_dtype": str(getattr(mp, "reduce_dtype", None)),
        "reshard_after_forward": plugin.reshard_after_forward,
        "cpu_offload": type(plugin.cpu_offload).__name__ if plugin.cpu_offload is not None else None,
        "state_dict_type": str(getattr(plugin.state_dict_type, "name", plugin.state_dict_type)),
        "activation_checkpointing_plugin": bool(plugin.activation_checkpointing),
        "gradient_checkpointing": _checkpointing(model),
        "world_size": int(accelerator.num_processes),
        "device": str(accelerator.device),
    }


def _patch(mod):
    cls = mod.Accelerator
    if getattr(cls, "_ftrecipes_fsdp2_probed", False):
        return
    cls._ftrecipes_fsdp2_probed = True
    from accelerate.optimizer import AcceleratedOptimizer

    prepare, backward, step = cls._prepare_fsdp2, cls.backward, AcceleratedOptimizer.step
    state = {"names": {}, "steps": 0, "frozen": None}

    def probed_prepare(self, *args):
        result = prepare(self, *args)
        try:
            import torch

            for obj in result:
                if isinstance(obj, torch.nn.Module):
                    state["names"] = {id(p): n for n, p in obj.named_parameters()}
                    frozen = next((p for p in obj.parameters() if not p.requires_grad), None)
                    state["frozen"] = frozen
                    state["frozen_before"] = frozen.to_local().detach().clone() if frozen is not None else None
                    _out(_facts(self, obj))
                    import ftrecipes_probe

                    ftrecipes_probe._watch_forward(obj)
        except Exception as exc:  # a probe must never break training
            _out({"event": "probe-error", "error": repr(exc)})
        return result

    def probed_backward(self, loss, **kwargs):
        if self.is_fsdp2:
            value = float(loss.detach().float().item())
            _out({"event": "loss", "value": value if math.isfinite(value) else str(value), "dtype": str(loss.dtype)})
        return backward(self, loss, **kwargs)

    def probed_step(self, closure=None):
        fsdp2 = bool(getattr(self.accelerator_state, "is_fsdp2", False))
        if not (fsdp2 and self.gradient_state.sync_gradients):
            return step(self, closure)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        with_grad = [p for p in params if p.grad is not None]
        record = {
            "event": "step",
            "optimizer": type(self.optimizer).__name__,
            "optimizer_params": len(params),
            "optimizer_lora_only": all("lora_" in state["names"].get(id(p), "") for p in params),
            "grads": len(with_grad),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in with_grad}),
            "grad_placements": sorted({str(_placements(p.grad)) for p in with_grad}),
        }
        result = step(self, closure)
        state["steps"] += 1
        frozen = state.get("frozen")
        if frozen is not None:
            import torch

            record["frozen_unchanged"] = bool(torch.equal(frozen.to_local(), state["frozen_before"]))
        record["global_steps"] = state["steps"]
        _out(record)
        return result

    cls._prepare_fsdp2 = probed_prepare
    cls.backward = probed_backward
    AcceleratedOptimizer.step = probed_step


def install(on_import):
    on_import(TARGET, _patch)
