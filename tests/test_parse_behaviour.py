"""Messages state what the framework really does with a key: the table and its wiring.

formats.FORMATS holds, per framework and per section, what its parser does with a key it does
not know. The framework tests feed one unknown key per listed place to the real parser (DeepSpeed
0.19.8, accelerate 1.15.0 and TRL 1.16.0 in the `trl` stack; LLaMA-Factory 0.9.5 in its own) and
fail when the table says "ignores" and the parser raises, or the reverse. The plain tests prove
that lint's messages read the table, place by place.
"""

import json

import pytest

from ftrecipes import formats, lint, schemas

PROBE = "zz_ftrecipes_probe"


def _lint(tmp_path, name, text, kind=None):
    path = tmp_path / name
    path.write_text(text)
    return lint.run([str(path)], kind=kind).findings


def _unknown(findings):
    return [f for f in findings if f.rule == "unknown-key" and PROBE in f.message]


# (format, section, file name, text builder, the effect the real parser shows: see the framework test)
def _ds(section):
    data = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    node = data
    for part in section:
        node = node.setdefault(part, {} if part != "zero_optimization" else {"stage": 2})
    node[PROBE] = 1
    return json.dumps(data)


def _acc(section):
    import yaml

    data = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": 2,
            "deepspeed_config": {"zero_stage": 2}}
    if section:
        data.setdefault(section[0], {})[PROBE] = 1
    else:
        data[PROBE] = 1
    return yaml.safe_dump(data)


CASES = [
    ("deepspeed", (), "ds.json", _ds(()), formats.IGNORES),
    ("deepspeed", ("zero_optimization",), "ds.json", _ds(("zero_optimization",)), formats.RAISES),
    ("deepspeed", ("zero_optimization", "offload_optimizer"), "ds.json", _ds(("zero_optimization", "offload_optimizer")), formats.RAISES),
    ("deepspeed", ("compile",), "ds.json", _ds(("compile",)), formats.RAISES),  # H7's corpus finding
    ("deepspeed", ("bf16",), "ds.json", _ds(("bf16",)), formats.RAISES),
    ("deepspeed", ("tensorboard",), "ds.json", _ds(("tensorboard",)), formats.RAISES),
    ("deepspeed", ("flops_profiler",), "ds.json", _ds(("flops_profiler",)), formats.IGNORES),
    ("deepspeed", ("activation_checkpointing",), "ds.json", _ds(("activation_checkpointing",)), formats.IGNORES),
    ("accelerate", (), "acc.yaml", _acc(()), formats.RAISES),
    ("accelerate", ("deepspeed_config",), "acc.yaml", _acc(("deepspeed_config",)), formats.IGNORES),  # H7's corpus finding
    ("trl", (), "sft.yaml", f"model_name_or_path: x\noutput_dir: o\nlearning_rate: 1.0e-5\n{PROBE}: 1\n", formats.RAISES),
    ("llamafactory", (), "lf.yaml", f"stage: sft\nfinetuning_type: lora\ntemplate: qwen\n{PROBE}: 1\n", formats.RAISES),
    ("axolotl", (), "ax.yaml", f"base_model: x\nsequence_len: 512\nmicro_batch_size: 1\n{PROBE}: 1\n", formats.IGNORES),
]


@pytest.mark.parametrize("kind, section, name, text, effect", CASES, ids=lambda x: ".".join(x) if isinstance(x, tuple) else None)
def test_unknown_key_message_states_the_parsers_effect(tmp_path, kind, section, name, text, effect):
    found = _unknown(_lint(tmp_path, name, text, kind))
    assert len(found) == 1, found
    stated = formats.FORMATS[kind].parsing.unknown(section)
    assert stated.kind == effect
    assert f"({stated.text})" in found[0].message
    # The other effect's words never appear: "raises" and "silently" exclude each other.
    assert ("silently" in found[0].message) == (effect == formats.IGNORES)


