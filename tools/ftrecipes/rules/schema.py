"""Docs for the findings that come from the schemas and the parsers."""

from . import ERROR, WARNING, document

document("unknown-key", ERROR, "a key the framework does not know", """
    The key is not one the framework reads at this place, and the message says what the
    framework's own parser does with it there (formats.FORMATS, checked against the real
    parsers by tests/test_parse_behaviour.py). DeepSpeed silently ignores unknown top-level
    keys (DeepSpeed#653, #1809): a misspelled `train_micro_batch_size_per_gpus` leaves the real
    setting at its default and nothing tells you; inside its pydantic sections
    (`zero_optimization`, `bf16`, `fp16`, `compile`, the monitors …) the same typo raises at
    start-up. accelerate refuses unknown top-level keys but `accelerate launch` ignores unknown
    keys inside `deepspeed_config`, `fsdp_config` and its other sections. TRL, LLaMA-Factory and
    OpenRLHF refuse unknown keys at start-up, after the job has queued for a node; axolotl drops
    them. The message names the closest known key.
""")
document("wrong-type", ERROR, "a value of the wrong type", """
    The value's type is not one the framework accepts here (a string where a number is
    expected, an object where a boolean is). Some frameworks convert silently, others fail
    late; either way the file does not say what its author meant.
""")
document("bad-value", ERROR, "a value outside the allowed choices", """
    The value is not one of the choices the framework accepts (e.g. `stage: dpoo` in a
    LLaMA-Factory file, which its dict parser does not check).
""")
document("out-of-range", ERROR, "a number outside its range", """
    The number is outside the range the framework accepts (ZeRO stage 5, a negative batch
    size, a probability above 1).
""")
document("coerced-value", WARNING, "a value the framework's parser converts to the right type", """
    The value is written as another type than the field's (text "2" for a number, "true" for a
    boolean, 2.0 for an integer), and the framework's own parser converts it before checking it:
    DeepSpeed's pydantic sections in lax mode, TrlParser's argparse for a text value. The job
    runs as if the typed value were written; the message names the converter and the value to
    write. Where the parser cannot read the text, the finding stays a wrong-type/bad-value error.
""")
document("misread-value", ERROR, "a value the parser converts but another reader takes as written", """
    The framework's parser would convert the text, but another program reads the same key from
    the raw file: the HF Trainer and accelerate read a DeepSpeed config's `zero_optimization.stage`
    and `bf16`/`fp16.enabled` themselves (transformers' and accelerate's HfDeepSpeedConfig), so
    `"stage": "3"` is not ZeRO-3 there and `"enabled": "true"` fails the Trainer's match with its
    bf16/fp16 argument. The message names that reader and what it gets wrong.
""")
document("missing-key", ERROR, "a required key is missing", """
    The framework needs this key and has no default for it, so it stops at start-up (for
    example an accelerate config without `compute_environment`).
""")
document("removed-key", ERROR, "a key the framework version no longer has", """
    The key was removed or renamed in the framework version the schema describes; the
    message names the replacement (e.g. transformers 5 dropped `warmup_ratio`: a float
    below 1 in `warmup_steps` is a ratio).
""")
document("conflicting-key", ERROR, "a key the framework refuses next to another one", """
    Each key is valid alone, but the framework stops at start-up when both are set: accelerate's
    DeepSpeed plugin refuses `zero_stage`, the offload devices, `gradient_accumulation_steps`,
    `gradient_clipping`, `zero3_save_16bit_model` and a `mixed_precision` value in the config
    file when `deepspeed_config_file` is given (DeepSpeedPlugin._deepspeed_config_checks), since
    the DeepSpeed JSON says those things. The message names where the JSON sets each one.
""")
document("duplicate-key", ERROR, "a key written twice", """
    The same key appears twice in one mapping. DeepSpeed's JSON loader rejects the file;
    YAML loaders silently keep the last value, so the first one is dead text that readers
    still believe.
""")
document("schema", ERROR, "another schema violation", """
    The file breaks a constraint of its format's schema not covered by a more specific rule;
    the message quotes the constraint.
""")
document("unusable-input", ERROR, "a file that cannot be read or parsed", """
    The file is empty, binary, not UTF-8, malformed JSON/YAML (with line and column), too
    large to be a config, or of a kind lint cannot tell. Lint exits with status 2.
""")
