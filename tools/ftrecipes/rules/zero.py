"""ZeRO rules: keys a stage ignores, and offload that needs a CPU optimizer."""

from . import ERROR, WARNING, rule
from .facts import ds_configs, zero_stage

# DeepSpeed has CPU implementations of these optimizers (engine._configure_basic_optimizer).
CPU_OPTIMIZERS = {"adam", "adamw", "adagrad", "lion"}


@rule("stage-ignored-key", ERROR, "a ZeRO key the configured stage ignores")
def stage_ignored(setup):
    """
    `offload_param` and the `stage3_*` knobs only act under ZeRO stage 3; below it DeepSpeed
    accepts and silently ignores them, so a config that looks like it offloads parameters
    keeps them all on the GPU. Likewise offload_optimizer needs stage 1 or higher.
    """
    for ds in ds_configs(setup):
        z = ds.data.get("zero_optimization")
        stage = zero_stage(ds)
        if not isinstance(z, dict) or stage is None:
            continue
        if stage < 3:
            op = z.get("offload_param")
            if isinstance(op, dict) and op.get("device", "none") not in ("none", None, "auto"):
                yield ds, ("zero_optimization", "offload_param"), f"offload_param is ignored at ZeRO stage {stage}; parameters stay on the GPU (use stage 3)"
            for key in z:
                if key.startswith("stage3_") and z[key] != "auto":
                    yield ds, ("zero_optimization", key), f"{key} is ignored at ZeRO stage {stage}", WARNING
        if stage == 0:
            oo = z.get("offload_optimizer")
            if isinstance(oo, dict) and oo.get("device", "none") not in ("none", None, "auto"):
                yield ds, ("zero_optimization", "offload_optimizer"), "offload_optimizer is ignored without ZeRO (stage 0)"


@rule("offload-optimizer-type", ERROR, "optimizer offload with an optimizer that has no CPU implementation")
def offload_optimizer_type(setup):
    """
    With `offload_optimizer` the optimizer step runs on the CPU. DeepSpeed has CPU versions
    of Adam/AdamW, Adagrad and Lion only; others (Lamb, the 1-bit family, Mu*, torch
    optimizers by name) either fail at start-up or run GPU kernels on CPU tensors.
    """
    for ds in ds_configs(setup):
        z = ds.data.get("zero_optimization")
        opt = ds.data.get("optimizer")
        if not (isinstance(z, dict) and isinstance(opt, dict)):
            continue
        oo = z.get("offload_optimizer")
        if not (isinstance(oo, dict) and oo.get("device") in ("cpu", "nvme")):
            continue
        kind = opt.get("type")
        if isinstance(kind, str) and kind != "auto" and kind.lower() not in CPU_OPTIMIZERS:
            yield ds, ("optimizer", "type"), f"optimizer {kind} has no CPU implementation for offload_optimizer {oo['device']}; use AdamW, Adagrad or Lion"


@rule("optimizer-max-grad-norm", ERROR, "max_grad_norm inside optimizer params")
def optimizer_max_grad_norm(setup):
    """
    DeepSpeed refuses `max_grad_norm` as an optimizer parameter; gradient clipping is the
    top-level `gradient_clipping` key.
    """
    for ds in ds_configs(setup):
        opt = ds.data.get("optimizer")
        params = opt.get("params") if isinstance(opt, dict) else None
        if isinstance(params, dict) and "max_grad_norm" in params:
            yield ds, ("optimizer", "params", "max_grad_norm"), "use top-level gradient_clipping instead of optimizer.params.max_grad_norm (DeepSpeed refuses it)"
