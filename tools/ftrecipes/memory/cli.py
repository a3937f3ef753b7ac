"""`estimate` and `trace` sub-commands. The main CLI calls register(subparsers); main(args) runs."""
from __future__ import annotations

import argparse
import json
import math

from . import configs
from ..errors import UserError, printable
from .activations import ATTN_IMPLEMENTATIONS
from .estimate import Setup
from .inputs import run
from .model_states import zero_paper_model_states
from .report import exit_status, render_svg, render_text


_MAX_COUNT = 2**31 - 1  # a tensor dimension, a process count


def count(minimum):
    """argparse type: an integer from minimum up; -1, 0 GPUs or a 10,000-digit number is bad input."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, not {text[:40]!r}") from None
        if not minimum <= value <= _MAX_COUNT:
            raise argparse.ArgumentTypeError(f"must be an integer from {minimum} to {_MAX_COUNT}, not {value}")
        return value
    return parse


def file_name(text):
    """argparse type: a file to write; '' would otherwise be taken as "no chart" and skipped."""
    if not text:
        raise argparse.ArgumentTypeError("an empty file name")
    return text


def amount(low, high, high_included=True):
    """argparse type: a finite number above low, up to high (NaN and inf are not amounts)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, not {text[:40]!r}") from None
        if not (math.isfinite(value) and value > low and (value <= high if high_included else value < high)):
            raise argparse.ArgumentTypeError(f"must be a number above {low:g} and {'at most' if high_included else 'below'} {high:g}, not {text[:40]}")
        return value
    return parse


def lora_target(text):
    """argparse type: 'all' or comma-separated module names the memory model knows."""
    from .activations import ALL_LINEAR, known_target_names

    if text.strip().lower() in ("all", "all-linear", "all_linear"):
        return text
    names = [t for t in text.replace(" ", "").split(",") if t]
    # lora_targets falls back to every linear layer for names it does not know: say so instead.
    unknown = [t for t in names if t not in known_target_names()]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown module {(unknown or [text])[0][:40]!r}; use 'all' or names from {', '.join(ALL_LINEAR)}")
    return text


# estimate's options that are not a setup: recipe mode accepts these, and refuses every other
# option as a setup of one's own next to a recipe (tests check the split covers the parser)
NOT_SETUP_OPTIONS = frozenset({"help", "recipe", "set", "framework_version", "json", "svg"})


def setup_options(parser) -> list[str]:
    """Destinations of the estimate parser's setup options."""
    return [a.dest for a in parser._actions if a.dest not in NOT_SETUP_OPTIONS]


def _add_estimate(sp):
    p = sp.add_parser("estimate", help="will this config fit on my GPUs, and what is the cheapest fix?",
                      description="Estimate per-GPU and host memory by phase and category.")
    p.add_argument("recipe", nargs="?", help="recipe name (recipe mode; handled by the core CLI)")
    p.add_argument("--set", action="append", default=[], metavar="K=V",
                   help="override a recipe value, or a memory setting (quantization, optimizer, ...)")
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="DeepSpeed JSON, LLaMA-Factory / TRL / accelerate / axolotl YAML or OpenRLHF script (repeatable)")
    p.add_argument("--framework-version", action="append", default=[], metavar="NAME=VER",
                   help="the accelerate, deepspeed or trl release the run uses (default: the files' repository pins, "
                        "the recipe's tested_with, else the newest release the trainer accepts)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="catalog name (e.g. Qwen2.5-7B) or path to a HF config.json")
    g.add_argument("--params", type=amount(0, 1e15), help="parameter count (model states only)")
    p.add_argument("--gpu")
    p.add_argument("--gpus", type=count(1), help="training processes (GPUs), data-parallel size")
    p.add_argument("--gpus-per-node", type=count(1))
    p.add_argument("--seq-len", type=count(1))
    p.add_argument("--micro-batch", type=count(1))
    p.add_argument("--grad-accum", type=count(1), help="micro batches per optimizer step")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--lora-rank", type=count(0))
    p.add_argument("--lora-target", type=lora_target)
    p.add_argument("--method", choices=["sft", "dpo", "grpo"])
    # sdpa-cpu is the path the CPU traces run, not a setting of a GPU run
    p.add_argument("--attn-implementation", choices=[a for a in ATTN_IMPLEMENTATIONS if a != "sdpa-cpu"])
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3])
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--offload-optimizer", choices=["none", "cpu", "nvme"])
    p.add_argument("--offload-param", choices=["none", "cpu", "nvme"])
    # no default here: a GRPO file's use_vllm / vllm_mode (or its TRL release's default) stands
    # unless the flag is given
    p.add_argument("--vllm-mode", choices=["none", "server", "colocate"])
    p.add_argument("--vllm-gpus", type=count(0), default=0)
    p.add_argument("--vllm-gpu-memory-utilization", type=amount(0, 1))
    p.add_argument("--host-ram-gb", type=amount(0, 1e9), help="host RAM per node (GiB) for the host verdict")
    p.add_argument("--model-states-only", action="store_true",
                   help="per-GPU model states as the ZeRO paper counts them (2Ψ+2Ψ+12Ψ by stage)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--svg", metavar="FILE", type=file_name, help="write a memory breakdown chart")
    p.set_defaults(func=main, memory_command="estimate", estimate_parser=p)
    return p


