"""Test-only probe: what accelerate's FSDP2 really built, recorded from inside the training run.

Smoke tests launch a recipe the way users do (`accelerate launch ... -m trl.scripts.sft`); the
training code is accelerate's, TRL's and the Trainer's. This probe wraps accelerate's fsdp2_prepare_model
(right after fully_shard), Accelerator.backward (once per micro step) and AcceleratedOptimizer.step, and
appends JSON lines to $FTRECIPES_PROBE/rank<R>.jsonl (the records ftrecipes_probe.read parses):
- `fsdp`: the prepared module and its FSDP2 state - whether the root and each decoder layer are
  FSDPModules (fully_shard), whether every parameter is a DTensor sharded on dim 0 over the
  world, the sharded parameters' dtype, each group's MixedPrecisionPolicy and
  reshard_after_forward, activation-checkpoint wrappers, and the Trainer's own checkpointing;
- `forward`: the dtype a decoder layer's linear weight has while it runs (the all-gathered,
  cast copy) and the layer's output dtype;
- `loaded` / `sharded-embedding`: the input embedding's sum on each rank before sharding (which
  ranks read the checkpoint) and after (what the shards hold);
- `loss` per micro step and `step` per optimizer step.
Activated by sitecustomize only when FTRECIPES_FSDP_PROBE is set; changes no behaviour.
"""

import json
import math
import os


