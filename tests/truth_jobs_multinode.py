"""Multi-node renders (nodes > 1) for the framework truth checks (pytest side; no framework imports).

- `slurm.sbatch` (a `format: shell` file rendered only when nodes > 1) -> "slurm": `bash -n`, its
  #SBATCH directives, then a dry run of the whole chain with stand-ins for SLURM only (`srun`
  runs the command once per node with SLURM_NODEID set, `scontrol` names the hosts) and for the
  launcher binary (records its argv and env). The recorded command of every node then goes through
  the launcher's real parser and the same framework checks as a single-node launch
  (frameworks/truth_multinode.py): the node rank must be SLURM_NODEID, the address the first host.
- the launch script of a multi-node render -> the usual launch-command jobs (truth_jobs.py and
  the plugins), with "$NODE_RANK", "$MASTER_ADDR" and "$MASTER_PORT" replaced by the values of
  the last node, since the rendered script reads them from the environment.
- `format: hostfile` -> "hostfile": DeepSpeed's own parser (deepspeed.launcher.runner.fetch_hostfile),
  one line per node with slots = training GPUs per node (only if no other plugin registered one).
"""

import re

from truth_jobs import BUILDERS, builder

# Stand-in upstream folders for scripts the launch scripts check before starting (finetune.py).
UPSTREAM_DIRS = ("QWEN_DIR", "MINICPMV_FINETUNE_DIR")
HOSTS = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]


def node_env(ctx, rank):
    return {"NODE_RANK": str(rank), "MASTER_ADDR": HOSTS[0], "MASTER_PORT": str(ctx["master_port"])}


def expand_node_env(text, env):
    """The launch script's "$NODE_RANK"-style words as one node's shell would expand them."""
    for name, value in env.items():
        text = re.sub(r'"\$%s"|\$%s\b|"\$\{%s\}"|\$\{%s\}' % ((name,) * 4), value, text)
    return text


def _upstream(path):
    # launch.sh refuses a finetune.py without the loading fix (grep low_cpu_mem_usage) or none at all.
    d = path.parent / "_upstream"
    d.mkdir(exist_ok=True)
    (d / "finetune.py").write_text("# stand-in for the dry run; never executed (low_cpu_mem_usage)\n")
    return str(d)


_single_node_shell = BUILDERS["shell"]


def _shell(ctx, path, text):
    if not ctx.get("multi_node"):
        return _single_node_shell(ctx, path, text)
    if "#SBATCH" in text:
        return _slurm(ctx, path, text)
    return _single_node_shell(ctx, path, expand_node_env(text, node_env(ctx, ctx["nodes"] - 1)))


BUILDERS["shell"] = _shell


def _slurm(ctx, path, text):
    r = ctx["_recipe"]
    launch = [f.name for f in r.files if f.format in ("shell", "openrlhf") and f.when is None]
    upstream = _upstream(path)
    base = {
        "check": "slurm", "path": str(path), "nodes": ctx["nodes"], "gpus_per_node": ctx["gpus_per_node"],
        "train_gpus_per_node": ctx["train_gpus_per_node"], "world_size": ctx["world_size"],
        "master_port": ctx["master_port"], "hosts": HOSTS[: ctx["nodes"]] if ctx["nodes"] <= len(HOSTS)
        else [f"gpu-{i:03d}" for i in range(ctx["nodes"])],
        "launch_scripts": launch, "env": {k: upstream for k in UPSTREAM_DIRS},
        "script": _hf_script_name(ctx), **_hf_release(ctx),
        "llamafactory_files": [f.name for f in r.files if f.format == "llamafactory"],
    }
    jobs = [base]
    scripts = [path.parent / name for name in launch]
    if any(f.format == "accelerate" for f in r.files) and any(
            p.is_file() and '"$LAUNCHER" = accelerate' in p.read_text() for p in scripts):
        # launch.sh's second launcher (LAUNCHER=accelerate): accelerate.yaml + --machine_rank etc.
        jobs.append({**base, "check": "slurm-accelerate", "env": {**base["env"], "LAUNCHER": "accelerate"}})
    return jobs


def _hf_script_name(ctx):
    try:
        from truth_jobs_hfscripts import _script
    except ImportError:
        return None
    return _script(ctx)


def _hf_release(ctx):
    # A launch.sh rendered for transformers 4.x: every node's command is parsed by that release.
    from truth_jobs_hfscripts import release

    return release(ctx) if _hf_script_name(ctx) else {}


if "hostfile" not in BUILDERS:

    @builder("hostfile")
    def _hostfile(ctx, path, text):
        return [{"check": "hostfile", "path": str(path), "nodes": ctx["nodes"], "slots": ctx["train_gpus_per_node"]}]