def test_openrlhf_unknown_flag_says_argparse_stops(tmp_path):
    script = f"deepspeed --module openrlhf.cli.train_sft --pretrain x --{PROBE} 1\n"
    found = _unknown(_lint(tmp_path, "train.sh", script))
    assert len(found) == 1 and "argparse stops with 'unrecognized arguments'" in found[0].message


def test_a_section_the_table_does_not_know_states_no_effect():
    fmt = formats.FORMATS["deepspeed"]
    assert fmt.unknown_note(("no_such_section",)) == ""
    assert fmt.unknown_note(("zero_optimization", "offload_param")) == fmt.unknown_note(("zero_optimization",))


def test_duplicate_key_effect_per_loader(tmp_path):
    ds = [f for f in _lint(tmp_path, "ds.json", '{"train_batch_size": 8, "train_batch_size": 8}') if f.rule == "duplicate-key"]
    assert ds and "DeepSpeed's loader rejects it" in ds[0].message
    acc = [f for f in _lint(tmp_path, "acc.yaml", "compute_environment: LOCAL_MACHINE\nnum_processes: 2\nnum_processes: 4\n")
           if f.rule == "duplicate-key"]
    assert acc and formats.LAST_WINS in acc[0].message


def _object_sections(schema):
    defs = schema.get("$defs", {})
    for key, prop in schema.get("properties", {}).items():
        branches = [prop] + [b for b in prop.get("anyOf", []) + prop.get("oneOf", []) if isinstance(b, dict)]
        for b in branches:
            b = defs.get(b["$ref"].rsplit("/", 1)[-1], b) if "$ref" in b else b
            if b.get("type") == "object" or "properties" in b:
                yield key
                break


@pytest.mark.parametrize("kind", ["deepspeed", "accelerate"])
def test_every_section_of_the_schema_has_a_stated_effect(kind):
    """A section added to the schema must be probed and entered in the table, not left unstated."""
    fmt = formats.FORMATS[kind]
    sections = set(_object_sections(schemas.load_schema(fmt.schema)))
    listed = {at[0] for at, _ in fmt.parsing.sections}
    assert sections, "no object sections found: the walk over the schema is broken"
    assert sorted(sections - listed) == []


def _table_places():
    for kind in ("deepspeed", "accelerate", "trl", "llamafactory"):
        parsing = formats.FORMATS[kind].parsing
        for at, effect in ((), parsing.top), *parsing.sections:
            yield kind, at, effect


STACK = {"deepspeed": "trl", "accelerate": "trl", "trl": "trl", "llamafactory": "llamafactory"}


@pytest.fixture(scope="module")
def parser_results(tmp_path_factory):
    from truth_jobs import run_truth

    places = list(_table_places())
    results = {}
    for stack in sorted(set(STACK.values())):
        mine = [p for p in places if STACK[p[0]] == stack]
        jobs = [{"check": f"unknown-key-{kind}", "section": list(at)} for kind, at, _ in mine]
        out = run_truth(stack, jobs, tmp_path_factory.mktemp(f"parsing-{stack}"))
        results.update({(kind, at): res for (kind, at, _), res in zip(mine, out)})
    return results


@pytest.mark.framework
@pytest.mark.parametrize("kind, at, effect", list(_table_places()), ids=lambda x: ".".join(x) if isinstance(x, tuple) else None)
def test_table_matches_the_real_parser(parser_results, kind, at, effect):
    res = parser_results[(kind, at)]
    if effect.kind == formats.RAISES:
        assert not res["ok"], f"{kind} {at}: the table says it raises, the parser read past it"
        assert "zz_ftrecipes_probe" in res["error"], res["error"]  # refused for the probe, not for the base file
    else:
        assert res["ok"], f"{kind} {at}: the table says it is ignored, the parser raised: {res['error']}"


# "auto" where no trainer fills it: the rule reports the places the table says DeepSpeed does
# not drop it, with the table's words.
AUTO_BASE = {"optimizer": {"optimizer": {"type": "AdamW"}}, "scheduler": {"scheduler": {"type": "WarmupLR"}}}
# The key under a table entry that gets "auto" (sections: any key; DeepSpeedConfigModel drops
# "auto" values before pydantic looks at the names).
AUTO_FIELD = {"optimizer": ["params", "lr"], "scheduler": ["params", "warmup_num_steps"], "zero_optimization": ["reduce_bucket_size"]}


