"""The file formats ftrecipes renders and lints, and how a value is written in each.

Templates never build syntax out of values: every ``{{ expr }}`` goes through the
format's ``emit`` function, so a value is always data in the output (a string with
``{{`` or a quote in it comes out as a quoted literal, not as template or shell code).
"""

import json
import math
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


def _flow_json(value):
    """JSON text of value whose floats a YAML 1.1 reader also takes as floats.

    json.dumps writes 1e-05, which PyYAML (what the frameworks load YAML with) reads as the
    string '1e-05': its float pattern wants a dot. A learning rate in a nested mapping would
    silently become a string.
    """
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        mantissa, e, exp = text.partition("e")
        return f"{mantissa}.0e{exp}" if e and "." not in mantissa else text
    if isinstance(value, dict):
        keys = (k if isinstance(k, str) else json.dumps(k) for k in value)
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_flow_json(v)}" for k, v in zip(keys, value.values())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def yaml_quoted(value):
    """A one-line YAML flow value from JSON text (JSON is YAML), with the characters YAML reads as
    line breaks or refuses raw (NEL, LS, PS, C1 controls, BOM, surrogates) written as escapes."""
    out = []
    for ch in _flow_json(value):
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


# What a framework's parser does with a key it does not know at one place in the file.
RAISES = "raises"  # the job stops at start-up (or the file is refused when loaded)
IGNORES = "ignores"  # parsed without a word and never used
LATER = "later"  # the parser takes it as written; the code that uses the value fails
ACTS_AS = "acts-as"  # the parser keeps it, and the run goes on as with a value the schema takes


@dataclass(frozen=True)
class Effect:
    kind: str  # RAISES | IGNORES | LATER
    text: str  # how a message states it, naming the code that reads the key


# The finding classes of a value the schema refuses (schemas.check's rule ids).
VALUE_RULES = frozenset({"wrong-type", "bad-value", "out-of-range"})
NOT_CONVERTED = object()
CONVERTIBLE = frozenset({"integer", "number", "boolean"})  # the field types a parser converts to
_TRUE_WORDS = {"pydantic": {"1", "on", "t", "true", "y", "yes"}, "string_to_bool": {"yes", "true", "t", "y", "1"}}
_FALSE_WORDS = {"pydantic": {"0", "off", "f", "false", "n", "no"}, "string_to_bool": {"no", "false", "f", "n", "0"}}
# pydantic-core reads "2", "+2", "2_000" and "2.0" as integers, not "2.5" or "1e3".
_PYDANTIC_INT = re.compile(r"([+-]?\d+(?:_\d+)*)(?:\.0*)?")


def _pydantic_lax(value, jtype):
    """What pydantic 2's lax mode makes of value for a field of JSON type jtype (probed on
    pydantic 2.14 in the trl stack; tests/test_parse_behaviour.py runs the real one)."""
    if isinstance(value, str):
        text = value.strip()
        if jtype == "integer":
            m = _PYDANTIC_INT.fullmatch(text)
            return int(m.group(1).replace("_", "")) if m else NOT_CONVERTED
        if jtype == "number":
            try:
                return float(text)
            except ValueError:
                return NOT_CONVERTED
        words = text.lower()
        return True if words in _TRUE_WORDS["pydantic"] else False if words in _FALSE_WORDS["pydantic"] else NOT_CONVERTED
    # pydantic alone reads True as 1, but DeepSpeed's fp16 section refuses a boolean for its loss
    # scale fields in before-validators (runtime/precision_config.py): no claim of a conversion.
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        if jtype == "integer" and float(value).is_integer():
            return int(value)
        if jtype == "boolean" and value in (0, 1):
            return bool(value)
    return NOT_CONVERTED


def _type_call(value, jtype):
    """What the field's type called on a text value makes of it: int(), float(), and for a
    boolean transformers' string_to_bool. HfArgumentParser's argparse does this to a text default
    (anything but text it keeps as it is), and so do DeepSpeed's fp16 before-validators."""
    if not isinstance(value, str):
        return NOT_CONVERTED
    if jtype == "boolean":
        low = value.lower()
        return True if low in _TRUE_WORDS["string_to_bool"] else False if low in _FALSE_WORDS["string_to_bool"] else NOT_CONVERTED
    try:
        return {"integer": int, "number": float}[jtype](value)
    except (KeyError, ValueError):
        return NOT_CONVERTED


