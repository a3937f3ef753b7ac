"""Versioned framework keys: the PEP 440 subset, schemas/versions.json, render by version, lint.

Flag/pass cases of the framework-version rule are in CASES (same shape as tests/test_rules.py,
which counts them in its every-rule-has-a-test check).
"""

import json

import pytest

from conftest import ROOT
from ftrecipes import readers, recipe, render, schemas, versions
from ftrecipes.errors import UserError
from test_rules import assert_flags_bad_passes_good

NAME = "llama8b-sft-a100x1"


# --- version parsing and ranges -------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    ("0.8.9", "0.8.10"), ("0.8.9.post1", "0.8.10"), ("0.9.1", "0.9.1.post1"), ("1.0rc1", "1.0"),
    ("1.0.dev1", "1.0a1"), ("1.0a1", "1.0b1"), ("1.0b2", "1.0rc1"), ("4.57.6", "5"), ("5.0", "5.0.1"),
])
def test_version_order(a, b):
    assert versions.parse(a) < versions.parse(b)


def test_version_equality_ignores_trailing_zeros_and_local():
    assert versions.parse("5") == versions.parse("5.0.0") == versions.parse("5.0+cpu")


@pytest.mark.parametrize("bad", ["", "x.y", "1..2", "0.8.5-foo", "latest"])
def test_bad_versions(bad):
    with pytest.raises(ValueError):
        versions.parse(bad)


@pytest.mark.parametrize("spec, inside, outside", [
    (">=0.8.0,<0.8.10", ["0.8.0", "0.8.5", "0.8.9.post1"], ["0.8.10", "0.7.5", "0.9.0"]),
    (">=0.10.2,<0.12", ["0.10.2", "0.11.2"], ["0.10.1.post2", "0.12.0"]),
    ("==0.11.*", ["0.11", "0.11.2"], ["0.10.9", "0.12.0"]),
    ("!=0.9.*", ["0.8.5", "0.10.0"], ["0.9.2"]),
    ("~=0.9.2", ["0.9.2", "0.9.10"], ["0.9.1", "0.10.0"]),
    ("~=5.0", ["5.0", "5.23.0"], ["4.57", "6.0"]),
    ("==5.6.0", ["5.6"], ["5.6.1"]),
    (">5,<=5.15", ["5.1", "5.15.0"], ["5.0", "5.15.1"]),
])
def test_specifier(spec, inside, outside):
    s = versions.Specifier(spec)
    assert all(s.contains(v) for v in inside), spec
    assert not any(s.contains(v) for v in outside), spec


@pytest.mark.parametrize("bad", ["", "0.8", ">=", ">=0.8,", "=>0.8", "~=1", ">=0.*", "0.8, <1"])
def test_bad_specifiers(bad):
    with pytest.raises(ValueError):
        versions.Specifier(bad)


# --- the table --------------------------------------------------------------------------------
def test_table_validates_and_loads():
    data = json.loads((ROOT / "schemas" / "versions.json").read_text())
    assert list(schemas.validator(schemas.load_schema("versions.schema.json")).iter_errors(data)) == []
    assert set(versions.table()) >= {"openrlhf", "transformers"}


def test_openrlhf_new_names_exist_in_the_generated_schema():
    # Every name the table says OpenRLHF uses today is a flag of the 0.11.2 schema.
    props = schemas.load_schema("openrlhf.schema.json")["properties"]
    h = versions.history("openrlhf")
    for key in h.tracked():
        now = h.spelled_at(key, "0.11.2")
        if now is None:  # removed without a successor (train_split)
            assert h.retired(key).kind == "removed", key
            continue
        assert now in props and props[now].get("not") != {}, (key, now)


@pytest.mark.parametrize("key, version, expected", [
    ("flash_attn", "0.8.5", "flash_attn"),
    ("flash_attn", "0.8.10", "attn_implementation"),
    ("flash_attn", "0.11.2", "ds.attn_implementation"),
    ("ds.param_dtype", "0.8.9", "bf16"),
    ("ds.param_dtype", "0.9.2", "param_dtype"),
    ("zero_stage", "0.10.2", "ds.zero_stage"),
    ("lr_scheduler", "0.8.5", "lr_scheduler"),
])
def test_spelled_at(key, version, expected):
    assert versions.history("openrlhf").spelled_at(key, version) == expected