def _auto_places():
    for at, effect in formats.FORMATS["deepspeed"].parsing.auto:
        section = at[0] in formats.DEEPSPEED_PARSING.sections_named()
        yield at, list(at) + AUTO_FIELD.get(at[0], ["enabled"] if section else []), effect


@pytest.mark.parametrize("at, path, effect", list(_auto_places()),
                         ids=lambda x: ".".join(x) if isinstance(x, (tuple, list)) else None)
def test_auto_message_states_the_table_effect(tmp_path, at, path, effect):
    data = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, **json.loads(json.dumps(AUTO_BASE.get(at[0], {})))}
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = "auto"
    (tmp_path / "ds.json").write_text(json.dumps(data))
    (tmp_path / "run.sh").write_text("#!/bin/bash\ndeepspeed --num_gpus 2 train.py --deepspeed_config ds.json\n")
    found = [f for f in lint.run([str(tmp_path)]).findings if f.rule == "auto-without-trainer"]
    if effect.kind == formats.IGNORES:
        assert found == []
    else:
        assert len(found) == 1 and f"({effect.text})" in found[0].message, found


def _stage_ignored_cases():
    return [{"stage": 2, "offload_param": {"device": "cpu"}}, {"stage": 1, "stage3_max_live_parameters": 1000},
            {"stage": 0, "offload_optimizer": {"device": "cpu"}}]


@pytest.mark.parametrize("zero", _stage_ignored_cases(), ids=lambda z: ",".join(z))
def test_stage_ignored_rule_fires(tmp_path, zero):
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}))
    found = [f for f in lint.run([str(tmp_path / "ds.json")]).findings if f.rule == "stage-ignored-key"]
    assert len(found) == 1 and "is ignored" in found[0].message


@pytest.fixture(scope="module")
def deepspeed_results(tmp_path_factory):
    from truth_jobs import run_truth

    auto = [{"check": "auto-deepspeed", "path": path, "base": AUTO_BASE.get(at[0], {})} for at, path, _ in _auto_places()]
    zero = [{"check": "zero-deepspeed", "zero": z} for z in _stage_ignored_cases()]
    out = run_truth("trl", auto + zero, tmp_path_factory.mktemp("parsing-ds"))
    return out[: len(auto)], out[len(auto):]


@pytest.mark.framework
def test_auto_table_matches_deepspeed(deepspeed_results):
    for (at, path, effect), res in zip(_auto_places(), deepspeed_results[0]):
        if effect.kind == formats.RAISES:
            assert not res["ok"] and "TypeError" in res["error"], (path, res)
        elif effect.kind == formats.LATER:
            assert res["ok"] and res["facts"]["kept"], (path, res)  # the string reaches the code that uses it
        else:
            assert res["ok"] and not res["facts"]["kept"], (path, res)


@pytest.mark.framework
def test_stage_ignored_keys_are_accepted_by_deepspeed(deepspeed_results):
    """The rule says "ignored": DeepSpeedConfig must take these sections without a word."""
    for zero, res in zip(_stage_ignored_cases(), deepspeed_results[1]):
        assert res["ok"], (zero, res["error"])


