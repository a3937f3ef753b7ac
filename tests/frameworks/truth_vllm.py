"""`vllm serve` command lines through vLLM's own parser (job "vllm-serve-native").

The job runs in a child process where the vLLM release (job "release", from
devenv.ensure_release("trl", version, package="vllm"): vLLM without dependencies plus the few modules its CLI
imports) is first on the path, with VLLM_TARGET_DEVICE=cpu, vLLM's own switch to its CPU
platform (vllm/platforms/__init__.py), without which building the parser's DeviceConfig default
fails on a machine with no GPU. There it builds the parser `vllm serve` builds
(vllm.entrypoints.launchers.cli_args.make_arg_parser on a FlexibleArgumentParser, as
vllm/entrypoints/cli/serve.py does), parses the arguments, runs validate_parsed_serve_args, and
then checks what TRL 1.16's client needs from the server (trl/scripts/vllm_serve.py build_command
and main; trl/generation/vllm_client.py init_communicator): VLLM_SERVER_DEV_MODE=1 in the
environment, the NCCL weight-transfer engine, processed logprobs, no logprobs cap; and that the
release is in TRL's supported range (trl/import_utils.py is_vllm_available).
Not covered: serving itself (model loading, CUDA, NCCL), which needs a GPU.
"""

import json
import os
import subprocess
import sys
import tempfile

from truth import CHECKS, _plain, check

RELEASE_ENV = "FTRECIPES_VLLM_RELEASE"


_RESULTS = {}


def _key(job):
    return json.dumps(job, sort_keys=True)


def _batch(job):
    """This job and every other vllm-serve-native job of the same release in this run's jobs file
    (truth.py's first argument): importing vLLM costs tens of seconds, so one child checks them all."""
    try:
        with open(sys.argv[1], encoding="utf-8") as fh:
            others = [j for j in json.load(fh) if isinstance(j, dict) and j.get("check") == job["check"]
                      and j.get("release") == job["release"]]
    except (OSError, ValueError, IndexError):
        others = []
    batch, seen = [job], {_key(job)}
    for j in others:
        if _key(j) not in seen and _key(j) not in _RESULTS:
            seen.add(_key(j))
            batch.append(j)
    return batch