def _out(record):
    directory = os.environ["FTRECIPES_PROBE"]
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(directory, f"rank{rank}.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _name(dtype):
    return str(dtype) if dtype is not None else None


def _unit_facts(module):
    """reshard_after_forward and the mixed precision policy of a module's FSDP2 parameter group."""
    state = module._get_fsdp_state()
    group = state._fsdp_param_group
    if group is None:
        return None
    mp = group.mp_policy
    return {
        # FSDPParamGroup keeps a post-forward mesh only when it reshards after forward
        "reshard_after_forward": group.post_forward_mesh_info is not None,
        "param_dtype": _name(mp.param_dtype),
        "reduce_dtype": _name(mp.reduce_dtype),
        "output_dtype": _name(mp.output_dtype),
        "params": len(group.fsdp_params),
    }


def _layer_unit(layer):
    """The FSDP2 group holding a decoder layer's weights: the layer itself or, under activation
    checkpointing, the layer inside its CheckpointWrapper (accelerate shards both modules; the
    weights belong to the inner one's group)."""
    from torch.distributed.fsdp import FSDPModule

    for sub in layer.modules():
        if isinstance(sub, FSDPModule) and sub._get_fsdp_state()._fsdp_param_group is not None:
            return _unit_facts(sub)
    return None


def _facts(model, world_size):
    import torch
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard

    params = list(model.named_parameters())
    dtensors = [p for _, p in params if isinstance(p, DTensor)]
    sharded = [p for p in dtensors
               if p.device_mesh.size() == world_size and tuple(p.placements) == (Shard(0),)]
    units = {name: type(sub).__name__ for name, sub in model.named_modules()
             if isinstance(sub, FSDPModule) and sub is not model}
    layers = [sub for name, sub in model.named_modules() if name.endswith("layers") and isinstance(sub, torch.nn.ModuleList)]
    decoder_layers = list(layers[0]) if layers else []
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    wrappers = [m for m in decoder_layers if isinstance(m, CheckpointWrapper)]
    layer_units = [_layer_unit(layer) for layer in decoder_layers]
    trainer_ckpt = any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    return {
        "event": "fsdp",
        "module_class": type(model).__name__,
        "root_is_fsdp_module": isinstance(model, FSDPModule),
        "root": _unit_facts(model) if isinstance(model, FSDPModule) else None,
        "params": len(params),
        "dtensor_params": len(dtensors),
        "sharded_dim0_over_world": len(sharded),
        "local_numel": sum(p.to_local().numel() for p in dtensors),
        "global_numel": sum(p.numel() for _, p in params),
        "sharded_dtypes": sorted({_name(p.dtype) for p in dtensors}),
        "trainable": sum(p.requires_grad for _, p in params),
        "decoder_layers": len(decoder_layers),
        "decoder_layer_classes": sorted({type(layer).__name__ for layer in decoder_layers}),
        "fsdp_units": sorted(set(units.values())),
        "fsdp_unit_count": len(units),
        "layer_units": layer_units,
        "checkpoint_wrappers": len(wrappers),
        "trainer_gradient_checkpointing": bool(trainer_ckpt),
        "world_size": world_size,
    }


def _embedding_sum(model):
    """Sum of the input embedding weights (the whole tensor, gathered if sharded): tells which
    ranks read the checkpoint and whether the shards hold rank 0's weights."""
    weight = model.get_input_embeddings().weight.detach()
    if hasattr(weight, "full_tensor"):
        weight = weight.full_tensor()
    return float(weight.float().sum().item())


def _watch_forward(model):
    """One `forward` record: a decoder layer's first linear weight dtype while it runs (FSDP2's
    all-gathered copy, cast to the policy's param_dtype) and the layer's output dtype."""
    import torch

    layer = next((sub for name, sub in model.named_modules() if name.endswith("layers.0")), None)
    linear = next((sub for sub in layer.modules() if isinstance(sub, torch.nn.Linear)), None) if layer is not None else None
    if layer is None or linear is None:
        _out({"event": "probe-error", "error": "no decoder layer 0 / linear found"})
        return
    seen, handles = {}, []

    def on_linear(mod, args, output):
        seen.setdefault("linear_weight", _name(mod.weight.dtype))
        seen.setdefault("linear_input", _name(args[0].dtype) if args else None)

    def on_layer(mod, args, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        seen.setdefault("layer_output", _name(getattr(out, "dtype", None)))
        if "linear_weight" in seen:
            _out({"event": "forward", **seen})
            for h in handles:
                h.remove()

    handles.append(linear.register_forward_hook(on_linear))
    handles.append(layer.register_forward_hook(on_layer))


def _patch_accelerator(mod):
    cls = mod.Accelerator
    if getattr(cls, "_ftrecipes_fsdp_probed", False):
        return
    cls._ftrecipes_fsdp_probed = True
    backward = cls.backward

    def probed_backward(self, loss, **kwargs):
        value = float(loss.detach().float().item())
        _out({"event": "loss", "value": value if math.isfinite(value) else str(value), "dtype": str(loss.dtype)})
        return backward(self, loss, **kwargs)

    cls.backward = probed_backward

    # accelerator.py calls fsdp2_prepare_model through its module globals: wrapping that name
    # sees the model right after fully_shard, before any forward has unsharded a unit
    prepare = mod.fsdp2_prepare_model

    def probed_prepare(accelerator, model):
        # where each rank's weights are before sharding: with fsdp_cpu_ram_efficient_loading
        # transformers reads the checkpoint on rank 0 only and leaves the others on "meta"
        _out({"event": "loaded", "devices": sorted({p.device.type for p in model.parameters()}),
              "cpu_ram_efficient_loading": bool(accelerator.state.fsdp_plugin.cpu_ram_efficient_loading),
              "embedding_sum": _embedding_sum(model)})
        prepared = prepare(accelerator, model)
        try:
            # full_tensor() all-gathers the sharded embedding: every rank calls it here
            _out({"event": "sharded-embedding", "embedding_sum": _embedding_sum(prepared)})
            _out(_facts(prepared, int(accelerator.num_processes)))
            _watch_forward(prepared)
        except Exception as exc:  # a probe must never break training
            _out({"event": "probe-error", "error": repr(exc)})
        return prepared

    mod.fsdp2_prepare_model = probed_prepare


def _patch_optimizer(mod):
    cls = mod.AcceleratedOptimizer
    if getattr(cls, "_ftrecipes_fsdp_probed", False):
        return
    cls._ftrecipes_fsdp_probed = True
    step = cls.step

    def probed_step(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        if self.gradient_state.sync_gradients:
            state_dtypes = sorted({str(v.dtype) for s in self.optimizer.state.values() for v in s.values()
                                   if hasattr(v, "dtype") and v.dim() > 0})
            _out({"event": "step", "optimizer": type(self.optimizer).__name__, "state_dtypes": state_dtypes})
        return result

    cls.step = probed_step


def install(on_import):
    on_import("accelerate.accelerator", _patch_accelerator)
    on_import("accelerate.optimizer", _patch_optimizer)
