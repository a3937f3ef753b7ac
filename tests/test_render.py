import json
import os
import stat

import pytest
import yaml

from ftrecipes import recipe, render
from ftrecipes.errors import UserError

NAMES = recipe.names()


def test_there_are_recipes():
    assert "qwen7b-lora-h100x8" in NAMES


def test_primary_file_is_deepspeed_json(run_cli):
    code, out, err = run_cli("qwen7b-lora-h100x8", prog="render")
    assert code == 0, err
    ds = json.loads(out)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["bf16"] == {"enabled": True}
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 4
    assert out.endswith("}\n") and not out.endswith("\n\n")


def test_ftrecipes_render_equals_render(run_cli):
    a = run_cli("render", "qwen7b-lora-h100x8", "--file", "accelerate.yaml")
    b = run_cli("qwen7b-lora-h100x8", "--file", "accelerate.yaml", prog="render")
    assert a == b and a[0] == 0


def test_set_overrides_flow_into_every_file(run_cli):
    code, out, _ = run_cli("render", "qwen7b-lora-h100x8", "--set", "micro_batch_size=2", "--set", "seq_len=4096")
    assert code == 0
    ds = json.loads(out)
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["train_batch_size"] == 2 * 4 * 4
    code, out, _ = run_cli("render", "qwen7b-lora-h100x8", "--file", "grpo.yaml", "--set", "micro_batch_size=2", "--set", "seq_len=4096")
    cfg = yaml.safe_load(out)
    assert cfg["per_device_train_batch_size"] == 2
    code, out, _ = run_cli("render", "qwen7b-lora-h100x8", "--file", "launch.sh", "--set", "micro_batch_size=2", "--set", "seq_len=4096")
    assert "--max-model-len 5120 " in out  # the server's context: 4,096 prompt + 1,024 completion tokens
    assert "# Overrides: micro_batch_size=2 seq_len=4096" in out


@pytest.mark.parametrize(
    "setting, needle",
    [
        ("micro_batch_size=abc", "expected an integer"),
        ("micro_batch_size=0", "out of range"),
        ("micro_batch_sise=2", "did you mean 'micro_batch_size'"),
        ("precision=bf17", "expected one of"),
        ("gradient_checkpointing=maybe", "expected true or false"),
        ("num_generations=7", "not divisible by num_generations=7"),
        ("novalue", "expected key=value"),
    ],
)
def test_bad_values_are_one_line_exit_2(run_cli, setting, needle):
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--set", setting)
    assert code == 2
    assert out == ""
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_template_syntax_in_values_is_data(run_cli):
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--file", "grpo.yaml", "--set", "output_dir={{ 7 * 7 }}")
    assert code == 0, err
    assert yaml.safe_load(out)["output_dir"] == "{{ 7 * 7 }}"
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--file", "grpo.yaml", "--set", "dataset=x: y\nevil: 1")
    assert code == 0, err
    data = yaml.safe_load(out)
    assert data["dataset_name"] == "x: y\nevil: 1" and "evil" not in data
    assert out.splitlines()[1] == '# Overrides: dataset="x: y\\nevil: 1"'


def test_shell_values_are_quoted(run_cli):
    import shlex

    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--file", "launch.sh", "--set", "model=org/a;rm&x|y")
    assert code == 0, err
    line = next(l for l in out.splitlines() if " vllm serve " in l)
    assert shlex.split(line.rstrip(" \\"))[-3:] == ["vllm", "serve", "org/a;rm&x|y"]
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--file", "launch.sh", "--set", "model=a b")
    assert code == 2 and "model" in err  # whitespace is never part of a model id


def test_unknown_recipe_and_file(run_cli):
    code, _, err = run_cli("render", "qwen7b-lora-h100x9")
    assert code == 2 and "did you mean 'qwen7b-lora-h100x8'" in err
    code, _, err = run_cli("render", "qwen7b-lora-h100x8", "--file", "ds.jsn")
    assert code == 2 and "did you mean 'ds.json'" in err


