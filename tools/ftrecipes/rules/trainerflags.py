"""Trainer flags on a script's command line that today's transformers no longer has."""

from .. import formats, schemas, versions
from . import ERROR, WARNING, rule
from .facts import commands, launcher_of
from .versions import config_versions

# Flags every HF-Trainer script accepts (TrainingArguments): their presence says the script parses
# its command line with HfArgumentParser(..., TrainingArguments).
_TRAINER_MARKERS = ("output_dir", "per_device_train_batch_size", "deepspeed", "gradient_accumulation_steps")


def _removed():
    """{key: why} for the TrainingArguments keys trl.schema.json marks removed (`not: {}`), and the
    ones the key history of transformers saw leave TrainingArguments.

    TRL's own ModelConfig removals (`torch_dtype`) are left out: a custom script's ModelArguments
    often defines such a field itself."""
    props = schemas.load_schema("trl.schema.json").get("properties", {})
    out = {k: v.get("description", "removed") for k, v in props.items()
           if isinstance(v, dict) and v.get("not") == {} and not str(v.get("description", "")).startswith("ModelConfig")}
    # Every other field the key history saw in TrainingArguments and today's release lacks
    # (FastChat's --fsdp_transformer_layer_cls_to_wrap, --per_gpu_train_batch_size, --logging_dir).
    h = versions.key_history("transformers")
    if h is not None:
        sections = h.select("TrainingArguments")
        for key in h.by_key:
            last = max((b for _, b in h.spans(key, sections)), default=None)
            if last is not None and key not in out and last < h.newest:
                out[key] = f"a TrainingArguments field up to transformers {last}, gone from {h.after(last)} on."
    return out


def _at_version(name, why, version):
    """(severity, message) for a flag today's transformers removed, at the transformers version
    in use (--framework-version, else the repository's pin; None: today's release).

    The schema was made from one 5.x release and cannot judge a 4.x script: the key history of
    TrainingArguments (schemas/key_history/transformers.json) can. A flag the release in use has
    is a warning (an upgrade breaks the script), as version-skew words it; a release older than
    every one read is a warning that says so; otherwise the flag fails at start-up: an error."""
    h = versions.key_history("transformers")
    # Named because a loose range (FastChat's transformers>=4.31.0) hides which release refuses it.
    shown = version or (str(h.newest) if h is not None else None)
    why = why.rstrip(".")
    error = (ERROR, f"--{name}: {why}; " + (f"transformers {shown}, the release in use, has no such field and " if shown else "")
                    + "HfArgumentParser refuses flags no dataclass defines")
    if version is None or h is None:
        return error
    at = h.sample_for(version)
    spans = h.spans(name, h.select("TrainingArguments"))
    if at is None:
        first = h.releases[0]
        gone = "" if any(a == first for a, _ in spans) else f"not in transformers {first}; "
        return (WARNING, f"--{name}: {gone}{why}; not judged at the transformers in use ({version}), older than every "
                         f"release the key history read ({first}): today's release refuses it")
    inside = [b for a, b in spans if a <= at <= b]
    if not inside:
        return error
    return (WARNING, f"--{name}: valid in transformers {version}, not in transformers {h.after(max(inside))} or later: {why}")


@rule("removed-trainer-flag", ERROR, "a TrainingArguments flag transformers removed, passed to a training script")
def removed_trainer_flag(setup):
    """
    Custom training scripts (QwenLM/Qwen's and MiniCPM-V's finetune.py, most in-house ones) read
    their flags with `HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))`.
    When a flag names a TrainingArguments field that transformers has removed
    (`--evaluation_strategy`, renamed `--eval_strategy`; `--no_cuda`; `--overwrite_output_dir`),
    `parse_args_into_dataclasses` raises "Some specified arguments are not used by the
    HfArgumentParser" at start-up. Checked on commands that run a Python script with at least
    one TrainingArguments flag, at the transformers version in use: `--framework-version`,
    else the one the repository pins (as version-skew), else the release trl.schema.json was
    made from. A flag the version in use still has is a warning: an upgrade breaks the script.
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
        if formats.unchecked_owner({name for _, name in flags}):
            continue  # a trainer whose own argument classes lint does not know (formats.UNCHECKED)
        if removed is None:
            removed = _removed()
        version = config_versions(cfg, setup.options).get("transformers")
        own = cfg.script_keys.get(i, ())
        for j, name in flags:
            if name in removed and name not in own:
                severity, message = _at_version(name, removed[name], version)
                yield cfg, ("command", i, j), message, severity
