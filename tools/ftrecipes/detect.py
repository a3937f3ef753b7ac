"""Tell which kind of config a file is, from its content (the name is only a hint)."""

from pathlib import Path

# Keys that only one format uses; a document is of the kind whose markers it has most of.
_DEEPSPEED = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "zero_optimization", "fp16", "bf16", "optimizer", "scheduler", "gradient_clipping",
    "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "activation_checkpointing",
}
_ACCELERATE = {
    "compute_environment", "distributed_type", "num_processes", "num_machines", "machine_rank",
    "main_training_function", "deepspeed_config", "fsdp_config", "use_cpu", "rdzv_backend",
    "same_network", "main_process_ip", "main_process_port", "downcast_bf16", "tpu_env", "gpu_ids",
}
_LLAMAFACTORY = {
    "stage", "finetuning_type", "template", "cutoff_len", "dataset_dir", "lora_target",
    "pref_beta", "pref_loss", "preprocessing_num_workers", "overwrite_cache", "plot_loss",
    "val_size", "max_samples", "trust_remote_code", "quantization_bit",
}
_TRL = {
    "model_name_or_path", "output_dir", "per_device_train_batch_size", "learning_rate",
    "num_train_epochs", "num_generations", "max_completion_length", "use_vllm", "beta",
    "dataset_name", "use_peft", "lora_r", "gradient_accumulation_steps", "max_length",
    "reward_funcs", "vllm_mode", "loss_type", "bf16", "gradient_checkpointing", "logging_steps",
}

# axolotl's own vocabulary (axolotl/utils/schemas/config.py: AxolotlInputConfig). `base_model` is
# required there and is no other format's key; the rest are spellings only axolotl uses for
# settings the HF trainer names differently (sequence_len vs max_length, micro_batch_size vs
# per_device_train_batch_size, num_epochs vs num_train_epochs).
_AXOLOTL = {
    "base_model", "sequence_len", "micro_batch_size", "num_epochs", "sample_packing", "val_set_size",
    "dataset_prepared_path", "lora_target_linear", "lora_model_dir", "saves_per_epoch", "evals_per_epoch",
    "wandb_project", "wandb_watch", "wandb_log_model", "special_tokens", "tokenizer_type", "adapter",
    "pad_to_sequence_len", "eval_sample_packing", "load_in_4bit", "load_in_8bit", "strict",
}

KINDS = ("deepspeed", "accelerate", "trl", "llamafactory", "openrlhf", "axolotl")
SUFFIX_SYNTAX = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".sh": "shell", ".bash": "shell"}


def syntax_of(path, text):
    suffix = Path(path).suffix.lower()
    if suffix in SUFFIX_SYNTAX:
        return SUFFIX_SYNTAX[suffix]
    stripped = text.lstrip()
    if stripped.startswith("#!") or "\ntorchrun " in text or "\ndeepspeed " in text:
        return "shell"
    if stripped.startswith("{"):
        return "json"
    return "yaml"


def kind_of(syntax, data, text):
    """The config kind of a parsed document, or None when it isn't one we know."""
    if syntax == "shell":
        return "openrlhf" if "openrlhf.cli." in text else None
    if not isinstance(data, dict):
        return None
    keys = set(data)
    if syntax == "json":
        return "deepspeed" if keys & _DEEPSPEED else None
    scores = {
        "axolotl": len(keys & _AXOLOTL) + (3 if "base_model" in keys else 0),
        "accelerate": len(keys & _ACCELERATE),
        "llamafactory": len(keys & _LLAMAFACTORY) + (3 if "stage" in keys and "finetuning_type" in keys else 0),
        "trl": len(keys & _TRL),
        "deepspeed": len(keys & {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}) * 2,
    }
    if "compute_environment" in keys or "distributed_type" in keys:
        return "accelerate"
    best = max(scores, key=lambda k: (scores[k], k))
    return best if scores[best] >= 2 else None
