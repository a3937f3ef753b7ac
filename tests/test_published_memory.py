"""The published-measurements corpus (bench/published_memory/cases.yaml) is well formed and the
benchmark runs over it. Accuracy is not asserted here: bench/published_memory.md holds the figures.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BENCH = os.path.join(ROOT, "bench", "published_memory.py")
CASES = os.path.join(ROOT, "bench", "published_memory", "cases.yaml")

# The case vocabulary agreed for issue 10: Setup's fields today plus the ones the model grows.
SETUP_KEYS = {
    "model", "params", "gpu", "gpus", "gpus_per_node", "nodes", "seq_len", "micro_batch", "precision",
    "zero_stage", "offload_optimizer", "offload_param", "pin_memory", "gradient_checkpointing",
    "attn_implementation", "lora_rank", "lora_target", "method", "trainer", "framework", "ds",
    "quantization", "master_weights", "optimizer", "loss_kernel", "modules_to_save", "fsdp_offload",
    "zero3_init", "image_slices", "deepspeed_version", "dpo_reference", "varying_lengths",
    "checkpoint_offload", "optimizer_in_backward", "adam_impl", "transformers_version", "lora_dropout", "double_quant",
    "freeze_vision_tower", "freeze_projector", "grad_accum", "checkpoint_reentrant", "trl_version", "load_dtype",
    "accelerate_version", "mixed_precision", "adapter_fp32", "torchao_version", "use_orig_params", "vllm_mode",
    "host_ram_bytes", "bitsandbytes_version", "sync_each_batch", "vllm_gpus", "vllm_gpu_memory_utilization",
    "layer_kernels", "expandable_segments", "kbit_prepared",
}
VALUES = {
    "precision": {"bf16", "fp16", "fp32"}, "zero_stage": {0, 1, 2, 3},
    "offload_optimizer": {"none", "cpu", "nvme"}, "offload_param": {"none", "cpu", "nvme"},
    "method": {"sft", "dpo", "grpo"}, "framework": {"deepspeed", "ddp", "fsdp", "fsdp2", "torch"},
    "quantization": {"none", "4bit", "8bit"}, "loss_kernel": {"none", "liger", "chunked"},
    "attn_implementation": {"flash_attention_2", "sdpa", "eager", "sdpa-math"}, "layer_kernels": {"hf", "unsloth", "liger"},
    "optimizer": {"adamw", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "sgd", "adafactor"},
    "varying_lengths": {True, False}, "checkpoint_offload": {True, False}, "double_quant": {True, False},
    "expandable_segments": {True, False}, "kbit_prepared": {True, False},
    "optimizer_in_backward": {True, False}, "freeze_vision_tower": {True, False}, "freeze_projector": {True, False},
    "adam_impl": {"foreach", "fused", "single"},
    "trainer": {"hf", "trl", "llamafactory", "openrlhf", "axolotl", "torchtune", "swift", "unsloth", "deepspeed",
                "accelerate"},
}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("published_memory", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cases(bench):
    return bench.load(CASES)


def test_every_case_has_its_fields_and_a_citation(bench, cases):
    assert bench.problems(cases) == []
    for c in cases:
        src = c["source"]
        assert src["quote"].strip(), c["id"]
        assert src.get("url", "").startswith("https://") or src.get("repo"), c["id"]
        if src.get("commit"):
            assert len(src["commit"]) == 40 and int(src["commit"], 16) >= 0, c["id"]


def test_ids_are_unique_kebab_case(cases):
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    for i in ids:
        assert i == i.lower() and " " not in i and "_" not in i, i


def test_split_follows_the_stated_rule_and_holds_out_about_a_third(cases):
    for c in cases:
        digest = int(hashlib.sha1(c["id"].encode("utf-8")).hexdigest(), 16)
        assert c["split"] == ("heldout" if digest % 3 == 0 else "train"), c["id"]
    share = sum(c["split"] == "heldout" for c in cases) / len(cases)
    assert 0.25 <= share <= 0.45, share
    with open(CASES, encoding="utf-8") as f:
        head = f.read(2000)
    assert "sha1(id" in head and "% 3 == 0" in head  # the rule is written where cases are added


def test_corpus_size_and_outcomes(cases):
    assert len(cases) >= 45
    whats = [c["measured"]["what"] for c in cases]
    assert whats.count("oom") >= 9
    assert whats.count("ran") >= 2
    assert sum(w not in ("oom", "ran") for w in whats) >= 30
    # figures are per GPU and in GiB: nothing beyond the largest card we know of
    assert all(0 < c["measured"]["gib"] <= 192 for c in cases if "gib" in c["measured"])


def test_setups_use_the_agreed_vocabulary(cases):
    for c in cases:
        s = c["setup"]
        assert set(s) <= SETUP_KEYS, (c["id"], set(s) - SETUP_KEYS)
        assert s.get("model") or s.get("params"), c["id"]
        assert s.get("gpu"), c["id"]
        for key, allowed in VALUES.items():
            if key in s:
                assert s[key] in allowed, (c["id"], key, s[key])
        if "modules_to_save" in s:
            assert isinstance(s["modules_to_save"], list) and s["lora_rank"] > 0, c["id"]


def test_the_checks_catch_a_broken_case(bench, cases):
    broken = json.loads(json.dumps(cases[0]))
    broken["source"]["quote"] = ""
    broken["split"] = "heldout" if broken["split"] == "train" else "train"
    del broken["measured"]["gib"]
    found = " ".join(bench.problems([broken, cases[0], cases[0]]))
    assert "quote" in found and "breaks the rule" in found and "gib" in found and "duplicate id" in found


def test_a_rerun_must_name_a_measured_run(bench, cases):
    """A case's rerun entries point at runs bench/gpu_calibrate.py recorded; a wrong file, a case
    name the file lacks or a path out of bench/ is a problem, and the good ones are printed."""
    with_rerun = next(c for c in cases if c.get("rerun"))
    broken = json.loads(json.dumps(with_rerun))
    broken["rerun"] = [{"file": "gpu_calibrate/h100-run5.json", "case": "no-such-run"},
                       {"file": "../README.md", "case": "x"}, {"file": "gpu_calibrate/h100-run5.json"},
                       {"file": "published_memory/cases.yaml", "case": "x"}]
    found = bench.problems([broken])
    assert sum("rerun" in f for f in found) == 4, found
    row = bench.evaluate(with_rerun)
    assert row["reruns"] and all("setup" in meas for _name, meas in row["reruns"])
    assert "| ran |" in "\n".join(bench.rerun_table([row])) or "OOM in" in "\n".join(bench.rerun_table([row]))


def test_benchmark_runs_and_accounts_for_every_case(bench, cases, capsys):
    assert bench.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in out["cases"]}
    assert set(rows) == {c["id"] for c in cases}
    for r in rows.values():
        if r["expressible"]:
            assert r["verdict"] in ("fits", "tight", "oom") and isinstance(r["agrees"], bool)
            assert ("error_pct" in r) == (r["what"] not in ("oom", "ran"))
        else:
            assert r["why"]
    s = out["summary"]
    assert s["all"]["cases"] == s["train"]["cases"] + s["heldout"]["cases"] == len(cases)
    assert s["all"]["expressible"] + s["all"]["not_expressible"] == len(cases)
    assert bench.main(["--split", "heldout"]) == 0
    text = capsys.readouterr().out
    assert "| heldout |" in text and "| train |" not in text


def test_an_unknown_setup_key_is_reported_not_dropped(bench, cases):
    case = json.loads(json.dumps(cases[0]))
    case["setup"]["no_such_setting"] = 1
    row = bench.evaluate(case)
    assert row["expressible"] is False and "no_such_setting" in row["why"]


@pytest.mark.parametrize("text, says", [
    ("- id: x\n  split: train\n", "missing source"),
    ("- id: x\n  id: y\n", "cases.yaml:2:3: duplicate key"),
    ("- [unclosed\n", "invalid YAML"),
])
def test_unusable_case_file_is_one_line_and_status_2(bench, tmp_path, capsys, text, says):
    bad = tmp_path / "cases.yaml"
    bad.write_text(text, encoding="utf-8")
    assert bench.main(["--cases", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


def test_committed_output_covers_every_case(cases):
    with open(os.path.join(ROOT, "bench", "published_memory.md"), encoding="utf-8") as f:
        text = f.read()
    missing = [c["id"] for c in cases if f"| {c['id']} |" not in text]
    assert not missing, f"re-run bench/published_memory.py > bench/published_memory.md: {missing}"
