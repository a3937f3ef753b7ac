"""FSDP rules for accelerate configs: keys one FSDP version ignores or refuses, FSDP mixed
with DeepSpeed, QLoRA dtypes FSDP1 cannot flatten, and wrap classes the model does not have.

Facts come from accelerate 1.15 (utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__,
utils/launch.py prepare_multi_gpu_env, commands/launch.py), transformers and torch as
installed in the trl stack; each message says what the framework really does.
"""

import os

from . import ERROR, WARNING, rule

# accelerate launch sets every FSDP_* variable; the plugin reads these four only under FSDP1
# (use_orig_params, sync_module_states, forward_prefetch) or reads and then drops them
# (backward_prefetch, with a "Multiple deprecation warnings due to FSDP2 conversion" warning).
_V2_IGNORED = {
    "sync_module_states": "obsolete in FSDP2; the plugin sets it to None with a warning",
    "use_orig_params": "obsolete in FSDP2 (it always uses the original parameters); the plugin sets it to None with a warning",
    "backward_prefetch": "not supported in FSDP2; the plugin sets it to None with a warning",
    "forward_prefetch": "not implemented in FSDP2; `accelerate launch` ignores it (the plugin reads FSDP_FORWARD_PREFETCH only for version 1) and FullyShardedDataParallelPlugin(forward_prefetch=...) raises ValueError",
}

# transformers model_type -> the decoder block class its modeling file defines
# (transformers/models/*/modeling_*.py; QWenBlock is QwenLM/Qwen's remote code, modeling_qwen.py).
_LAYER_CLASS = {
    "llama": "LlamaDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "mistral": "MistralDecoderLayer",
    "gemma3_text": "Gemma3DecoderLayer",
    "qwen": "QWenBlock",
}

_TRAINERS = ("trl", "llamafactory")


def _on(value):
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _off(value):
    return value is False or (isinstance(value, str) and value.lower() == "false")


def _fsdp_setups(setup):
    """(accelerate config, its fsdp_config mapping, fsdp version) for each FSDP accelerate config."""
    for acc in setup.of("accelerate"):
        data = acc.data
        if not isinstance(data, dict) or data.get("distributed_type") != "FSDP":
            continue
        fc = data.get("fsdp_config")
        fc = fc if isinstance(fc, dict) else {}
        version = _get(fc, "version")[1]
        yield acc, fc, 2 if str(version) == "2" else 1


def _get(fc, name):
    """(key as written, value): launch accepts fsdp_config keys with or without the fsdp_ prefix."""
    for key in ("fsdp_" + name, name):
        if key in fc:
            return key, fc[key]
    return None, None


def _trainers(setup):
    for kind in _TRAINERS:
        for cfg in setup.of(kind):
            if isinstance(cfg.data, dict):
                yield kind, cfg


@rule("fsdp-version-key", WARNING, "an fsdp_config key the configured FSDP version ignores or refuses")
def fsdp_version_key(setup):
    """
    accelerate's FullyShardedDataParallelPlugin reads fsdp_config per `fsdp_version` (absent = 1).
    Under FSDP2, `sync_module_states`, `use_orig_params` and `backward_prefetch` are dropped with
    a warning and `forward_prefetch` is not read at all by `accelerate launch` (the plugin raises
    ValueError when it is passed in Python), so the config does not do what it says. Hard
    errors: `state_dict_type: LOCAL_STATE_DICT` under FSDP2 and `activation_checkpointing_offload`
    under FSDP1 both raise ValueError when the plugin is built.
    """
    for acc, fc, version in _fsdp_setups(setup):
        if version == 2:
            for name, effect in _V2_IGNORED.items():
                key, value = _get(fc, name)
                if key is None or value is None or _off(value) or (name == "backward_prefetch" and str(value).upper() == "NO_PREFETCH"):
                    continue
                yield acc, ("fsdp_config", key), f"{key}: {value} does nothing under fsdp_version 2: {effect}"
            key, value = _get(fc, "state_dict_type")
            if isinstance(value, str) and value.upper() == "LOCAL_STATE_DICT":
                yield acc, ("fsdp_config", key), "FSDP2 does not support LOCAL_STATE_DICT: the plugin raises ValueError (use SHARDED_STATE_DICT or FULL_STATE_DICT)", ERROR
        else:
            key, value = _get(fc, "activation_checkpointing_offload")
            if _on(value):
                yield acc, ("fsdp_config", key), "activation_checkpointing_offload requires fsdp_version 2: the plugin raises ValueError under FSDP1", ERROR


@rule("fsdp-with-deepspeed", ERROR, "an FSDP accelerate config used together with DeepSpeed settings")
def fsdp_with_deepspeed(setup):
    """
    accelerate runs one of FSDP or DeepSpeed. With `distributed_type: FSDP`, `accelerate launch`
    copies a `deepspeed_config` section onto its arguments but never turns DeepSpeed on, so the
    ZeRO settings there are silently ignored. A trainer YAML of the same setup that names a
    DeepSpeed file (`deepspeed:`) makes the HF Trainer switch DeepSpeed on, and AcceleratorState
    checks DeepSpeed before FSDP: the run uses ZeRO and the whole fsdp_config is silently unused.
    """
    for acc, _, _ in _fsdp_setups(setup):
        section = acc.data.get("deepspeed_config")
        if isinstance(section, dict) and section:
            yield acc, ("deepspeed_config",), "deepspeed_config under distributed_type FSDP is silently ignored: accelerate launch only enables DeepSpeed for distributed_type DEEPSPEED"
        for _, cfg in _trainers(setup):
            if cfg.data.get("deepspeed") not in (None, "", False):
                yield cfg, ("deepspeed",), (f"deepspeed: {cfg.data['deepspeed']} with the FSDP accelerate config {os.path.basename(acc.path)}: the Trainer enables DeepSpeed, "
                                            "which accelerate picks before FSDP, so the fsdp_config is silently unused; drop one of them")


