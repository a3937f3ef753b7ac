"""What `accelerate launch` (1.15) makes of an accelerate config's inline deepspeed_config.

launch copies each key onto its argument of the same name, utils/launch.py
prepare_deepspeed_cmd_env passes it on as str(value) (offload devices and zero3_init_flag also
.lower()), and DeepSpeedPlugin reads it back with int() (the ZeRO stage), str_to_bool()
(zero3_init_flag) or as a device name that DeepSpeed's own config then checks. A null is unset:
stage 2, devices "none". A value none of them takes is refused here, at its line, rather than
reaching the estimate as a number it cannot compare.
"""

from ..errors import UserError, clip

_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")
_DEVICES = ("none", "cpu", "nvme")  # DeepSpeed's OffloadDeviceEnum


def read(cfg, data) -> dict:
    """{zero_stage, offload_optimizer, offload_param, zero3_init} from data["deepspeed_config"];
    only zero3_init where a deepspeed_config_file holds the rest."""
    ds = data.get("deepspeed_config")
    if ds is None:
        ds = {}
    if not isinstance(ds, dict):  # launch_command calls defaults.deepspeed_config.keys()
        raise _error(cfg, (), f"expected a mapping of DeepSpeed settings, got {clip(repr(ds))}")
    out = {}
    init = ds.get("zero3_init_flag")
    if init is not None:
        text = str(init).lower()
        if isinstance(init, (list, dict)) or text not in _TRUE + _FALSE:  # str_to_bool: "invalid truth value"
            raise _error(cfg, ("zero3_init_flag",), f"expected true or false, got {clip(repr(init))}")
        out["zero3_init"] = text in _TRUE
    if ds.get("deepspeed_config_file"):
        return out
    out["zero_stage"] = _stage(cfg, ds.get("zero_stage"))
    for key, field in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_param")):
        device = ds.get(key)
        name = "none" if device is None else str(device).lower()
        if isinstance(device, (list, dict, bool)) or name not in _DEVICES:
            raise _error(cfg, (key,), f"expected one of {', '.join(_DEVICES)}, got {clip(repr(device))}")
        out[field] = name
    return out


def _stage(cfg, value):
    if value is None:
        return 2
    try:  # int(str(value)): 3 and "3" pass; 3.0 ("3.0"), true ("True") and lists do not
        stage = None if isinstance(value, (list, dict)) else int(str(value))
    except ValueError:
        stage = None
    if stage not in (0, 1, 2, 3):  # DeepSpeed's ZeroStageEnum
        raise _error(cfg, ("zero_stage",), f"expected a ZeRO stage 0, 1, 2 or 3, got {clip(repr(value))}")
    return stage


def _error(cfg, path, message):
    line, col = cfg.doc.where(("deepspeed_config", *path))
    return UserError(f"accelerate launch refuses it: {message}", path=cfg.path, line=line, column=col,
                     key=".".join(("deepspeed_config", *path)))
