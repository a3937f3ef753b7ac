"""Trainer flags on a script's command line that today's transformers no longer has."""

from .. import schemas, versions
from . import ERROR, rule
from .facts import commands, launcher_of

# Flags every HF-Trainer script accepts (TrainingArguments): their presence says the script parses
# its command line with HfArgumentParser(..., TrainingArguments).
_TRAINER_MARKERS = ("output_dir", "per_device_train_batch_size", "deepspeed", "gradient_accumulation_steps")


def _removed():
    """{key: why} for the TrainingArguments keys trl.schema.json marks removed (`not: {}`).

    TRL's own ModelConfig removals (`torch_dtype`) are left out: a custom script's ModelArguments
    often defines such a field itself."""
    props = schemas.load_schema("trl.schema.json").get("properties", {})
    return {k: v.get("description", "removed") for k, v in props.items()
            if isinstance(v, dict) and v.get("not") == {} and not str(v.get("description", "")).startswith("ModelConfig")}


def _valid_at_named_version(setup):
    """Keys the transformers history (schemas/versions.json) finds no error in at the version the
    user named with --framework-version transformers=X: the schema, made from one 5.x release,
    cannot judge them there (--warmup_ratio is right for a transformers 4.x script)."""
    version = setup.options.framework_versions.get("transformers")
    h = versions.history("transformers")
    if version is None or h is None:
        return set()
    return {k for k in h.tracked() if not any(sev == "error" for sev, _ in h.problems(k, version))}


@rule("removed-trainer-flag", ERROR, "a TrainingArguments flag transformers removed, passed to a training script")
def removed_trainer_flag(setup):
    """
    Custom training scripts (QwenLM/Qwen's and MiniCPM-V's finetune.py, most in-house ones) read
    their flags with `HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))`.
    When a flag names a TrainingArguments field that transformers has removed
    (`--evaluation_strategy`, renamed `--eval_strategy`; `--no_cuda`; `--overwrite_output_dir`),
    `parse_args_into_dataclasses` raises "Some specified arguments are not used by the
    HfArgumentParser" at start-up. Checked on commands that run a Python script with at least
    one TrainingArguments flag, against the transformers release trl.schema.json was made from.
    """
    removed = None
    for cfg, i, cmd in commands(setup):
        runs_python = launcher_of(cmd) in ("torchrun", "deepspeed", "accelerate") or (bool(cmd.words) and cmd.words[0].rsplit("/", 1)[-1].startswith("python"))
        if not runs_python:
            continue
        script = next((j for j, w in enumerate(cmd.words) if w.endswith(".py")), None)
        if script is None:
            continue
        flags = [(j, w[2:].split("=", 1)[0]) for j, w in enumerate(cmd.words) if j > script and w.startswith("--")]
        if not any(name in _TRAINER_MARKERS for _, name in flags):
            continue
        if removed is None:
            valid = _valid_at_named_version(setup)
            removed = {k: v for k, v in _removed().items() if k not in valid}
        for j, name in flags:
            if name in removed:
                yield cfg, ("command", i, j), f"--{name}: {removed[name]} (HfArgumentParser refuses flags no dataclass defines)"
