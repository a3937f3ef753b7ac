"""Truth checks for launch scripts that run a repository's own HF Trainer script under torchrun.

QwenLM/Qwen finetune.py and OpenBMB/MiniCPM-V finetune/finetune.py are not packages. Their
argument dataclasses are written down in the test stand-ins (qwen_finetune.py,
minicpmv_finetune.py beside this file; same field names, types and defaults as upstream),
and the rendered torchrun command is checked with:

1. the launcher's own argument parser: torch.distributed.run's for `torchrun`, accelerate's
   launch_command_parser for `accelerate launch` (world size from its --config_file);
2. HfArgumentParser over the script's four dataclasses, strict: an unknown flag fails, as
   the script's own parse_args_into_dataclasses() does;
3. HF's DeepSpeed consistency check (HfTrainerDeepSpeedConfig, what Trainer runs) between
   those TrainingArguments and the --deepspeed JSON, at the launcher's world size
   (torchrun: nproc_per_node x nnodes; accelerate: the config's num_processes), which must
   also equal the world size the JSON's batch numbers were written for.

A launch script rendered for transformers 4.x (value transformers_version) is checked in a child
process where that release shadows the stack's transformers 5 (devenv.ensure_release("trl",
version, package="transformers"): transformers with the tokenizers and huggingface-hub it
imports with), so its own TrainingArguments decides which flags exist and what type they have.
"""

import importlib
import json
import os

from truth import _plain, check, in_release

SCRIPTS = {"qwen-finetune": "qwen_finetune", "minicpmv-finetune": "minicpmv_finetune"}


def _nnodes(value):
    # torchrun accepts "N" or "MIN:MAX"; a fixed-size job has MIN == MAX.
    lo, _, hi = str(value).partition(":")
    assert not hi or hi == lo, f"elastic --nnodes {value}: world size is not fixed"
    return int(lo)


@check("hf-script")
def hf_script(job):
    facts = in_release(dict(job, check="hf-script"))  # rendered for transformers 4.x: that release parses it
    if facts is not None:
        return facts
    import transformers
    from transformers import HfArgumentParser

    HfTrainerDeepSpeedConfig = _hf_deepspeed().HfTrainerDeepSpeedConfig
    cwd = os.getcwd()
    os.chdir(job["cwd"])  # relative paths (ds.json, accelerate.yaml) are the launch script's folder
    try:
        script_path, script_args, world = _launcher(job["launcher"], job["argv"])
        script = importlib.import_module(SCRIPTS[job["script"]])
        parser = HfArgumentParser(script.DATACLASSES)
        # --use_cpu true only because TrainingArguments refuses bf16 on a machine without a GPU.
        args = list(script_args) + list(job.get("extra", []))
        model_args, data_args, training_args, lora_args = parser.parse_args_into_dataclasses(
            args=args, return_remaining_strings=False)

        facts = {"world_size": world, "training_script": script_path, "launcher": job["launcher"],
                 "zero3_enabled_before_load": _zero3(), "transformers": transformers.__version__}
        if training_args.deepspeed:
            with open(training_args.deepspeed, encoding="utf-8") as fh:
                ds = json.load(fh)
            ds_world = ds["train_batch_size"] // (ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"])
            assert ds_world * ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] == ds["train_batch_size"], \
                "ds.json train_batch_size is not micro x accumulation x a whole world size"
            assert ds_world == world, f"torchrun starts {world} processes, ds.json's batch is for {ds_world}"
            # The check HF Trainer runs, with the world size the launcher will give it.
            hf = HfTrainerDeepSpeedConfig(training_args.deepspeed)
            hf.trainer_config_process(_AtWorldSize(training_args, world))
            hf.trainer_config_finalize(_AtWorldSize(training_args, world), model=None, num_training_steps=100)
            facts["zero_stage"] = int(ds["zero_optimization"]["stage"])
        for obj in (model_args, data_args, training_args, lora_args):
            for key in job.get("report", []):
                if hasattr(obj, key):
                    facts[key] = _plain(getattr(obj, key))
        return facts
    finally:
        os.chdir(cwd)


def _launcher(name, argv):
    """(script, script args, world size) as the launcher itself parses argv."""
    if name == "torchrun":
        from torch.distributed.run import get_args_parser

        ns = get_args_parser().parse_args(argv)
        return ns.training_script, ns.training_script_args, int(ns.nproc_per_node) * _nnodes(ns.nnodes)
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    ns = launch_command_parser().parse_args(argv)
    assert ns.config_file, "accelerate launch without --config_file"
    cfg = load_config_from_file(ns.config_file)
    return ns.training_script, ns.training_script_args, int(ns.num_processes or cfg.num_processes)


def _hf_deepspeed():
    # transformers.deepspeed became transformers.integrations.deepspeed in 4.33 (QwenLM/Qwen pins 4.32).
    try:
        from transformers.integrations import deepspeed
    except ImportError:
        from transformers import deepspeed
    return deepspeed


def _zero3():
    """Whether transformers will build the model under zero.Init (read from --deepspeed at parse time)."""
    return bool(_hf_deepspeed().is_deepspeed_zero3_enabled())


class _AtWorldSize:
    """TrainingArguments as seen by a process of a WORLD-process job (this one is not launched)."""

    def __init__(self, args, world):
        self._args, self.world_size = args, world

    def __getattr__(self, name):
        return getattr(self._args, name)
