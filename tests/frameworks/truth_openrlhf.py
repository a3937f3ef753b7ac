"""Truth checks for OpenRLHF launch scripts (runs in the `openrlhf` stack venv).

`deepspeed --num_gpus N ... --module openrlhf.cli.<trainer> --flag value ...` is checked in
three steps, each by the frameworks' own code:

1. DeepSpeed's launcher parser (deepspeed.launcher.runner.parse_args) reads the whole command;
   the world size it starts is --num_gpus x nodes, which must equal the recipe's world size.
2. OpenRLHF's argument parser, which 0.11.2 builds under `if __name__ == "__main__"` of the
   trainer module: the module is run with runpy as __main__ with the trainer flags the launcher
   hands over (plus the `--local_rank=0` the launcher appends), and `openrlhf.utils.get_strategy`
   (the first thing train() calls) is replaced by a function that keeps the parsed args, builds
   the real DeepspeedStrategy from them and stops with a sentinel. Unknown flags, wrong types and
   bad choices end in argparse's error, which becomes the rejection message.
3. The DeepSpeed config OpenRLHF would pass to deepspeed.initialize: the real
   DeepspeedStrategy.prepare((model, cfg)) runs on a 2-parameter stand-in model with
   deepspeed.initialize replaced by a sentinel that captures `config`. `cfg` is built from the
   parsed args exactly as openrlhf/cli/train_sft.py's train() builds it (only scheduler_steps, which
   depends on the data, is a placeholder; it does not reach the DeepSpeed config). When the job
   names a rendered ds.json, it must equal that config exactly, and DeepSpeedConfig must accept the
   config at the launcher's world size (its train_batch_size assertion).

A file rendered for an older release (job "release": a directory from devenv.ensure_release)
is checked in a child process where that release shadows the stack's openrlhf: its own argparse
(flat flag names before 0.10.2) and its own DeepspeedStrategy.get_ds_train_config, on the stack's
torch/DeepSpeed/transformers.
"""

import contextlib
import io
import json
import runpy
import sys

from truth import CHECKS, check, in_release


class _Stop(BaseException):
    """Raised by the replaced functions once they have what the check needs."""


def launcher_world_size(words):
    """Parse `deepspeed <launcher args> --module M <args>` with DeepSpeed's parser."""
    from deepspeed.launcher import runner

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            largs = runner.parse_args(list(words[1:]))
    except SystemExit as exc:
        raise ValueError(f"deepspeed launcher rejected the command: {err.getvalue().strip()}") from exc
    if largs.num_gpus <= 0:
        raise ValueError("deepspeed launcher: --num_gpus is not set, so the world size is every visible GPU")
    if largs.include or largs.exclude:
        raise ValueError("deepspeed launcher: --include/--exclude are not modelled by this check")
    nodes = largs.num_nodes if largs.num_nodes > 0 else 1
    return largs, largs.num_gpus * nodes


def parse_trainer_args(module, argv):
    """OpenRLHF's own parser (and its post-parse checks) on argv; returns (args, strategy)."""
    import openrlhf.utils as outils

    captured = {}
    real_get_strategy = outils.get_strategy

    def get_strategy(args):
        captured["args"] = args
        captured["strategy"] = real_get_strategy(args)
        raise _Stop

    saved_argv = sys.argv
    err = io.StringIO()
    outils.get_strategy = get_strategy
    sys.argv = [module.rsplit(".", 1)[-1] + ".py"] + list(argv)
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Stop:
        pass
    except SystemExit as exc:  # argparse: unrecognized arguments, invalid choice, bad type
        text = err.getvalue().strip()
        # argparse prints the whole usage first; the reason is on the "error:" line.
        reason = text[text.find(" error: ") + 1:] if " error: " in text else text[-1500:]
        raise ValueError(f"{module} rejected its flags: {reason}") from exc
    finally:
        outils.get_strategy = real_get_strategy
        sys.argv = saved_argv
    if "args" not in captured:
        raise ValueError(f"{module} returned before calling get_strategy; nothing was checked")
    return captured["args"], captured["strategy"]


def train_sft_optimizer_cfg(args):
    """The dict train_sft.train() hands to strategy.prepare (openrlhf 0.11.2, cli/train_sft.py)."""
    return dict(
        optim=args.optim,
        muon=vars(args.muon),
        adam=vars(args.adam),
        lr_scheduler=args.lr_scheduler,
        lr_warmup_ratio=args.lr_warmup_ratio,
        min_lr_ratio=args.min_lr_ratio,
        max_norm=args.max_norm,
        scheduler_steps=1,  # depends on the data set; not part of the DeepSpeed config
    )


def openrlhf_ds_config(strategy, cfg):
    """The `config` DeepspeedStrategy._ds_init_train_model passes to deepspeed.initialize."""
    import deepspeed
    import torch

    captured = {}
    real_initialize = deepspeed.initialize

    def initialize(*args, **kwargs):
        captured["config"] = kwargs.get("config")
        raise _Stop

    deepspeed.initialize = initialize
    try:
        strategy.prepare((torch.nn.Linear(2, 1), cfg))
    except _Stop:
        pass
    finally:
        deepspeed.initialize = real_initialize
    if captured.get("config") is None:
        raise ValueError("DeepspeedStrategy.prepare did not reach deepspeed.initialize")
    # As JSON: what a file can hold (tuples become lists).
    return json.loads(json.dumps(captured["config"]))


