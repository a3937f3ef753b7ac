"""What each framework's own parser does with one unknown key at one place (loaded by truth.py).

A checker returns normally when the parser reads past the key and raises when it refuses it, so
a job's `ok` is "ignored" and its error is the framework's own words. The key is a name no
release defines. formats.FORMATS states these effects in lint's messages; tests/
test_parse_behaviour.py compares the two.
"""

import json
import tempfile

from truth import check

PROBE = "zz_ftrecipes_probe"


def _nested(base, section):
    data = json.loads(json.dumps(base))
    node = data
    for part in section:
        node = node.setdefault(part, {})
    node[PROBE] = 1
    return data


@check("unknown-key-deepspeed")
def deepspeed_unknown(job):
    """DeepSpeedConfig, the object deepspeed.initialize builds from the file."""
    import deepspeed.runtime.config as ds_config

    ds_config.dist.get_rank = lambda *a, **k: 0
    ds_config.dist.get_world_size = lambda *a, **k: 1
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    ds_config.DeepSpeedConfig(_nested(base, job["section"]))
    return {}


@check("unknown-key-accelerate")
def accelerate_unknown(job):
    """ClusterConfig.from_yaml_file, then `accelerate launch`'s own validation of the loaded file."""
    _accelerate_launch_args(lambda base: _nested(base, job["section"]))
    return {}


def _accelerate_launch_args(edit):
    """A DeepSpeed accelerate config, changed by edit(base), written to a file, loaded by
    ClusterConfig.from_yaml_file and validated as `accelerate launch` does; its namespace."""
    import yaml
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    base = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": 2,
            "machine_rank": 0, "num_machines": 1, "mixed_precision": "no", "use_cpu": True,
            "deepspeed_config": {"zero_stage": 2}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(edit(base), fh)
    args = launch_command_parser().parse_args(["--config_file", fh.name, "train.py"])
    _validate_launch_command(args)
    return args


@check("unknown-key-trl")
def trl_unknown(job):
    """TrlParser.parse_args_and_config, as `trl sft --config x.yaml` calls it."""
    import yaml
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    base = {"output_dir": tempfile.mkdtemp(), "dataset_name": "x", "use_cpu": True}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(_nested(base, job["section"]), fh)
    TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(["--config", fh.name])
    return {}


@check("unknown-key-llamafactory")
def llamafactory_unknown(job):
    """llamafactory.hparams.get_train_args, what `llamafactory-cli train x.yaml` runs on the YAML."""
    from llamafactory.hparams import get_train_args

    base = {"model_name_or_path": "x", "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "output_dir": tempfile.mkdtemp(), "dataset": "x", "template": "qwen", "use_cpu": True}
    get_train_args(_nested(base, job["section"]))
    return {}


def _ds_config(data):
    import deepspeed.runtime.config as ds_config

    ds_config.dist.get_rank = lambda *a, **k: 0
    ds_config.dist.get_world_size = lambda *a, **k: 1
    return ds_config.DeepSpeedConfig(data)


@check("auto-deepspeed")
def deepspeed_auto(job):
    """"auto" left at one key path; facts say whether the parsed config still holds the string."""
    data = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    data.update(job.get("base", {}))
    node = data
    for part in job["path"][:-1]:
        node = node.setdefault(part, {})
    node[job["path"][-1]] = "auto"
    cfg = _ds_config(data)
    held = {"gradient_clipping": lambda: cfg.gradient_clipping, "optimizer": lambda: cfg.optimizer_params,
            "scheduler": lambda: cfg.scheduler_params}.get(job["path"][0], lambda: None)()
    return {"kept": held == "auto" or (isinstance(held, dict) and "auto" in held.values())}


@check("zero-deepspeed")
def deepspeed_zero(job):
    """A zero_optimization section as written; DeepSpeedConfig either takes it or raises."""
    _ds_config({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": job["zero"]})
    return {}


def _set(data, path, value):
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return data


def _held(obj, path):
    """The value the parsed object holds for the last key of path (attribute or mapping entry)."""
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return getattr(obj, "value", obj)


@check("value-deepspeed")
def deepspeed_value(job):
    """A wrong value at one path: DeepSpeedConfig raises, or facts say what it kept."""
    cfg = _ds_config(_set({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}, job["path"], job["value"]))
    section = {"zero_optimization": "zero_config", "activation_checkpointing": "activation_checkpointing_config",
               "bf16": "bfloat16_config", "fp16": "float16_config"}
    path = job["path"]
    held = _held(getattr(cfg, section[path[0]]), path[1:]) if path[0] in section else getattr(cfg, path[0], None)
    return {"held": held}


def _hf_view(data, bf16, fp16):
    """What the HF Trainer's DeepSpeed integration and accelerate read from a config: the ZeRO
    stage tests, the offload test, the mismatches trainer_config_process finds against
    TrainingArguments-like arguments (bf16/fp16 as DeepSpeed's typed config has them, the rest
    matching the file), and DeepSpeedPlugin's stage (its type too: "2" == 2 is False)."""
    from types import SimpleNamespace

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(data)))
    args = SimpleNamespace(world_size=1, per_device_train_batch_size=1, gradient_accumulation_steps=1, max_grad_norm=1.0,
                           learning_rate=1e-5, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0,
                           save_on_each_node=False, fp16=fp16, fp16_full_eval=False, bf16=bf16, bf16_full_eval=False)
    hf.trainer_config_process(args)
    # accelerate's DeepSpeedPlugin copies the raw stage to zero_stage, which Accelerator.no_sync,
    # get_state_dict and the Trainer compare with numbers.
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config=json.loads(json.dumps(data)))
    return {"zero2": hf.is_zero2(), "zero3": hf.is_zero3(), "offload": hf.is_offload(), "mismatches": hf.mismatches,
            "plugin_stage": [type(plugin.zero_stage).__name__, plugin.zero_stage], "zero3_init": plugin.zero3_init_flag}


