"""`vllm serve` command lines through vLLM's own parser (job "vllm-serve-native").

The job runs in a child process where the vLLM release (job "release", from
devenv.ensure_release("trl", version): vLLM without dependencies plus the few modules its CLI
imports) is first on the path, with VLLM_TARGET_DEVICE=cpu, vLLM's own switch to its CPU
platform (vllm/platforms/__init__.py), without which building the parser's DeviceConfig default
fails on a machine with no GPU. There it builds the parser `vllm serve` builds
(vllm.entrypoints.launchers.cli_args.make_arg_parser on a FlexibleArgumentParser, as
vllm/entrypoints/cli/serve.py does), parses the arguments, runs validate_parsed_serve_args, and
then checks what TRL 1.16's client needs from the server (trl/scripts/vllm_serve.py build_command
and main; trl/generation/vllm_client.py init_communicator): VLLM_SERVER_DEV_MODE=1 in the
environment, the NCCL weight-transfer engine, processed logprobs, no logprobs cap; and that the
release is in TRL's supported range (trl/import_utils.py is_vllm_available).
Not covered: serving itself (model loading, CUDA, NCCL), which needs a GPU.
"""

import json
import os
import subprocess
import sys
import tempfile

from truth import _plain, check

RELEASE_ENV = "FTRECIPES_VLLM_RELEASE"


_RESULTS = {}


def _key(job):
    return json.dumps(job, sort_keys=True)


def _batch(job):
    """This job and every other vllm-serve-native job of the same release in this run's jobs file
    (truth.py's first argument): importing vLLM costs tens of seconds, so one child checks them all."""
    try:
        with open(sys.argv[1], encoding="utf-8") as fh:
            others = [j for j in json.load(fh) if isinstance(j, dict) and j.get("check") == job["check"]
                      and j.get("release") == job["release"]]
    except (OSError, ValueError, IndexError):
        others = []
    batch, seen = [job], {_key(job)}
    for j in others:
        if _key(j) not in seen and _key(j) not in _RESULTS:
            seen.add(_key(j))
            batch.append(j)
    return batch


def _in_release(job):
    if _key(job) not in _RESULTS:
        batch = _batch(job)
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as tmp:
            jobs, out = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "out.json")
            with open(jobs, "w", encoding="utf-8") as fh:
                json.dump(batch, fh)
            env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
            env["PYTHONPATH"] = os.pathsep.join([job["release"]] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
            env[RELEASE_ENV] = job["release"]
            proc = subprocess.run([sys.executable, os.path.join(here, "truth.py"), jobs, out], env=env, cwd=job.get("cwd"),
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0 or not os.path.exists(out):
                raise ValueError(f"vllm {job['vllm_version']} check process failed: {proc.stderr[-1500:]}")
            with open(out, encoding="utf-8") as fh:
                for j, res in zip(batch, json.load(fh)):
                    _RESULTS[_key(j)] = res
    res = _RESULTS[_key(job)]
    if not res["ok"]:
        raise ValueError(res["error"])
    return res["facts"]


def _parse(args):
    """vLLM's parser; argparse's exit on a refused flag becomes an error with its message."""
    import contextlib
    import io

    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_args(list(args))
    except SystemExit:
        raise ValueError(err.getvalue().strip().splitlines()[-1]) from None
    parsed.subparser = "serve"
    validate_parsed_serve_args(parsed)
    return parsed


@check("vllm-serve-native")
def vllm_serve_native(job):
    if os.environ.get(RELEASE_ENV) != job["release"]:
        return _in_release(job)
    import importlib.metadata

    from packaging.version import Version

    installed = importlib.metadata.version("vllm")
    if installed != job["vllm_version"]:
        raise ValueError(f"vLLM {installed} on the path, the job wants {job['vllm_version']}")
    # TRL 1.16's range, as trl.import_utils.is_vllm_available states it.
    if not Version("0.22.0") <= Version(Version(installed).base_version) <= Version("0.31.0"):
        raise ValueError(f"vLLM {installed} is outside the range TRL 1.16 supports (0.22.0 to 0.31.0)")
    args = _parse(job["args"])
    problems = []
    if job.get("env", {}).get("VLLM_SERVER_DEV_MODE") != "1":
        problems.append("VLLM_SERVER_DEV_MODE=1 is not set: TRL's weight sync needs the dev endpoints")
    wt = args.weight_transfer_config
    if wt is None or getattr(wt, "backend", None) != "nccl":
        problems.append(f"weight transfer config {wt!r}: TRL's client needs the nccl engine")
    if args.logprobs_mode != "processed_logprobs":
        problems.append(f"logprobs mode {args.logprobs_mode}: TRL needs processed_logprobs")
    if args.max_logprobs != -1:
        problems.append(f"max logprobs {args.max_logprobs}: TRL needs -1 (no cap)")
    if problems:
        raise ValueError("; ".join(problems))
    keys = ("model_tag", "host", "port", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization",
            "max_model_len", "dtype", "logprobs_mode", "max_logprobs")
    facts = {k: _plain(getattr(args, k, None)) for k in keys}
    facts["weight_transfer_backend"] = wt.backend
    facts["vllm"] = installed
    return facts