# A wrong value, one per entry of the value-effect table (formats.Parsing.values): the format,
# the key path, the finding class lint gives, and the value. The plain test proves lint's message
# states the table's effect for it; the framework test feeds the same value to the real parser
# (RAISES: it refuses the file; LATER: it holds the value as written, for the code that uses it).
# Each value here is one the parser cannot convert into one the schema takes; those it can are
# COERCED_CASES below.
VALUE_CASES = [
    ("deepspeed", ("steps_per_print",), "wrong-type", "ten"),
    ("deepspeed", ("zero_optimization", "overlap_comm"), "wrong-type", "maybe"),
    ("deepspeed", ("zero_optimization", "overlap_comm"), "wrong-type", 2.5),
    ("deepspeed", ("zero_optimization", "stage"), "bad-value", "7"),  # pydantic reads 7, ZeroStageEnum refuses it
    ("deepspeed", ("zero_optimization", "reduce_bucket_size"), "wrong-type", "5e8"),  # pydantic's int wants digits
    ("deepspeed", ("fp16", "min_loss_scale"), "wrong-type", "2.0"),  # int("2.0") in a before-validator
    ("deepspeed", ("zero_optimization",), "wrong-type", 1),  # the section itself: DeepSpeedZeroConfig(**1)
    ("deepspeed", ("zero_optimization", "stage"), "bad-value", 7),
    ("deepspeed", ("zero_optimization", "reduce_bucket_size"), "out-of-range", -1),
    ("deepspeed", ("activation_checkpointing", "partition_activations"), "wrong-type", "maybe"),
    ("accelerate", ("distributed_type",), "bad-value", "DEEPSPEEED"),
    ("accelerate", ("compute_environment",), "bad-value", "LOCAL"),
    # YAML's `no`: ClusterConfig keeps a distributed_type that is not text, and launch runs one
    # process; a compute_environment that is not text makes the file a SageMaker config
    ("accelerate", ("distributed_type",), "bad-value", False),
    ("accelerate", ("compute_environment",), "bad-value", False),
    ("accelerate", ("deepspeed_config", "zero_stage"), "bad-value", 7),
    ("trl", ("per_device_train_batch_size",), "wrong-type", "two"),
    ("trl", ("per_device_train_batch_size",), "wrong-type", "2.0"),  # argparse's int("2.0") fails
    ("trl", ("bf16",), "wrong-type", "maybe"),
    ("trl", ("per_device_train_batch_size",), "wrong-type", 2.5),
    ("trl", ("packing_strategy",), "bad-value", "ffd"),
    ("trl", ("lr_scheduler_type",), "bad-value", "cosinee"),
    ("trl", ("optim",), "bad-value", "adamww"),
    ("trl", ("eval_strategy",), "bad-value", "stepz"),
    ("llamafactory", ("cutoff_len",), "wrong-type", "abc"),
    ("llamafactory", ("pref_loss",), "bad-value", "sigmoidd"),
    ("llamafactory", ("save_strategy",), "bad-value", "stepz"),
    ("axolotl", ("sequence_len",), "wrong-type", "4096x"),
    ("axolotl", ("micro_batch_size",), "wrong-type", 2.5),
    ("axolotl", ("rl",), "bad-value", "dpoo"),
    ("axolotl", ("sample_packing",), "wrong-type", "maybe"),
    ("axolotl", ("relora_prune_ratio",), "out-of-range", 1.5),  # ReLoRAConfig: Field(ge=0, le=1)
]
# Values pydantic's lax mode coerces: axolotl takes them, so lint must not flag them.
AXOLOTL_LAX = [(("sequence_len",), "4096"), (("sample_packing",), "yes"), (("learning_rate",), "2e-5"),
               (("num_epochs",), True), (("micro_batch_size",), 2.0), (("bf16",), "auto")]
VALUE_BASE = {
    "deepspeed": ("ds.json", {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}),
    "accelerate": ("acc.yaml", {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": 2,
                                "deepspeed_config": {"zero_stage": 2}}),
    "trl": ("sft.yaml", {"model_name_or_path": "x", "output_dir": "o", "learning_rate": 1.0e-5}),
    "llamafactory": ("lf.yaml", {"stage": "sft", "finetuning_type": "lora", "template": "qwen"}),
    "axolotl": ("ax.yaml", {"base_model": "x", "sequence_len": 512, "micro_batch_size": 1}),
}


def _value_file(tmp_path, kind, path, value):
    import yaml

    name, base = VALUE_BASE[kind]
    data = json.loads(json.dumps(base))
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    (tmp_path / name).write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return lint.run([str(tmp_path / name)], kind=kind).findings


def _at(findings, path):
    dotted = ".".join(path)
    return [f for f in findings if f.message.startswith(f"{dotted}: ")]


