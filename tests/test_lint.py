import json
import shutil

import pytest

from ftrecipes import recipe

GOOD_DS = """{
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2}
}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_clean_config_exit_0(run_cli, tmp_path):
    code, out, err = run_cli("lint", write(tmp_path, "ds.json", GOOD_DS))
    assert (code, out) == (0, "")


def test_misspelled_top_level_key_is_an_error_with_suggestion(run_cli, tmp_path):
    path = write(tmp_path, "ds.json", GOOD_DS.replace('"train_micro_batch_size_per_gpu"', '"train_micro_batch_size_per_gpus"'))
    code, out, _ = run_cli("lint", path)
    assert code == 1
    assert out == (
        f"{path}:3:3: unknown-key unknown key 'train_micro_batch_size_per_gpus' (DeepSpeed ignores it silently); "
        "did you mean 'train_micro_batch_size_per_gpu'?\n"
    )


def test_json_format(run_cli, tmp_path):
    path = write(tmp_path, "ds.json", GOOD_DS.replace('"stage": 2', '"stage": 5'))
    code, out, _ = run_cli("lint", "--format", "json", path)
    assert code == 1
    [item] = json.loads(out)
    assert item == {
        "path": path, "line": 6, "column": 25, "rule": "bad-value", "severity": "error",
        "message": item["message"],
    }
    assert "zero_optimization.stage" in item["message"]


def test_duplicate_keys(run_cli, tmp_path):
    path = write(tmp_path, "ds.json", GOOD_DS.replace('"bf16"', '"gradient_accumulation_steps": 4,\n  "bf16"'))
    code, out, _ = run_cli("lint", path)
    assert code == 1 and "duplicate-key" in out and ":5:3:" in out


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("empty.json", "", "empty"),
        ("trunc.json", '{"train_batch_size": ', "invalid JSON"),
        ("bad.yaml", "a: [1,\n", "invalid YAML"),
        ("bin.json", "\x00\x01", "binary"),
        ("what.yaml", "hello: world\n", "cannot tell which kind"),
    ],
)
def test_unusable_input_exit_2(run_cli, tmp_path, name, content, needle):
    path = write(tmp_path, name, content)
    code, out, err = run_cli("lint", path)
    assert code == 2 and needle in out and out.count("\n") == 1


def test_missing_path_and_empty_directory(run_cli, tmp_path):
    code, out, _ = run_cli("lint", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in out
    (tmp_path / "empty").mkdir()
    code, out, err = run_cli("lint", str(tmp_path / "empty"))
    assert code == 0 and out == "" and "no configs found" in err and "nothing was checked" in err


# The shape of LLaMA-Factory's v1 configs (hiyouga/LlamaFactory examples/v1/train_lora/
# train_lora_sft.yaml at ff6d4d12e): output_dir and learning_rate are TRL keys too, the rest are not
LF_V1 = """model: Qwen/Qwen3-4B
model_class: llm
peft_config:
  name: lora
  r: 16
dist_config:
  name: fsdp2
train_dataset: data/v1_sft_demo.yaml
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10
"""


def test_a_file_most_of_whose_keys_no_known_format_has_is_not_judged_as_one(run_cli, tmp_path):
    """Two keys every trainer uses would pick TRL and make each other key an error: such a file is
    one lint cannot tell (exit 2, one line), while a TRL file with a few misspelt keys is still
    TRL's and its typos are reported."""
    code, out, _ = run_cli("lint", write(tmp_path, "v1.yaml", LF_V1))
    assert code == 2 and "cannot tell which kind" in out and out.count("\n") == 1
    trl = ("model_name_or_path: Qwen/Qwen2.5-7B\noutput_dir: out\nlearning_rate: 1.0e-5\n"
           "per_device_train_batch_size: 2\nnum_generations: 8\nuse_vllm: true\nlerning_rate_x: 3\nbetta: 0.1\n")
    code, out, _ = run_cli("lint", write(tmp_path, "grpo.yaml", trl))
    assert code == 1 and "unknown key 'lerning_rate_x'" in out and "unknown key 'betta'" in out
    code, out, _ = run_cli("lint", "--kind", "trl", write(tmp_path, "v1b.yaml", LF_V1))
    assert code == 1 and "unknown key 'peft_config'" in out  # --kind still decides


def test_kind_override(run_cli, tmp_path):
    path = write(tmp_path, "x.yaml", "train_batch_size: 8\nzero_optimization: {stage: 2}\nbogus: 1\n")
    code, out, _ = run_cli("lint", "--kind", "deepspeed", path)
    assert code == 1 and "unknown key 'bogus'" in out


@pytest.mark.parametrize("name", recipe.names())
def test_rendered_recipes_lint_clean(run_cli, name):
    code, out, _ = run_cli("lint", str(recipe.load(name).dir / "rendered"))
    assert code == 0, out


def test_directory_walk_skips_non_configs(run_cli, tmp_path):
    shutil.copytree(recipe.load("qwen7b-lora-h100x8").dir / "rendered", tmp_path / "cfg")
    write(tmp_path / "cfg", "notes.yaml", "title: hello\n")
    code, out, _ = run_cli("lint", str(tmp_path))
    assert code == 0, out


