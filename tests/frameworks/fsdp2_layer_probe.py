"""Test-only probe, beside fsdp2_probe: FSDP2 facts per decoder layer, for a full fine-tune.

fsdp2_probe (active whenever FTRECIPES_PROBE is set) records the prepared model as a whole, the
losses and the optimizer steps. A full-parameter recipe under FSDP2 also needs to show, per
decoder layer, what accelerate's fsdp2_prepare_model and fsdp2_apply_ac built, and that rank 0's
weights reached the shards. This module wraps accelerate's `fsdp2_prepare_model` (called through
accelerate.accelerator's module globals, right where fully_shard runs) and
AcceleratedOptimizer.step, and appends to the same $FTRECIPES_PROBE/rank<R>.jsonl:
- `loaded`: before sharding, the input embedding's sum on this rank (which ranks read the
  checkpoint) and the plugin's cpu_ram_efficient_loading;
- `sharded-embedding`: the same sum gathered from the shards after fully_shard;
- `fsdp2-layers`: each decoder layer's FSDP2 group (reshard_after_forward, MixedPrecisionPolicy
  dtypes), the CheckpointWrapper around each layer (FSDP's activation checkpointing), every
  parameter's shard placement and dtype;
- `forward-weight`: the dtype a decoder layer's first linear weight has while it runs (FSDP2's
  all-gathered copy, cast to the policy's param_dtype) and the layer's output dtype;
- `optimizer-state`: the dtypes of the optimizer's state tensors after each optimizer step.
Activated by sitecustomize only when FTRECIPES_FSDP2_LAYER_PROBE is set; changes no behaviour.
"""

import json
import os


def _out(record):
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(os.environ["FTRECIPES_PROBE"], f"rank{rank}.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _name(dtype):
    return str(dtype) if dtype is not None else None


def _unit_facts(module):
    """reshard_after_forward and the mixed precision policy of a module's FSDP2 parameter group."""
    group = module._get_fsdp_state()._fsdp_param_group
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


def _decoder_layers(model):
    import torch

    lists = [sub for name, sub in model.named_modules() if name.endswith("layers") and isinstance(sub, torch.nn.ModuleList)]
    return list(lists[0]) if lists else []


def _facts(model, world_size):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.tensor import DTensor, Shard

    params = list(model.named_parameters())
    dtensors = [p for _, p in params if isinstance(p, DTensor)]
    layers = _decoder_layers(model)
    return {
        "event": "fsdp2-layers",
        "params": len(params),
        "sharded_dim0_over_world": sum(p.device_mesh.size() == world_size and tuple(p.placements) == (Shard(0),)
                                       for p in dtensors),
        "sharded_dtypes": sorted({_name(p.dtype) for p in dtensors}),
        "decoder_layers": len(layers),
        "layer_units": [_layer_unit(layer) for layer in layers],
        "checkpoint_wrappers": sum(isinstance(layer, CheckpointWrapper) for layer in layers),
    }


def _embedding_sum(model):
    """Sum of the input embedding weights (the whole tensor, gathered if sharded): tells which
    ranks read the checkpoint and whether the shards hold rank 0's weights."""
    weight = model.get_input_embeddings().weight.detach()
    if hasattr(weight, "full_tensor"):
        weight = weight.full_tensor()
    return float(weight.float().sum().item())


def _watch_forward(model):
    """One `forward-weight` record, from hooks on decoder layer 0 and its first linear."""
    import torch

    layers = _decoder_layers(model)
    layer = layers[0] if layers else None
    linear = next((sub for sub in layer.modules() if isinstance(sub, torch.nn.Linear)), None) if layer is not None else None
    if linear is None:
        _out({"event": "probe-error", "error": "no decoder layer 0 / linear found"})
        return
    seen, handles = {}, []

    def on_linear(mod, args, output):
        seen.setdefault("linear_weight", _name(mod.weight.dtype))

    def on_layer(mod, args, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        seen.setdefault("layer_output", _name(getattr(out, "dtype", None)))
        if "linear_weight" in seen:
            _out({"event": "forward-weight", **seen})
            for h in handles:
                h.remove()

    handles.append(linear.register_forward_hook(on_linear))
    handles.append(layer.register_forward_hook(on_layer))


def _patch_accelerator(mod):
    if getattr(mod, "_ftrecipes_layer_probed", False):
        return
    mod._ftrecipes_layer_probed = True
    # accelerator.py calls fsdp2_prepare_model through its module globals: wrapping that name
    # sees the model just before and right after fully_shard, before any forward
    prepare = mod.fsdp2_prepare_model

    def probed_prepare(accelerator, model):
        _out({"event": "loaded", "cpu_ram_efficient_loading": bool(accelerator.state.fsdp_plugin.cpu_ram_efficient_loading),
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
    if getattr(cls, "_ftrecipes_layer_probed", False):
        return
    cls._ftrecipes_layer_probed = True
    step = cls.step

    def probed_step(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        if self.gradient_state.sync_gradients:
            dtypes = sorted({str(v.dtype) for s in self.optimizer.state.values() for v in s.values()
                             if hasattr(v, "dtype") and v.dim() > 0})
            _out({"event": "optimizer-state", "optimizer": type(self.optimizer).__name__, "state_dtypes": dtypes})
        return result

    cls.step = probed_step


def install(on_import):
    on_import("accelerate.accelerator", _patch_accelerator)
    on_import("accelerate.optimizer", _patch_optimizer)