@pytest.mark.parametrize("kind, path, rule, value", VALUE_CASES, ids=lambda x: ".".join(map(str, x)) if isinstance(x, tuple) else None)
def test_wrong_value_message_states_the_parsers_effect(tmp_path, kind, path, rule, value):
    found = _at(_value_file(tmp_path, kind, path, value), path)
    assert [f.rule for f in found] == [rule], found
    effect = formats.FORMATS[kind].parsing.value(path, rule, value)
    assert effect is not None and found[0].message.endswith(f"({effect.text})"), found[0].message


@pytest.mark.parametrize("path, value", AXOLOTL_LAX, ids=lambda x: ".".join(x) if isinstance(x, tuple) else None)
def test_axolotl_values_pydantic_coerces_pass(tmp_path, path, value):
    assert _at(_value_file(tmp_path, "axolotl", path, value), path) == []


def test_every_value_message_class_is_probed():
    """Each effect a value table can state (per format) needs a case above, and so a check
    against the real parser. Sections sharing one effect (DeepSpeed's pydantic models) share a
    probe: the table groups them because their parser is the same code."""
    for kind, fmt in formats.FORMATS.items():
        if not fmt.parsing or kind == "openrlhf":  # flags: argparse's own type/choices, by construction
            continue
        stated = {e.effect for e in fmt.parsing.values}
        probed = {fmt.parsing.value(p, r, v) for k, p, r, v in VALUE_CASES if k == kind}
        assert sorted(e.text for e in stated - probed) == [], kind


VALUE_STACK = {"deepspeed": "trl", "accelerate": "trl", "trl": "trl", "llamafactory": "llamafactory"}


def _value_expected(kind, path, rule, value):
    return formats.FORMATS[kind].parsing.value(path, rule, value).kind


@pytest.fixture(scope="module")
def value_results(tmp_path_factory):
    from truth_jobs import run_truth

    results = {}
    for stack in sorted(set(VALUE_STACK.values())):
        mine = [c for c in VALUE_CASES if VALUE_STACK.get(c[0]) == stack]
        jobs = [{"check": f"value-{kind}", "path": list(path), "value": value} for kind, path, _, value in mine]
        out = run_truth(stack, jobs, tmp_path_factory.mktemp(f"values-{stack}"))
        results.update({c: r for c, r in zip(mine, out)})
    return results


def _agrees(case, res):
    expected = _value_expected(*case)
    if expected == formats.RAISES:
        return not res["ok"]
    if expected == formats.ACTS_AS:
        return res["ok"] and res["facts"]["multi"] is False  # loaded, and one process launched
    return res["ok"] and res["facts"]["held"] == case[3]  # LATER: the value reaches the code as written


@pytest.mark.framework
@pytest.mark.parametrize("case", [c for c in VALUE_CASES if c[0] in VALUE_STACK], ids=lambda c: f"{c[0]}.{'.'.join(c[1])}={c[3]}")
def test_value_table_matches_the_real_parser(value_results, case):
    res = value_results[case]
    assert _agrees(case, res), (case, res)