@check("misread-deepspeed-hf")
def deepspeed_hf_misread(job):
    """One value as written and as DeepSpeed converts it (job["typed"]): misread is True when the
    HF integration sees a different config in the two files."""
    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    raw = _set(json.loads(json.dumps(base)), job["path"], job["value"])
    typed = _set(json.loads(json.dumps(base)), job["path"], job["typed"])
    flags = {k: bool(typed.get(k, {}).get("enabled", False)) for k in ("bf16", "fp16")}
    seen, meant = _hf_view(raw, **flags), _hf_view(typed, **flags)
    return {"misread": seen != meant, "seen": seen, "meant": meant}


@check("pydantic-lax")
def pydantic_lax(job):
    """What pydantic (the version DeepSpeed runs on) makes of a value for an int/float/bool field."""
    from pydantic import TypeAdapter

    made = TypeAdapter({"integer": int, "number": float, "boolean": bool}[job["type"]]).validate_python(job["value"])
    return {"made": made}


@check("value-accelerate")
def accelerate_value(job):
    """ClusterConfig.from_yaml_file and `accelerate launch`'s validation, as for unknown keys."""
    args = _accelerate_launch_args(lambda base: _set(base, job["path"], job["value"]))
    # launch copies a section's keys onto the namespace under their own names; `multi` is whether
    # a launcher other than the one-process simple_launcher was chosen (launch_command's branches)
    multi = any(getattr(args, k, False) for k in ("use_deepspeed", "use_fsdp", "use_megatron_lm", "multi_gpu", "tpu"))
    return {"held": getattr(args, job["path"][-1], None), "multi": multi}


@check("value-trl")
def trl_value(job):
    import yaml
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    base = {"output_dir": tempfile.mkdtemp(), "dataset_name": "x", "use_cpu": True}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(_set(base, job["path"], job["value"]), fh)
    parsed = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(["--config", fh.name])
    key = job["path"][0]
    return {"held": next((getattr(o, key) for o in parsed if hasattr(o, key)), None)}


@check("value-llamafactory")
def llamafactory_value(job):
    from llamafactory.hparams import get_train_args

    base = {"model_name_or_path": "x", "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "output_dir": tempfile.mkdtemp(), "dataset": "x", "template": "qwen", "use_cpu": True}
    parsed = get_train_args(_set(base, job["path"], job["value"]))
    key = job["path"][0]
    return {"held": next((getattr(o, key) for o in parsed if hasattr(o, key)), None)}


@check("value-axolotl")
def axolotl_value(job):
    """AxolotlInputConfig, the model validate_config builds from the YAML (no GPU capabilities).
    Needs axolotl's package on the path (no stack installs it; see tools/schemagen/README.md)."""
    from axolotl.utils.schemas.config import AxolotlInputConfig

    base = {"base_model": "x", "datasets": [{"path": "x", "type": "alpaca"}], "micro_batch_size": 1,
            "gradient_accumulation_steps": 1, "learning_rate": 1e-5, "num_epochs": 1, "output_dir": "o"}
    cfg = AxolotlInputConfig(**_set(base, job["path"], job["value"]))
    return {"held": _held(cfg, job["path"])}
