"""Multi-node truth checks (run inside a stack venv; loaded by truth.py). Jobs: tests/truth_jobs_multinode.py.

- "slurm" / "slurm-accelerate": the rendered slurm.sbatch is parsed by `bash -n`, its #SBATCH
  directives are read, then it runs for real under bash with test stand-ins for `srun` (runs
  its command once per node, SLURM_NODEID = 0..nodes-1, sequentially), `scontrol show
  hostnames` (prints fake host names) and the launcher binary (torchrun / accelerate /
  llamafactory-cli / deepspeed: records argv and env, starts nothing). Each node's recorded
  command then goes through the launcher's own parser: torch.distributed.run's for torchrun;
  accelerate's launch parser + config file + prepare_deepspeed_cmd_env (the torchrun arguments
  accelerate would run) for `accelerate launch`; LLaMA-Factory's launcher (truth_llamafactory)
  for llamafactory-cli. node_rank must equal the node's SLURM_NODEID, master_addr the first host,
  nnodes x nproc_per_node the recipe's world size; the framework checks of a single-node launch
  (hf-script, llamafactory-launch) run on every node's command too.
  Not covered: a real SLURM (srun's environment propagation, GPU binding), name resolution of
  the first host from the other nodes, NCCL over the network.
- "hostfile": DeepSpeed's own hostfile parser, nodes lines of slots = training GPUs per node.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

from truth import CHECKS, check

RECORDED_ENV = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "FORCE_TORCHRUN",
                "PYTORCH_CUDA_ALLOC_CONF", "OPTIM_TORCH", "LAUNCHER", "SLURM_NODEID")
LAUNCHERS = ("torchrun", "accelerate", "llamafactory-cli", "deepspeed")

FAKE_SRUN = r"""#!/usr/bin/env bash
# Test stand-in for srun: the command once per node, SLURM_NODEID set as srun sets it.
echo "$*" >> "$FTR_FAKE_OUT/srun.args"
nodes=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes=*) nodes="${1#--nodes=}"; shift ;;
    -N|--nodes) nodes="$2"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