def test_value_table_matches_axolotl(tmp_path):
    """axolotl is in no stack venv: FTRECIPES_AXOLOTL_PYTHON names a python that can import
    axolotl.utils.schemas.config, with PYTHONPATH pointing at the unpacked wheel where needed
    (tools/schemagen/README.md shows how to make one)."""
    import os
    import subprocess
    import sys

    python = os.environ.get("FTRECIPES_AXOLOTL_PYTHON")
    if not python:
        pytest.skip("FTRECIPES_AXOLOTL_PYTHON not set")
    cases = [c for c in VALUE_CASES if c[0] == "axolotl"] + [("axolotl", p, None, v) for p, v in AXOLOTL_LAX]
    (tmp_path / "jobs.json").write_text(json.dumps([{"check": "value-axolotl", "path": list(p), "value": v} for _, p, _, v in cases]))
    script = os.path.join(os.path.dirname(__file__), "frameworks", "truth.py")
    proc = subprocess.run([python, script, "jobs.json", "results.json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for case, res in zip(cases, json.loads((tmp_path / "results.json").read_text())):
        if case[2] is None:
            assert res["ok"], (case, res["error"])  # lint passes it, and so does axolotl
        else:
            assert _agrees(case, res), (case, res)


# A value the parser converts into one the schema takes: (format, key path, value, what the
# parser makes of it, whether another reader of the file takes the text as written). The plain
# tests prove lint's finding (a coerced-value warning, or a misread-value error naming the
# reader); the framework tests feed the value to the real parser (it must hold exactly the
# converted value, type included) and, for DeepSpeed, to the HF integration that reads the same
# file (transformers' HfTrainerDeepSpeedConfig and accelerate's DeepSpeedPlugin: they must see the
# same config as with the typed value unless the table says they misread it).
COERCED_CASES = [
    ("deepspeed", ("zero_optimization", "overlap_comm"), "true", True, False),
    ("deepspeed", ("zero_optimization", "overlap_comm"), "off", False, False),
    ("deepspeed", ("zero_optimization", "contiguous_gradients"), 1, True, False),
    ("deepspeed", ("zero_optimization", "reduce_bucket_size"), "500000000", 500000000, False),
    ("deepspeed", ("zero_optimization", "stage"), "1", 1, True),  # accelerate's no_sync: "1" < 2 raises
    ("deepspeed", ("zero_optimization", "stage"), "2", 2, True),
    ("deepspeed", ("zero_optimization", "stage"), "3", 3, True),
    ("deepspeed", ("fp16", "initial_scale_power"), "16", 16, False),
    ("deepspeed", ("fp16", "min_loss_scale"), "2", 2, False),
    ("deepspeed", ("fp16", "loss_scale"), "128", 128.0, False),
    ("deepspeed", ("bf16", "enabled"), "true", True, True),
    ("deepspeed", ("fp16", "enabled"), "false", False, True),
    ("trl", ("per_device_train_batch_size",), "2", 2, False),
    ("trl", ("gradient_checkpointing",), "yes", True, False),
    ("trl", ("bf16",), "False", False, False),
]


def _coerced_id(c):
    return f"{c[0]}.{'.'.join(c[1])}={c[2]!r}"


@pytest.mark.parametrize("case", COERCED_CASES, ids=_coerced_id)
def test_converted_value_is_a_warning_unless_misread(tmp_path, case):
    kind, path, value, made, misread = case
    found = _at(_value_file(tmp_path, kind, path, value), path)
    fmt = formats.FORMATS[kind]
    assert [f.rule for f in found] == ["misread-value" if misread else "coerced-value"], found
    assert found[0].severity == ("error" if misread else "warning")
    entry = fmt.parsing.value_entry(path, "wrong-type", value)
    written = fmt.emit(made)
    assert found[0].message.startswith(f"{'.'.join(path)}: {entry.convert.by} converts ")
    assert found[0].message.endswith(f"; write {written}")
    if misread:
        reader = fmt.parsing.misread_at(path)
        assert f"but {reader.text};" in found[0].message
    else:
        # A converted value is not one the parser refuses: no word of raising or failing.
        assert not any(w in found[0].message for w in ("raise", "stops", "fails"))


def test_coerced_message_words():
    """The messages, written out once: what the lead and users read."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "2"},
                                                     "fp16": {"initial_scale_power": "16"}}))
        (Path(d) / "sft.yaml").write_text("model_name_or_path: x\noutput_dir: o\nper_device_train_batch_size: '2'\n")
        ds = {f.rule: f.message for f in lint.run([str(Path(d) / "ds.json")]).findings}
        trl = {f.rule: f.message for f in lint.run([str(Path(d) / "sft.yaml")], kind="trl").findings}
    assert ds["coerced-value"] == "fp16.initial_scale_power: DeepSpeed's model of this section converts '16' to 16; write 16"
    assert ds["misread-value"].startswith("zero_optimization.stage: DeepSpeed's model of this section converts '2' to 2, "
                                          "but the HF Trainer and accelerate read the raw value")
    assert trl["coerced-value"] == "per_device_train_batch_size: TrlParser (argparse) converts '2' to 2; write 2"


@pytest.mark.parametrize("conversion, value, jtype, made", [
    ("pydantic-lax", " +2 ", "integer", 2), ("pydantic-lax", "2.0", "integer", 2), ("pydantic-lax", "2.5", "integer", None),
    ("pydantic-lax", "1e3", "integer", None), ("pydantic-lax", "1e3", "number", 1000.0), ("pydantic-lax", "On", "boolean", True),
    ("pydantic-lax", 2, "boolean", None), ("pydantic-lax", 0.0, "boolean", False), ("pydantic-lax", True, "integer", None),
    ("type-call", "2.0", "integer", None), ("type-call", " 2 ", "integer", 2), ("type-call", "On", "boolean", None),
    ("type-call", "T", "boolean", True), ("type-call", 2.0, "integer", None), ("type-call", "1e-5", "number", 1e-5),
])
def test_conversions_match_the_parsers_rules(conversion, value, jtype, made):
    """Each row is what pydantic 2.14 (TypeAdapter in lax mode) or argparse with transformers'
    string_to_bool / int / float does with the value; the framework test below runs them. One
    exception on purpose: True for an integer (see _pydantic_lax)."""
    got = formats._CONVERTERS[conversion](value, jtype)
    assert (None if got is formats.NOT_CONVERTED else got) == made
    if made is not None:
        assert type(got) is type(made)


@pytest.fixture(scope="module")
def coerced_results(tmp_path_factory):
    from truth_jobs import run_truth

    mine = [c for c in COERCED_CASES if c[0] in VALUE_STACK]
    jobs = [{"check": f"value-{k}", "path": list(p), "value": v} for k, p, v, _, _ in mine]
    hf = [c for c in mine if c[0] == "deepspeed"]
    jobs += [{"check": "misread-deepspeed-hf", "path": list(p), "value": v, "typed": m} for _, p, v, m, _ in hf]
    # Rows of pydantic's lax rules, checked against pydantic itself.
    lax = [("2", "integer"), (" +2 ", "integer"), ("2.0", "integer"), ("2.5", "integer"), ("2_000", "integer"), ("1e3", "integer"),
           ("1e3", "number"), ("inf", "number"), ("On", "boolean"), ("T", "boolean"), ("2", "boolean"), (2.0, "integer"),
           (2.5, "integer"), (1, "boolean"), (2, "boolean"), (0.0, "boolean")]
    # Not rows: True for a number. pydantic reads it as 1, DeepSpeed's fp16 before-validators
    # refuse it, and lint claims no conversion (the oracle in test_lint_vs_deepspeed.py).
    jobs += [{"check": "pydantic-lax", "value": v, "type": t} for v, t in lax]
    out = run_truth("trl", jobs, tmp_path_factory.mktemp("coerced"))
    n, m = len(mine), len(hf)
    return dict(zip(mine, out[:n])), dict(zip(hf, out[n:n + m])), list(zip(lax, out[n + m:]))


@pytest.mark.framework
@pytest.mark.parametrize("case", [c for c in COERCED_CASES if c[0] in VALUE_STACK], ids=_coerced_id)
def test_converted_value_matches_the_real_parser(coerced_results, case):
    res = coerced_results[0][case]
    made = case[3]
    assert res["ok"], (case, res["error"])
    assert res["facts"]["held"] == made and type(res["facts"]["held"]) is type(made), (case, res)


@pytest.mark.framework
@pytest.mark.parametrize("case", [c for c in COERCED_CASES if c[0] == "deepspeed"], ids=_coerced_id)
def test_misread_table_matches_the_hf_integration(coerced_results, case):
    res = coerced_results[1][case]
    assert res["ok"], (case, res["error"])
    assert res["facts"]["misread"] == case[4], (case, res["facts"])


@pytest.mark.framework
def test_pydantic_lax_rules_match_pydantic(coerced_results):
    for (value, jtype), res in coerced_results[2]:
        ours = formats._pydantic_lax(value, jtype)
        theirs = res["facts"]["made"] if res["ok"] else None
        assert (None if ours is formats.NOT_CONVERTED else ours) == theirs, (value, jtype, res)
