"""Checker for `accelerate launch ... -m trl.scripts.NAME --config F` lines (see tests/truth_jobs_trl.py)."""

from truth import _plain, check

# TrainingArguments refuses bf16 on a machine without a GPU; the one CPU necessity added.
CPU_ARGS = ["--use_cpu", "true"]


@check("trl-launch")
def trl_launch(job):
    """The command runs from the rendered folder (launch.sh cds there): its paths resolve from it."""
    import os

    cwd = os.getcwd()
    os.chdir(job["cwd"])
    try:
        return _trl_launch(job)
    finally:
        os.chdir(cwd)


def _trl_launch(job):
    import importlib

    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    from trl import get_peft_config, get_quantization_config
    from trl.trainer.model_config import ModelConfig

    ns = launch_command_parser().parse_args(job["argv"])
    assert ns.config_file, "accelerate launch without --config_file"
    assert ns.module, "a TRL script is run as a module (-m trl.scripts.NAME)"
    cfg = load_config_from_file(ns.config_file)
    script = importlib.import_module(ns.training_script)
    parsed = script.make_parser().parse_args_and_config(args=list(ns.training_script_args) + CPU_ARGS,
                                                        fail_with_unknown_args=True)
    [model_args] = [obj for obj in parsed if isinstance(obj, ModelConfig)]
    [train_args] = [obj for obj in parsed if hasattr(obj, "per_device_train_batch_size")]
    facts = {"script": ns.training_script, "num_processes": int(ns.num_processes or cfg.num_processes),
             "distributed_type": str(getattr(cfg.distributed_type, "value", cfg.distributed_type)),
             "optim": _plain(train_args.optim), "bf16": train_args.bf16, "fp16": train_args.fp16,
             "activation_checkpointing": bool(train_args.activation_checkpointing),
             "micro_batch": train_args.per_device_train_batch_size,
             "grad_accum": train_args.gradient_accumulation_steps,
             "max_length": getattr(train_args, "max_length", None), "packing": getattr(train_args, "packing", None)}
    quant = get_quantization_config(model_args)
    facts["quantization"] = None if quant is None else {
        "load_in_4bit": quant.load_in_4bit, "quant_type": quant.bnb_4bit_quant_type,
        "double_quant": quant.bnb_4bit_use_double_quant, "compute_dtype": str(quant.bnb_4bit_compute_dtype)}
    peft = get_peft_config(model_args)
    facts["lora"] = None if peft is None else {
        "r": peft.r, "alpha": peft.lora_alpha, "dropout": peft.lora_dropout,
        "target_modules": sorted(peft.target_modules) if isinstance(peft.target_modules, (set, list)) else peft.target_modules}
    return facts
