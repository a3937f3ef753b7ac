"""An accelerate FSDP config as `accelerate launch` and the Trainer read it (job "accelerate-fsdp").

accelerate 1.15: launch_command_parser + _validate_launch_command merge the config file into the
launch arguments (commands/launch.py), prepare_multi_gpu_env turns them into the FSDP_*
variables every training process gets (utils/launch.py), and FullyShardedDataParallelPlugin()
reads those variables (utils/dataclasses.py) - the plugin the Trainer's Accelerator uses. The
trainer config beside it is parsed by the TRL script's own parser with those variables set, and
the rule transformers 5.23 enforces when it builds the Accelerator (Trainer.
create_accelerator_and_postprocess: FSDP's activation checkpointing and the training argument
may not both be on) is evaluated on the two. Nothing is launched and no process group is made.
"""

import os

from truth import _plain, check


@check("accelerate-fsdp")
def accelerate_fsdp(job):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    argv = ["--config_file", job["path"], "-m", f"trl.scripts.{job['script']}"]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    env = {k: v for k, v in prepare_multi_gpu_env(args).items() if k.startswith(("FSDP_", "ACCELERATE_"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        facts = _plugin_facts(args)
        if job.get("trainer_config"):
            facts["trainer_activation_checkpointing"] = _trainer_checkpointing(job)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    # transformers 5.23 trainer.py: ValueError when both are True
    facts["refused_by_transformers"] = bool(facts["activation_checkpointing"] and facts.get("trainer_activation_checkpointing"))
    return facts


def _plugin_facts(args):
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import CPUOffloadPolicy

    plugin = FullyShardedDataParallelPlugin()
    policy = plugin.auto_wrap_policy
    return {
        "use_fsdp": bool(args.use_fsdp),
        "num_processes": int(args.num_processes),
        "num_machines": int(args.num_machines),
        "mixed_precision": _plain(args.mixed_precision),
        "fsdp_version": plugin.fsdp_version,
        "reshard_after_forward": _plain(plugin.reshard_after_forward),
        "activation_checkpointing": bool(plugin.activation_checkpointing),
        "cpu_ram_efficient_loading": bool(plugin.cpu_ram_efficient_loading),
        "auto_wrap_policy": getattr(policy, "__name__", _plain(policy)),
        "state_dict_type": _plain(plugin.state_dict_type.name),
        "cpu_offload": isinstance(plugin.cpu_offload, CPUOffloadPolicy),
    }


def _trainer_checkpointing(job):
    import importlib

    script = importlib.import_module(f"trl.scripts.{job['script']}")
    parsed = script.make_parser().parse_args_and_config(
        args=["--config", job["trainer_config"], "--use_cpu", "true"], fail_with_unknown_args=True)
    [training_args] = [obj for obj in parsed if hasattr(obj, "activation_checkpointing")]
    return bool(training_args.activation_checkpointing)