_CONVERTERS = {"pydantic-lax": _pydantic_lax, "type-call": _type_call}


@dataclass(frozen=True)
class Conversion:
    """A parser that converts a value of another type into the field's type before it checks it."""

    how: str  # key of _CONVERTERS
    by: str  # who converts, for the message ("DeepSpeed's model of this section")

    def apply(self, value, types, accepts):
        """The value the parser makes of value for a field of the JSON types the schema names (in
        its order), when the schema accepts it; NOT_CONVERTED otherwise."""
        for jtype in types:
            if jtype in CONVERTIBLE:
                made = _CONVERTERS[self.how](value, jtype)
                if made is not NOT_CONVERTED and accepts(made):
                    return made
        return NOT_CONVERTED


@dataclass(frozen=True)
class ValueEffect:
    """What the parser does with a value the schema refuses, at a key path prefix."""

    at: tuple  # key path prefix; the longest matching entry wins
    effect: Effect  # what happens to a value the parser does not convert
    rules: frozenset = VALUE_RULES  # the finding classes it speaks for
    # True: only for a value written as text (argparse converts text defaults and nothing else);
    # False: only for any other value; None: either.
    text: bool | None = None
    # The parser converts what it can read into the field's type first: such a value is not an
    # error (a coerced-value warning) unless another reader of the file takes it as written.
    convert: Conversion | None = None
    # True: for the keys under `at` only, not for `at` itself (DeepSpeed builds a section's model
    # from a mapping: `"zero_optimization": 1` raises a TypeError, nothing converts it).
    under: bool = False


@dataclass(frozen=True)
class ValueVerdict:
    """What happens to one value the schema refuses (Format.value_verdict)."""

    note: str = ""  # the parser's effect on a value it does not convert; '' where the table makes no claim
    converted: object = NOT_CONVERTED  # what the parser makes of it
    by: str = ""  # who converts it
    written: str = ""  # the converted value as the file's syntax writes it
    misread: str = ""  # who else reads it as written, and what goes wrong there
    acts_as: bool = False  # the run goes on as with an accepted value (a warning, not an error)

    @property
    def coerced(self):
        return self.converted is not NOT_CONVERTED


@dataclass(frozen=True)
class Misread:
    """A key whose raw value another program reads from the same file, before or beside the
    framework's parser: a value the parser would convert is taken as written there."""

    at: tuple  # the key's full path
    text: str  # who reads it and what goes wrong


@dataclass(frozen=True)
class Parsing:
    """How one framework reads unknown keys and wrong values, per section of its file.

    Verified against the real parsers by tests/frameworks/truth_parsing.py (one unknown key per
    section, and one wrong value per value-effect class, fed to DeepSpeedConfig,
    ClusterConfig.from_yaml_file, TrlParser, get_train_args, axolotl's AxolotlInputConfig).
    A section not listed here states no effect: no claim is better than a guessed one.
    """

    top: Effect  # unknown top-level keys
    sections: tuple = ()  # ((section path tuple, Effect), ...): the longest matching prefix wins
    # What the parser does with the placeholder "auto" (which only the HF Trainer / accelerate
    # integration fills) left at a key: ((key path prefix, Effect), ...).
    auto: tuple = ()
    # What the parser does with a wrong value: (ValueEffect, ...). Nothing listed: no claim.
    values: tuple = ()
    # Keys other programs read raw from the same file: (Misread, ...).
    misread: tuple = ()

    def unknown(self, path):
        """The Effect of an unknown key inside the mapping at path (() for the top level), or None."""
        path = tuple(path)
        return self.top if not path else _longest(self.sections, path)

    def sections_named(self):
        """The top-level names of the sections the table lists."""
        return {at[0] for at, _ in self.sections}

    def auto_value(self, path):
        """The Effect of "auto" as the value at path, or None where the table says nothing."""
        return _longest(self.auto, tuple(path))

    def value_entry(self, path, rule, value, types=None):
        """The ValueEffect for a value the schema refuses (finding class rule) at path, or None.
        types: the JSON types the schema wants there, when known; an entry that converts speaks
        only for a field of a type it converts to (argparse keeps text for a list of strings)."""
        path = tuple(path)
        fits = [v for v in self.values if path[:len(v.at)] == v.at and rule in v.rules
                and (v.text is None or v.text == isinstance(value, str))
                and (v.convert is None or types is None or bool(set(types) & CONVERTIBLE))
                and (not v.under or len(path) > len(v.at))]
        # The longest prefix wins; among equals, the entry listed first (max keeps the first).
        return max(fits, key=lambda v: len(v.at), default=None)

    def value(self, path, rule, value):
        """The Effect of a value the schema refuses and the parser does not convert, or None."""
        entry = self.value_entry(path, rule, value)
        return entry.effect if entry else None

    def misread_at(self, path):
        """The Misread of the key at path, or None."""
        return next((m for m in self.misread if m.at == tuple(path)), None)


