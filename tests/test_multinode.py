"""Multi-node renders: what `--set nodes=2` produces, and a two-"node" training run on this machine.

The training test starts the recipe's rendered multi-node launch.sh twice on 127.0.0.1, as two
nodes would (NODE_RANK 0 and 1, one MASTER_PORT, one process per node: gpus_per_node=1), and
asserts with the engine probe that both ranks ran one 2-process DeepSpeed job. The overrides are
the recipe's documented smoke overrides (recipe.yaml `smoke:`) plus nodes=2, gpus_per_node=1.
Not covered: two real machines (network interfaces, name resolution, NCCL across nodes), SLURM
itself (the truth checks dry-run slurm.sbatch with stand-ins for srun and scontrol).
"""

import json
import os
import shutil
import subprocess
import time

import pytest

from ftrecipes import devenv, recipe, render, values
from ftrecipes.errors import UserError
from smoke_harness import FRAMEWORKS, TIMINGS, assert_engine, free_port, make_assets, read_probe, render_into
from test_smoke_qwen7b_lora_zero2_a100x2 import STANDIN_LORA_TARGET, qwen_conversations, torchrun_shim

NAME = "qwen7b-lora-zero2-a100x2"
MULTI = ["qwen7b-lora-zero2-a100x2", "minicpmv-full-a100-40gx2", "qwen7b-dpo-v100x8"]


def _render(name, sets):
    r = recipe.load(name)
    return {f.name: text for f, text in render.render(r, values.parse_sets(r, sets))}


