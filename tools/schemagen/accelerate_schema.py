"""Generate schemas/accelerate.schema.json from the installed accelerate.

    /tmp/scratch-schemas/trl/bin/python tools/schemagen/accelerate_schema.py

Top level = accelerate.commands.config.config_args.ClusterConfig fields (ClusterConfig.from_yaml_file
rejects unknown keys) plus the two legacy keys process_config() converts (fp16, dynamo_backend).
The sub-dicts (deepspeed_config, fsdp_config, ...) are copied key by key onto the `accelerate launch`
argparse namespace (commands/launch.py::_validate_launch_command), where unknown keys are silently
ignored: their keys and help come from launch_command_parser()'s argument groups.
"""
import dataclasses
import inspect
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import accelerate  # noqa: E402
from accelerate.commands.config.config_args import ClusterConfig  # noqa: E402
from accelerate.commands.launch import launch_command_parser  # noqa: E402
from accelerate.utils import DistributedType, DynamoBackend  # noqa: E402
from accelerate.utils.dataclasses import FP8BackendType  # noqa: E402
from accelerate.utils import constants as C  # noqa: E402
from accelerate.utils import launch as launch_env  # noqa: E402

from common import argparse_scalar, closed_object, short, write  # noqa: E402

BOOLISH = {"anyOf": [{"type": "boolean"}, {"enum": ["true", "false", "True", "False"]}]}
STRATEGIES = list(C.FSDP_SHARDING_STRATEGY) + [x.lower() for x in C.FSDP_SHARDING_STRATEGY] + [1, 2, 3, 4, 5, "1", "2", "3", "4", "5"]


def fsdp_by_version():
    """fsdp_config constraints that depend on fsdp_version (absent = 1, accelerate's default)."""
    keys = ("fsdp_reshard_after_forward", "reshard_after_forward")
    v2 = {"properties": {"fsdp_version": {"enum": [2, "2"]}}, "required": ["fsdp_version"]}
    return [{
        "if": v2,
        "then": {"properties": {k: dict(BOOLISH, description="FSDP2 takes a boolean here (the plugin raises ValueError otherwise).") for k in keys}},
        "else": {"properties": {k: {"enum": STRATEGIES, "description": "FSDP1 takes a sharding strategy here (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2); the plugin raises ValueError on a boolean."} for k in keys}},
    }]

