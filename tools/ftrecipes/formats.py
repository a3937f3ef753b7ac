"""The file formats ftrecipes renders and lints, and how a value is written in each.

Templates never build syntax out of values: every ``{{ expr }}`` goes through the
format's ``emit`` function, so a value is always data in the output (a string with
``{{`` or a quote in it comes out as a quoted literal, not as template or shell code).
"""

import json
import re
import shlex
from dataclasses import dataclass

import yaml


class Raw(str):
    """Text produced by one of our own filters (e.g. a whole JSON document): written as is.

    Only filters create Raw; a value from --set or recipe.yaml is a plain str and
    is always escaped by the format's writer.
    """


def json_document(value):
    return Raw(json.dumps(value, indent=2, ensure_ascii=False))


def _emit_json(value):
    return value if isinstance(value, Raw) else json.dumps(value, ensure_ascii=False)


# Characters YAML reads as line breaks (folded inside a quoted scalar, so the value would change).
_YAML_BREAKS = "\r\n\x85\u2028\u2029"


def yaml_quoted(value):
    """A one-line YAML flow value from JSON text (JSON is YAML), with the characters YAML reads as
    line breaks or refuses raw (NEL, LS, PS, C1 controls, BOM, surrogates) written as escapes."""
    out = []
    for ch in json.dumps(value, ensure_ascii=False):
        o = ord(ch)
        if ch in "\x85\u2028\u2029\ufeff" or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF or o in (0xFFFE, 0xFFFF):
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _has_breaks(value):
    if isinstance(value, str):
        return any(c in value for c in _YAML_BREAKS)
    if isinstance(value, dict):
        return any(_has_breaks(k) or _has_breaks(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_breaks(v) for v in value)
    return False


def _emit_yaml(value):
    if isinstance(value, Raw):
        return value
    if value is None:
        return "null"
    if isinstance(value, str) and value == "":
        return "''"
    if _has_breaks(value):
        # PyYAML's emitter writes these raw inside a quoted scalar (a lone NEL comes back as a space).
        return yaml_quoted(value)
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000, sort_keys=False)
    text = text.removesuffix("\n...\n").removesuffix("\n")
    if "\n" in text:
        # A multi-line scalar written inline would need indentation we can't know here;
        # a JSON string is a valid one-line YAML double-quoted scalar.
        return yaml_quoted(value)
    return text


SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+$")


def _emit_shell(value):
    if isinstance(value, Raw):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    if value is None:
        return "''"
    if isinstance(value, (list, tuple)):
        return " ".join(_emit_shell(v) for v in value)
    text = str(value)
    if "\x00" in text:
        raise ValueError(f"value {text!r} contains a NUL character, which no shell word can hold")
    return text if SAFE_WORD.match(text) else shlex.quote(text)


def _emit_text(value):
    if isinstance(value, Raw):
        return value
    # Hostfiles and similar plain lists: a value may not break the line structure.
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"value {text!r} contains a newline")
    return text


@dataclass(frozen=True)
class Format:
    name: str  # kind id used by recipe.yaml `format:` and lint --kind
    syntax: str  # json | yaml | shell | text
    schema: str | None  # schemas/<file>, None when there is nothing to validate
    description: str
    unknown_note: str = ""  # what the framework does with a key it doesn't know
    drops_unknown: bool = False  # the framework drops unknown top-level keys instead of refusing the file
    # Key histories (schemas/key_history/) that define this format's keys: "framework:section",
    # "*" for every section, "<path>" for the section named by the enclosing mapping's dotted
    # path, "@parent" for the keys of a nested mapping only.
    histories: tuple = ()

    @property
    def emit(self):
        return {"json": _emit_json, "yaml": _emit_yaml, "shell": _emit_shell, "text": _emit_text}[self.syntax]

    @property
    def comment(self):
        return None if self.syntax == "json" else "#"


FORMATS = {
    f.name: f
    for f in (
        Format("deepspeed", "json", "deepspeed.schema.json", "DeepSpeed config JSON", "DeepSpeed ignores it silently", True,
               histories=("deepspeed:<path>",)),
        Format("accelerate", "yaml", "accelerate.schema.json", "accelerate config YAML", "accelerate refuses to load the file",
               histories=("accelerate:ClusterConfig", "accelerate:launch@deepspeed_config", "accelerate:launch@fsdp_config",
                          "accelerate:launch@megatron_lm_config")),
        Format("trl", "yaml", "trl.schema.json", "TRL trainer config YAML (trl CLI / TrlParser)", "TrlParser stops with an error",
               # The classes the trl CLI's commands parse (as in trl.schema.json), not every TRL class.
               histories=("transformers:TrainingArguments", *(f"trl:{c}" for c in (
                   "SFTConfig", "DPOConfig", "GRPOConfig", "KTOConfig", "RewardConfig", "RLOOConfig", "DistillationConfig",
                   "ModelConfig", "ScriptArguments", "DatasetMixtureConfig", "GRPOScriptArguments", "RLOOScriptArguments")))),
        Format("llamafactory", "yaml", "llamafactory.schema.json", "LLaMA-Factory training YAML", "LLaMA-Factory stops with an error",
               histories=("transformers:Seq2SeqTrainingArguments", "llamafactory:*")),
        Format("openrlhf", "shell", "openrlhf.schema.json", "launch script running an OpenRLHF trainer", "argparse stops with 'unrecognized arguments'",
               histories=("openrlhf:*",)),
        # Key names only (axolotl's models read from its source): values are not checked yet.
        Format("axolotl", "yaml", "axolotl.schema.json", "axolotl training YAML", "axolotl drops it silently", True),
        Format("shell", "shell", None, "launch script"),
        Format("hostfile", "text", None, "DeepSpeed hostfile"),
    )
}


def get(name):
    return FORMATS[name]
