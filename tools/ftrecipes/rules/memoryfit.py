"""memory-fit: the memory model's verdict on a linted setup, when the hardware is known."""

from ..errors import UserError
from . import ERROR, WARNING, rule
from ..memory.inputs import DEEPSPEED_FIELDS, check_fields
from .facts import commands, count, ds_configs, world_sizes

_MODEL_KEYS = ("model_name_or_path", "pretrain", "model.model_name_or_path", "model")
_SEQ_KEYS = ("max_length", "cutoff_len", "model_max_length", "max_seq_length", "data.max_len", "max_len", "vllm_max_model_length")


def _lookup(setup, keys):
    """First value for any of keys in trainer configs, OpenRLHF flags or launch-script flags."""
    for kind in ("trl", "llamafactory", "openrlhf"):
        for cfg in setup.of(kind):
            if isinstance(cfg.data, dict):
                for k in keys:
                    if cfg.data.get(k) not in (None, True):
                        return cfg.data[k]
    for _, _, cmd in commands(setup):
        for j, w in enumerate(cmd.words[:-1]):
            if w.startswith("--") and w[2:] in keys:
                return cmd.words[j + 1]
    return None


def _flag_on(setup, keys):
    for kind in ("trl", "llamafactory", "openrlhf"):
        for cfg in setup.of(kind):
            if isinstance(cfg.data, dict) and any(cfg.data.get(k) in (True, "true", "True") for k in keys):
                return True
    for _, _, cmd in commands(setup):
        for j, w in enumerate(cmd.words):
            if w.startswith("--") and w[2:] in keys:
                nxt = cmd.words[j + 1] if j + 1 < len(cmd.words) else "--"
                if nxt.startswith("--") or nxt.lower() in ("true", "1"):
                    return True
    return False


def _lora_rank(setup):
    for cfg in setup.of("trl"):
        if isinstance(cfg.data, dict) and cfg.data.get("use_peft") is True:
            return count(cfg.data.get("lora_r", 16)) or 0
    for cfg in setup.of("llamafactory"):
        if isinstance(cfg.data, dict) and cfg.data.get("finetuning_type") == "lora":
            return count(cfg.data.get("lora_rank", 8)) or 0
    rank = _lookup(setup, ("lora_r", "lora_rank", "lora.rank"))
    use = _flag_on(setup, ("use_lora",)) or setup.of("openrlhf")
    return (count(rank) or 0) if use else 0


@rule("memory-fit", ERROR, "the memory model says the setup does not fit the GPUs")
def memory_fit(setup):
    """
    With `--gpu` (and the world size from the launch files or `--gpus`), lint runs the memory
    model (`ftrecipes estimate`) on the DeepSpeed config and the trainer settings it finds:
    model (by name from the catalog, or a local config.json), sequence length, micro batch,
    gradient checkpointing, LoRA. An out-of-memory verdict is an error naming the phase and the
    cheapest remedy that fits; under 10 % headroom is a warning. Setups whose model the
    catalog does not know are not judged (no guesses).
    """
    if not setup.options.gpu:
        return
    from ..memory import estimate_from_config

    model = _lookup(setup, _MODEL_KEYS)
    if not isinstance(model, str):
        return
    worlds = world_sizes(setup)
    gpus = worlds[0].value if worlds and len({f.value for f in worlds}) == 1 else setup.options.gpus
    gpus = count(gpus, minimum=1)
    seq = count(_lookup(setup, _SEQ_KEYS), minimum=1)
    method = "sft"
    for cfg in setup.of("trl") + setup.of("llamafactory"):
        d = cfg.data if isinstance(cfg.data, dict) else {}
        if d.get("num_generations"):
            method = "grpo"
        if d.get("stage") == "dpo" or "beta" in d and "num_generations" not in d and d.get("loss_type") in ("sigmoid", "ipo"):
            method = "dpo"
    for cfg in setup.of("openrlhf"):
        if "train_dpo" in getattr(cfg.doc, "module", ""):
            method = "dpo"
    checkpointing = _flag_on(setup, ("gradient_checkpointing", "activation_checkpointing", "model.gradient_checkpointing_enable", "gradient_checkpointing_enable"))
    trainer = ""
    for cfg in setup.of("llamafactory"):
        trainer = "llamafactory"
        # LLaMA-Factory checkpoints by default; it has a switch to turn it off.
        if isinstance(cfg.data, dict) and not cfg.data.get("disable_gradient_checkpointing", False):
            checkpointing = True
    if setup.of("trl"):
        trainer = "trl"
    if setup.of("openrlhf"):
        trainer = "openrlhf"
    for ds in ds_configs(setup):
        try:
            check_fields(ds.doc, DEEPSPEED_FIELDS)  # values the estimate cannot use: the schema reports them
        except UserError:
            continue
        try:
            result = estimate_from_config(
                ds.data, model=model, gpu=setup.options.gpu, gpus=gpus or 1, seq_len=seq,
                gradient_checkpointing=checkpointing or None, trainer=trainer or None,
                lora_rank=_lora_rank(setup) or None, method=method,
            )
        except (KeyError, ValueError, TypeError, UserError):
            return  # a model the catalog does not know, or a config.json it cannot read: no guesses
        j = result.to_json()
        gib = 1024**3
        where = ("train_micro_batch_size_per_gpu",) if "train_micro_batch_size_per_gpu" in ds.data else ()
        seq_note = f"seq {seq}" if seq else "seq 2048 (assumed)"
        if j["verdict"] == "oom":
            fix = next((r["change"] for r in j.get("remedies") or [] if r.get("verdict") == "fits"), None)
            yield ds, where, (
                f"estimated GPU peak {j['gpu_peak_bytes'] / gib:.1f} GiB ({j['peak_phase']}) exceeds "
                f"{j['gpu_bytes'] / gib:.1f} GiB on {setup.options.gpu} ({model}, {gpus or 1} GPUs, {seq_note})"
                + (f"; cheapest fix: {fix}" if fix else "")
            )
        elif j["verdict"] == "tight":
            yield ds, where, (
                f"estimated GPU peak {j['gpu_peak_bytes'] / gib:.1f} of {j['gpu_bytes'] / gib:.1f} GiB on "
                f"{setup.options.gpu}: under 10 % headroom ({model}, {seq_note})"
            ), WARNING