# Per-key value schemas where the argparse type (often plain str) is looser than what the code accepts.
OVERRIDES = {
    "zero_stage": {"enum": [0, 1, 2, 3]},
    "offload_optimizer_device": {"enum": ["none", "cpu", "nvme"]},
    "offload_param_device": {"enum": ["none", "cpu", "nvme"]},
    "zero3_init_flag": BOOLISH,
    "zero3_save_16bit_model": BOOLISH,
    "gradient_accumulation_steps": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
    "gradient_clipping": {"anyOf": [{"type": "number", "minimum": 0}, {"const": "auto"}]},
    "deepspeed_multinode_launcher": {"enum": list(C.DEEPSPEED_MULTINODE_LAUNCHERS)},
    "fsdp_version": {"enum": [1, 2, "1", "2"]},
    "fsdp_sharding_strategy": {"enum": list(C.FSDP_SHARDING_STRATEGY) + [1, 2, 3, 4, 5]},
    # FullyShardedDataParallelPlugin.__post_init__ (utils/dataclasses.py): FSDP1 maps a strategy name
    # (any case) or its number to a ShardingStrategy and raises ValueError on a bool; FSDP2 wants a
    # bool. Which one applies is fixed per fsdp_version in FSDP_BY_VERSION below.
    "fsdp_reshard_after_forward": {"anyOf": BOOLISH["anyOf"] + [{"enum": STRATEGIES}]},
    "fsdp_auto_wrap_policy": {"enum": list(C.FSDP_AUTO_WRAP_POLICY)},
    "fsdp_backward_prefetch": {"enum": list(C.FSDP_BACKWARD_PREFETCH)},
    "fsdp_state_dict_type": {"enum": list(C.FSDP_STATE_DICT_TYPE)},
    "fsdp_transformer_layer_cls_to_wrap": {"type": "string"},
    "fsdp_min_num_params": {"type": "integer", "minimum": 0},
    "dynamo_backend": {"enum": [b.value for b in DynamoBackend] + [b.value.lower() for b in DynamoBackend]},
    # launch copies a YAML value into ACCELERATE_FP8_BACKEND unchanged (utils/launch.py
    # setup_fp8_env) and Accelerator.fp8_backend reads it as FP8BackendType, whose values are upper
    # case ("TE" in accelerate's own config templates); the flag's argparse choices are lower case
    "fp8_backend": {"enum": ["ao", "te", "msamp"] + [b.value for b in FP8BackendType if b.value != "NO"]},
    "fp8_override_linear_precision": {"anyOf": [{"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3}, {"type": "string"}]},
    "parallelism_config_sp_seq_length": {"type": ["integer", "string", "null"]},
}

# fp8 keys written by `accelerate config` (commands/config/cluster.py) that differ from the launch flags.
FP8_CONFIG_WRITER_KEYS = {
    "amax_compute_algorithm": ("fp8_amax_compute_algo", {"enum": ["max", "most_recent"]}),
    "amax_history_length": ("fp8_amax_history_len", {"type": "integer", "minimum": 1}),
    "optimization_level": ("fp8_opt_level", {"enum": ["O1", "O2"]}),
}

GROUPS = {
    "deepspeed_config": ("DeepSpeed Arguments", None,
                         "DeepSpeedPlugin settings (launch --zero_stage etc.). Keys are copied to `accelerate launch` arguments; unknown ones are silently ignored."),
    "fsdp_config": ("FSDP Arguments", "fsdp_",
                    "FullyShardedDataParallelPlugin settings; keys may omit the fsdp_ prefix (launch adds it)."),
    "megatron_lm_config": ("Megatron-LM Arguments", None, "MegatronLMPlugin settings."),
    "fp8_config": ("FP8 Arguments", "fp8_", "FP8 recipe settings; keys may omit the fp8_ prefix (launch adds it)."),
    "dynamo_config": (None, "dynamo_", "torch.compile (TorchDynamo) settings; keys may omit the dynamo_ prefix (launch adds it)."),
    "mpirun_config": ("MPI Arguments", None, "mpirun settings for multi-CPU launches."),
    "parallelism_config": ("ParallelismConfig Arguments", None, "ND-parallelism sizes (FSDP2 + TP/CP/SP)."),
}


# Namespace attributes accelerate's utils/launch.py reads with getattr(args, "..."): launch copies a
# config section's keys onto its namespace, so such a key takes effect though no flag names it
# (fsdp_ignored_modules -> FSDP_IGNORED_MODULES).
READ_WITHOUT_FLAG = frozenset(re.findall(r'getattr\(args, "(\w+)"', inspect.getsource(launch_env)))


def action_schema(a):
    name = a.dest
    if name in OVERRIDES:
        s = dict(OVERRIDES[name])
    elif type(a).__name__ in ("_StoreTrueAction", "_StoreFalseAction") or a.type is bool or getattr(a.type, "__name__", "") == "str_to_bool":
        s = dict(BOOLISH) if a.type is not None else {"type": "boolean"}
    elif argparse_scalar(a):
        s = argparse_scalar(a)
    elif isinstance(a.default, str) and a.default.lower() in ("true", "false"):
        s = dict(BOOLISH)
    else:
        s = {"type": "string"}
    if a.default is not None and not callable(a.default) and isinstance(a.default, (int, float, str, bool)):
        s["default"] = a.default
    s["description"] = short(a.help or name.replace("_", " "))
    return s


def group_schema(parser, title, prefix, desc, dests=None):
    props = {}
    for g in parser._action_groups:
        if (title and g.title == title) or (dests and not title):
            for a in g._group_actions:
                if dests and a.dest not in dests:
                    continue
                if title is None and dests is None:
                    continue
                s = action_schema(a)
                props[a.dest] = s
                if prefix and a.dest.startswith(prefix):
                    props[a.dest[len(prefix):]] = dict(s, description=short(f"Same as {a.dest}. " + s["description"]))
    return {"type": ["object", "null"], "description": desc, "properties": props, "additionalProperties": False}


NULL_FROM_LAUNCH = " null: given on the accelerate launch line (the flag of the same name)."


def _hand_written():
    """Top-level ClusterConfig fields whose schema launch's flags do not give (or give too loosely)."""
    return {
        "compute_environment": ({"const": "LOCAL_MACHINE"}, "Where training runs. This schema covers ClusterConfig (LOCAL_MACHINE); AMAZON_SAGEMAKER files are SageMakerConfig."),
        "distributed_type": ({"enum": [d.value for d in DistributedType]}, "Distributed mode (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM, XLA, ...). Required."),
        "mixed_precision": ({"enum": ["no", "fp16", "bf16", "fp8", None]}, "Mixed precision mode."),
        "use_cpu": ({"type": "boolean"}, "Force training on CPU."),
        "debug": ({"type": "boolean"}, "Enable debug checks of distributed operations."),
        "fp16": ({"type": "boolean"}, "Legacy: converted to mixed_precision: fp16 when mixed_precision is absent, then dropped."),
        "dynamo_backend": (dict(OVERRIDES["dynamo_backend"]), "Legacy: converted to dynamo_config.dynamo_backend."),
        # null is "not set here": launch copies a file's value into args only where the flag is None
        # (commands/launch.py _validate_launch_command), so `--num_processes 8` on the launch line
        # fills it, as it overrides any number. Slurm templates (huggingface/smollm's vloom) write
        # null and pass the counts per job; without the flag the launch fails, as with -1.
        "num_processes": ({"type": ["integer", "null"], "minimum": -1}, None),
        "machine_rank": ({"type": ["integer", "null"], "minimum": 0}, None),
        "num_machines": ({"type": ["integer", "null"], "minimum": 1}, None),
        "gpu_ids": ({"type": ["string", "integer", "null"]}, None),
        "main_process_ip": ({"type": ["string", "null"]}, None),
        "main_process_port": ({"type": ["integer", "null"], "minimum": 0, "maximum": 65535}, None),
        "rdzv_backend": ({"type": ["string", "null"], "examples": ["static", "c10d", "etcd", "etcd-v2"]}, None),
        "same_network": ({"type": ["boolean", "null"]}, None),
        "main_training_function": ({"type": "string"}, None),
        "enable_cpu_affinity": ({"type": "boolean"}, None),
        "downcast_bf16": ({"type": ["boolean", "string"]}, None),
        "tpu_name": ({"type": ["string", "null"]}, "Name of the TPU pod."),
        "tpu_zone": ({"type": ["string", "null"]}, "Zone of the TPU pod."),
        "tpu_use_cluster": ({"type": "boolean"}, None),
        "tpu_use_sudo": ({"type": "boolean"}, None),
        "command_file": ({"type": ["string", "null"]}, "File of commands to run on TPU pod workers (accelerate tpu-config)."),
        "commands": ({"type": ["array", "null"], "items": {"type": "string"}}, "Commands to run on TPU pod workers (accelerate tpu-config)."),
        "tpu_vm": ({"type": ["array", "null"], "items": {"type": "string"}}, "TPU VM names."),
        "tpu_env": ({"type": ["array", "null"], "items": {"type": "string"}}, "Environment variables for TPU workers."),
    }


def _group_property(parser, by_dest, name):
    """The schema of one *_config section, from launch's argument group and what accelerate reads besides."""
    title, prefix, desc = GROUPS[name]
    if name == "dynamo_config":
        dests = ["dynamo_backend", "dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation"]
        sub = {"type": ["object", "null"], "description": desc, "additionalProperties": False, "properties": {}}
        for d in dests:
            s = action_schema(by_dest[d])
            sub["properties"][d] = s
            sub["properties"][d[len("dynamo_"):]] = dict(s, description=short(f"Same as {d}. " + s["description"]))
    else:
        sub = group_schema(parser, title, prefix, desc)
    if name == "fsdp_config":
        sub["allOf"] = fsdp_by_version()
    for key in sorted(k for k in READ_WITHOUT_FLAG if prefix and k.startswith(prefix)):
        if key not in sub["properties"]:
            note = {"description": "Read by accelerate launch (utils/launch.py) though no launch flag names it."}
            sub["properties"][key] = note
            sub["properties"][key[len(prefix):]] = dict(note)
    if name == "fp8_config":
        for k, (launch, s) in FP8_CONFIG_WRITER_KEYS.items():
            sub["properties"][k] = dict(s, description=f"Written by `accelerate config`; corresponds to launch --{launch}.")
    if name == "deepspeed_config":
        sub["properties"]["deepspeed_config_file"]["description"] = short(
            "Path to a DeepSpeed JSON config (validated by deepspeed.schema.json). With it set, zero_stage/offload/"
            "gradient_* keys here must be left out (accelerate raises). " + sub["properties"]["deepspeed_config_file"]["description"])
    return sub


def build():
    parser = launch_command_parser()
    by_dest = {a.dest: a for a in parser._actions}
    hand = _hand_written()
    field_names = [f.name for f in dataclasses.fields(ClusterConfig)] + ["fp16", "dynamo_backend"]
    props = {}
    for name in field_names:
        if name in GROUPS:
            props[name] = _group_property(parser, by_dest, name)
            continue
        s, desc = hand.get(name, ({}, None))
        s = dict(s)
        a = by_dest.get(name) or by_dest.get({"tpu_vm": "vm", "tpu_env": "env"}.get(name, ""))
        s["description"] = short(desc or (a.help if a is not None and a.help else name.replace("_", " ")))
        if "null" in s.get("type", ()) and name in ("num_processes", "machine_rank", "num_machines"):
            s["description"] += NULL_FROM_LAUNCH
        props[name] = s

    schema = closed_object("accelerate.schema.json", "accelerate config file",
                    f"`accelerate config` / `accelerate launch --config_file` YAML (ClusterConfig), generated from accelerate "
                    f"{accelerate.__version__} by tools/schemagen/accelerate_schema.py. Unknown top-level keys are rejected "
                    "(as ClusterConfig.from_yaml_file does); unknown keys in the *_config sub-dicts are rejected here "
                    "because accelerate launch silently ignores them.",
                    {"name": "accelerate", "version": accelerate.__version__}, props, required=["distributed_type"])
    schema["allOf"] = _deepspeed_file_checks()
    return schema


def _deepspeed_file_checks():
    # With deepspeed_config_file, DeepSpeedPlugin._deepspeed_config_checks raises if the accelerate config
    # also sets these (launch passes the deepspeed_config keys, and mixed_precision when it came from the
    # config file, in ACCELERATE_CONFIG_DS_FIELDS). Only on the DeepSpeed launcher path (not use_cpu).
    return [{
        "if": {"required": ["distributed_type", "deepspeed_config"],
               "properties": {"distributed_type": {"const": "DEEPSPEED"},
                              "use_cpu": {"const": False},
                              "deepspeed_config": {"type": "object", "required": ["deepspeed_config_file"],
                                                   "properties": {"deepspeed_config_file": {"type": "string"}}}}},
        "then": {"properties": {
            # launch counts mixed_precision as set whenever the file gives a value, "no" included
            # (_validate_launch_command: mp_from_config_flag); null is no value
            "mixed_precision": dict(_beside_ds_file("the bf16 or fp16 section"),
                                    **{"not": {"type": ["string", "number", "boolean", "object", "array"]}}),
            # any of these keys present is an error, whatever its value (launch passes the key names)
            "deepspeed_config": {"properties": {k: _beside_ds_file(DS_FILE_KEYS[k]) for k in DS_FILE_KEYS}}}},
    }]


# The deepspeed_config keys DeepSpeedPlugin._deepspeed_config_checks refuses beside
# deepspeed_config_file, with where the DeepSpeed JSON says the same (its plugin_to_config_mapping).
DS_FILE_KEYS = {
    "zero_stage": "zero_optimization.stage", "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "gradient_accumulation_steps": "gradient_accumulation_steps", "gradient_clipping": "gradient_clipping",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}


def _beside_ds_file(where):
    """A key accelerate launch refuses next to deepspeed_config_file; lint names the rule and the place."""
    return {"not": {}, "x-rule": "conflicting-key",
            "description": "accelerate stops at start-up when deepspeed_config_file is also set "
                           f"(DeepSpeedPlugin._deepspeed_config_checks): remove it and set {where} in the DeepSpeed JSON"}


if __name__ == "__main__":
    write(build(), "accelerate.schema.json")
