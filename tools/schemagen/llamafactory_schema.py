"""Generate schemas/llamafactory.schema.json from LLaMA-Factory's hparams dataclasses.

    /tmp/scratch-schemas/lf/bin/python tools/schemagen/llamafactory_schema.py

Venv: /tmp/scratch-schemas/lf (torch==2.13.0, then `pip install --no-deps llamafactory==0.9.5` plus
transformers==5.6.0 peft==0.18.1 accelerate==1.11.0 trl==0.24.0 datasets<=4.0.0 omegaconf: only what
`import llamafactory.hparams` needs; no torchvision/torchaudio).

`llamafactory-cli train x.yaml` loads the YAML with OmegaConf and calls HfArgumentParser.parse_dict on
(ModelArguments, DataArguments, TrainingArguments, FinetuningArguments, GeneratingArguments): unknown keys
raise (unless ALLOW_EXTRA_ARGS=1), but values are passed to the dataclasses unchecked, so a Literal such as
`stage: dpoo` is not rejected by LLaMA-Factory itself. Here every Literal/Enum becomes an `enum`.
The chat/export (infer) and eval commands use subsets (+ EvaluationArguments); `x-commands` records them.
"""
import dataclasses
import pathlib
import sys
import typing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import transformers  # noqa: E402
import llamafactory  # noqa: E402
from llamafactory.hparams import (  # noqa: E402
    DataArguments, FinetuningArguments, GeneratingArguments, ModelArguments, TrainingArguments)
from llamafactory.hparams.evaluation_args import EvaluationArguments  # noqa: E402
from llamafactory.hparams import parser as lf_parser  # noqa: E402

from common import closed_object, jsonable_default, short, type_schema, write  # noqa: E402

COMMANDS = {
    "train": lf_parser._TRAIN_ARGS,
    "chat/export/webchat": lf_parser._INFER_ARGS,
    "eval": lf_parser._EVAL_ARGS,
}
# str fields LLaMA-Factory splits on commas in __post_init__ (split_arg): a YAML list works as well.
COMMA_LISTS = {"additional_target", "apollo_target", "dataset", "eval_dataset", "freeze_extra_modules",
               "freeze_trainable_modules", "galore_target", "interleave_probs", "lora_target", "oft_target"}


def field_schema(name, hint):
    s = type_schema(hint)
    if name in COMMA_LISTS:
        item = {"type": "number"} if name == "interleave_probs" else {"type": "string"}
        s = {"anyOf": [s, {"type": "array", "items": item}]}
    return s


def build():
    props, commands, owners, defaults = {}, {}, {}, {}
    for cmd, classes in COMMANDS.items():
        for cls in classes:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                if not f.init:
                    continue
                if f.name not in props:
                    s = field_schema(f.name, hints[f.name])
                    s["description"] = short(f.metadata.get("help") or f.name.replace("_", " "))
                    props[f.name] = s
                    d = jsonable_default(f)
                    if d is not dataclasses.MISSING:
                        defaults[f.name] = d
                commands.setdefault(f.name, [])
                if cmd not in commands[f.name]:
                    commands[f.name].append(cmd)
                owners.setdefault(f.name, [])
                if cls.__name__ not in owners[f.name]:
                    owners[f.name].append(cls.__name__)
    for name, s in props.items():
        if name in defaults:
            s["default"] = defaults[name]
        s["x-commands"] = commands[name]
        s["x-source"] = owners[name]
        if commands[name] == ["eval"]:
            s["description"] = short(s["description"], 360) + " [llamafactory-cli eval only]"
    # Widely used spelling mistakes / removed keys get a pointer instead of a bare "unexpected".
    return closed_object("llamafactory.schema.json", "LLaMA-Factory config (llamafactory-cli YAML)",
                    f"YAML for `llamafactory-cli train|chat|export|eval config.yaml`, generated from llamafactory {llamafactory.__version__} "
                    f"(transformers {transformers.__version__}) by tools/schemagen/llamafactory_schema.py from ModelArguments, "
                    "DataArguments, TrainingArguments (Seq2SeqTrainingArguments), FinetuningArguments, GeneratingArguments "
                    "and EvaluationArguments. Literal choices are enforced here (LLaMA-Factory's dict parsing does not check them).",
                         {"name": "llamafactory", "version": llamafactory.__version__, "transformers": transformers.__version__},
                         props)


if __name__ == "__main__":
    write(build(), "llamafactory.schema.json")