def test_messages_name_the_replacement():
    h = versions.history("openrlhf")
    assert h.problems("flash_attn", "0.8.10") == [("error", "--flash_attn was replaced by --attn_implementation in openrlhf 0.8.10")]
    assert h.problems("ds.zero_stage", "0.9.2") == [("error", "--ds.zero_stage exists from openrlhf 0.10.2 on; openrlhf 0.9.2 spells it --zero_stage")]
    t = versions.history("transformers")
    assert t.problems("warmup_ratio", "4.46") == []
    assert t.problems("warmup_ratio", "5.6")[0][0] == "warning"
    assert "removed in transformers 5.15" in t.problems("warmup_ratio", "5.15.0")[0][1]
    assert t.problems("gradient_checkpointing", "5.23.0") == [("warning", "gradient_checkpointing is deprecated since transformers 5.23; use activation_checkpointing")]
    assert t.problems("activation_checkpointing", "5.22.2")[0][0] == "error"


# --- lint: flag/pass cases of the framework-version rule ----------------------------------------
def _sh(*flags):
    return "#!/bin/bash\ndeepspeed --num_gpus 1 --module openrlhf.cli.train_sft \\\n  " + " \\\n  ".join(flags) + "\n"


OLD = _sh("--pretrain m", "--zero_stage 2", "--bf16", "--flash_attn", "--adam_offload", "--gradient_checkpointing")
O810 = _sh("--pretrain m", "--zero_stage 2", "--bf16", "--attn_implementation flash_attention_2")
O92 = _sh("--pretrain m", "--zero_stage 2", "--param_dtype bf16", "--attn_implementation sdpa")
NEW = _sh("--model.model_name_or_path m", "--ds.zero_stage 2", "--ds.param_dtype bf16", "--ds.adam_offload")
TRL = "model_name_or_path: m\nper_device_train_batch_size: 1\nwarmup_ratio: 0.03\n"
TRL_NEW = "model_name_or_path: m\nper_device_train_batch_size: 1\nwarmup_steps: 0.03\n"

CASES = [
    ("framework-version", {"launch.sh": NEW}, {"launch.sh": OLD}, {"framework_versions": {"openrlhf": "0.8.5"}}),
    ("framework-version", {"launch.sh": OLD}, {"launch.sh": O810}, {"framework_versions": {"openrlhf": "0.8.10"}}),
    ("framework-version", {"launch.sh": O810}, {"launch.sh": O92}, {"framework_versions": {"openrlhf": "0.9.2"}}),
    ("framework-version", {"launch.sh": O92}, {"launch.sh": NEW}, {"framework_versions": {"openrlhf": "0.11.2"}}),
    ("framework-version", {"sft.yaml": TRL}, {"sft.yaml": TRL_NEW}, {"framework_versions": {"transformers": "5.15.0"}}),
    ("framework-version", {"sft.yaml": TRL + "activation_checkpointing: true\n"}, {"sft.yaml": TRL + "gradient_checkpointing: true\n"},
     {"framework_versions": {"transformers": "4.46"}}),
    # version-skew (more in test_key_history.py): dtype is TRL >= 0.23, max_seq_length TRL < 0.20.
    ("version-skew", {"sft.yaml": "model_name_or_path: m\nper_device_train_batch_size: 1\ndtype: bfloat16\n"},
     {"sft.yaml": "model_name_or_path: m\nper_device_train_batch_size: 1\nuse_peft: true\n"}, {"framework_versions": {"trl": "0.19.1"}}),
    ("version-skew", {"sft.yaml": "model_name_or_path: m\nper_device_train_batch_size: 1\nmax_seq_length: 512\n"},
     {"sft.yaml": "model_name_or_path: m\nper_device_train_batch_size: 1\nmax_length: 512\n"}, {"framework_versions": {"trl": "1.16.0"}}),
]