@pytest.mark.parametrize("name", MULTI)
def test_nodes_2_rederives_the_batch_and_adds_the_slurm_script(name):
    one = _render(name, [])
    two = _render(name, ["nodes=2", "gpus_per_node=8"])
    assert "slurm.sbatch" not in one and "slurm.sbatch" in two
    ds = json.loads(two["ds.json"])
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 16
    sbatch = two["slurm.sbatch"]
    assert sbatch.startswith("#!/usr/bin/env bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in sbatch
    assert 'NODE_RANK="$SLURM_NODEID"' in sbatch and "scontrol show hostnames" in sbatch
    launch = two["launch.sh"]
    # Rank and address come from the environment, never from the file.
    assert '"$NODE_RANK"' in launch and '"$MASTER_ADDR"' in launch and "localhost" not in launch
    with pytest.raises(UserError, match="only when multi_node"):
        render.render(recipe.load(name), only="slurm.sbatch")


def test_minicpmv_accelerate_config_is_multi_machine():
    import yaml

    acc = yaml.safe_load(_render("minicpmv-full-a100-40gx2", ["nodes=2", "gpus_per_node=8"])["accelerate.yaml"])
    assert acc["num_machines"] == 2 and acc["num_processes"] == 16
    assert acc["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"
    assert "main_process_ip" not in acc  # passed by launch.sh from MASTER_ADDR


def test_vllm_recipe_refuses_more_nodes_with_a_reason():
    r = recipe.load("qwen7b-lora-h100x8")
    with pytest.raises(UserError, match="vLLM server.*one node only.*More nodes"):
        render.render(r, values.parse_sets(r, ["nodes=2"]))


@pytest.mark.parametrize("name", MULTI)
def test_lint_accepts_multi_node_renders(name, tmp_path):
    from ftrecipes import cli

    render_into(name, ["nodes=2", "gpus_per_node=8"], tmp_path)
    assert cli.main(["lint", str(tmp_path)]) == 0


@pytest.mark.parametrize("env, message", [({}, "set NODE_RANK"), ({"NODE_RANK": "2", "MASTER_ADDR": "h"}, "this job has 2 nodes"),
                                          ({"NODE_RANK": "x", "MASTER_ADDR": "h"}, "not a number"),
                                          ({"NODE_RANK": "1"}, "set MASTER_ADDR")])
def test_launch_sh_needs_a_node_rank_and_address(tmp_path, env, message):
    run = tmp_path / "run"
    render_into("qwen7b-dpo-v100x8", ["nodes=2"], run)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llamafactory-cli").write_text("#!/bin/sh\necho launcher reached >&2\nexit 99\n")
    (bin_dir / "llamafactory-cli").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(["bash", str(run / "launch.sh")], env={**base, **env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr and "launcher reached" not in proc.stderr, proc.stderr


def _truth(stack, jobs, tmp_path):
    from conftest import ROOT

    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([str(devenv.ensure_env(stack)), str(ROOT / "tests" / "frameworks" / "truth.py"), str(tmp_path / "jobs.json"),
                    str(tmp_path / "out.json")], env=devenv.run_env(stack), check=True, capture_output=True, timeout=600, cwd=tmp_path)
    return json.loads((tmp_path / "out.json").read_text())


@pytest.mark.framework
def test_slurm_truth_check_can_fail(tmp_path):
    """The dry run catches a hard-coded node rank and accelerate's default (pdsh + hostfile) multi-node launcher."""
    from truth_jobs import jobs_for

    _, jobs = jobs_for("minicpmv-full-a100-40gx2", ["nodes=2"], tmp_path / "render")
    slurm = {job["check"]: job for _, job in jobs if job["check"].startswith("slurm")}
    assert set(slurm) == {"slurm", "slurm-accelerate"}
    cases = {}
    for label, edit in {"pinned": ("srun", 'NODE_RANK="$SLURM_NODEID"', "NODE_RANK=0"),
                        "pdsh": ("accelerate", "  deepspeed_multinode_launcher: standard\n", "")}.items():
        d = tmp_path / label
        shutil.copytree(tmp_path / "render", d)
        target = d / ("slurm.sbatch" if edit[0] == "srun" else "accelerate.yaml")
        text = target.read_text()
        assert edit[1] in text
        target.write_text(text.replace(edit[1], edit[2]))
        check = "slurm" if label == "pinned" else "slurm-accelerate"
        cases[label] = {**slurm[check], "path": str(d / "slurm.sbatch"), "cwd": str(d)}
    ok, pinned, pdsh = _truth("trl", [slurm["slurm-accelerate"]] + list(cases.values()), tmp_path)
    assert ok["ok"], ok
    assert not pinned["ok"] and "node 1" in pinned["error"] and "node_rank" in pinned["error"], pinned
    assert not pdsh["ok"] and "deepspeed --hostfile" in pdsh["error"], pdsh


def _start(stack, argv, cwd, probe_dir, extra_env, log):
    env = devenv.run_env(stack)
    env["PYTHONPATH"] = str(FRAMEWORKS / "site") + os.pathsep + env.get("PYTHONPATH", "")
    env["FTRECIPES_PROBE"] = str(probe_dir)
    env.update(extra_env)
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


@pytest.mark.smoke
def test_two_nodes_on_one_machine_train_from_the_multi_node_launch_sh(tmp_path):
    assets = make_assets("trl", tmp_path / "tiny-chat")
    data = qwen_conversations(assets["sft"], tmp_path / "data" / "train.json")
    run, out, probe = tmp_path / "run", tmp_path / "out", tmp_path / "probe"
    sets = [
        "nodes=2", "gpus_per_node=1", f"model={assets['model']}", f"dataset={data}", "seq_len=64", "max_steps=3",
        "logging_steps=1", f"lora_target={STANDIN_LORA_TARGET}", f"output_dir={out}",
    ]
    render_into(NAME, sets, run)
    shutil.copy(FRAMEWORKS / "qwen_finetune.py", run / "finetune.py")
    env = devenv.run_env("trl")
    shim = torchrun_shim(tmp_path / "bin", shutil.which("torchrun", path=env["PATH"]), ["--use_cpu", "true"])
    port = str(free_port())
    probe.mkdir()
    procs, logs = [], []
    start = time.time()
    for rank in (0, 1):
        log = open(tmp_path / f"node{rank}.log", "w")
        logs.append(log)
        node_env = {"QWEN_DIR": str(run), "PATH": f"{shim}:{env['PATH']}", "NODE_RANK": str(rank),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(_start("trl", ["bash", str(run / "launch.sh")], tmp_path, probe, node_env, log))
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for log in logs:
            log.close()
    elapsed = time.time() - start
    with open(TIMINGS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"test": f"{NAME} (2 nodes)", "seconds": round(elapsed, 1), "returncode": max(codes),
                             "at": round(start, 1)}) + "\n")
    assert codes == [0, 0], "\n".join((tmp_path / f"node{r}.log").read_text()[-4000:] for r in (0, 1))

    ds = json.loads((run / "ds.json").read_text())
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2
    records = assert_engine(read_probe(probe), ds, world_size=2, lora=True, gradient_checkpointing=True)
    for rank, recs in records.items():
        engine = next(r for r in recs if r["event"] == "engine")
        assert engine["world_size"] == 2, engine
    # One process per "node" (nproc_per_node 1), global ranks 0 and 1: both loaded the model the fixed way.
    for rank in (0, 1):
        assert json.loads((out / f"load_rank{rank}.json").read_text())["low_cpu_mem_usage"] is True
    assert (out / "adapter_model.safetensors").exists()