def test_skip_unknown_for_pre_commit(run_cli, tmp_path):
    other = write(tmp_path, "package.json", '{"name": "x"}')
    bad = write(tmp_path, "ds.json", GOOD_DS.replace('"stage": 2', '"stage": 7'))
    assert run_cli("lint", "--skip-unknown", other)[0] == 0
    code, out, _ = run_cli("lint", "--skip-unknown", other, bad)
    assert code == 1 and "stage" in out
    assert run_cli("lint", other)[0] == 2  # without the flag a non-config is unusable input


def test_pre_commit_hook_definition():
    import yaml

    from conftest import ROOT

    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "ftrecipes-lint" and hook["entry"].startswith("ftrecipes lint")
    assert hook["language"] == "python"


def test_keys_refused_beside_deepspeed_config_file_are_one_finding_each_at_their_own_line(run_cli):
    # accelerate launch passes the deepspeed_config keys the file has (and mixed_precision when the
    # file gives any value, "no" included) in ACCELERATE_CONFIG_DS_FIELDS, and
    # DeepSpeedPlugin._deepspeed_config_checks raises when deepspeed_config_file is set too
    # (accelerate 1.15.0 commands/launch.py, utils/dataclasses.py). Each key is its own finding,
    # at its own line, naming where the DeepSpeed JSON says the same.
    from pathlib import Path

    example = Path(__file__).parent / "schema_examples" / "accelerate" / "invalid" / "config_file_plus_inline_keys.yaml"
    code, out, err = run_cli("lint", str(example))
    assert code == 1 and err == ""
    lines = out.strip().splitlines()
    assert len(lines) == 3, out
    assert "config_file_plus_inline_keys.yaml:5:3: conflicting-key deepspeed_config.zero_stage:" in lines[0]
    assert "set zero_optimization.stage in the DeepSpeed JSON" in lines[0]
    assert ":6:3: conflicting-key deepspeed_config.gradient_accumulation_steps:" in lines[1]
    assert ":7:1: conflicting-key mixed_precision:" in lines[2]


@pytest.mark.parametrize("mixed, refused", [("bf16", True), ("'no'", True), ("null", False)])
def test_mixed_precision_beside_deepspeed_config_file(tmp_path, run_cli, mixed, refused):
    cfg = tmp_path / "acc.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                   f"deepspeed_config:\n  deepspeed_config_file: ds.json\nmixed_precision: {mixed}\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}}')
    code, out, _ = run_cli("lint", str(cfg))
    assert ("conflicting-key mixed_precision" in out) is refused, out


def test_the_same_keys_without_deepspeed_config_file_are_fine(tmp_path, run_cli):
    cfg = tmp_path / "acc.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                   "deepspeed_config:\n  zero_stage: 2\n  gradient_accumulation_steps: 8\nmixed_precision: bf16\n")
    code, out, _ = run_cli("lint", str(cfg))
    assert "conflicting-key" not in out, out


@pytest.mark.parametrize("schema, instance", [
    ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "c": 3, "b": 2}),
    ({"properties": {"a": {}}, "additionalProperties": False}, {"b": 2}),
    ({"properties": {"a": {}}, "patternProperties": {"^x": {}, "y$": {}}, "additionalProperties": False}, {"a": 1, "xb": 2, "c": 3, "ay": 4}),
    ({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}, {"a": 1, "b": "s", "c": 3}),
    ({"properties": {"a": {"additionalProperties": False}}}, {"a": {"q": 1}}),
])
def test_additional_properties_errors_are_jsonschemas(schema, instance):
    # schemas.validator() replaces jsonschema's additionalProperties only to stop listing (and
    # sorting) every extra key in one message; up to 20 keys its errors are jsonschema's own.
    from jsonschema import Draft202012Validator

    from ftrecipes import schemas

    def errors(v):
        return sorted((e.message, list(e.absolute_path), e.validator) for e in v.iter_errors(instance))

    assert errors(schemas.validator(schema)) == errors(Draft202012Validator(schema))


def test_additional_properties_message_names_twenty_keys_and_counts_the_rest():
    from ftrecipes import schemas

    instance = {f"k{i:02d}": i for i in range(25)}
    (err,) = schemas.validator({"additionalProperties": False}).iter_errors(instance)
    assert err.message == ("Additional properties are not allowed (" + ", ".join(f"'k{i:02d}'" for i in range(20))
                           + " and 5 more were unexpected)")


def test_a_walk_that_finds_no_config_checks_nothing_and_says_so(run_cli, tmp_path):
    """A pull-request check of a repository without configs: exit 0, stdout the empty report of its
    format, one note on stderr (ruff and black say so and exit 0 for a folder without Python
    files). A file named on the command line that is no config is still unusable input."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("print('hi')\n")
    (repo / "notes.yaml").write_text("title: notes\n")
    code, out, err = run_cli("lint", str(repo))
    assert (code, out, err) == (0, "", f"ftrecipes: note: no configs found in {repo}; nothing was checked\n")
    code, out, err = run_cli("lint", "--format", "json", str(repo))
    assert code == 0 and json.loads(out) == [] and "nothing was checked" in err
    code, out, err = run_cli("lint", str(repo / "notes.yaml"))
    assert code == 2 and "cannot tell which kind of config" in out and err == ""
    ds = write(tmp_path, "ds.json", GOOD_DS)
    code, out, err = run_cli("lint", str(repo), ds)
    assert code == 0 and err == ""
