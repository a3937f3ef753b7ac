"""LLaMA-Factory truth checks (run inside the `llamafactory` stack venv; loaded by truth.py).

- "llamafactory": a rendered training YAML through `llamafactory.hparams.get_train_args`
  (HfArgumentParser over LLaMA-Factory's dataclasses plus all its cross-field checks), then
  three things that parser does NOT do when given a dict:
    * every key's value against its field's `Literal[...]` / Enum choices (`stage: dpoo`
      parses fine from a dict; only the CLI's argparse would refuse it);
    * `template` against LLaMA-Factory's template registry (otherwise a KeyError at data load);
    * HF Trainer's ds.json <-> TrainingArguments agreement (HfTrainerDeepSpeedConfig
      .trainer_config_process, whose mismatches the Trainer raises on) at the recipe's world
      size, not the one-process world size this check runs with.
- "llamafactory-launch": a launch-script command `ENV=... llamafactory-cli train X.yaml` run
  through LLaMA-Factory's own launcher with subprocess.run intercepted; the torchrun command
  it would start is parsed with torchrun's own parser. Checks that it starts torchrun, that
  nnodes x nproc_per_node equals the world size the ds.json (named by the YAML) was written
  for, and that the YAML it trains is the recipe's rendered LLaMA-Factory file.
"""

import contextlib
import difflib
import enum
import json
import os
import socket
import sys
import types
import typing

