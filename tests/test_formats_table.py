"""formats.FORMATS is the one table a framework is added to: every entry is wired end to end.

For each format with a schema, a small file of that format (SAMPLES below: adding a framework
means adding its entry there too) must be told apart by lint's detection without --kind, be
accepted by `lint --kind`, give the unknown-key finding that the entry's parse table states, and
give render's check of a written file the very same findings as lint (one check path).
"""

import json

import pytest

from ftrecipes import detect, formats, lint, render, schemas
from ftrecipes.recipe import RecipeFile

PROBE = "zz_ftrecipes_probe"
_DS = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}}

# (file name, text, the same file with one unknown top-level key)
SAMPLES = {
    "deepspeed": ("ds.json", json.dumps(_DS), json.dumps({**_DS, PROBE: 1})),
    "accelerate": ("acc.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n"
                   "deepspeed_config:\n  deepspeed_config_file: ds.json\n", None),
    "trl": ("sft.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/Capybara\noutput_dir: out\n"
            "learning_rate: 2.0e-5\nper_device_train_batch_size: 2\ndeepspeed: ds.json\n", None),
    "llamafactory": ("lf.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                     "template: qwen\ndataset: alpaca_en_demo\noutput_dir: out\ndeepspeed: ds.json\n", None),
    "openrlhf": ("train.sh", "deepspeed --module openrlhf.cli.train_sft --pretrain Qwen/Qwen2.5-0.5B --max_epochs 1\n",
                 f"deepspeed --module openrlhf.cli.train_sft --pretrain Qwen/Qwen2.5-0.5B --max_epochs 1 --{PROBE} 1\n"),
    "axolotl": ("ax.yaml", "base_model: Qwen/Qwen2.5-0.5B\nsequence_len: 512\nmicro_batch_size: 1\nnum_epochs: 1\n"
                "deepspeed: ds.json\n", None),
}
CHECKED = [name for name, f in formats.FORMATS.items() if f.schema]


def _with_probe(kind):
    name, text, probed = SAMPLES[kind]
    return probed if probed is not None else f"{text}{PROBE}: 1\n"


def test_every_format_with_a_schema_has_a_sample():
    assert sorted(SAMPLES) == sorted(CHECKED)


@pytest.mark.parametrize("kind", CHECKED)
def test_entry_is_complete(kind):
    fmt = formats.FORMATS[kind]
    assert schemas.load_schema(fmt.schema).get("properties"), fmt.schema
    assert fmt.parsing is not None and fmt.parsing.top.text
    assert fmt.detection is not None and kind in detect.KINDS
    assert fmt.syntax in ("json", "yaml") or fmt.command  # there is a way to read it


@pytest.mark.parametrize("kind", CHECKED)
def test_detected_without_kind_and_clean(tmp_path, kind):
    name, text, _ = SAMPLES[kind]
    (tmp_path / "ds.json").write_text(json.dumps(_DS))
    path = tmp_path / name
    path.write_text(text)
    result = lint.run([str(path)])
    assert (str(path), kind) in result.checked
    mine = [f for f in result.findings if f.path == str(path) and f.rule in ("unknown-key", "wrong-type", "schema", "duplicate-key")]
    assert mine == []


@pytest.mark.parametrize("kind", CHECKED)
def test_references_are_followed(tmp_path, kind):
    if not formats.FORMATS[kind].references:
        pytest.skip("this format names no other file")
    name, text, _ = SAMPLES[kind]
    (tmp_path / "ds.json").write_text(json.dumps(_DS))
    (tmp_path / name).write_text(text)
    cfg = lint.load(str(tmp_path / name), True)
    cfg.root = str(tmp_path)
    assert lint.references(cfg) == [str(tmp_path / "ds.json")]


@pytest.mark.parametrize("kind", CHECKED)
def test_lint_and_render_share_one_check(tmp_path, kind):
    name, _, _ = SAMPLES[kind]
    text = _with_probe(kind)
    (tmp_path / "ds.json").write_text(json.dumps(_DS))  # what the others name; the deepspeed sample replaces it
    path = tmp_path / name
    path.write_text(text)
    by_lint = [f for f in lint.run([str(path)], kind=kind).findings if f.path == str(path)]
    by_render = render.check_output(RecipeFile(name, name + ".j2", kind), text, str(tmp_path))
    # Lint also runs its cross-file rules; the per-file check is what both must agree on.
    per_file = {"unknown-key", "wrong-type", "bad-value", "out-of-range", "missing-key", "removed-key", "duplicate-key", "schema"}
    assert _plain(by_render, per_file) == _plain(by_lint, per_file)
    unknown = [f for f in by_render if f.rule == "unknown-key"]
    assert len(unknown) == 1 and PROBE in unknown[0].message
    assert f"({formats.FORMATS[kind].unknown_note(())})" in unknown[0].message


def _plain(findings, rules):
    return sorted((f.rule, f.line, f.column, f.message) for f in findings if f.rule in rules)


def test_kinds_come_from_the_table():
    assert detect.KINDS == formats.detectable()
    assert set(detect.KINDS) == {n for n, f in formats.FORMATS.items() if f.detection is not None}
