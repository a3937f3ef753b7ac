"""Precision rules: what the hardware supports, and files that disagree about it."""

from . import ERROR, WARNING, rule
from .facts import commands, ds_configs


def _bf16_sources(setup):
    for ds in ds_configs(setup):
        b = ds.data.get("bf16") or ds.data.get("bfloat16")
        if isinstance(b, dict) and b.get("enabled") is True:
            yield ds, ("bf16", "enabled"), "DeepSpeed bf16.enabled"
    # axolotl's `bf16: true` too (its config validation refuses it without bf16 hardware; `auto` picks).
    for kind in ("trl", "llamafactory", "axolotl"):
        for cfg in setup.of(kind):
            if isinstance(cfg.data, dict) and cfg.data.get("bf16") is True:
                yield cfg, ("bf16",), f"{kind} bf16: true"
    for acc in setup.of("accelerate"):
        if acc.data.get("mixed_precision") == "bf16":
            yield acc, ("mixed_precision",), "accelerate mixed_precision: bf16"
    for cfg in setup.of("openrlhf"):
        if cfg.data.get("ds.param_dtype") == "bf16" or cfg.data.get("bf16") is True:
            key = "ds.param_dtype" if "ds.param_dtype" in cfg.data else "bf16"
            yield cfg, (key,), f"--{key}"
    for cfg, i, cmd in commands(setup):
        for j, w in enumerate(cmd.words):
            if w == "--bf16" and cfg.kind == "launch" and (j + 1 >= len(cmd.words) or cmd.words[j + 1].lower() in ("true", "1")):
                yield cfg, ("command", i, j), "--bf16 True"


@rule("bf16-unsupported", ERROR, "bf16 on a GPU without bf16")
def bf16_unsupported(setup):
    """
    V100 and T4 (compute capability 7.x) have no bf16 arithmetic: PyTorch refuses bf16
    autocast on them or emulates it very slowly, and DeepSpeed's bf16 optimizer fails.
    Use fp16 with dynamic loss scaling (`fp16.enabled: true`, `loss_scale: 0`) instead
    (LlamaFactory#4339). Needs `--gpu` (or a recipe's hardware) to know the GPU.
    """
    if not setup.options.gpu:
        return
    from ..memory import catalog

    try:
        gpu = catalog.gpu(setup.options.gpu)
    except KeyError:
        return
    if gpu.bf16:
        return
    for cfg, path, what in _bf16_sources(setup):
        yield cfg, path, f"{what} on {gpu.name}, which has no bf16; use fp16 with dynamic loss scaling"


@rule("precision-mismatch", ERROR, "the trainer and the DeepSpeed config disagree on precision")
def precision_mismatch(setup):
    """
    The HF Trainer and accelerate compare their precision flag with the DeepSpeed config
    and stop at start-up when they differ; other launchers silently use the DeepSpeed
    config's. Say the same thing in both files (or use "auto" in the DeepSpeed config
    where an HF Trainer fills it).
    """
    for ds in ds_configs(setup):
        enabled = [(ds.data.get(k) or {}).get("enabled") if isinstance(ds.data.get(k), dict) else None for k in ("bf16", "fp16")]
        if "auto" in enabled:
            continue  # the trainer fills it from its own flag: nothing to disagree with
        ds_bf16, ds_fp16 = (e is True for e in enabled)
        for kind in ("trl", "llamafactory"):
            for cfg in setup.of(kind):
                d = cfg.data if isinstance(cfg.data, dict) else {}
                for key, ds_on in (("bf16", ds_bf16), ("fp16", ds_fp16)):
                    mine = d.get(key)
                    if isinstance(mine, bool) and mine != ds_on and (ds_bf16 or ds_fp16 or mine):
                        yield cfg, (key,), f"{key}: {str(mine).lower()} here, but {ds.path} has {key} {'enabled' if ds_on else 'disabled'}"


@rule("fp16-no-loss-scaling", WARNING, "fp16 without loss scaling")
def fp16_no_loss_scaling(setup):
    """
    fp16 has a narrow exponent range: small gradients underflow to zero unless the loss is
    scaled up before the backward pass. `loss_scale: 0` selects DeepSpeed's dynamic loss
    scaling (start at 2**initial_scale_power, halve on overflow); a fixed `loss_scale: 1`
    turns scaling off, and a tiny `initial_scale_power` starts too low to help.
    """
    for ds in ds_configs(setup):
        f = ds.data.get("fp16")
        if not (isinstance(f, dict) and f.get("enabled") is True):
            continue
        scale = f.get("loss_scale", 0)
        if scale == 1:
            yield ds, ("fp16", "loss_scale"), "fp16 with loss_scale 1 trains without loss scaling; use 0 (dynamic)"
        power = f.get("initial_scale_power")
        if scale == 0 and isinstance(power, int) and power < 8:
            yield ds, ("fp16", "initial_scale_power"), f"initial_scale_power {power} starts dynamic loss scaling at {2 ** power}; 16 is DeepSpeed's default"
