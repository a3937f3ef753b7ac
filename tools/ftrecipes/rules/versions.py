"""Keys of another framework version: --framework-version NAME=VER checks names against it."""

from .. import versions
from . import ERROR, rule


@rule("framework-version", ERROR, "a key of another framework version than the one you run")
def framework_version(setup):
    """
    Frameworks rename and remove keys between releases, and a config written for one release
    fails (or is silently ignored) under another. Given `--framework-version NAME=VER`
    (repeatable), lint checks every key that schemas/versions.json tracks for NAME against
    VER:

    - a key retired before VER is an error naming its replacement (OpenRLHF: "--flash_attn
      was replaced by --attn_implementation in openrlhf 0.8.10");
    - a key that only appears after VER is an error naming the spelling VER uses
      (`--ds.zero_stage` with openrlhf=0.9.2 -> `--zero_stage`);
    - a key deprecated at or before VER is a warning (transformers 5.23 `gradient_checkpointing`
      -> `activation_checkpointing`).

    Keys valid at VER that the format's schema (generated from another release) would call
    removed or unknown are not reported by the schema. Frameworks in the table: openrlhf
    (launch-script flags) and transformers (TrainingArguments keys in TRL and LLaMA-Factory
    files). Without --framework-version the schemas' own release applies.
    """
    fv = setup.options.framework_versions or {}
    if not fv:
        return
    for cfg in setup.configs:
        for key, severity, message in versions.key_problems(cfg.data, cfg.kind, fv):
            yield cfg, (key,), message, severity