def _add_trace(sp):
    p = sp.add_parser("trace", help="measure one real training step with fake tensors (needs torch)")
    p.add_argument("--model", required=True)
    p.add_argument("--seq-len", type=count(1), default=2048)
    p.add_argument("--micro-batch", type=count(1), default=1)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--lora-rank", type=count(0), default=0)
    p.add_argument("--lora-target", type=lora_target, default="all")
    p.add_argument("--attn-implementation", default="sdpa")
    p.set_defaults(func=main, memory_command="trace")
    return p


def register(subparsers) -> None:
    """Add `estimate` and `trace` to an argparse subparsers object."""
    _add_estimate(subparsers)
    _add_trace(subparsers)


def setup_from_args(a) -> tuple[Setup, list[str]]:
    """The Setup the flags and files give, and what none of them named (said with the estimate)."""
    from ..versions import parse_framework_versions

    over = dict(model=a.model, params=int(a.params) if a.params else None, gpu=a.gpu, gpus=a.gpus,
                gpus_per_node=a.gpus_per_node, seq_len=a.seq_len, micro_batch=a.micro_batch,
                grad_accum=a.grad_accum, lora_rank=a.lora_rank, lora_target=a.lora_target, method=a.method,
                attn_implementation=a.attn_implementation, zero_stage=a.zero_stage, precision=a.precision,
                offload_optimizer=a.offload_optimizer, offload_param=a.offload_param,
                vllm_mode=a.vllm_mode, vllm_gpus=a.vllm_gpus,
                vllm_gpu_memory_utilization=a.vllm_gpu_memory_utilization,
                host_ram_bytes=int(a.host_ram_gb * 1024 ** 3) if a.host_ram_gb else None)
    if a.gradient_checkpointing:
        over["gradient_checkpointing"] = True
    given = {**configs.parse_sets(a.set), **{k: v for k, v in over.items() if v is not None}}
    # the files' release decides defaults read from them (TRL's vllm_mode)
    return configs.setup_from_files(a.config or [], parse_framework_versions(a.framework_version), given)


def main(args) -> int:
    if getattr(args, "memory_command", "estimate") == "trace":
        return _trace(args)
    if args.recipe and not (args.model or args.params):
        raise UserError("recipe mode is run by the main ftrecipes CLI; here pass --model/--params")
    try:
        s, assumed = setup_from_args(args)
        if not (s.model or s.params):
            if args.config:  # the files were read and none named a model: say which, and how to go on
                others = f" (nor do {', '.join(args.config[1:])})" if len(args.config) > 1 else ""
                raise UserError(f"names no model{others}, and no file it refers to does; "
                                "pass --model NAME|config.json or --params N", path=args.config[0])
            raise UserError("estimate needs a recipe name, or --model NAME|config.json or --params N "
                            "(or a config file naming a known model)")
        return _estimate(args, s, assumed)
    except (KeyError, ValueError) as exc:  # unknown model or GPU name, a combination the model refuses
        raise UserError(exc.args[0] if exc.args else str(exc)) from None


def _trace(args) -> int:
    """trace runs a real step (torch, transformers; peft for LoRA), which the tool's own install
    lacks: without them, or with a model name the catalog lacks, it was a traceback."""
    import importlib.util

    from . import catalog

    try:
        catalog.model(args.model)
    except KeyError as exc:
        raise UserError(exc.args[0]) from None
    wanted = ("torch", "transformers") + (("peft",) if args.lora_rank else ())
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"trace runs one real training step on fake tensors and needs {', '.join(missing)}, "
                        f"which this Python lacks (pip install {' '.join(missing)}); estimate needs none of them")
    from .trace import trace_step

    r = trace_step(args.model, args.seq_len, args.micro_batch, args.gradient_checkpointing,
                   args.lora_rank, args.lora_target, args.attn_implementation)
    print(json.dumps(r, indent=1))
    return 0


def _estimate(args, s, assumed=()) -> int:
    if args.model_states_only:
        if s.model:
            from .estimate import _counts

            _shape, n_params, _t = _counts(s)
        else:
            n_params = s.params
        b = zero_paper_model_states(n_params, s.gpus, s.zero_stage)
        if args.json:
            print(json.dumps({"params": n_params, "gpus": s.gpus, "zero_stage": s.zero_stage,
                              "model_states_bytes": round(b)}))
        else:
            print(f"model states per GPU (ZeRO paper, K=12): {b / 1e9:.1f} GB ({b / 1024 ** 3:.1f} GiB) "
                  f"for {n_params:,} parameters, {s.gpus} GPUs, ZeRO stage {s.zero_stage}")
        return 0
    r = run(s)
    if assumed:
        # what no flag or file said: the answer depends on it, so the output says it was assumed
        r.notes.append(f"not given by a flag or a file, so assumed: {', '.join(assumed)} "
                       "(pass --gpu / --gpus)")
    if args.svg:
        from ..atomic import write_one

        write_one(args.svg, render_svg(r))
    print(json.dumps(r.to_json(), indent=1) if args.json else printable(render_text(r)))
    return exit_status(r)


def standalone(argv=None) -> int:
    from ..cli import OneLineParser, run_parsed

    ap = OneLineParser(prog="python -m ftrecipes.memory")
    register(ap.add_subparsers(dest="command", required=True))
    return run_parsed(ap, argv)