for ((i = 0; i < nodes; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 "$@" || exit $?
done
"""
FAKE_SCONTROL = r"""#!/usr/bin/env bash
# Test stand-in for `scontrol show hostnames LIST`.
[ "$1" = show ] && [ "$2" = hostnames ] || exit 2
for h in $FTR_FAKE_HOSTS; do echo "$h"; done
"""
FAKE_LAUNCHER = """#!{python}
# Test stand-in for a launcher: records what the node would run, runs nothing.
import json, os, sys
rec = {{"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:], "env": {{k: os.environ[k] for k in {keys!r} if k in os.environ}}}}
with open(os.path.join(os.environ["FTR_FAKE_OUT"], "node%s.json" % os.environ.get("SLURM_NODEID", "x")), "w") as fh:
    json.dump(rec, fh)
"""


def _directives(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"#SBATCH\s+--([a-z-]+)(?:[= ](\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) if m.group(2) is not None else True
    return out


def _write(path, text):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, 0o755)


def _dry_run(job):
    """Run slurm.sbatch with SLURM and launcher stand-ins: {node: record}, srun args."""
    with open(job["path"], encoding="utf-8") as fh:
        text = fh.read()
    syntax = subprocess.run(["bash", "-n", job["path"]], capture_output=True, text=True)
    if syntax.returncode:
        raise ValueError(f"bash -n: {syntax.stderr.strip()}")
    d = _directives(text)
    want = {"nodes": str(job["nodes"]), "ntasks-per-node": "1", "gpus-per-node": str(job["gpus_per_node"])}
    got = {k: d.get(k) for k in want}
    if got != want:
        raise ValueError(f"#SBATCH directives {got}, expected {want}")
    tmp = tempfile.mkdtemp(prefix="ftr-slurm-")
    bin_dir, out = os.path.join(tmp, "bin"), os.path.join(tmp, "out")
    os.makedirs(bin_dir)
    os.makedirs(out)
    _write(os.path.join(bin_dir, "srun"), FAKE_SRUN)
    _write(os.path.join(bin_dir, "scontrol"), FAKE_SCONTROL)
    for name in LAUNCHERS:
        _write(os.path.join(bin_dir, name), FAKE_LAUNCHER.format(python=sys.executable, keys=RECORDED_ENV))
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER")}
    env.update(job.get("env", {}))
    env.update({"PATH": bin_dir + os.pathsep + env.get("PATH", ""), "FTR_FAKE_OUT": out,
                "FTR_FAKE_HOSTS": " ".join(job["hosts"]), "SLURM_JOB_NODELIST": "gpu-fake[list]",
                "SLURM_SUBMIT_DIR": job["cwd"], "SLURM_JOB_ID": "4242", "SLURM_NNODES": str(job["nodes"])})
    proc = subprocess.run(["bash", job["path"]], cwd=job["cwd"], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise ValueError(f"slurm.sbatch dry run failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    records = {}
    for i in range(job["nodes"]):
        p = os.path.join(out, f"node{i}.json")
        if not os.path.exists(p):
            raise ValueError(f"node {i} started no launcher ({', '.join(LAUNCHERS)}); stderr: {proc.stderr.strip()[-800:]}")
        with open(p, encoding="utf-8") as fh:
            records[i] = json.load(fh)
    with open(os.path.join(out, "srun.args"), encoding="utf-8") as fh:
        srun_args = fh.read().split("\n")[0]
    if "--ntasks-per-node=1" not in srun_args.split():
        raise ValueError(f"srun {srun_args}: one task per node is needed (the launcher starts the node's processes)")
    return records


def _torchrun_ns(argv):
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args(argv)


def _accelerate_ns(argv, cwd):
    """The torchrun arguments `accelerate launch argv` runs with (standard multi-node launcher)."""
    import accelerate.utils.launch as acc_launch
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from torch.distributed import run as distrib_run

    old = os.getcwd()
    os.chdir(cwd)
    saved = acc_launch.is_port_in_use
    acc_launch.is_port_in_use = lambda *a, **k: False  # this machine is not the rendezvous host
    try:
        args = launch_command_parser().parse_args(argv)
        if not args.config_file:
            raise ValueError("accelerate launch without --config_file")
        args, defaults, mp_from_config = _validate_launch_command(args)
        if args.use_fsdp and not args.cpu:
            # FSDP goes through accelerate's multi_gpu_launcher: its env, then torchrun on these args
            acc_launch.prepare_multi_gpu_env(args)
            return acc_launch._filter_args(args, distrib_run.get_args_parser(),
                                           ["--training_script", args.training_script,
                                            "--training_script_args", args.training_script_args])
        if not args.use_deepspeed or args.cpu:
            raise ValueError("accelerate.yaml selects neither DeepSpeed nor FSDP")
        # As accelerate's launch_command does before its deepspeed_launcher.
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        args.deepspeed_fields_from_accelerate_config = ",".join(fields + (["mixed_precision"] if mp_from_config else []))
        cmd, _ = acc_launch.prepare_deepspeed_cmd_env(args)
        if cmd is not None:
            # pdsh/openmpi/...: accelerate would start `deepspeed --hostfile ...` from this node.
            raise ValueError(f"accelerate would run {' '.join(cmd[:4])} ... (deepspeed_multinode_launcher "
                             f"{args.deepspeed_multinode_launcher}), not one launcher per node")
        return acc_launch._filter_args(args, distrib_run.get_args_parser(),
                                       ["--training_script", args.training_script,
                                        "--training_script_args", args.training_script_args])
    finally:
        acc_launch.is_port_in_use = saved
        os.chdir(old)


def _launch_config(ns):
    """What torchrun's agent will use: nodes, node rank and rendezvous endpoint, via torchrun's own config_from_args."""
    from torch.distributed.run import config_from_args

    config, _, _ = config_from_args(ns)
    if config.min_nodes != config.max_nodes:
        raise ValueError(f"elastic nnodes {config.min_nodes}:{config.max_nodes}: the world size is not fixed")
    host, _, port = config.rdzv_endpoint.rpartition(":")
    if config.rdzv_backend != "static":
        raise ValueError(f"rdzv_backend {config.rdzv_backend}: node ranks are then assigned at rendezvous, not from NODE_RANK")
    return {"nnodes": config.max_nodes, "node_rank": int(config.rdzv_configs["rank"]), "master_addr": host,
            "master_port": int(port), "nproc_per_node": int(config.nproc_per_node)}


def _nodes_facts(job, rank, rec):
    argv = rec["argv"]
    name = argv[0]
    facts = {"launcher": name}
    if name == "torchrun":
        facts.update(_launch_config(_torchrun_ns(argv[1:])))
        if job.get("script"):
            facts["framework"] = CHECKS["hf-script"]({"script": job["script"], "launcher": "torchrun", "argv": argv[1:],
                                                      "extra": ["--use_cpu", "true"], "cwd": job["cwd"],
                                                      "release": job.get("release")})
    elif name == "accelerate":
        if argv[1:2] != ["launch"]:
            raise ValueError(f"accelerate {argv[1:2]}: expected `accelerate launch`")
        facts.update(_launch_config(_accelerate_ns(argv[2:], job["cwd"])))
        if job.get("script"):
            facts["framework"] = CHECKS["hf-script"]({"script": job["script"], "launcher": "accelerate", "argv": argv[2:],
                                                      "extra": ["--use_cpu", "true"], "cwd": job["cwd"],
                                                      "release": job.get("release")})
    elif name == "llamafactory-cli":
        env = {k: v for k, v in rec["env"].items() if k not in ("LAUNCHER", "SLURM_NODEID")}
        lf = CHECKS["llamafactory-launch"]({"env": env, "args": argv[1:], "world_size": job["world_size"],
                                            "devices_per_node": job["gpus_per_node"],
                                            "llamafactory_files": job["llamafactory_files"], "cwd": job["cwd"]})
        facts.update(nnodes=lf["nnodes"], node_rank=int(lf["node_rank"]), master_addr=lf["master_addr"],
                     master_port=int(lf["master_port"]), nproc_per_node=lf["nproc_per_node"], framework=lf)
    else:
        raise ValueError(f"no multi-node check for launcher {name}")
    want = {"nnodes": job["nodes"], "node_rank": rank, "master_addr": job["hosts"][0], "master_port": int(job["master_port"]),
            "nproc_per_node": job["train_gpus_per_node"]}
    wrong = {k: (facts[k], v) for k, v in want.items() if facts[k] != v}
    if wrong:
        raise ValueError(f"node {rank} ({name}): got vs expected {wrong}")
    return facts


@check("slurm")
def slurm(job):
    records = _dry_run(job)
    return {str(rank): _nodes_facts(job, rank, rec) for rank, rec in records.items()}


CHECKS["slurm-accelerate"] = slurm


if "hostfile" not in CHECKS:

    @check("hostfile")
    def hostfile(job):
        from deepspeed.launcher.runner import fetch_hostfile

        pool = fetch_hostfile(job["path"])
        if not pool:
            raise ValueError("DeepSpeed reads no hosts from the hostfile")
        if len(pool) != int(job["nodes"]) or set(pool.values()) != {int(job["slots"])}:
            raise ValueError(f"hostfile {dict(pool)}: expected {job['nodes']} hosts of slots={job['slots']}")
        return {"hosts": list(pool), "slots": list(pool.values())}