@rule("fsdp-cpu-ram-loading", ERROR, "fsdp_cpu_ram_efficient_loading without fsdp_sync_module_states")
def fsdp_cpu_ram_loading(setup):
    """
    With cpu_ram_efficient_loading only rank 0 loads the checkpoint; the others hold empty
    weights until FSDP broadcasts rank 0's with sync_module_states. `accelerate launch`
    (utils/launch.py prepare_multi_gpu_env, used for every FSDP launch) raises ValueError when
    cpu_ram_efficient_loading is on and sync_module_states is off, whatever fsdp_version says.
    Both default to true in the launch parser, so a config that leaves sync_module_states out is
    fine; writing `false` is the mistake. (A plugin built in Python under FSDP1 instead forces
    sync_module_states on with a warning.)
    """
    for acc, fc, _ in _fsdp_setups(setup):
        ram_key, ram = _get(fc, "cpu_ram_efficient_loading")
        sync_key, sync = _get(fc, "sync_module_states")
        if sync_key is not None and _off(sync) and not _off(ram):
            said = f"{ram_key}: {ram}" if ram_key else "fsdp_cpu_ram_efficient_loading (launch default true)"
            yield acc, ("fsdp_config", sync_key), f"{sync_key}: false with {said}: accelerate launch raises ValueError (set {sync_key}: true or turn cpu_ram_efficient_loading off)"


def _trl_dtype(cfg):
    for key in ("dtype", "torch_dtype"):
        if key in cfg.data:
            return key, cfg.data[key]
    return None, "float32"  # trl ModelConfig.dtype default


@rule("fsdp-qlora-dtype", ERROR, "QLoRA under FSDP1 with a quant storage dtype unlike the model dtype")
def fsdp_qlora_dtype(setup):
    """
    FSDP1 flattens each wrapped unit's parameters into one flat parameter and refuses mixed
    dtypes (torch/distributed/fsdp/_flat_param.py: "Must flatten tensors with uniform dtype").
    4-bit bitsandbytes weights are stored as `bnb_4bit_quant_storage` (uint8 when unset) while
    the rest of the model loads as `dtype`/`torch_dtype` (TRL's default float32), so TRL's
    `load_in_4bit` under FSDP1 needs bnb_4bit_quant_storage equal to the model dtype.
    LLaMA-Factory sets quant storage to the compute dtype itself (quantization.py, "crucial for
    fsdp+qlora") and is not flagged; a dtype of "auto" cannot be judged and is not flagged.
    """
    fsdp1 = [acc for acc, _, version in _fsdp_setups(setup) if version == 1]
    if not fsdp1:
        return
    for kind, cfg in _trainers(setup):
        if kind != "trl" or not _on(cfg.data.get("load_in_4bit")):
            continue
        dkey, dtype = _trl_dtype(cfg)
        storage = cfg.data.get("bnb_4bit_quant_storage")
        if dtype == "auto" or storage == dtype:
            continue
        where = ("bnb_4bit_quant_storage",) if storage is not None else (dkey,) if dkey else ("load_in_4bit",)
        yield cfg, where, (f"QLoRA under FSDP1 ({os.path.basename(fsdp1[0].path)}) with bnb_4bit_quant_storage {storage or 'unset (uint8)'} and model dtype {dtype}: "
                           f"FSDP1 raises 'Must flatten tensors with uniform dtype'; set bnb_4bit_quant_storage: {dtype}")


def _model_type(setup):
    """model_type of the trainer's model when the catalog knows it by name; else None (no guesses)."""
    from ..memory import catalog

    for _, cfg in _trainers(setup):
        name = cfg.data.get("model_name_or_path")
        if not isinstance(name, str) or os.path.exists(name):
            continue
        try:
            shape = catalog.model(name)
        except KeyError:
            continue
        # A multimodal model also holds its vision tower's blocks, which a wrap list may name.
        if getattr(shape, "vision", None) is None:
            return shape.model_type, name
    return None, None


@rule("fsdp-wrap-class", ERROR, "fsdp_transformer_layer_cls_to_wrap names a class the model lacks")
def fsdp_wrap_class(setup):
    """
    With TRANSFORMER_BASED_WRAP accelerate looks each named class up in the model and raises
    ValueError "Could not find the transformer layer class ... in the model" when one is
    missing (utils/dataclasses.py set_auto_wrap_policy, utils/fsdp_utils.py for FSDP2). Judged
    only when the trainer's model_name_or_path is a text model the catalog knows (its
    model_type gives the decoder layer class: Qwen2DecoderLayer, LlamaDecoderLayer, ...);
    otherwise the rule stays silent.
    """
    mtype, name = _model_type(setup)
    expected = _LAYER_CLASS.get(mtype)
    if expected is None:
        return
    for acc, fc, _ in _fsdp_setups(setup):
        key, value = _get(fc, "transformer_layer_cls_to_wrap")
        if not isinstance(value, str):
            continue
        if _get(fc, "auto_wrap_policy")[1] != "TRANSFORMER_BASED_WRAP":
            continue  # the class list is only read by the transformer-based policy
        wrong = [c.strip() for c in value.split(",") if c.strip() and c.strip() != expected]
        if wrong:
            yield acc, ("fsdp_config", key), (f"{', '.join(wrong)} is not a layer class of {name} (model_type {mtype}, layers are {expected}): "
                                              "accelerate raises ValueError 'Could not find the transformer layer class'")
