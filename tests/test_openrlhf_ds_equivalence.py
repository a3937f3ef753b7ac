"""llama8b-sft-a100x1: the OpenRLHF truth check reports what the recipe says, and can fail.

The positive checks (defaults and OVERRIDES in test_framework_truth.py) run the `openrlhf`
checker of tests/frameworks/truth_openrlhf.py: DeepSpeed's launcher parser, OpenRLHF 0.11.2's own
argparse for train_sft, and exact equality of the rendered ds.json with the DeepSpeed config
OpenRLHF builds from launch.sh's flags. Here: the facts it reads back match the recipe's values,
and each part rejects what it should (unknown flag, wrong launcher world size, edited ds.json).
"""

import json

import pytest

from conftest import ROOT
from ftrecipes import devenv
from truth_jobs import jobs_for, run_truth

pytestmark = pytest.mark.framework
NAME = "llama8b-sft-a100x1"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    work = tmp_path_factory.mktemp("openrlhf-truth")
    _, jobs = jobs_for(NAME, [], work / "defaults")
    [job] = [j for _, j in jobs if j["check"] == "openrlhf"]
    typo = dict(job, words=job["words"] + ["--ds.adam_offlaod"])
    two = dict(job, words=list(job["words"]))
    two["words"][two["words"].index("--num_gpus") + 1] = "2"
    edited = json.loads(open(job["ds_json"]).read())
    del edited["zero_optimization"]["offload_optimizer"]
    (work / "edited.json").write_text(json.dumps(edited))
    cases = {"defaults": job, "typo": typo, "world": two, "edited": dict(job, ds_json=str(work / "edited.json"))}
    return dict(zip(cases, run_truth("openrlhf", list(cases.values()), work)))


def test_parsed_flags_and_config_are_the_recipe(results):
    res = results["defaults"]
    assert res["ok"], res["error"]
    f = res["facts"]
    assert f["launcher_world_size"] == 1
    assert (f["zero_stage"], f["adam_offload"], f["param_dtype"], f["gradient_checkpointing"], f["lora_rank"]) == (2, True, "bf16", True, 0)
    assert (f["micro_batch_size"], f["train_batch_size"], f["accumulated_gradient"]) == (1, 64, 64)
    assert f["attn_implementation"] == "flash_attention_2" and f["max_len"] == 2048
    assert f["ds_equal"] is True
    ds = f["deepspeed"]  # DeepSpeedConfig on OpenRLHF's own config at world size 1
    assert (ds["world_size"], ds["grad_accum"], ds["zero_stage"], ds["offload_optimizer"], ds["bf16"]) == (1, 64, 2, "cpu", True)


def test_unknown_flag_is_rejected_by_openrlhfs_parser(results):
    res = results["typo"]
    assert not res["ok"] and "unrecognized arguments: --ds.adam_offlaod" in res["error"], res


def test_launcher_world_size_must_match(results):
    res = results["world"]
    assert not res["ok"] and "starts 2 process(es)" in res["error"], res


def test_edited_ds_json_is_caught(results):
    res = results["edited"]
    assert not res["ok"] and "zero_optimization.offload_optimizer: only in OpenRLHF's config" in res["error"], res


# --- older OpenRLHF releases: each era's own parser and DeepSpeed config ----------------------------
# Each release is installed alone (pip --no-deps --target, devenv.ensure_release) and shadows the
# stack's openrlhf 0.11.2 in a child process, on the stack's torch 2.13 / DeepSpeed 0.19.6 /
# transformers 5.15 (not the pins it was released with): its argparse and its
# DeepspeedStrategy.get_ds_train_config run for real; training on that stack is not claimed.
# 0.8.0 is not run: its openrlhf.trainer imports ray (PPO trainers) at import time and the stack has
# no ray; its train_sft flags are checked with ast below (TABLE_RELEASES).
ERAS = {
    "0.8.5": (["openrlhf_version=0.8.5"], ("bf16", "flash_attention_2"), "--attn_implementation"),
    "0.8.10": (["openrlhf_version=0.8.10", "attn_implementation=sdpa"], ("bf16", "sdpa"), "--flash_attn"),
    "0.9.2": (["openrlhf_version=0.9.2", "precision=fp16"], ("fp16", "flash_attention_2"), "--bf16"),
    "0.10.2": (["openrlhf_version=0.10.2"], ("bf16", "flash_attention_2"), "--zero_stage"),
}


