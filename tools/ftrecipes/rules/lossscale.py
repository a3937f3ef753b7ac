"""Loss scaling that a config asks for but DeepSpeed does not apply."""

import os

from . import ERROR, rule
from .facts import ds_configs, zero_stage

# LLaMA-Factory fine-tuning types whose trainable parameters are new PEFT adapter weights. PEFT
# (get_peft_model's autocast_adapter_dtype, on by default) makes fp16 adapters fp32, and
# LLaMA-Factory 0.9.5 (model/adapter.py, init_adapter) leaves them so under ZeRO-3.
ADAPTER_TYPES = ("lora", "oft")


def static_loss_scale(trainer: str, finetuning: str, precision: str, zero_stage: int, autocast: bool = False) -> bool:
    """The settings this module's rule flags, as plain values: `plan` filters its candidates
    with it, so it never proposes a setup whose files the rule would reject."""
    return (trainer == "llamafactory" and finetuning in ADAPTER_TYPES and zero_stage == 3
            and precision == "fp16" and not autocast)


def _fp16(ds, trainer):
    f = ds.data.get("fp16")
    enabled = f.get("enabled") if isinstance(f, dict) else None
    return enabled is True or (enabled == "auto" and trainer.get("fp16") is True)


def _autocast(ds):
    t = ds.data.get("torch_autocast")
    return isinstance(t, dict) and t.get("enabled") is True


def _referenced_ds(setup, cfg):
    name = cfg.data.get("deepspeed")
    if not isinstance(name, str) or not name:
        return None
    want = os.path.normpath(name if os.path.isabs(name) else os.path.join(str(cfg.dir), name))
    for ds in ds_configs(setup):
        if os.path.normpath(ds.path) == want:
            return ds
    return None


@rule("fp16-static-loss-scale", ERROR, "fp16 with fp32 trainable adapters under ZeRO-3: DeepSpeed uses a static loss scale of 1.0")
def fp16_static_loss_scale(setup):
    """
    DeepSpeed picks its fp16 loss scaler by the dtype of the first trainable parameter, not by
    the `fp16` section: `CreateLossScaler` (deepspeed/runtime/fp16/loss_scaler.py, 0.19.8)
    builds the DynamicLossScaler only for fp16 parameters and otherwise a static scale of 1.0
    (the ZeRO-3 optimizer takes that dtype from its first parameter, stage3.py). LLaMA-Factory's
    LoRA and OFT adapters are fp32 under ZeRO-3 (PEFT upcasts half-precision adapters;
    LLaMA-Factory keeps them), and ZeRO-3 does not cast a model built under zero.Init (engine
    `_configure_distributed_model`). So a LLaMA-Factory LoRA run with `fp16: true` and a ZeRO-3
    config trains with no loss scaling at all - fp16 activation gradients of the frozen base can
    underflow to zero, and the scale never adapts (a step whose gradient norm is not finite is
    still skipped) - while `loss_scale: 0` and `initial_scale_power` in the DeepSpeed config
    silently do nothing. At ZeRO stage 0-2 the engine casts every parameter, adapters included,
    to fp16 and keeps fp32 master copies in the optimizer, so loss scaling is dynamic; use stage
    2 (with `offload_optimizer` if GPU memory is short). Configs with DeepSpeed's
    `torch_autocast` section are not judged here: that path uses torch's GradScaler instead.
    """
    for cfg in setup.of("llamafactory"):
        d = cfg.data if isinstance(cfg.data, dict) else {}
        kind = d.get("finetuning_type", "lora")  # LLaMA-Factory's default is LoRA
        ds = _referenced_ds(setup, cfg)
        if ds is None or not static_loss_scale("llamafactory", kind, "fp16" if _fp16(ds, d) else "other",
                                               zero_stage(ds), _autocast(ds)):
            continue
        yield ds, ("fp16",), (
            f"fp16 with {kind} adapters under ZeRO-3 ({cfg.path}): the adapters are fp32, so DeepSpeed "
            "silently uses a static loss scale of 1.0 (the loss is never scaled); this fp16 section's "
            "loss scaling does nothing. Use ZeRO stage 2, where DeepSpeed casts the adapters to fp16 and "
            "scales dynamically"
        )