def _longest(table, path):
    for n in range(len(path), 0, -1):
        for at, effect in table:
            if at == path[:n]:
                return effect
    return None


_DS_IGNORES = Effect(IGNORES, "DeepSpeed ignores it silently")
# deepspeed/runtime/config.py builds these sections as pydantic models with extra="forbid"
# (DeepSpeedConfigModel), so DeepSpeedConfig raises a ValidationError on an extra key.
_DS_RAISES = Effect(RAISES, "DeepSpeed raises at start-up, its model of this section forbids extra keys")
_DS_MODELS = ("bf16", "bfloat16", "fp16", "zero_optimization", "compile", "comms_logger", "hybrid_engine",
              "tensor_parallel", "weight_quantization", "tensorboard", "wandb", "comet", "csv_monitor")
# Read key by key (get_scalar_param and friends): anything else in them is never looked at.
_DS_DICTS = ("activation_checkpointing", "aio", "autotuning", "checkpoint", "data_efficiency", "data_types",
             "datastates_ckpt", "expert_parallel", "flops_profiler", "pipeline", "timers", "torch_autocast",
             "optimizer", "scheduler")
# "auto": the batch sizes are compared with numbers inside DeepSpeedConfig (TypeError);
# gradient_clipping and optimizer/scheduler params are kept as the string until the engine or
# the optimizer uses them (engine.py `self.gradient_clipping() > 0.0`, the optimizers' lr
# checks); DeepSpeedConfigModel.__init__ drops "auto" values, so its sections keep defaults.
_AUTO_RAISES = Effect(RAISES, "DeepSpeed raises a TypeError at start-up")
_AUTO_LATER = Effect(LATER, "DeepSpeed keeps the string and fails where it uses the number")
_AUTO_DROPPED = Effect(IGNORES, "DeepSpeed drops it and keeps the default")
# A wrong value: the pydantic sections validate in lax mode: what pydantic can read as the type
# ("2", "true", 2.0 for an integer, 1 for a boolean) is converted, the rest raises. The top level
# and the key-by-key sections are read with get_scalar_param, which checks nothing, so the value
# reaches the code that uses it.
_DS_VALUE_RAISES = Effect(RAISES, "DeepSpeed raises at start-up, its model of this section validates the value")
_DS_LAX = Conversion("pydantic-lax", "DeepSpeed's model of this section")
_DS_VALUE_LATER = Effect(LATER, "DeepSpeed reads it unchecked; the code that uses it gets the value as written")
# The HF integration (transformers/integrations/deepspeed.py, accelerate/utils/deepspeed.py
# HfDeepSpeedConfig, accelerate's DeepSpeedPlugin) reads these keys from the raw dict, so text
# DeepSpeed would convert is taken as written by the HF Trainer and accelerate.
_DS_MISREAD = (
    # is_zero3()/is_zero2() compare _stage == 3 / == 2; DeepSpeedPlugin copies the raw stage to
    # zero_stage, which Trainer, TRL's trainers and Accelerator.get_state_dict compare with 3 and
    # Accelerator.no_sync with `< 2`.
    Misread(("zero_optimization", "stage"),
            "the HF Trainer and accelerate read the raw value: HfDeepSpeedConfig.is_zero3() and Accelerator.get_state_dict "
            "compare it with 3 (text is never ZeRO-3 there: no zero.Init while the model loads, weights saved ungathered) "
            "and Accelerator.no_sync raises a TypeError comparing it with 2"),
    # HfTrainerDeepSpeedConfig.trainer_config_process: fill_match compares the raw value with
    # TrainingArguments' bf16/fp16 and trainer_config_finalize raises on any mismatch.
    *(Misread((s, "enabled"),
              f"the HF Trainer compares the raw value with its {s} argument (HfTrainerDeepSpeedConfig.fill_match) and "
              "stops with a ValueError listing the mismatch") for s in ("bf16", "fp16")),
)
DEEPSPEED_PARSING = Parsing(
    _DS_IGNORES,
    tuple(((s,), _DS_RAISES) for s in _DS_MODELS) + tuple(((s,), _DS_IGNORES) for s in _DS_DICTS),
    auto=tuple(((k,), _AUTO_RAISES) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    + tuple(((k,), _AUTO_LATER) for k in ("gradient_clipping", "optimizer", "scheduler"))
    + tuple(((s,), _AUTO_DROPPED) for s in _DS_MODELS),
    # Per section: its fields (listed first, so they win over the section's own value), then the
    # section's own value.
    values=(ValueEffect((), _DS_VALUE_LATER),)
    + tuple(e for s in _DS_MODELS for e in (ValueEffect((s,), _DS_VALUE_RAISES, convert=_DS_LAX, under=True),
                                            ValueEffect((s,), _DS_VALUE_RAISES)))
    + tuple(ValueEffect((s,), _DS_VALUE_LATER) for s in _DS_DICTS)
    # runtime/precision_config.py: before-validators call float()/int() on these and refuse a
    # boolean, so "2.0" for min_loss_scale raises where pydantic alone would read it.
    + tuple(ValueEffect(("fp16", k), _DS_VALUE_RAISES, convert=Conversion("type-call", _DS_LAX.by))
            for k in ("loss_scale", "loss_scale_window", "min_loss_scale")),
    misread=_DS_MISREAD,
)
# accelerate's ClusterConfig.from_yaml_file refuses unknown top-level keys; `accelerate launch`
# copies a section's keys onto its argument namespace, where a name no code reads stays unused.
_ACC_IGNORES = Effect(IGNORES, "accelerate launch ignores it silently")
_ACC_SECTIONS = ("deepspeed_config", "fsdp_config", "fp8_config", "megatron_lm_config", "dynamo_config",
                 "parallelism_config", "mpirun_config")
# Values: ClusterConfig.__post_init__ turns distributed_type and compute_environment into enums
# (ValueError); `accelerate launch` copies the sections' values onto its namespace unchecked.
# Other top-level keys differ key by key (num_processes "two" fails a comparison in launch, a
# mixed_precision "bf17" passes it): no claim for them.
# Only text is turned into the enum: YAML's `distributed_type: no` arrives as false, which
# ClusterConfig keeps, and `accelerate launch` (commands/launch.py), matching it with none of its
# launchers, runs one process as for NO (accelerate 1.15; Mantis's FSDP config runs so). A
# compute_environment that is not text is not LOCAL_MACHINE, so the file is read as a SageMaker
# config, which refuses the cluster keys (load_config_from_file): that one raises either way.
ACCELERATE_PARSING = Parsing(
    Effect(RAISES, "accelerate refuses to load the file"),
    tuple(((s,), _ACC_IGNORES) for s in _ACC_SECTIONS),
    values=(ValueEffect(("distributed_type",), Effect(ACTS_AS, "ClusterConfig turns only text into its enum; "
                                                               "accelerate launch then runs one process, as for NO"),
                        VALUE_RULES, text=False),)
    + tuple(ValueEffect((k,), Effect(RAISES, "accelerate refuses to load the file, ClusterConfig turns it into an enum"),
                        frozenset({"bad-value"})) for k in ("distributed_type", "compute_environment"))
    + tuple(ValueEffect((s,), Effect(LATER, "accelerate launch passes it on unchecked")) for s in _ACC_SECTIONS),
)
# TrainingArguments fields typed `SomeEnum | str`: __post_init__ converts them, so a name outside
# the enum raises ValueError under every parser (transformers/training_args.py).
_HF_ENUM_FIELDS = ("lr_scheduler_type", "optim", "eval_strategy", "save_strategy", "logging_strategy", "hub_strategy")
_HF_ENUM_RAISES = Effect(RAISES, "TrainingArguments raises at start-up, it turns the value into an enum")


def _hf_values(rest):
    return tuple(ValueEffect((k,), _HF_ENUM_RAISES, frozenset({"bad-value", "wrong-type"})) for k in _HF_ENUM_FIELDS) + rest


# TrlParser sets the YAML's values as argparse defaults; argparse converts a default written as
# text with the field's type (and stops when it cannot) but takes any other value as it is and
# never checks choices or bounds for a default.
TRL_PARSING = Parsing(
    Effect(RAISES, "TrlParser stops with an error"),
    values=_hf_values((
        ValueEffect((), Effect(RAISES, "TrlParser stops, argparse cannot read the text as the field's type"),
                    frozenset({"wrong-type"}), text=True, convert=Conversion("type-call", "TrlParser (argparse)")),
        ValueEffect((), Effect(LATER, "TrlParser takes it unchecked; the trainer gets the value as written"), text=None),
    )),
)
# get_train_args -> HfArgumentParser.parse_dict builds the dataclasses from the values as they are.
LLAMAFACTORY_PARSING = Parsing(
    Effect(RAISES, "LLaMA-Factory stops with an error"),
    values=_hf_values((ValueEffect((), Effect(LATER, "LLaMA-Factory takes it unchecked; the trainer gets the value as written")),)),
)
# validate_config builds AxolotlConfigWCapabilities from the YAML; a ValidationError stops the run.
AXOLOTL_PARSING = Parsing(
    Effect(IGNORES, "axolotl drops it silently"),
    values=(ValueEffect((), Effect(RAISES, "axolotl stops at start-up, its pydantic config model refuses the value")),),
)
# Flags on a command line: argparse converts with the flag's type and checks its choices.
OPENRLHF_PARSING = Parsing(
    Effect(RAISES, "argparse stops with 'unrecognized arguments'"),
    values=(ValueEffect((), Effect(RAISES, "argparse stops, the flag's type or choices refuse it"), frozenset({"wrong-type", "bad-value"})),),
)


LAST_WINS = "only the last value is used"


@dataclass(frozen=True)
class Detection:
    """How lint tells a document of this format from its keys (the file name is only a hint)."""

    markers: frozenset = frozenset()  # keys only this format uses: one point each
    together: tuple = ()  # keys that, all present, add 3 points (what the format requires)
    decisive: frozenset = frozenset()  # any one of these alone decides
    # The same format written in another syntax (a DeepSpeed config as YAML): (keys, points each).
    foreign: tuple = ()


@dataclass(frozen=True)
class Format:
    name: str  # kind id used by recipe.yaml `format:` and lint --kind
    syntax: str  # json | yaml | shell | text
    schema: str | None  # schemas/<file>, None when there is nothing to validate
    description: str
    parsing: Parsing | None = None  # what the framework does with keys it does not know
    # What the loader does with a key written twice: yaml.safe_load and argparse keep the last one.
    duplicate_note: str = LAST_WINS
    # Key histories (schemas/key_history/) that define this format's keys: "framework:section",
    # "*" for every section, "<path>" for the section named by the enclosing mapping's dotted
    # path, "@parent" for the keys of a nested mapping only.
    histories: tuple = ()
    detection: Detection | None = None  # None: lint never picks this format by itself
    command: str = ""  # shell formats: module prefix of the command whose flags are the document
    references: tuple = ()  # key paths whose value names another config file (resolved by lint)
    # The launcher lets the command line override the file's keys (TrlParser, llamafactory-cli
    # train x.yaml key=value): cross-file rules see the command line's value.
    overridable: bool = False

    @property
    def emit(self):
        return {"json": _emit_json, "yaml": _emit_yaml, "shell": _emit_shell, "text": _emit_text}[self.syntax]

    @property
    def comment(self):
        return None if self.syntax == "json" else "#"

    @property
    def drops_unknown(self):
        """The framework reads past unknown top-level keys instead of refusing the file."""
        return self.parsing is not None and self.parsing.top.kind == IGNORES

    def unknown_note(self, path):
        """What the framework does with an unknown key in the mapping at path: '' when unknown to us."""
        effect = self.parsing.unknown(path) if self.parsing else None
        return effect.text if effect else ""

    def value_verdict(self, path, rule, value, types=None, accepts=lambda made: False):
        """What the framework does with a value the schema refuses (rule: wrong-type, bad-value,
        out-of-range) at path. types: the JSON types the schema wants there; accepts(made): the
        schema takes the converted value made there."""
        entry = self.parsing.value_entry(path, rule, value, types) if self.parsing else None
        if entry is None:
            return ValueVerdict()
        made = entry.convert.apply(value, types or (), accepts) if entry.convert else NOT_CONVERTED
        if made is NOT_CONVERTED:
            return ValueVerdict(entry.effect.text, acts_as=entry.effect.kind == ACTS_AS)
        # Other readers take the file's text as written; a number or boolean they compare alike.
        misread = self.parsing.misread_at(path) if isinstance(value, str) else None
        return ValueVerdict(entry.effect.text, made, entry.convert.by, self.emit(made), misread.text if misread else "")


_DEEPSPEED_MARKERS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "zero_optimization", "fp16", "bf16", "optimizer", "scheduler", "gradient_clipping",
    "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "activation_checkpointing",
})
_ACCELERATE_MARKERS = frozenset({
    "compute_environment", "distributed_type", "num_processes", "num_machines", "machine_rank",
    "main_training_function", "deepspeed_config", "fsdp_config", "use_cpu", "rdzv_backend",
    "same_network", "main_process_ip", "main_process_port", "downcast_bf16", "tpu_env", "gpu_ids",
})
_LLAMAFACTORY_MARKERS = frozenset({
    "stage", "finetuning_type", "template", "cutoff_len", "dataset_dir", "lora_target",
    "pref_beta", "pref_loss", "preprocessing_num_workers", "overwrite_cache", "plot_loss",
    "val_size", "max_samples", "trust_remote_code", "quantization_bit",
})
_TRL_MARKERS = frozenset({
    "model_name_or_path", "output_dir", "per_device_train_batch_size", "learning_rate",
    "num_train_epochs", "num_generations", "max_completion_length", "use_vllm", "beta",
    "dataset_name", "use_peft", "lora_r", "gradient_accumulation_steps", "max_length",
    "reward_funcs", "vllm_mode", "loss_type", "bf16", "gradient_checkpointing", "logging_steps",
})
# axolotl's own vocabulary (axolotl/utils/schemas/config.py: AxolotlInputConfig). `base_model` is
# required there and is no other format's key; the rest are spellings only axolotl uses for
# settings the HF trainer names differently (sequence_len vs max_length, micro_batch_size vs
# per_device_train_batch_size, num_epochs vs num_train_epochs).
_AXOLOTL_MARKERS = frozenset({
    "base_model", "sequence_len", "micro_batch_size", "num_epochs", "sample_packing", "val_set_size",
    "dataset_prepared_path", "lora_target_linear", "lora_model_dir", "saves_per_epoch", "evals_per_epoch",
    "wandb_project", "wandb_watch", "wandb_log_model", "special_tokens", "tokenizer_type", "adapter",
    "pad_to_sequence_len", "eval_sample_packing", "load_in_4bit", "load_in_8bit", "strict",
})
# HF Trainer based YAML names its DeepSpeed config in `deepspeed:`, read from the working directory.
_DS_REFERENCE = (("deepspeed",),)