@pytest.fixture(scope="module")
def era_results(tmp_path_factory):
    work = tmp_path_factory.mktemp("openrlhf-eras")
    cases = {}
    for version, (sets, _, other_era_flag) in ERAS.items():
        _, jobs = jobs_for(NAME, sets, work / version)
        [job] = [j for _, j in jobs if j["check"] == "openrlhf"]
        assert job["openrlhf_version"] == version and job["release"]
        cases[version] = job
        # A flag of another era (a real one, with its argument where it takes one).
        extra = [other_era_flag] + (["2"] if other_era_flag == "--zero_stage" else ["sdpa"] if other_era_flag == "--attn_implementation" else [])
        cases[version + "-other-era"] = dict(job, words=job["words"] + extra)
    return dict(zip(cases, run_truth("openrlhf", list(cases.values()), work, timeout=1200)))


@pytest.mark.parametrize("version", list(ERAS))
def test_older_release_parses_its_eras_launch_and_builds_ds_json(era_results, version):
    res = era_results[version]
    assert res["ok"], res["error"]
    f = res["facts"]
    assert f["openrlhf_version"] == version and f["legacy_flags"] == (version != "0.10.2")
    assert (f["param_dtype"], f["attn_implementation"]) == ERAS[version][1]
    assert (f["zero_stage"], f["adam_offload"], f["gradient_checkpointing"], f["accumulated_gradient"]) == (2, True, True, 64)
    assert f["ds_equal"] is True


@pytest.mark.parametrize("version", list(ERAS))
def test_older_release_rejects_a_flag_of_another_era(era_results, version):
    res = era_results[version + "-other-era"]
    flag = ERAS[version][2]
    assert not res["ok"] and f"unrecognized arguments: {flag}" in res["error"], res


# --- schemas/versions.json against the releases' own argparse definitions --------------------------
# Read with ast as tools/schemagen/openrlhf_schema.py does (nothing imported), for the last release
# of each era and the first of the next: every flag of train_sft/train_dpo is valid at its own
# release per the table, and every flag that disappears at an era boundary is in the table.
TABLE_RELEASES = ["0.8.0", "0.8.5", "0.8.9.post1", "0.8.10", "0.9.1.post1", "0.9.2", "0.10.1.post2", "0.10.2", "0.11.2"]


def _release_flags(version, cmd):
    import sys

    sys.path.insert(0, str(ROOT / "tools" / "schemagen"))
    import openrlhf_schema

    root = devenv.release_dir("openrlhf", version) if version != "0.11.2" else None
    if root is None:
        import glob

        root = glob.glob(str(devenv.env_dir("openrlhf") / "lib" / "python3*" / "site-packages"))[0]
    else:
        devenv.ensure_release("openrlhf", version)
    from pathlib import Path

    parser = openrlhf_schema.build_parser(Path(root) / "openrlhf" / "cli" / f"{cmd}.py")
    return {o[2:] for a in parser._actions for o in a.option_strings if o.startswith("--") and a.dest != "help"}


@pytest.mark.parametrize("cmd", ["train_sft", "train_dpo"])
def test_version_table_matches_the_releases(cmd):
    from ftrecipes import versions

    devenv.ensure_env("openrlhf")
    h = versions.history("openrlhf")
    tracked = h.tracked()
    flags = {v: _release_flags(v, cmd) for v in TABLE_RELEASES}
    for v, fl in flags.items():
        wrong = {k: h.problems(k, v) for k in fl if h.problems(k, v)}
        assert wrong == {}, (v, wrong)
    for older, newer in zip(TABLE_RELEASES, TABLE_RELEASES[1:]):
        gone = flags[older] - flags[newer]
        assert gone <= tracked, (older, newer, sorted(gone - tracked))


@pytest.mark.parametrize("version", TABLE_RELEASES)
def test_rendered_launch_uses_only_that_releases_flags(version):
    # Every release named here, including those between the eras checked by a full run above.
    from ftrecipes import readers, recipe, render

    r = recipe.load(NAME)
    out = {f.name: t for f, t in render.render(r, {"openrlhf_version": version.split(".post")[0]})}
    used = set(readers.openrlhf_document(out["launch.sh"], "launch.sh").data)
    assert used <= _release_flags(version, "train_sft"), (version, sorted(used - _release_flags(version, "train_sft")))