def _in_release(job):
    if _key(job) not in _RESULTS:
        batch = _batch(job)
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as tmp:
            jobs, out = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "out.json")
            with open(jobs, "w", encoding="utf-8") as fh:
                json.dump(batch, fh)
            env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
            env["PYTHONPATH"] = os.pathsep.join([job["release"]] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
            env[RELEASE_ENV] = job["release"]
            proc = subprocess.run([sys.executable, os.path.join(here, "truth.py"), jobs, out], env=env, cwd=job.get("cwd"),
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0 or not os.path.exists(out):
                raise ValueError(f"vllm {job['vllm_version']} check process failed: {proc.stderr[-1500:]}")
            with open(out, encoding="utf-8") as fh:
                for j, res in zip(batch, json.load(fh)):
                    _RESULTS[_key(j)] = res
    res = _RESULTS[_key(job)]
    if not res["ok"]:
        raise ValueError(res["error"])
    return res["facts"]


def _parse(args):
    """vLLM's parser; argparse's exit on a refused flag becomes an error with its message."""
    import contextlib
    import io

    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_args(list(args))
    except SystemExit:
        raise ValueError(err.getvalue().strip().splitlines()[-1]) from None
    parsed.subparser = "serve"
    validate_parsed_serve_args(parsed)
    return parsed


@check("vllm-serve-native")
def vllm_serve_native(job):
    if os.environ.get(RELEASE_ENV) != job["release"]:
        return _in_release(job)
    import importlib.metadata

    from packaging.version import Version

    installed = importlib.metadata.version("vllm")
    if installed != job["vllm_version"]:
        raise ValueError(f"vLLM {installed} on the path, the job wants {job['vllm_version']}")
    # TRL 1.16's range, as trl.import_utils.is_vllm_available states it.
    if not Version("0.22.0") <= Version(Version(installed).base_version) <= Version("0.31.0"):
        raise ValueError(f"vLLM {installed} is outside the range TRL 1.16 supports (0.22.0 to 0.31.0)")
    args = _parse(job["args"])
    problems = []
    if job.get("env", {}).get("VLLM_SERVER_DEV_MODE") != "1":
        problems.append("VLLM_SERVER_DEV_MODE=1 is not set: TRL's weight sync needs the dev endpoints")
    wt = args.weight_transfer_config
    if wt is None or getattr(wt, "backend", None) != "nccl":
        problems.append(f"weight transfer config {wt!r}: TRL's client needs the nccl engine")
    if args.logprobs_mode != "processed_logprobs":
        problems.append(f"logprobs mode {args.logprobs_mode}: TRL needs processed_logprobs")
    if args.max_logprobs != -1:
        problems.append(f"max logprobs {args.max_logprobs}: TRL needs -1 (no cap)")
    if problems:
        raise ValueError("; ".join(problems))
    keys = ("model_tag", "host", "port", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization",
            "max_model_len", "dtype", "logprobs_mode", "max_logprobs")
    facts = {k: _plain(getattr(args, k, None)) for k in keys}
    facts["weight_transfer_backend"] = wt.backend
    facts["vllm"] = installed
    return facts


# srun stand-in for a job of several steps: each call is one step, its records go to a folder of
# their own (step0, step1, ...) with the --nodelist it was given; SLURM_NODEID counts the step's nodes.
FAKE_SRUN_STEPS = r"""#!/usr/bin/env bash
# Test stand-in for srun: the command once per node of the step, SLURM_NODEID set as srun sets it.
# It outlives the batch script's `kill` of a background step, so that step's record is complete.
trap '' TERM
# Steps may start at once (one in the background): mkdir is atomic, so each gets its own folder.
step=0
until mkdir "$FTR_FAKE_OUT/step$step" 2>/dev/null; do step=$((step + 1)); done
dir="$FTR_FAKE_OUT/step$step"
echo "$*" > "$dir/srun.args"
nodes=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes=*) nodes="${1#--nodes=}"; shift ;;
    --nodelist=*) echo "${1#--nodelist=}" > "$dir/nodelist"; shift ;;
    -*) shift ;;
    *) break ;;
  esac
done
for ((i = 0; i < nodes; i++)); do
  FTR_FAKE_OUT="$dir" SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 "$@" || exit $?
done
touch "$dir/done"
"""


def _steps(job):
    """Run slurm.sbatch with stand-ins for srun, scontrol, accelerate and vllm: {step: (nodelist, {node: record})}."""
    import truth_multinode as tm

    syntax = subprocess.run(["bash", "-n", job["path"]], capture_output=True, text=True)
    if syntax.returncode:
        raise ValueError(f"bash -n: {syntax.stderr.strip()}")
    with open(job["path"], encoding="utf-8") as fh:
        d = tm._directives(fh.read())
    want = {"nodes": str(job["nodes"]), "ntasks-per-node": "1", "gpus-per-node": str(job["gpus_per_node"])}
    if {k: d.get(k) for k in want} != want:
        raise ValueError(f"#SBATCH directives {d}, expected {want}")
    tmp = tempfile.mkdtemp(prefix="ftr-slurm-vllm-")
    bin_dir, out = os.path.join(tmp, "bin"), os.path.join(tmp, "out")
    os.makedirs(bin_dir)
    os.makedirs(out)
    tm._write(os.path.join(bin_dir, "srun"), FAKE_SRUN_STEPS)
    tm._write(os.path.join(bin_dir, "scontrol"), tm.FAKE_SCONTROL)
    keys = tm.RECORDED_ENV + ("VLLM_SERVER_HOST", "VLLM_SERVER_DEV_MODE", "CUDA_VISIBLE_DEVICES")
    for name in ("accelerate", "vllm"):
        tm._write(os.path.join(bin_dir, name), tm.FAKE_LAUNCHER.format(python=sys.executable, keys=keys))
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "VLLM_SERVER_HOST")}
    env.update({"PATH": bin_dir + os.pathsep + env.get("PATH", ""), "FTR_FAKE_OUT": out, "FTR_FAKE_HOSTS": " ".join(job["hosts"]),
                "SLURM_JOB_NODELIST": "gpu-fake[list]", "SLURM_SUBMIT_DIR": job["cwd"], "SLURM_JOB_ID": "4242",
                "SLURM_NNODES": str(job["nodes"])})
    proc = subprocess.run(["bash", job["path"]], cwd=job["cwd"], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise ValueError(f"slurm.sbatch dry run failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    steps = {}
    for name in sorted(os.listdir(out)):
        sdir = os.path.join(out, name)
        if not os.path.exists(os.path.join(sdir, "done")):
            raise ValueError(f"srun step {name} ({open(os.path.join(sdir, 'srun.args')).read().strip()}) failed: {proc.stderr.strip()[-800:]}")
        nodelist = open(os.path.join(sdir, "nodelist")).read().strip() if os.path.exists(os.path.join(sdir, "nodelist")) else None
        recs = {}
        for f in sorted(os.listdir(sdir)):
            if f.startswith("node") and f.endswith(".json"):
                with open(os.path.join(sdir, f), encoding="utf-8") as fh:
                    recs[int(f[4:-5])] = json.load(fh)
        steps[name] = (nodelist, recs)
    return steps


@check("slurm-vllm-node")
def slurm_vllm_node(job):
    """One step runs `vllm serve` on the last host (checked by vLLM's parser); one runs accelerate on
    the other hosts, node rank = SLURM_NODEID, rendezvous on the first host, the trainer (TRL's own
    GRPO parser) pointed at the server's host."""
    import truth_multinode as tm

    hosts, server = job["hosts"], job["hosts"][-1]
    steps = _steps(job).values()
    serving = [(nl, recs) for nl, recs in steps if any(r["argv"][0] == "vllm" for r in recs.values())]
    training = [(nl, recs) for nl, recs in steps if any(r["argv"][0] == "accelerate" for r in recs.values())]
    if len(serving) != 1 or len(training) != 1:
        raise ValueError(f"expected one srun step serving and one training, got {len(serving)} and {len(training)}")
    (snl, srecs), (tnl, trecs) = serving[0], training[0]
    if snl != server or sorted(srecs) != [0]:
        raise ValueError(f"vllm serve runs on {snl} ({len(srecs)} node(s)); expected the last host {server} alone")
    served = CHECKS["vllm-serve-native"]({"check": "vllm-serve-native", "args": srecs[0]["argv"][2:], "env": srecs[0]["env"],
                                          "vllm_version": job["vllm_version"], "release": job["release"], "cwd": job["cwd"]})
    train_hosts = hosts[: job["train_nodes"]]
    if tnl != ",".join(train_hosts) or sorted(trecs) != list(range(job["train_nodes"])):
        raise ValueError(f"training runs on {tnl} ({sorted(trecs)}); expected {','.join(train_hosts)}")
    nodes = {}
    for rank, rec in trecs.items():
        argv = rec["argv"]
        facts = tm._launch_config(tm._accelerate_ns(argv[2:], job["cwd"]))
        want = {"nnodes": job["train_nodes"], "node_rank": rank, "master_addr": hosts[0],
                "master_port": int(job["master_port"]), "nproc_per_node": job["train_gpus_per_node"]}
        wrong = {k: (facts[k], v) for k, v in want.items() if facts[k] != v}
        if wrong:
            raise ValueError(f"training node {rank}: got vs expected {wrong}")
        script_args = argv[argv.index(f"trl.scripts.{job['script']}") + 1:]
        trl = _trl_args(job, script_args)
        if trl["vllm_server_host"] != server:
            raise ValueError(f"training node {rank} points the trainer at {trl['vllm_server_host']}, the server is on {server}")
        nodes[str(rank)] = {**facts, **trl}
    return {"server": served, "training": nodes}


def _trl_args(job, script_args):
    """The GRPO script's own parser on what a training node passes it (strict about unknown keys)."""
    import importlib

    parser = importlib.import_module(f"trl.scripts.{job['script']}").make_parser()
    old = os.getcwd()
    os.chdir(job["cwd"])
    try:
        parsed = parser.parse_args_and_config(args=list(script_args) + ["--use_cpu", "true"], fail_with_unknown_args=True)
    finally:
        os.chdir(old)
    out = {}
    for obj in parsed:
        for key in ("vllm_server_host", "vllm_server_port", "vllm_mode", "per_device_train_batch_size", "num_generations"):
            if hasattr(obj, key):
                out[key] = _plain(getattr(obj, key))
    return out
