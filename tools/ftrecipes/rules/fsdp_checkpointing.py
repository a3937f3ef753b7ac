"""FSDP's activation checkpointing and the Trainer's, both on: refused at start-up.

Facts: transformers 5.23 trainer.py (Trainer.create_accelerator_and_postprocess) and 4.57.6
(same check, older wording) raise ValueError when the accelerate FSDP plugin has
activation_checkpointing and the training arguments have gradient/activation checkpointing;
TRL's configs turn the latter on by default (trl/trainer/base_config.py, TRL 1.16).
"""

from . import ERROR, rule
from .fsdp import _fsdp_setups, _get, _on

# transformers 5.23 renamed gradient_checkpointing to activation_checkpointing (old name: alias)
_TRAINER_KEYS = ("activation_checkpointing", "gradient_checkpointing")


@rule("fsdp-checkpointing-twice", ERROR, "FSDP's activation checkpointing and the Trainer's both on")
def fsdp_checkpointing_twice(setup):
    """
    An accelerate FSDP config with `fsdp_activation_checkpointing: true` and a TRL trainer config
    whose gradient checkpointing is on - written as `activation_checkpointing: true` /
    `gradient_checkpointing: true`, or left out, since TRL's configs default it to true. The
    Trainer refuses the pair when it builds its Accelerator: "fsdp_config['activation_checkpointing']
    ... and the activation_checkpointing training argument can't both be set to True"
    (transformers 5.23; 4.57 raises the same). Keep FSDP's (accelerate wraps each layer in a
    CheckpointWrapper before sharding it) and write `activation_checkpointing: false` in the TRL
    file. Recipe llama8b-full-h100x8 is built around this.
    """
    for acc, fc, _ in _fsdp_setups(setup):
        ac_key, ac = _get(fc, "activation_checkpointing")
        if not _on(ac):
            continue
        for cfg in setup.of("trl"):
            data = cfg.data if isinstance(cfg.data, dict) else {}
            key = next((k for k in _TRAINER_KEYS if k in data), None)
            value = data[key] if key else True
            if not _on(value):
                continue
            refusal = ("the Trainer raises ValueError at start-up (transformers refuses FSDP's and its own "
                       "activation checkpointing together)")
            if key:
                yield cfg, (key,), f"{key}: {str(value).lower()} while {acc.path} sets {ac_key}: true: {refusal}; set {key}: false"
            else:
                yield acc, ("fsdp_config", ac_key), (f"{ac_key}: true while {cfg.path} leaves gradient checkpointing at "
                                                     f"TRL's default (on): {refusal}; write activation_checkpointing: false there")
