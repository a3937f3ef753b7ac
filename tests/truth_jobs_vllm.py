"""Jobs for `vllm serve` commands in launch scripts (pytest side; no framework imports).

One job per command, checked by tests/frameworks/truth_vllm.py with vLLM's own `vllm serve`
argument parser, of the release the recipe targets (value vllm_version, else tested_with),
installed beside the trl stack by devenv.ensure_release("trl", version, package="vllm").
"""

from ftrecipes import devenv
from truth_jobs import BUILDERS, command


def _is_vllm_serve(words):
    return words[:2] == ["vllm", "serve"]


@command(_is_vllm_serve)
def _vllm_serve(ctx, path, cmd):
    version = ctx["_recipe"].framework_versions(ctx).get("vllm")
    if version is None:
        raise ValueError(f"{path}: runs `vllm serve` but the recipe names no vLLM version (value vllm_version)")
    return [{"check": "vllm-serve-native", "args": cmd.words[2:], "env": dict(cmd.env), "vllm_version": version,
             "release": str(devenv.ensure_release("trl", version, package="vllm"))}]


# nodes > 1 of a recipe with a dedicated vLLM node: its slurm.sbatch starts serve.sh on one node and
# launch.sh on the others, which the generic "slurm" dry run (one launcher per node) does not model.
_shell_before = BUILDERS["shell"]


def _shell(ctx, path, text):
    if not (ctx.get("vllm_node") and "#SBATCH" in text):
        return _shell_before(ctx, path, text)
    from truth_jobs_multinode import HOSTS

    version = ctx["_recipe"].framework_versions(ctx).get("vllm")
    return [{"check": "slurm-vllm-node", "path": str(path), "nodes": ctx["nodes"], "gpus_per_node": ctx["gpus_per_node"],
             "train_nodes": ctx["train_nodes"], "train_gpus_per_node": ctx["train_gpus_per_node"],
             "world_size": ctx["world_size"], "master_port": ctx["master_port"], "hosts": HOSTS[: ctx["nodes"]],
             "vllm_version": version, "release": str(devenv.ensure_release("trl", version, package="vllm")),
             "script": ctx["_recipe"].meta["framework"]["script"].rsplit(".", 1)[-1]}]


BUILDERS["shell"] = _shell