def first_difference(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                return f"{path}{key}: only in OpenRLHF's config ({b[key]!r})"
            if key not in b:
                return f"{path}{key}: only in ds.json ({a[key]!r})"
            diff = first_difference(a[key], b[key], f"{path}{key}.")
            if diff:
                return diff
        return None
    if a != b or type(a) is not type(b):
        return f"{path.rstrip('.')}: ds.json {a!r} != OpenRLHF {b!r}"
    return None


def _arg(args, dotted, legacy):
    """A parsed flag by its 0.10.2+ dotted name, or by its earlier flat name (older releases)."""
    node = args
    for part in dotted.split("."):
        node = getattr(node, part, None)
        if node is None:
            break
    return node if node is not None else getattr(args, legacy, None)


@check("openrlhf")
def openrlhf_launch(job):
    facts = in_release(job)
    if facts is not None:
        return facts
    words = job["words"]
    module = job["module"]
    largs, world = launcher_world_size(words)
    if largs.module is not True or largs.user_script != module:
        raise ValueError(f"deepspeed launcher does not run module {module} (user_script={largs.user_script!r})")
    if world != int(job["world_size"]):
        raise ValueError(f"deepspeed launcher starts {world} process(es); the recipe's world size is {job['world_size']}")
    # The launcher appends --local_rank=<rank> to the module's arguments (unless --no_local_rank).
    argv = list(largs.user_args) + ([] if largs.no_local_rank else ["--local_rank=0"])
    args, strategy = parse_trainer_args(module, argv)
    from importlib.metadata import version as _dist_version

    legacy = not hasattr(args, "ds")  # before 0.10.2: flat flag names
    if legacy:
        # --bf16 (up to 0.9.1) is a switch; --param_dtype (0.9.2) a value. --flash_attn (up to
        # 0.8.9) means flash_attention_2, else the model is loaded with eager attention.
        dtype = getattr(args, "param_dtype", None) or ("bf16" if getattr(args, "bf16", False) else "fp32")
        attn = getattr(args, "attn_implementation", None) or ("flash_attention_2" if getattr(args, "flash_attn", False) else "eager")
    else:
        dtype, attn = args.ds.param_dtype, args.ds.attn_implementation
    micro = _arg(args, "train.micro_batch_size", "micro_train_batch_size")
    batch = _arg(args, "train.batch_size", "train_batch_size")
    ring = _arg(args, "ds.ring_attn_size", "ring_attn_size") or 1
    tp = _arg(args, "ds.tensor_parallel_size", "ds_tensor_parallel_size") or 1
    facts = {
        "openrlhf_version": _dist_version("openrlhf"),
        "legacy_flags": legacy,
        "launcher_world_size": world,
        "zero_stage": _arg(args, "ds.zero_stage", "zero_stage"),
        "adam_offload": bool(_arg(args, "ds.adam_offload", "adam_offload")),
        "param_dtype": dtype,
        "attn_implementation": attn,
        "gradient_checkpointing": bool(_arg(args, "model.gradient_checkpointing_enable", "gradient_checkpointing")),
        "lora_rank": _arg(args, "ds.lora.rank", "lora_rank"),
        "micro_batch_size": micro,
        "train_batch_size": batch,
        # DeepspeedStrategy.setup_distributed's formula (integer division: a remainder is lost).
        "accumulated_gradient": batch * ring * tp // micro // world,
        "max_len": _arg(args, "data.max_len", "max_len"),
    }
    if job.get("openrlhf_version") and facts["openrlhf_version"] != job["openrlhf_version"]:
        raise ValueError(f"checked with openrlhf {facts['openrlhf_version']}, not the {job['openrlhf_version']} the file is for")
    if module != "openrlhf.cli.train_sft" or not job.get("ds_json"):
        return facts
    if legacy:
        # Before 0.10.2 the optimizer is an object built by strategy.create_optimizer, and
        # _ds_init_train_model passes get_ds_train_config(is_actor) to deepspeed.initialize as is.
        ours = json.loads(json.dumps(strategy.get_ds_train_config(is_actor=True)))
    else:
        ours = openrlhf_ds_config(strategy, train_sft_optimizer_cfg(args))
    with open(job["ds_json"], encoding="utf-8") as fh:
        rendered = json.load(fh)
    diff = first_difference(rendered, ours)
    if diff:
        raise ValueError(f"ds.json differs from the DeepSpeed config OpenRLHF builds from launch.sh: {diff}")
    # DeepSpeed's own parser on OpenRLHF's config at the launcher's world size (batch assertion).
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(ours, fh)
    ds_facts = CHECKS["deepspeed"]({"path": fh.name, "world_size": world})
    facts["ds_equal"] = True
    facts["deepspeed"] = ds_facts
    return facts
