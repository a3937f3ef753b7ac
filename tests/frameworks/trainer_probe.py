"""Test-only probe for runs without DeepSpeed: what a transformers Trainer really trains.

ftrecipes_probe wraps DeepSpeed's engine; a one-process QLoRA run has no engine, so this wraps
transformers.trainer.Trainer when that module is first imported (sitecustomize, only when
FTRECIPES_TRAINER_PROBE is set) and appends records to $FTRECIPES_PROBE/rank<R>.jsonl:
`trainer` (the live model's base layers, LoRA adapters, trainable parameters, checkpointing),
`loss` after every training_step, and `trained` when train() returns (optimizer class, the dtype
of each optimizer state, steps run). It changes no behaviour; a failing probe records an error.
"""

import math

TARGET = "transformers.trainer"


def _linear_facts(module):
    """Every module that is the frozen base of a LoRA layer (or a plain linear layer outside them)."""
    out = []
    for name, sub in module.named_modules():
        if name.endswith(".base_layer") or (type(sub).__name__ in ("Linear", "Linear4bit", "Linear8bitLt")
                                            and ".lora_" not in name and not hasattr(sub, "base_layer")):
            weight = getattr(sub, "weight", None)
            state = getattr(weight, "quant_state", None)
            out.append({"name": name, "class": f"{type(sub).__module__}.{type(sub).__name__}",
                        "weight_class": type(weight).__name__, "weight_dtype": str(getattr(weight, "dtype", None)),
                        "quant_type": getattr(weight, "quant_type", None),
                        "compute_dtype": str(getattr(sub, "compute_dtype", None)),
                        "nested": bool(getattr(state, "nested", False)) if state is not None else None,
                        "requires_grad": bool(getattr(weight, "requires_grad", False))})
    return out


def _lora_facts(model):
    cfgs = getattr(model, "peft_config", {}) or {}
    out = {}
    for adapter, cfg in cfgs.items():
        targets = cfg.target_modules
        out[adapter] = {"r": cfg.r, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                        "target_modules": sorted(targets) if isinstance(targets, (set, list)) else targets}
    return out


def _model_facts(model):
    named = list(model.named_parameters())
    trainable = [n for n, p in named if p.requires_grad]
    checkpointing = any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
    return {"event": "trainer", "model_class": type(model).__name__, "base_layers": _linear_facts(model),
            "lora": _lora_facts(model), "trainable": trainable,
            "trainable_dtypes": sorted({str(p.dtype) for _, p in named if p.requires_grad}),
            "gradient_checkpointing": bool(checkpointing)}


def _optimizer_facts(trainer):
    opt = trainer.optimizer
    inner = getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer wraps the real one
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    states = []
    for group in inner.param_groups:
        for p in group["params"]:
            st = inner.state.get(p, {})
            states.append({"param": names.get(id(p), "?"), "numel": p.numel(),
                           "state1": str(st["state1"].dtype) if "state1" in st else None,
                           "state2": str(st["state2"].dtype) if "state2" in st else None})
    cfg = getattr(inner, "args", None)
    return {"event": "trained", "optimizer": f"{type(inner).__module__}.{type(inner).__name__}",
            "optim_bits": getattr(cfg, "optim_bits", None), "min_8bit_size": getattr(cfg, "min_8bit_size", None),
            "is_paged": getattr(inner, "is_paged", None), "states": states,
            "global_step": int(trainer.state.global_step)}


def _patch(mod, out):
    cls = mod.Trainer
    if getattr(cls, "_ftrecipes_trainer_probed", False):
        return
    cls._ftrecipes_trainer_probed = True
    training_step, train = cls.training_step, cls.train
    seen = set()

    def probed_training_step(self, model, *args, **kwargs):
        if id(self) not in seen:
            seen.add(id(self))
            try:
                out(_model_facts(model))
            except Exception as exc:  # a probe must never break training
                out({"event": "probe-error", "error": repr(exc)})
        loss = training_step(self, model, *args, **kwargs)
        value = float(loss.detach().float().item())
        out({"event": "loss", "value": value if math.isfinite(value) else str(value)})
        return loss

    def probed_train(self, *args, **kwargs):
        result = train(self, *args, **kwargs)
        try:
            out(_optimizer_facts(self))
        except Exception as exc:
            out({"event": "probe-error", "error": repr(exc)})
        return result

    cls.training_step = probed_training_step
    cls.train = probed_train


def install(on_import, out):
    on_import(TARGET, lambda mod: _patch(mod, out))