def test_output_dir_writes_all_and_refuses_overwrite(run_cli, tmp_path):
    out = tmp_path / "run"
    code, _, err = run_cli("render", "qwen7b-lora-h100x8", "-o", str(out))
    assert code == 0, err
    r = recipe.load("qwen7b-lora-h100x8")
    # Files with a `when` (serve.sh, slurm.sbatch: nodes > 1 only) are not part of a one-node render.
    assert sorted(p.name for p in out.iterdir()) == sorted(f.name for f in r.files if f.when is None)
    assert os.stat(out / "launch.sh").st_mode & stat.S_IXUSR
    before = {p.name: p.read_text() for p in out.iterdir()}
    code, _, err = run_cli("render", "qwen7b-lora-h100x8", "-o", str(out), "--set", "micro_batch_size=2")
    assert code == 2 and "--force" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    code, _, err = run_cli("render", "qwen7b-lora-h100x8", "-o", str(out), "--set", "micro_batch_size=2", "--force")
    assert code == 0
    assert json.loads((out / "ds.json").read_text())["train_micro_batch_size_per_gpu"] == 2
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_bad_values_write_nothing(run_cli, tmp_path):
    out = tmp_path / "run"
    code, _, _ = run_cli("render", "qwen7b-lora-h100x8", "-o", str(out), "--set", "num_generations=7")
    assert code == 2 and not out.exists()


@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_renders_and_validates(name):
    r = recipe.load(name)
    files = render.render(r)
    assert [f.name for f, _ in files] == [f.name for f in r.files if not f.when]
    for f, text in files:
        assert text.endswith("\n") and not text.endswith("\n\n")
        assert render.check_output(f, text, name) == []
        if f.format != "deepspeed":
            assert f"{r.name}@{r.version}" in text.splitlines()[0] + text.splitlines()[1]


def test_header_carries_name_and_version():
    r = recipe.load("qwen7b-lora-h100x8")
    text = dict((f.name, t) for f, t in render.render(r))["launch.sh"]
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert lines[1].startswith("# Rendered by ftrecipes from qwen7b-lora-h100x8@")


def test_value_schema_errors_in_recipe_yaml_name_file_and_line(tmp_path):
    import shutil

    src = recipe.load("qwen7b-lora-h100x8").dir
    dst = tmp_path / "qwen7b-lora-h100x8"
    shutil.copytree(src, dst)
    text = (dst / "recipe.yaml").read_text().replace("  micro_batch_size: 4\n", "  micro_batch_size: four\n")
    (dst / "recipe.yaml").write_text(text)
    line = text.splitlines().index("  micro_batch_size: four") + 1
    r = recipe.load_dir(dst)
    with pytest.raises(UserError) as exc:
        render.render(r)
    assert f"recipe.yaml:{line}:" in str(exc.value) and "micro_batch_size" in str(exc.value)


def test_values_file(run_cli, tmp_path):
    vals = tmp_path / "vals.yaml"
    vals.write_text("micro_batch_size: 2\nseq_len: 4096\n")
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--values", str(vals), "--set", "grad_accum=8")
    assert code == 0, err
    ds = json.loads(out)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (2, 8)
    vals.write_text("micro_batch_size: 2\nseq_lenn: 4096\n")
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--values", str(vals))
    assert code == 2 and f"{vals}:2:1:" in err and "did you mean 'seq_len'" in err
    vals.write_text("micro_batch_size: two\n")
    code, out, err = run_cli("render", "qwen7b-lora-h100x8", "--values", str(vals))
    assert code == 2 and f"{vals}:1:1:" in err and "micro_batch_size" in err


def test_primary_file_is_the_sharding_config():
    """The DeepSpeed config where a recipe has one; an FSDP recipe has none, and its accelerate
    config (where FSDP is set) is the primary file; a recipe that shards nothing (one process)
    leads with its trainer config."""
    for name in NAMES:
        r = recipe.load(name)
        formats = {f.format for f in r.files}
        if "deepspeed" in formats:
            expected = "deepspeed"
        else:
            acc = [text for f, text in render.render(r, {}, check=False) if f.format == "accelerate"]
            fsdp = any(yaml.safe_load(text).get("distributed_type") == "FSDP" for text in acc)
            expected = "accelerate" if fsdp else r.meta["framework"]["name"]
        assert r.primary.format == expected, name
