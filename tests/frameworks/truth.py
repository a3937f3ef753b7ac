"""Framework truth: feed rendered files to the parsers the frameworks themselves use.

Runs inside a stack venv (python truth.py jobs.json results.json): one
process checks many files, because importing transformers/deepspeed costs
seconds. Each job is {"check": NAME, ...}; each result is {"ok": bool, "error":
str|None, "facts": {...}} in the same order. A checker raises on rejection; the
message is the framework's own.
"""

import json
import os
import sys
import traceback

os.environ.setdefault("DS_ACCELERATOR", "cpu")
# Plugins do `from truth import check`; run as a script this module is __main__, so
# make both names one module (one CHECKS registry).
sys.modules.setdefault("truth", sys.modules[__name__])
CHECKS = {}


def check(name):
    def register(fn):
        CHECKS[name] = fn
        return fn

    return register


@check("deepspeed")
def deepspeed_config(job):
    """DeepSpeedConfig at the recipe's world size, after the HF-style 'auto' filling when asked."""
    import deepspeed.runtime.config as ds_config

    world = int(job["world_size"])
    # DeepSpeedConfig asks the process group for rank and world size; give it the
    # recipe's, as a launched job would have.
    ds_config.dist.get_rank = lambda *a, **k: 0
    ds_config.dist.get_world_size = lambda *a, **k: world
    source = job["path"]
    if job.get("fill_auto"):
        with open(source, encoding="utf-8") as fh:
            data = json.load(fh)
        source = _fill_auto(data, job["fill_auto"])
    cfg = ds_config.DeepSpeedConfig(source)
    zero = cfg.zero_config
    return {
        "world_size": cfg.world_size,
        "train_batch_size": cfg.train_batch_size,
        "micro_batch": cfg.train_micro_batch_size_per_gpu,
        "grad_accum": cfg.gradient_accumulation_steps,
        "zero_stage": int(zero.stage),
        "offload_optimizer": _device(zero.offload_optimizer),
        "offload_param": _device(zero.offload_param),
        "bf16": bool(cfg.bfloat16_config.enabled),
        "fp16": bool(cfg.float16_config.enabled),
        "gradient_clipping": cfg.gradient_clipping,
    }


def _device(offload):
    # The device is an enum in some DeepSpeed releases and a plain string in others.
    if offload is None:
        return "none"
    dev = offload.device
    return str(getattr(dev, "value", dev))


def _fill_auto(data, values):
    """Replace "auto" the way transformers' HfTrainerDeepSpeedConfig does, from given values."""

    def walk(node, path):
        if isinstance(node, dict):
            return {k: walk(v, f"{path}.{k}" if path else k) for k, v in node.items()}
        if node == "auto":
            if path not in values:
                raise ValueError(f"'auto' at {path} has no value to fill it")
            return values[path]
        return node

    return walk(data, "")


@check("accelerate")
def accelerate_config(job):
    from accelerate.commands.config.config_args import ClusterConfig

    cfg = ClusterConfig.from_yaml_file(job["path"])
    return {
        "distributed_type": str(getattr(cfg.distributed_type, "value", cfg.distributed_type)),
        "num_processes": cfg.num_processes,
        "num_machines": cfg.num_machines,
        "deepspeed_config": cfg.deepspeed_config,
        "mixed_precision": str(getattr(cfg.mixed_precision, "value", cfg.mixed_precision)),
        "fsdp_config": cfg.fsdp_config,
    }


@check("trl")
def trl_config(job):
    """The trl script's own parser, strict about unknown keys (the scripts themselves are not)."""
    import importlib

    script = importlib.import_module(f"trl.scripts.{job['script']}")
    parser = script.make_parser()
    argv = ["--config", job["path"]] + list(job.get("args", []))
    parsed = parser.parse_args_and_config(args=argv, fail_with_unknown_args=True)
    facts = {}
    for obj in parsed:
        for key in job.get("report", []):
            if hasattr(obj, key):
                facts[key] = _plain(getattr(obj, key))
    return facts


@check("vllm-serve")
def vllm_serve_args(job):
    from trl.scripts import vllm_serve

    parser = vllm_serve.make_parser()
    (args,) = parser.parse_args_and_config(args=list(job["args"]), fail_with_unknown_args=True)
    return {k: _plain(getattr(args, k)) for k in ("model", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len", "port")}


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(getattr(value, "value", value))


def _load_plugins():
    """Stack-specific checkers live in truth_<stack>.py beside this file and register with @check."""
    import importlib
    import pathlib

    here = pathlib.Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    for path in sorted(here.glob("truth_*.py")):
        importlib.import_module(path.stem)


RELEASE_ENV = "FTRECIPES_TRUTH_RELEASE"


def in_release(job):
    """The job's result from a child process where job["release"] (a directory from
    devenv.ensure_release: an older release of the stack's framework) comes first on sys.path,
    so that release's own parser does the checking; None when this process is that child."""
    import subprocess
    import tempfile

    if not job.get("release") or os.environ.get(RELEASE_ENV) == job["release"]:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        jobs, out = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "out.json")
        with open(jobs, "w", encoding="utf-8") as fh:
            json.dump([job], fh)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([job["release"]] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[RELEASE_ENV] = job["release"]
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), jobs, out], env=env, cwd=job.get("cwd"),
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not os.path.exists(out):
            raise ValueError(f"check process for {os.path.basename(job['release'])} failed: {proc.stderr[-1500:]}")
        with open(out, encoding="utf-8") as fh:
            [res] = json.load(fh)
    if not res["ok"]:
        # argparse states its reason on stderr and raises a bare SystemExit: keep that line.
        said = [ln for ln in proc.stderr.splitlines() if "error:" in ln][-1:]
        raise ValueError("; ".join([res["error"]] + said))
    return res["facts"]


def main():
    _load_plugins()
    with open(sys.argv[1], encoding="utf-8") as fh:
        jobs = json.load(fh)
    results = []
    for job in jobs:
        try:
            facts = CHECKS[job["check"]](job)
            results.append({"ok": True, "error": None, "facts": facts})
        except BaseException as exc:  # SystemExit from argparse is a rejection too
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            results.append({"ok": False, "error": detail[-2000:], "facts": {}})
    # A file, not stdout: frameworks log to stdout freely.
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