@pytest.mark.parametrize("rule_id, bad, good, options", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_flags_bad_and_passes_good(tmp_path, rule_id, bad, good, options):
    assert_flags_bad_passes_good(tmp_path, rule_id, bad, good, options)


def _all(tmp_path, files, **options):
    from ftrecipes import lint, rules

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return lint.run([str(tmp_path)], options=rules.Options(**options)).findings


def test_old_flags_are_clean_at_their_version_and_reported_once_otherwise(tmp_path):
    # At 0.8.5 neither the rule nor the 0.11.2 schema reports the era's own flags.
    assert [f for f in _all(tmp_path, {"launch.sh": OLD}, framework_versions={"openrlhf": "0.8.5"}) if f.severity == "error"] == []
    found = _all(tmp_path, {"launch.sh": OLD}, framework_versions={"openrlhf": "0.9.2"})
    assert [(f.rule, f.message) for f in found] == [
        ("framework-version", "--bf16 was replaced by --param_dtype in openrlhf 0.9.2"),
        ("framework-version", "--flash_attn was replaced by --attn_implementation in openrlhf 0.8.10"),
    ]


def test_untracked_typo_is_still_caught_with_a_version(tmp_path):
    found = _all(tmp_path, {"launch.sh": _sh("--pretrain m", "--zero_stagee 2")}, framework_versions={"openrlhf": "0.8.5"})
    assert [f.rule for f in found] == ["unknown-key"]


def test_deprecation_is_a_warning(tmp_path):
    found = _all(tmp_path, {"sft.yaml": TRL_NEW + "gradient_checkpointing: true\n"}, framework_versions={"transformers": "5.23.0"})
    assert [(f.rule, f.severity) for f in found] == [("framework-version", "warning")]


def test_lint_cli_refuses_a_bad_version(tmp_path, run_cli):
    (tmp_path / "sft.yaml").write_text(TRL_NEW)
    code, _, err = run_cli("lint", str(tmp_path), "--framework-version", "transformers=five")
    assert code == 2 and "'five' is not a version" in err


def test_lint_cli_exit_codes(tmp_path, run_cli):
    (tmp_path / "sft.yaml").write_text(TRL)
    assert run_cli("lint", str(tmp_path), "--framework-version", "transformers=4.46")[0] == 0
    code, out, _ = run_cli("lint", str(tmp_path), "--framework-version", "transformers=5.15")
    assert code == 1 and "warmup_ratio was removed in transformers 5.15" in out


# --- render by version ------------------------------------------------------------------------------
def _render(sets):
    r = recipe.load(NAME)
    return {f.name: t for f, t in render.render(r, sets)}


def _flags(text):
    return set(readers.openrlhf_document(text, "launch.sh").data)


ERA_FLAGS = {
    "0.8.5": ({"pretrain", "zero_stage", "bf16", "flash_attn", "adam_offload", "gradient_checkpointing"},
              {"attn_implementation", "param_dtype", "ds.zero_stage"}),
    "0.8.10": ({"zero_stage", "bf16", "attn_implementation"}, {"flash_attn", "param_dtype"}),
    "0.9.2": ({"zero_stage", "param_dtype", "attn_implementation"}, {"bf16", "flash_attn", "ds.param_dtype"}),
    "0.10.2": ({"ds.zero_stage", "ds.param_dtype", "ds.attn_implementation", "ds.adam_offload"}, {"zero_stage", "pretrain"}),
    "0.11.2": ({"ds.zero_stage", "ds.param_dtype", "ds.attn_implementation", "model.gradient_checkpointing_enable"}, {"zero_stage"}),
}


@pytest.mark.parametrize("version", list(ERA_FLAGS))
def test_render_uses_the_eras_flags(version):
    out = _render({"openrlhf_version": version})
    have, lacks = ERA_FLAGS[version]
    flags = _flags(out["launch.sh"])
    assert have <= flags and not (lacks & flags), (version, sorted(flags))
    h = versions.history("openrlhf")
    assert all(h.problems(f, version) == [] for f in flags), version
    ds = json.loads(out["ds.json"])
    assert ("fp16" in ds) == versions.in_range(version, ">=0.9.2")
    assert ("optimizer" in ds) == versions.in_range(version, ">=0.10.2")


def test_default_render_is_the_committed_one():
    r = recipe.load(NAME)
    for f, text in render.render(r, {}):
        assert (r.dir / "rendered" / f.name).read_text() == text


@pytest.mark.parametrize("version", ["0.7.5", "0.12.0"])
def test_unsupported_version_is_one_line_listing_ranges(run_cli, version):
    code, out, err = run_cli("render", NAME, "--set", f"openrlhf_version={version}")
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and f"openrlhf {version} is not supported" in line
    assert ">=0.8.0,<0.8.10 | >=0.8.10,<0.9.2 | >=0.9.2,<0.10.2 | >=0.10.2,<0.12" in line


@pytest.mark.parametrize("sets, fragment", [
    ({"openrlhf_version": "0.8.5", "precision": "fp16"}, "precision"),
    ({"openrlhf_version": "0.9.1", "precision": "fp16"}, "precision"),
    ({"openrlhf_version": "0.8.9", "attn_implementation": "sdpa"}, "attn_implementation"),
])
def test_values_an_era_cannot_express_are_refused(sets, fragment):
    with pytest.raises(UserError, match=fragment):
        _render(sets)


def test_fp16_and_sdpa_from_their_eras():
    doc = readers.openrlhf_document(_render({"openrlhf_version": "0.9.2", "precision": "fp16"})["launch.sh"], "x")
    assert doc.data["param_dtype"] == "fp16"
    doc = readers.openrlhf_document(_render({"openrlhf_version": "0.8.10", "attn_implementation": "sdpa"})["launch.sh"], "x")
    assert doc.data["attn_implementation"] == "sdpa"


def test_eager_before_0_8_10_means_no_flash_attn_flag():
    assert "flash_attn" not in _flags(_render({"openrlhf_version": "0.8.5", "attn_implementation": "eager"})["launch.sh"])


def test_variants_pick_the_first_match():
    f = recipe.load(NAME).file("launch.sh")
    assert f.template_for({"openrlhf": "0.10.1"}) == "launch-legacy.sh.j2"
    assert f.template_for({"openrlhf": "0.10.2"}) == "launch.sh.j2"
    assert f.template_for({}) == "launch.sh.j2"


def test_bad_supported_range_in_recipe_yaml_is_reported(tmp_path):
    import shutil

    d = tmp_path / NAME
    shutil.copytree(ROOT / "recipes" / NAME, d)
    y = d / "recipe.yaml"
    y.write_text(y.read_text().replace('">=0.10.2,<0.12"', '">=0.10.2,<"'))
    with pytest.raises(UserError, match="supported_versions.openrlhf"):
        recipe.load_dir(str(d))


# --- multi-node ----------------------------------------------------------------------------------------
def test_two_nodes_render_a_hostfile_and_a_hostfile_launch():
    out = _render({"nodes": 2, "gpus_per_node": 8})
    hosts = [ln for ln in out["hostfile"].splitlines() if ln and not ln.startswith("#")]
    assert hosts == ["node1 slots=8", "node2 slots=8"]
    launch_line = next(ln for ln in out["launch.sh"].splitlines() if ln.startswith("deepspeed "))
    assert "--hostfile hostfile --num_nodes 2 --num_gpus 8" in launch_line
    ds = json.loads(out["ds.json"])
    assert ds["train_batch_size"] == 1 * 64 * 16
    assert "hostfile" not in _render({})


def test_two_nodes_with_an_old_release():
    out = _render({"nodes": 2, "openrlhf_version": "0.9.2"})
    assert "hostfile" in out and "--hostfile hostfile --num_nodes 2" in out["launch.sh"] and "--zero_stage 2" in out["launch.sh"]


def test_lint_counts_the_multi_node_world(tmp_path):
    from ftrecipes import lint, rules
    from ftrecipes.rules import facts

    out = _render({"nodes": 2, "gpus_per_node": 4})
    for name, text in out.items():
        (tmp_path / name).write_text(text)
    result = lint.run([str(tmp_path)], options=rules.Options())
    assert [f for f in result.findings if f.severity == "error"] == []
    cfgs = [lint.load(str(tmp_path / "launch.sh"), True)]
    assert [f.value for f in facts.world_sizes(rules.Setup(cfgs, rules.Options()))] == [8]


# --- the transformers rows against the TrainingArguments of the stacks' own releases --------------------
@pytest.mark.framework
@pytest.mark.parametrize("stack", ["llamafactory", "openrlhf", "trl"])
def test_transformers_rows_match_the_installed_training_args(stack):
    # transformers 5.6.0 (llamafactory), 5.15.0 (openrlhf), 5.23.0 (trl): the source is read, not imported.
    import glob
    import re

    from ftrecipes import devenv

    devenv.ensure_env(stack)
    [pkg] = glob.glob(str(devenv.env_dir(stack) / "lib" / "python3*" / "site-packages" / "transformers"))
    version = re.search(r'__version__ = "([^"]+)"', open(f"{pkg}/__init__.py").read())[1]
    src = open(f"{pkg}/training_args.py").read()
    t = versions.history("transformers")

    def field(name):
        return re.search(rf"^    {name}: ", src, re.M) is not None

    for key in ("warmup_ratio", "activation_checkpointing", "gradient_checkpointing"):
        errors = [m for sev, m in t.problems(key, version) if sev == "error"]
        assert field(key) == (not errors), (version, key, errors)
    deprecated_alias = "Deprecated alias of `activation_checkpointing`" in src
    assert deprecated_alias == any(sev == "warning" for sev, _ in t.problems("gradient_checkpointing", version)), version
