"""LLaMA-Factory jobs for the framework truth checks (pytest side; see frameworks/truth_llamafactory.py).

- a rendered `format: llamafactory` YAML -> "llamafactory": get_train_args + Literal/Enum choices
  + template name + HF Trainer's ds.json agreement at the recipe's world size;
- a launch-script command `... llamafactory-cli train X.yaml` -> "llamafactory-launch": the
  script's env assignments through LLaMA-Factory's own launcher (torchrun world size = the
  recipe's, and X.yaml is the rendered LLaMA-Factory file);
- `accelerate launch --config_file A.yaml -m llamafactory.launcher X.yaml` ->
  "llamafactory-accelerate-launch": accelerate's own launch code up to the torchrun start (FSDP
  version, mixed precision and process count the workers get; X.yaml the rendered file).
The ds.json itself is checked by the generic "deepspeed" builder, in the recipe's stack venv.
"""

from truth_jobs import builder, command


@builder("llamafactory")
def _llamafactory(ctx, path, text):
    from ftrecipes.memory import catalog

    # Whether the recipe's GPU has bf16 (LLaMA-Factory's pure_bf16 check asks the machine's GPU).
    gpu_bf16 = catalog.gpu(ctx["_recipe"].meta["hardware"]["gpu"]).bf16
    return [{"check": "llamafactory", "path": str(path), "world_size": ctx["world_size"], "gpu_bf16": gpu_bf16}]


@command(lambda w: len(w) >= 2 and w[0] in ("llamafactory-cli", "lmf") and w[1] == "train")
def _llamafactory_cli(ctx, path, cmd):
    lf_files = [f.name for f in ctx["_recipe"].files if f.format == "llamafactory"]
    return [{
        "check": "llamafactory-launch",
        "env": dict(cmd.env),
        "args": cmd.words[1:],
        "world_size": ctx["world_size"],
        # GPUs per node the launcher would count on the recipe's hardware.
        "devices_per_node": ctx["gpus_per_node"],
        "llamafactory_files": lf_files,
    }]


@command(lambda w: w[:2] == ["accelerate", "launch"] and "llamafactory.launcher" in w)
def _llamafactory_accelerate(ctx, path, cmd):
    lf_files = [f.name for f in ctx["_recipe"].files if f.format == "llamafactory"]
    return [{"check": "llamafactory-accelerate-launch", "args": cmd.words[2:], "world_size": ctx["world_size"],
             "llamafactory_files": lf_files}]
