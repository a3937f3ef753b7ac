"""Bad input never crashes: `ftrecipes lint` and `render` answer with one clear line and exit 2.

Every case runs the real CLI in a subprocess (python -m ftrecipes, base dependencies only) and
checks: exit status, exactly one non-empty output line (stdout + stderr), no traceback, and
for parse errors a line:column.
"""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_subprocess

ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
LINE_COL = re.compile(r":\d+:\d+: ")


def lint(*args, **kw):
    return run_subprocess(["-m", "ftrecipes", "lint", *map(str, args)], **kw)


def render(*args, **kw):
    return run_subprocess(["-m", "ftrecipes", "render", *args], **kw)


def one_line(proc, code=2):
    out = (proc.stdout + proc.stderr).strip("\n")
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert proc.returncode == code, (proc.returncode, out)
    return lines[0]


def alias_bomb(levels=9, width=9):
    text = 'a0: &a0 ["lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text


# name -> (file name, content as bytes, expected words in the message, wants line:col)
FILES = {
    "empty": ("ds.json", b"", "empty file", False),
    "blank": ("ds.yaml", b"  \n\n\t\n", "empty file", False),
    "binary": ("ds.json", b"\x00\x01\x02\xffbinary\x00", "binary file", False),
    "invalid-utf8": ("ds.json", b'{"train_batch_size": 8, "x": "\xff\xfe"}', "invalid UTF-8", False),
    "latin1-yaml": ("cfg.yaml", "model_name_or_path: caf\u00e9\n".encode("latin-1"), "invalid UTF-8", False),
    "truncated-json": ("ds.json", b'{\n  "train_batch_size": 8,\n  "bf16": {"enabled": tr', "invalid JSON", True),
    "truncated-json-eof": ("ds.json", b'{\n  "train_batch_size": 8,\n', "invalid JSON", True),
    "json-trailing-comma": ("ds.json", b'{"train_batch_size": 8,}', "invalid JSON", True),
    "json-two-docs": ("ds.json", b'{"a": 1} {"b": 2}', "invalid JSON", True),
    "json-deep": ("ds.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply", True),
    "yaml-bad-indent": ("cfg.yaml", b"a: 1\n b: [1, 2\n", "invalid YAML", True),
    "yaml-unclosed-quote": ("cfg.yaml", b'model_name_or_path: "Qwen\nbf16: true\n', "invalid YAML", True),
    "yaml-tab": ("cfg.yaml", b"a:\n\t- b\n", "invalid YAML", True),
    "yaml-python-tag": ("cfg.yaml", b"a: !!python/object/apply:os.system [id]\n", "invalid YAML", True),
    "yaml-c1-control": ("cfg.yaml", "model_name_or_path: a\u0080b\n".encode(), "not allowed", True),
    "yaml-two-docs": ("cfg.yaml", b"a: 1\n---\nb: 2\n", "invalid YAML", True),
    "yaml-deep-flow": ("cfg.yaml", b"[" * 100_000 + b"]" * 100_000, "nested too deeply", False),
    "yaml-deep-block": ("cfg.yaml", "".join(" " * i + "a:\n" for i in range(3000)).encode(), "nested too deeply", False),
    "yaml-alias-bomb": ("cfg.yaml", alias_bomb().encode(), "alias bomb", False),
    "yaml-merge-key": ("cfg.yaml", b"base: &b {bf16: true}\ncfg:\n  <<: *b\n", "merge keys", True),
    "yaml-complex-key": ("cfg.yaml", b"? [a, b]\n: 1\n", "plain scalars", True),
    "unknown-kind": ("thing.json", b'{"hello": "world"}', "--kind", False),
    "top-level-list": ("thing.yaml", b"- 1\n- 2\n", "--kind", False),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_lint_bad_file(tmp_path, case):
    name, content, words, line_col = FILES[case]
    path = tmp_path / name
    path.write_bytes(content)
    started = time.monotonic()
    proc = lint(path, timeout=60)
    elapsed = time.monotonic() - started
    line = one_line(proc)
    assert words in line, line
    assert line.startswith(str(path)), line
    if line_col:
        assert LINE_COL.search(line), line
    assert elapsed < 20, f"{case} took {elapsed:.1f} s"


def test_lint_json_error_position_is_exact(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{\n  "train_batch_size": 8,\n  "bf16": {"enabled": tru}\n}\n')
    line = one_line(lint(path))
    assert f"{path}:3:" in line, line


def test_lint_yaml_error_position_is_exact(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model_name_or_path: x\nbf16: [true\nlearning_rate: 1\n")
    line = one_line(lint(path))
    assert re.search(rf"{re.escape(str(path))}:[34]:\d+: ", line), line


def test_lint_100mb_file_is_refused_fast(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.write(b'{"train_batch_size": 8, "x": "')
        fh.truncate(100 * 1024 * 1024)  # sparse: instant to make, 100 MB to read
    started = time.monotonic()
    proc = lint(path, timeout=60)
    elapsed = time.monotonic() - started
    line = one_line(proc)
    assert "larger than" in line, line
    assert elapsed < 10, f"took {elapsed:.1f} s"


@pytest.mark.skipif(ROOT_USER, reason="root reads mode-000 files; see the symlink/directory cases")
def test_lint_unreadable_file(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 8}')
    path.chmod(0)
    try:
        line = one_line(lint(path))
    finally:
        path.chmod(0o644)
    assert "cannot read" in line, line


def test_lint_dangling_symlink(tmp_path):
    link = tmp_path / "ds.json"
    link.symlink_to(tmp_path / "missing" / "ds.json")
    line = one_line(lint(link))
    assert "cannot read" in line, line


@pytest.mark.parametrize("verb", ["lint", "estimate"])
def test_symlink_loop_is_one_line_exit_2(tmp_path, verb):
    """A config that is a symbolic-link loop: Path.resolve raises RuntimeError on it in Python
    3.11, which the repository-pins lookup used to do before the read reported the loop."""
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    args = ["lint", str(tmp_path / "a.json")] if verb == "lint" else [
        "estimate", "--config", str(tmp_path / "a.json"), "--model", "Llama-3-8B"]
    line = one_line(run_subprocess(["-m", "ftrecipes", *args], timeout=60))
    assert "symbolic link loop" in line, line


def test_lint_missing_path(tmp_path):
    line = one_line(lint(tmp_path / "nope.json"))
    assert "cannot read" in line, line


def test_lint_directory_named_like_a_file(tmp_path):
    d = tmp_path / "ds.json"
    d.mkdir()
    line = one_line(lint(d), code=0)
    assert line == f"ftrecipes: note: no configs found in {d}; nothing was checked", line


def test_lint_directory_without_configs(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "sub").mkdir()
    proc = lint(tmp_path)
    assert proc.stdout == "", proc.stdout
    assert one_line(proc, code=0) == f"ftrecipes: note: no configs found in {tmp_path}; nothing was checked"


def test_lint_kind_given_but_not_a_mapping(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text("[1, 2, 3]")
    line = one_line(lint("--kind", "deepspeed", path), code=1)
    assert "mapping" in line, line


def test_lint_lone_surrogate_key_is_reported_not_crashed(tmp_path):
    # json allows "\ud800" escapes; echoing such a key back used to raise UnicodeEncodeError.
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 8, "\\ud800x": 1}')
    line = one_line(lint("--kind", "deepspeed", path), code=1)
    assert "unknown-key" in line, line


def test_lint_no_arguments():
    line = one_line(lint())
    assert "FILE_OR_DIR" in line, line


# ---------------------------------------------------------------- render

RECIPE = "qwen7b-lora-h100x8"


@pytest.mark.parametrize(
    "args,words",
    [
        (["no-such-recipe"], "no recipe named"),
        ([RECIPE, "--set", "no_such_value=1"], "has no value"),
        ([RECIPE, "--set", "zero_stage"], "expected key=value"),
        ([RECIPE, "--set", "micro_batch_size=abc"], "expected an integer"),
        ([RECIPE, "--set", "micro_batch_size=0"], "micro_batch_size"),
        ([RECIPE, "--set", "learning_rate=nan"], "finite"),
        ([RECIPE, "--set", "zero_stage=7"], "zero_stage"),
        ([RECIPE, "--set", "precision=fp8"], "precision"),
        ([RECIPE, "--set", "gradient_checkpointing=maybe"], "true or false"),
        ([RECIPE, "--file", "nope.yaml"], "has no file"),
    ],
)
def test_render_bad_input(args, words):
    line = one_line(render(*args))
    assert words in line, line
    assert line.startswith("ftrecipes: error: "), line


def test_render_non_utf8_set_value():
    proc = run_subprocess([b"-m", b"ftrecipes", b"render", RECIPE.encode(), b"--set", b"model=Qwen\xff"])
    line = one_line(proc)
    assert "UTF-8" in line, line


def test_render_bad_values_file(tmp_path):
    bad = tmp_path / "values.yaml"
    bad.write_bytes(b"micro_batch_size: [1\n")
    line = one_line(render(RECIPE, "--values", str(bad)))
    assert LINE_COL.search(line) or re.search(r":\d+: ", line), line


def test_render_output_dir_under_a_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    line = one_line(render(RECIPE, "-o", str(blocker / "out")))
    assert "cannot create directory" in line or "not a directory" in line.lower(), line
    line = one_line(render(RECIPE, "-o", str(blocker)))
    assert "not a directory" in line, line


@pytest.mark.skipif(ROOT_USER, reason="root writes into mode-555 directories")
def test_render_unwritable_output_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        line = one_line(render(RECIPE, "-o", str(ro / "out")))
    finally:
        ro.chmod(0o755)
    assert "cannot" in line, line


def test_render_refuses_to_overwrite(tmp_path):
    out = tmp_path / "out"
    assert render(RECIPE, "-o", str(out)).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = one_line(render(RECIPE, "-o", str(out), "--set", "micro_batch_size=2"))
    assert "--force" in line, line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_render_value_with_line_breaks_stays_one_line():
    line = one_line(render(RECIPE, "--set", "micro_batch_size=1\n2"))
    assert "\\n" in line, line


def test_lint_key_with_line_break_is_one_line(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 8, "a\\nb\\u2028c": 1}')
    line = one_line(lint("--kind", "deepspeed", path), code=1)
    assert "unknown-key" in line, line


def test_cli_imports_no_framework():
    # The CLI starts with base dependencies only.
    proc = run_subprocess(["-c", "import sys, ftrecipes.cli; sys.exit(0 if 'torch' not in sys.modules else 1)"])
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- estimate: flags, --config, --model


def estimate(*args, **kw):
    return run_subprocess(["-m", "ftrecipes", "estimate", *map(str, args)], **kw)


@pytest.mark.parametrize(
    "flag, value",
    [("--seq-len", "-1"), ("--seq-len", "0"), ("--gpus", "0"), ("--micro-batch", "0"), ("--lora-rank", "-4"),
     ("--params", "nan"), ("--params", "-7e9"), ("--host-ram-gb", "inf"), ("--vllm-gpu-memory-utilization", "1.5"),
     ("--gpus-per-node", "9" * 5000), ("--vllm-gpus", "-1")],
)
def test_estimate_flag_out_of_range(flag, value):
    # Before: `--seq-len -1` printed "peak -34.1 GiB -> FITS" and exited 0.
    line = one_line(estimate("--model", "Llama-3-8B", flag, value))
    assert f"argument {flag}" in line, line


# name -> (DeepSpeed JSON bytes, expected words, expected "line:col: key")
DS_CONFIGS = {
    "empty": (b"", "empty file", "1"),
    "comment": (b'// ZeRO-3\n{"train_batch_size": 8}', "unexpected character", "1:1"),
    "non-utf8": (b'{"a": "\xff"}', "invalid UTF-8", "1:8"),
    "null": (b"null", "cannot tell which kind of config", ""),
    "bf16-int": (b'{"bf16": 5}', "must be a mapping", "1:2: bf16"),
    "bf16-enabled-str": (b'{"bf16": {"enabled": "yes"}}', "true or false", "1:11: bf16.enabled"),
    "zero-null": (b'{"zero_optimization": null}', "must be a mapping, not null", "1:2: zero_optimization"),
    "stage-7": (b'{"zero_optimization": {"stage": 7}}', "must be one of", "1:24: zero_optimization.stage"),
    "stage-true": (b'{"zero_optimization": {"stage": true}}', "must be one of", "1:24: zero_optimization.stage"),
    "inf": (b'{"train_batch_size": 1e400}', "not finite", "1:22"),
    "nan": (b'{"train_batch_size": NaN}', "NaN is not a JSON number", "1:22"),
    "bigint": (b'{"train_batch_size": ' + b"9" * 10_000 + b"}", "too large", "1:22"),
    "huge": (b'{"train_batch_size": 99999999999999999999999}', "from 1 to", "1:2: train_batch_size"),
    "micro-neg": (b'{"train_micro_batch_size_per_gpu": -2}', "from 1 to", "1:2: train_micro_batch_size_per_gpu"),
    "micro-zero": (b'{"train_micro_batch_size_per_gpu": 0}', "from 1 to", "1:2: train_micro_batch_size_per_gpu"),
    "micro-float": (b'{"train_micro_batch_size_per_gpu": 2.0}', "not float 2.0", "1:2"),
    "bucket-str": (b'{"zero_optimization": {"reduce_bucket_size": "big"}}', "whole number", "1:24: zero_optimization.reduce_bucket_size"),
    "offload-list": (b'{"zero_optimization": {"offload_param": []}}', "must be a mapping", "1:24: zero_optimization.offload_param"),
    "device": (b'{"zero_optimization": {"offload_optimizer": {"device": "gpu"}}}', "must be one of", "1:46: zero_optimization.offload_optimizer.device"),
    "duplicate": (b'{"train_batch_size": 8,\n "train_batch_size": 16}', "duplicate key", "2:2: train_batch_size"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply", "1:"),
}


@pytest.mark.parametrize("case", sorted(DS_CONFIGS))
def test_estimate_bad_deepspeed_config(tmp_path, case):
    content, words, where = DS_CONFIGS[case]
    path = tmp_path / "ds.json"
    path.write_bytes(content)
    line = one_line(estimate("--config", path, "--model", "Llama-3-8B"))
    assert words in line, line
    assert f"ds.json:{where}" in line, line


def test_estimate_config_that_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "ds.json"
    os.mkfifo(fifo)
    start = time.monotonic()
    assert "a fifo" in one_line(estimate("--config", fifo, "--model", "Llama-3-8B", timeout=20))
    assert time.monotonic() - start < 10
    assert "a character device" in one_line(estimate("--config", "/dev/zero", "--model", "Llama-3-8B"))
    assert "no such file" in one_line(estimate("--config", tmp_path / "missing.json", "--model", "Llama-3-8B"))


def test_estimate_deepspeed_config_with_bom_and_crlf(tmp_path):
    path = tmp_path / "ds.json"
    path.write_bytes(b'\xef\xbb\xbf{\r\n "train_micro_batch_size_per_gpu": 2,\r\n "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}\r\n}\r\n')
    proc = estimate("--config", path, "--model", "Llama-3-8B", "--json")
    assert proc.returncode in (0, 3), proc.stderr
    assert '"micro_batch": 2' in proc.stdout or '"micro_batch":2' in proc.stdout.replace(" ", ""), proc.stdout[:400]


HF_OK = {"hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2, "num_attention_heads": 4}


@pytest.mark.parametrize(
    "change, words, key",
    [
        ({"hidden_size": -64}, "from 1 to", "hidden_size"),
        ({"hidden_size": "64"}, "from 1 to", "hidden_size"),
        ({"hidden_size": 64.0}, "from 1 to", "hidden_size"),
        ({"num_attention_heads": 0}, "from 1 to", "num_attention_heads"),
        ({"vocab_size": 10**30}, "from 1 to", "vocab_size"),
        ({"hidden_size": None}, "missing hidden_size", None),
        ({"text_config": 5}, "must be a mapping", "text_config"),
        ({"text_config": {"hidden_size": 8}}, "missing vocab_size", None),
        ({"tie_word_embeddings": "no"}, "true or false", "tie_word_embeddings"),
        ({"model_type": 3}, "must be a string", "model_type"),
    ],
)
def test_estimate_bad_hf_config(tmp_path, change, words, key):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**HF_OK, **change}))
    line = one_line(estimate("--model", path))
    assert words in line, line
    assert re.search(r"config\.json:\d+:\d+: ", line), line
    if key:
        assert f": {key}: " in line, line


def test_estimate_hf_config_folder_holding_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    assert "a fifo" in one_line(estimate("--model", tmp_path, timeout=20))


def test_estimate_usage_errors_are_one_line():
    assert "invalid choice" in one_line(estimate("--model", "Llama-3-8B", "--zero-stage", "9"))
    assert "needs a recipe name" in one_line(estimate())
    assert "unknown model" in one_line(estimate("--model", "No-Such-Model-7B"))


@pytest.mark.parametrize("item, key", [("trainer=abc", "trainer"), ("load_dtype=abc", "load_dtype"),
                                       ("trl_version=abc", "trl_version")])
def test_estimate_set_refuses_values_the_model_would_ignore(item, key):
    # accepted without a word before: a trainer or dtype the model has no rule for changed nothing
    line = one_line(estimate("--model", "Qwen2.5-7B", "--set", item))
    assert key in line and "'abc'" in line, line


def test_estimate_config_naming_no_model_names_the_file(tmp_path):
    # an accelerate file alone says how to launch, not what to train: the line names it and the flag
    acc = tmp_path / "accelerate.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 8\n")
    line = one_line(estimate("--config", acc))
    assert line.startswith(f"ftrecipes: error: {acc}: names no model") and "--model" in line, line


def test_estimate_svg_into_a_missing_folder(tmp_path):
    line = one_line(estimate("--model", "Llama-3-8B", "--svg", tmp_path / "no" / "chart.svg"))
    assert "cannot write" in line or "does not exist" in line, line
    assert not (tmp_path / "no").exists()


# ---------------------------------------------------------------- lint never reads what is not a regular file


def test_lint_folder_with_a_fifo_named_like_a_config(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8}')
    os.mkfifo(tmp_path / "zz.json")  # would block lint forever if opened for reading
    start = time.monotonic()
    proc = lint(tmp_path, timeout=30)
    assert time.monotonic() - start < 10
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "zz.json" not in proc.stdout + proc.stderr


def test_lint_explicit_fifo_and_device_are_unusable(tmp_path):
    os.mkfifo(tmp_path / "ds.json")
    assert "a fifo" in one_line(lint(tmp_path / "ds.json", timeout=30))
    assert "a character device" in one_line(lint("--kind", "deepspeed", "/dev/zero", timeout=30))


def test_lint_does_not_read_a_model_path_that_is_a_device(tmp_path):
    # memory-fit loads a local config.json the trainer config names: /dev/zero must not be read.
    (tmp_path / "trl.yaml").write_text("model_name_or_path: /dev/zero\nbf16: true\nper_device_train_batch_size: 1\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}}')
    start = time.monotonic()
    proc = lint(tmp_path, "--gpu", "A100-80GB", timeout=30)
    assert time.monotonic() - start < 10
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        ("seq_len: 4096.0\n", "seq_len: expected an integer, got float 4096.0"),  # jsonschema calls 4096.0 an integer
        ("micro_batch_size: true\n", "micro_batch_size"),  # bool is an int in Python
        ("learning_rate: .nan\n", "not finite"),
        ("learning_rate: .inf\n", "not finite"),
        ("seq_len: !!int abc\n", "not a valid !!int"),
        ("seq_len: " + "9" * 5000 + "\n", "integer is too large"),
        ("gradient_checkpointing: 1\n", "gradient_checkpointing"),
        ("model: !!binary aGVsbG8=\n", "not supported"),
    ],
)
def test_render_values_file_gets_the_set_checks(tmp_path, content, words):
    path = tmp_path / "values.yaml"
    path.write_text(content)
    line = one_line(render(RECIPE, "--values", str(path)))
    assert words in line, line
    assert LINE_COL.search(line), line


def test_render_values_file_alias_bomb_is_refused_quickly(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(alias_bomb(levels=9, width=9) + "model: *a9\n")
    start = time.monotonic()
    line = one_line(render(RECIPE, "--values", str(path)))
    assert "alias bomb" in line and len(line) < 400, line
    assert time.monotonic() - start < 10


def test_sarif_artifact_uris_are_percent_encoded(tmp_path):
    import json
    from urllib.parse import unquote, urlsplit

    folder = tmp_path / "my configs#1"
    folder.mkdir()
    (folder / "ds 100%.json").write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpus": 1}')
    proc = lint("--format", "sarif", "my configs#1", cwd=tmp_path)
    results = json.loads(proc.stdout)["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris == {"my%20configs%231/ds%20100%25.json"}, uris  # relative stays relative
    proc = lint("--format", "sarif", folder)
    [uri] = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(proc.stdout)["runs"][0]["results"]}
    parts = urlsplit(uri)
    assert parts.scheme == "file" and unquote(parts.path) == str(folder / "ds 100%.json"), uri


def test_estimate_lora_target_and_hf_duplicates(tmp_path):
    import json

    line = one_line(estimate("--model", "Llama-3-8B", "--lora-rank", "8", "--lora-target", "\u2028"))
    assert "argument --lora-target: unknown module" in line, line
    assert estimate("--model", "Llama-3-8B", "--lora-rank", "8", "--lora-target", "q,v_proj").returncode == 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_OK)[:-1] + ', "hidden_size": 128}')
    line = one_line(estimate("--model", path))
    assert "hidden_size: duplicate key" in line and "config.json:1:" in line, line


@pytest.mark.parametrize(
    "breakage, words",
    [
        ("recipe.yaml", "invalid YAML"),
        ("recipe-tag", "not a valid !!timestamp"),
        ("recipe-fifo", None),
    ],
)
def test_list_show_regen_with_a_broken_recipe_folder(tmp_path, breakage, words):
    import shutil

    from conftest import ROOT

    for part in ("tools", "recipes", "schemas"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    recipe_yaml = tmp_path / "recipes" / RECIPE / "recipe.yaml"
    recipe_yaml.unlink()
    if breakage == "recipe.yaml":
        recipe_yaml.write_text("name: [\n")
    elif breakage == "recipe-tag":
        recipe_yaml.write_text("name: !!timestamp x\n")
    else:
        os.mkfifo(recipe_yaml)
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(tmp_path / "tools"))  # the copy, not this checkout
    for verb in (["list"], ["show", RECIPE], ["regen", "--check"]):
        proc = subprocess.run([sys.executable, "-m", "ftrecipes", *verb], env=env, cwd=tmp_path, timeout=60,
                              capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, out
        if words:
            line = one_line(proc)
            assert words in line and re.search(r"recipe\.yaml:[12]:\d+: ", line), line
        elif verb[0] == "show":
            assert "no recipe named" in one_line(proc)


@pytest.mark.parametrize("args, words", [
    (["lint", "--framework-version", "nosuch=1.0", "recipes"], "unknown framework"),
    (["lint", "--host-ram", "-1", "recipes"], "--host-ram"),
    (["lint", "--host-ram", "nan", "recipes"], "--host-ram"),
    (["lint", "--gpus", "0", "recipes"], "--gpus"),
    (["lint", "--gpu", "H9000", "recipes"], "unknown GPU"),
    (["render", "qwen7b-dpo-v100x8", "-o", ""], "empty folder name"),
    (["estimate", "x" * 5000], "no recipe named"),
    (["show", "x" * 5000], "no recipe named"),
])
def test_flags_and_names_out_of_range_are_bad_input(args, words):
    """Found by bench/hostile.py: these exited 0 or 1 (or, for a name longer than the file system
    allows, gave a traceback) instead of one line and exit 2."""
    line = one_line(run_subprocess(["-m", "ftrecipes", *args]))
    assert words in line, line


# --- hostile round of 2026-11-28 (bench/hostile.py: dash/, hint/, cwd-gone/ and others) -------
PLAN = ["plan", "--model", "Qwen2.5-7B", "--method", "lora", "--gpus", "8xA100-80GB", "--seq-len", "2048", "--global-batch", "64"]


@pytest.mark.parametrize("args, stream", [
    (["estimate", "qwen7b-dpo-v100x8", "--svg", "-"], "standard output"),
    (["estimate", "--model", "Qwen2.5-7B", "--svg", "-"], "standard output"),
    (["render", "qwen7b-dpo-v100x8", "-o", "-"], "standard output"),
    ([*PLAN, "-o", "-"], "standard output"),
    (["render", "qwen7b-dpo-v100x8", "--values", "-"], "standard input"),
    (["estimate", "--config", "-", "--model", "Qwen2.5-7B"], "standard input"),
    (["lint", "--config-extras", "-", "recipes"], "standard input"),
])
def test_dash_is_no_stream_and_no_file(tmp_path, args, stream):
    """'-' named no stream: `estimate --svg -` wrote a file '-', `render -o -` a folder '-'."""
    line = one_line(run_subprocess(["-m", "ftrecipes", *args], cwd=tmp_path))
    assert line.startswith("ftrecipes: error: -: not " + stream), line
    assert not os.path.lexists(tmp_path / "-")


def test_dash_spelt_as_a_path_is_a_file(tmp_path):
    proc = run_subprocess(["-m", "ftrecipes", "estimate", "qwen7b-dpo-v100x8", "--svg", "./-"], cwd=tmp_path)
    assert proc.returncode in (0, 3) and (tmp_path / "-").read_text().startswith("<svg"), proc.stderr


def test_estimate_hints_name_no_lint_flag(tmp_path):
    """estimate --config of a file of no known kind said 'pass --kind', a flag only lint has."""
    (tmp_path / "x.yaml").write_text("foo: 1\n")
    line = one_line(estimate("--config", tmp_path / "x.yaml"))
    assert "x.yaml" in line and "--kind" not in line and "estimate --config reads" in line, line
    report = lint(tmp_path / "x.yaml")
    assert report.returncode == 2 and "pass --kind" in report.stdout, report.stdout


def test_plan_unknown_model_offers_no_params_flag():
    line = one_line(run_subprocess(["-m", "ftrecipes", *PLAN[:2], "NoSuch-7B", *PLAN[3:]]))
    assert "NoSuch-7B" in line and "--params" not in line, line


@pytest.mark.parametrize("old, new, key", [("  name: Qwen2.5-7B-Instruct\n", "  name: NoSuch-7B\n", "model.name"),
                                            ("  gpu: V100-32GB\n", "  gpu: V999\n", "hardware.gpu")])
def test_recipe_with_unknown_model_or_gpu_names_recipe_yaml(tmp_path, old, new, key):
    folder = tmp_path / "qwen7b-dpo-v100x8"
    shutil.copytree(ROOT / "recipes" / folder.name, folder)
    text = (folder / "recipe.yaml").read_text()
    assert old in text
    (folder / "recipe.yaml").write_text(text.replace(old, new, 1))
    line = one_line(estimate(str(folder)))
    assert re.search(r"recipe\.yaml:\d+:\d+: " + re.escape(key) + ": unknown", line) and "--params" not in line, line


@pytest.mark.parametrize("args, words", [
    (["estimate", "minicpmv-full-a100-40gx2", "--set", "image_slices=" + "1" * 400], "image_slices"),
    (["estimate", "minicpmv-full-a100-40gx2", "--set", "image_slices=2147483648"], "image_slices"),
    ([*PLAN[:6], "9" * 5000 + "xH100-80GB", *PLAN[7:]], "--gpus"),
    ([*PLAN, "-o", ""], "-o"),
    (["render", "qwen7b-dpo-v100x8", "--file", ""], "--file"),
    (["lint", "--root", "no-such-folder", "recipes"], "--root"),
    (["lint", "--root", "README.md", "recipes"], "--root"),
])
def test_counts_and_names_that_were_taken_as_something_else(args, words):
    """image_slices with 400 digits overflowed float() (traceback), plan --gpus with 5,000 digits
    hit int()'s limit; plan -o '' and render --file '' were read as absent, lint --root naming
    no folder was ignored."""
    line = one_line(run_subprocess(["-m", "ftrecipes", *args], cwd=ROOT))
    assert words in line, line


def test_deleted_working_folder_is_one_line(tmp_path):
    """A shell sitting in a deleted folder: relative paths, and os.getcwd on the way to absolute
    ones, were FileNotFoundError tracebacks; an absolute --svg needs no working folder."""
    def gone(*args):
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
        return subprocess.run(["sh", "-c", 'mkdir "$0" && cd "$0" && rmdir "$0" && exec "$@"', str(tmp_path / "gone"),
                               sys.executable, "-m", "ftrecipes", *args], capture_output=True, text=True, env=env)
    for args in (["render", "qwen7b-dpo-v100x8", "-o", "out"], ["estimate", "--config", "ds.json", "--model", "Qwen2.5-7B"]):
        assert "current folder no longer exists" in one_line(gone(*args))
    proc = gone("estimate", "--model", "Qwen2.5-7B", "--gpu", "A100-80GB", "--svg", str(tmp_path / "c.svg"))
    assert proc.returncode in (0, 3) and (tmp_path / "c.svg").is_file(), proc.stderr


def _without_dac(args, cwd):
    """Run the CLI where permissions bite: as root, with the capabilities that bypass them
    dropped (capsh), since root reads mode-000 files and searches mode-600 folders."""
    cmd = [sys.executable, "-m", "ftrecipes", *map(str, args)]
    if ROOT_USER:
        if not shutil.which("capsh"):
            pytest.skip("root without capsh: permissions cannot bite")
        cmd = ["capsh", "--drop=cap_dac_override,cap_dac_read_search,cap_fowner", "--", "-c", 'exec "$0" "$@"', *cmd]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)


def test_permission_denied_folders_are_one_line(tmp_path):
    """A config in a folder that may not be searched was a PermissionError traceback in estimate
    (pins probed the folder's .git and setup.py with Path.exists / is_file); a folder named to lint
    that may not be listed read as 'no configs found', exit 0."""
    (tmp_path / "noexec").mkdir()
    shutil.copy(ROOT / "recipes" / "qwen7b-dpo-v100x8" / "rendered" / "ds.json", tmp_path / "noexec" / "ds.json")
    shutil.copytree(tmp_path / "noexec", tmp_path / "locked")
    (tmp_path / "noexec").chmod(0o600)  # listed, not searched
    (tmp_path / "locked").chmod(0o300)  # searched, not listed
    try:
        line = one_line(_without_dac(["estimate", "--config", "noexec/ds.json", "--model", "Qwen2.5-7B"], tmp_path))
        assert line == "ftrecipes: error: noexec/ds.json: cannot read: Permission denied", line
        proc = _without_dac(["lint", "locked"], tmp_path)
        assert proc.returncode == 2 and proc.stdout == "locked:1:1: unusable-input cannot read folder: Permission denied\n", proc
    finally:
        (tmp_path / "noexec").chmod(0o755)
        (tmp_path / "locked").chmod(0o755)


def test_trace_without_torch_or_with_an_unknown_model_is_one_line():
    """trace was a KeyError traceback for a model the catalog lacks, and a ModuleNotFoundError
    traceback where torch is not installed (the tool's own install has none)."""
    import importlib.util

    line = one_line(run_subprocess(["-m", "ftrecipes", "trace", "--model", "NoSuch-7B"]))
    assert "unknown model 'NoSuch-7B'" in line, line
    if importlib.util.find_spec("torch") is None:
        line = one_line(run_subprocess(["-m", "ftrecipes", "trace", "--model", "Qwen2.5-7B"]))
        assert "needs torch" in line, line