from truth import check


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@contextlib.contextmanager
def _cwd(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _one_process_dist_env():
    # With `deepspeed:` set, TrainingArguments sets up torch.distributed (LLaMA-Factory then
    # insists on a distributed launch). A one-process group is enough for parsing; the
    # recipe's own world size is used where it matters (trainer_config_process below).
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", _free_port())


def _is_enum(tp):
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _is_enum_list(tp):
    return typing.get_origin(tp) in (list, tuple) and bool(typing.get_args(tp)) and all(
        _is_enum(a) for a in typing.get_args(tp))


def _choices(annotation):
    """(allowed values, free) for a field type: free=True when some member takes any value."""
    allowed, free = [], False
    origin = typing.get_origin(annotation)
    members = typing.get_args(annotation) if origin in (typing.Union, types.UnionType) else (annotation,)
    for member in members:
        m_origin = typing.get_origin(member)
        if member is type(None):
            continue
        if m_origin is typing.Literal:
            allowed.extend(typing.get_args(member))
        elif _is_enum(member):
            allowed.extend(e.value for e in member)
        elif _is_enum_list(member):
            # list[SomeEnum]: HF also accepts one space-separated string of members (fsdp, debug).
            for a in typing.get_args(member):
                allowed.extend(e.value for e in a)
        elif member is str and any(_is_enum(a) or _is_enum_list(a) for a in members):
            # `SomeEnum | str` is HF's spelling for "a member name as a string": still choices.
            continue
        else:
            free = True
    return allowed, free


def literal_violations(data, dataclasses_):
    """Keys whose value is not among their field's Literal/Enum choices: [(key, value, choices)].

    Fields whose type also admits free values (e.g. `bool | str | list[FSDPOption]`) are
    left to the parser; a space-separated string for a `list[Enum]` field is checked word
    by word, as HF splits it.
    """
    fields = {}
    for cls in dataclasses_:
        hints = typing.get_type_hints(cls)
        for f in cls.__dataclass_fields__.values():
            fields.setdefault(f.name, (hints.get(f.name, f.type), f.metadata))
    bad = []
    for key, value in data.items():
        if key not in fields or value is None:
            continue
        annotation, metadata = fields[key]
        allowed, free = _choices(annotation)
        if metadata.get("choices"):  # HfArgumentParser hands these to argparse as `choices`
            allowed, free = allowed + list(metadata["choices"]), False
        if not allowed or free:
            continue
        words = value if isinstance(value, list) else value.split() if isinstance(value, str) else [value]
        for word in words or [value]:
            if word not in allowed and str(word) not in [str(a) for a in allowed]:
                bad.append((key, value, sorted({str(a) for a in allowed})))
                break
    return bad


@check("llamafactory")
def llamafactory_config(job):
    import yaml
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from llamafactory.data.template import TEMPLATES
    from llamafactory.hparams import get_train_args
    from llamafactory.hparams import parser as lf_parser

    with open(job["path"], encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    data.update(job.get("overrides", {}))
    # parser_only: skip the checks below (tests show get_train_args alone lets a bad Literal pass).
    bad = [] if job.get("parser_only") else literal_violations(data, lf_parser._TRAIN_ARGS)
    if bad:
        raise ValueError("; ".join(f"{k}: {v!r} is not one of {c}" for k, v, c in bad))
    if not job.get("parser_only") and data.get("template") is not None and data["template"] not in TEMPLATES:
        near = difflib.get_close_matches(str(data["template"]), list(TEMPLATES), n=3)
        raise ValueError(f"template: {data['template']!r} is not a LLaMA-Factory template "
                         f"({len(TEMPLATES)} known; close: {', '.join(near) or 'none'})")
    _one_process_dist_env()
    # pure_bf16 is refused unless the GPU reports bf16 (parser.is_torch_bf16_gpu_available); this
    # machine has none, so the answer is the recipe's GPU's (gpu_bf16 from the memory catalog).
    real_bf16 = lf_parser.is_torch_bf16_gpu_available
    if "gpu_bf16" in job:
        lf_parser.is_torch_bf16_gpu_available = lambda: bool(job["gpu_bf16"])
    # The YAML names ds.json relative to the folder llamafactory-cli runs in.
    try:
        with _cwd(job.get("cwd") or os.path.dirname(job["path"])):
            model_args, data_args, training_args, finetuning_args, _ = get_train_args(dict(data))
    finally:
        lf_parser.is_torch_bf16_gpu_available = real_bf16
    with _cwd(job.get("cwd") or os.path.dirname(job["path"])):
        facts = {
            "stage": finetuning_args.stage,
            "finetuning_type": finetuning_args.finetuning_type,
            "lora_rank": finetuning_args.lora_rank,
            "fp16": bool(training_args.fp16),
            "bf16": bool(training_args.bf16),
            "cutoff_len": data_args.cutoff_len,
            "template": data_args.template,
            "flash_attn": str(getattr(model_args.flash_attn, "value", model_args.flash_attn)),
            "deepspeed": training_args.deepspeed,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
            "pure_bf16": bool(finetuning_args.pure_bf16),
            "compute_dtype": str(model_args.compute_dtype),
        }
        if training_args.deepspeed:
            world = int(job["world_size"])
            # What HF Trainer does with the ds.json when it builds the engine, at the recipe's
            # world size: fill "auto" and collect every value that disagrees with the arguments.
            hf_ds = HfTrainerDeepSpeedConfig(training_args.deepspeed)
            cls = type(training_args)
            real = cls.__dict__.get("world_size")
            try:
                setattr(cls, "world_size", property(lambda self: world))
                hf_ds.trainer_config_process(training_args)
            finally:
                if real is None:
                    delattr(cls, "world_size")
                else:
                    setattr(cls, "world_size", real)
            if hf_ds.mismatches:
                raise ValueError("ds.json disagrees with the LLaMA-Factory arguments at world size "
                                 f"{world} (HF Trainer refuses this):\n" + "\n".join(hf_ds.mismatches))
            facts["ds_zero3"] = hf_ds.is_zero3()
            facts["ds_train_batch_size"] = hf_ds.get_value("train_batch_size")
    return facts


@check("llamafactory-launch")
def llamafactory_launch(job):
    """LLaMA-Factory's launcher, given the script's env and args, must start the recipe's torchrun."""
    import subprocess

    import yaml
    from torch.distributed import run as torchrun

    from llamafactory import launcher
    from llamafactory.extras import misc
    from llamafactory.train import tuner

    started = []

    def no_training():
        raise ValueError(f"llamafactory-cli {' '.join(job['args'])} with {job['env']} would train in this "
                         "process without torchrun (DeepSpeed needs FORCE_TORCHRUN=1 or several GPUs)")

    def fake_run(cmd, *args, **kwargs):
        started.append({"argv": list(cmd), "env": dict(kwargs.get("env") or {})})
        return subprocess.CompletedProcess(cmd, 0)

    saved = dict(os.environ), list(sys.argv), launcher.subprocess.run, misc.get_device_count, tuner.run_exp
    try:
        for key in ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT",
                    "RDZV_ID", "OPTIM_TORCH", "USE_MCA", "USE_RAY", "USE_V1"):
            os.environ.pop(key, None)  # only what the script sets
        os.environ.update(job["env"])
        sys.argv = ["llamafactory-cli"] + list(job["args"])
        launcher.subprocess.run = fake_run
        # The launcher counts the node's GPUs (torchrun without FORCE_TORCHRUN when > 1); this
        # machine has none, so it sees the recipe's hardware instead. Training never starts here.
        misc.get_device_count = lambda: int(job["devices_per_node"])
        tuner.run_exp = no_training
        try:
            launcher.launch()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    finally:
        os.environ.clear()
        os.environ.update(saved[0])
        sys.argv, launcher.subprocess.run, misc.get_device_count, tuner.run_exp = saved[1:]
    if len(started) != 1 or started[0]["argv"][0] != "torchrun":
        raise ValueError(f"llamafactory-cli {' '.join(job['args'])} with {job['env']} does not start "
                         f"torchrun (FORCE_TORCHRUN=1 is needed for DeepSpeed): {started}")
    ns = torchrun.get_args_parser().parse_args(started[0]["argv"][1:])
    nnodes, nproc = int(str(ns.nnodes).split(":")[-1]), int(ns.nproc_per_node)
    script_args = list(ns.training_script_args)
    if not script_args or script_args[0] not in job["llamafactory_files"]:
        raise ValueError(f"torchrun trains {script_args[:1]}, not the recipe's rendered file "
                         f"({', '.join(job['llamafactory_files'])})")
    cwd = job.get("cwd") or "."
    with open(os.path.join(cwd, script_args[0]), encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    world = nnodes * nproc
    facts = {"nnodes": nnodes, "nproc_per_node": nproc, "world_size": world, "yaml": script_args[0],
             "master_port": ns.master_port, "node_rank": ns.node_rank, "master_addr": ns.master_addr,
             "force_torchrun": job["env"].get("FORCE_TORCHRUN"),
             "PYTORCH_CUDA_ALLOC_CONF": started[0]["env"].get("PYTORCH_CUDA_ALLOC_CONF")}
    if world != int(job["world_size"]):
        raise ValueError(f"NNODES x NPROC_PER_NODE = {nnodes} x {nproc} = {world}, but the recipe's "
                         f"world size is {job['world_size']}")
    if cfg.get("deepspeed"):
        with open(os.path.join(cwd, cfg["deepspeed"]), encoding="utf-8") as fh:
            ds = json.load(fh)
        micro, accum, tbs = (ds.get(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                                 "train_batch_size"))
        if all(isinstance(v, int) for v in (micro, accum, tbs)):
            if tbs != micro * accum * world:
                raise ValueError(f"{cfg['deepspeed']} is written for {tbs / (micro * accum):g} processes "
                                 f"(train_batch_size {tbs} / micro {micro} / accum {accum}), but torchrun "
                                 f"starts {nnodes} x {nproc} = {world}")
            facts["ds_world_size"] = tbs // (micro * accum)
        else:
            # "auto" batch values: HF fills them from the running world size; nothing to compare.
            facts["ds_world_size"] = "auto"
    return facts


@check("llamafactory-accelerate-launch")
def llamafactory_accelerate_launch(job):
    """`accelerate launch --config_file X.yaml -m llamafactory.launcher Y.yaml` through accelerate's
    own parser, validation and launch-environment code (accelerate/commands/launch.py); only the
    final torchrun start (torch.distributed.run.run) is intercepted. What the workers would get:
    FSDP on and its version, mixed precision, process count, and the rendered LLaMA-Factory file."""
    import yaml
    import torch.distributed.run as distrib_run
    from accelerate.commands import launch as acc_launch

    started = []

    def fake_run(args):
        started.append({"args": args, "env": dict(os.environ)})

    saved_env, saved_run = dict(os.environ), distrib_run.run
    try:
        for key in [k for k in os.environ if k.startswith(("ACCELERATE_", "FSDP_"))]:
            os.environ.pop(key)  # only what the launch itself sets
        distrib_run.run = fake_run
        with _cwd(job.get("cwd") or "."):
            args = acc_launch.launch_command_parser().parse_args(list(job["args"]))
            acc_launch.launch_command(args)
    finally:
        distrib_run.run = saved_run
        os.environ.clear()
        os.environ.update(saved_env)
    if len(started) != 1:
        raise ValueError(f"accelerate launch {' '.join(job['args'])} did not start torchrun's multi-process launch "
                         f"(started {len(started)}; FSDP on this machine needs the GPU path)")
    ns, env = started[0]["args"], started[0]["env"]
    nnodes, nproc = int(str(ns.nnodes).split(":")[-1]), int(ns.nproc_per_node)
    script_args = list(ns.training_script_args)
    facts = {"module": bool(ns.module), "script": ns.training_script, "script_args": script_args,
             "nnodes": nnodes, "nproc_per_node": nproc, "world_size": nnodes * nproc,
             "use_fsdp": env.get("ACCELERATE_USE_FSDP"), "fsdp_version": env.get("FSDP_VERSION"),
             "mixed_precision": env.get("ACCELERATE_MIXED_PRECISION"),
             "fsdp_offload_params": env.get("FSDP_OFFLOAD_PARAMS"),
             "fsdp_reshard_after_forward": env.get("FSDP_RESHARD_AFTER_FORWARD"),
             "fsdp_auto_wrap_policy": env.get("FSDP_AUTO_WRAP_POLICY"),
             "fsdp_state_dict_type": env.get("FSDP_STATE_DICT_TYPE"),
             "fsdp_cpu_ram_efficient_loading": env.get("FSDP_CPU_RAM_EFFICIENT_LOADING"),
             "master_port": ns.master_port}
    if facts["world_size"] != int(job["world_size"]):
        raise ValueError(f"accelerate starts {nnodes} x {nproc} = {facts['world_size']} processes, but the "
                         f"recipe's world size is {job['world_size']}")
    if not (ns.module and ns.training_script == "llamafactory.launcher"):
        raise ValueError(f"accelerate launch runs {ns.training_script!r} (module: {ns.module}), not -m llamafactory.launcher")
    if not script_args or script_args[0] not in job["llamafactory_files"]:
        raise ValueError(f"llamafactory.launcher trains {script_args[:1]}, not the recipe's rendered file "
                         f"({', '.join(job['llamafactory_files'])})")
    with open(os.path.join(job.get("cwd") or ".", script_args[0]), encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    amp = facts["mixed_precision"] not in (None, "no")
    if cfg.get("pure_bf16") and amp:
        raise ValueError(f"{script_args[0]} asks for pure_bf16 but the accelerate config turns mixed precision "
                         f"{facts['mixed_precision']} on: transformers takes the Trainer's mixed precision from "
                         "ACCELERATE_MIXED_PRECISION, so it autocasts, and accelerate 1.11 upcasts the FSDP2 model to fp32")
    facts["pure_bf16"] = bool(cfg.get("pure_bf16"))
    return facts