FORMATS = {
    f.name: f
    for f in (
        # DeepSpeed reads JSON with object_pairs_hook=dict_raise_error_on_duplicate_keys.
        Format("deepspeed", "json", "deepspeed.schema.json", "DeepSpeed config JSON", DEEPSPEED_PARSING,
               duplicate_note="DeepSpeed's loader rejects it", histories=("deepspeed:<path>",),
               detection=Detection(_DEEPSPEED_MARKERS, foreign=(
                   (frozenset({"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}), 2),))),
        Format("accelerate", "yaml", "accelerate.schema.json", "accelerate config YAML", ACCELERATE_PARSING,
               histories=("accelerate:ClusterConfig", "accelerate:launch@deepspeed_config", "accelerate:launch@fsdp_config",
                          "accelerate:launch@megatron_lm_config"),
               detection=Detection(_ACCELERATE_MARKERS, decisive=frozenset({"compute_environment", "distributed_type"})),
               references=(("deepspeed_config", "deepspeed_config_file"),)),
        # TrlParser passes the YAML's keys as arguments with fail_with_unknown_args=True.
        Format("trl", "yaml", "trl.schema.json", "TRL trainer config YAML (trl CLI / TrlParser)",
               TRL_PARSING,
               # The classes the trl CLI's commands parse (as in trl.schema.json), not every TRL class.
               histories=("transformers:TrainingArguments", *(f"trl:{c}" for c in (
                   "SFTConfig", "DPOConfig", "GRPOConfig", "KTOConfig", "RewardConfig", "RLOOConfig", "DistillationConfig",
                   "ModelConfig", "ScriptArguments", "DatasetMixtureConfig", "GRPOScriptArguments", "RLOOScriptArguments"))),
               detection=Detection(_TRL_MARKERS), references=_DS_REFERENCE, overridable=True),
        # HfArgumentParser.parse_dict(allow_extra_keys=False) inside get_train_args.
        Format("llamafactory", "yaml", "llamafactory.schema.json", "LLaMA-Factory training YAML",
               LLAMAFACTORY_PARSING,
               histories=("transformers:Seq2SeqTrainingArguments", "llamafactory:*"),
               # finetuning_type is LLaMA-Factory's (FinetuningArguments) and no other format's: a
               # full-parameter SFT file, whose other keys are HF Trainer's, would tie with TRL
               detection=Detection(_LLAMAFACTORY_MARKERS, together=("stage", "finetuning_type"),
                                   decisive=frozenset({"finetuning_type"})),
               references=_DS_REFERENCE, overridable=True),
        Format("openrlhf", "shell", "openrlhf.schema.json", "launch script running an OpenRLHF trainer",
               OPENRLHF_PARSING, histories=("openrlhf:*",),
               detection=Detection(), command="openrlhf.cli."),
        # AxolotlInputConfig is a pydantic model with the default extra="ignore"; values are
        # checked as its fields' types, choices and bounds (tools/schemagen/axolotl_schema.py).
        Format("axolotl", "yaml", "axolotl.schema.json", "axolotl training YAML", AXOLOTL_PARSING,
               detection=Detection(_AXOLOTL_MARKERS, together=("base_model",)), references=_DS_REFERENCE),
        Format("shell", "shell", None, "launch script"),
        Format("hostfile", "text", None, "DeepSpeed hostfile"),
    )
}


# Trainers whose configs share the HF Trainer's vocabulary but which lint does not check, with
# keys only they use. A file or command holding one is theirs: judged as a TRL YAML or DeepSpeed
# JSON, every key of its own would be a false "unknown key" error, and its own argument classes
# may keep flags transformers removed.
UNCHECKED = {
    # `swift sft --config x.yaml|json` and swift/cli/*.py parse its argument dataclasses
    # (swift/arguments/base_args/*.py; train_type before 4.0), whose TrainArguments keeps
    # warmup_ratio after transformers 5.12 deprecated it (swift/trainers/arguments.py)
    "ms-swift": frozenset({"tuner_type", "train_type", "model_author", "split_dataset_ratio", "attn_impl"}),
    # Megatron-Core's parallel sizes (ModelParallelConfig) are keys of the trainers built on it:
    # LLaMA-Factory's USE_MCA=1 mode (hparams/parser.py _TRAIN_MCA_ARGS, mcore_adapter's
    # McaSeq2SeqTrainingArguments: its examples/megatron/*.yaml), its Megatron-Bridge mode and
    # ms-swift's megatron commands
    "Megatron-Core": frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                "expert_model_parallel_size"}),
    # `accelerate launch` reads a file whose compute_environment is AMAZON_SAGEMAKER as a
    # SageMakerConfig (commands/config/config_args.py load_config_from_file), not the ClusterConfig
    # accelerate.schema.json describes; these are its two required fields
    "accelerate on SageMaker": frozenset({"ec2_instance_type", "iam_role_name"}),
}


def unchecked_owner(keys):
    """(trainer, its keys found) when keys include one only an unchecked trainer uses, else None."""
    for name, own in UNCHECKED.items():
        if keys & own:
            return name, sorted(keys & own)
    return None


def get(name):
    return FORMATS[name]


def detectable():
    """The kinds lint can tell by itself and accepts for --kind, in table order."""
    return tuple(name for name, f in FORMATS.items() if f.detection is not None)
