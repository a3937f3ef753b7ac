"""What a setup says about world size, batches and precision, wherever it says it.

Rules compare these facts; each fact carries the config and path it came from,
so a finding points at the line that disagrees.
"""

import re
from dataclasses import dataclass


LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "llamafactory-cli", "python", "python3", "trl")


@dataclass(frozen=True)
class Fact:
    value: object
    cfg: object
    path: tuple
    what: str  # human description of where the value comes from
    nodes: int = 1  # machines the count spans


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def count(v, minimum=0, maximum=2**31 - 1):
    """v as a whole count when it is one (an int, or a launch flag's decimal word), else None.

    Configs hold anything: a string where a number belongs, 1e308, a list. A rule that
    needs a count asks here instead of calling int(), and judges nothing when it gets None.
    """
    if isinstance(v, str) and v.strip().isdecimal() and len(v.strip()) <= 12:
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and minimum <= v <= maximum:
        return v
    return None


def ds_configs(setup):
    return [c for c in setup.configs if c.kind == "deepspeed" and isinstance(c.data, dict)]


def zero_stage(ds):
    z = ds.data.get("zero_optimization")
    if isinstance(z, dict):
        s = z.get("stage", 0)
        return s if isinstance(s, int) else None
    if z is True:
        return 1
    return 0


def devices(env_value):
    """GPU ids in a CUDA_VISIBLE_DEVICES value, or None when it is not a literal list."""
    if env_value is None or "$" in env_value:
        return None
    return [d for d in env_value.split(",") if d.strip() != ""]


def commands(setup):
    """(config, index, Command) for every command of every launch script in the setup."""
    for cfg in setup.configs:
        for i, cmd in enumerate(cfg.commands):
            yield cfg, i, cmd


def launcher_of(cmd):
    words = cmd.words
    if not words:
        return None
    head = words[0].rsplit("/", 1)[-1]
    if head in ("accelerate",) and words[1:2] == ["launch"]:
        return "accelerate"
    if head == "trl" and words[1:2] == ["vllm-serve"]:
        return "vllm-serve"
    if head == "vllm" and words[1:2] == ["serve"]:
        return "vllm-serve"
    if head == "llamafactory-cli" and words[1:2] == ["train"]:
        return "llamafactory-cli"
    if head in ("torchrun", "deepspeed", "trl"):
        return head
    if head.startswith("python") and "torch.distributed.run" in words[:3]:
        return "torchrun"
    return None


def _flag(cmd, *names):
    """(value, word index) of the first of names among the command's launcher flags."""
    for j, w in enumerate(cmd.words):
        for n in names:
            if w == f"--{n}" and j + 1 < len(cmd.words):
                return cmd.words[j + 1], j
            if w.startswith(f"--{n}="):
                return w.split("=", 1)[1], j
    return None, None


def _assignment(cmd, name):
    """(value, word index) of a `name=value` word of the command, or (None, None)."""
    for j, w in enumerate(cmd.words):
        if w.startswith(name + "="):
            return w.split("=", 1)[1], j
    return None, None


def _int(text):
    return int(text) if isinstance(text, str) and re.fullmatch(r"\d+", text) else None


def world_sizes(setup):
    """Facts about the number of training processes, from every place that states it."""
    out = []
    for acc in setup.of("accelerate"):
        if "num_processes" in getattr(acc, "overridden", {}):
            continue  # the launch command's --num_processes wins; its own fact is below
        n, m = acc.data.get("num_processes"), acc.data.get("num_machines", 1)
        if isinstance(n, int) and isinstance(m, int):
            # num_processes counts every machine's processes (accelerate launches
            # num_processes // num_machines per machine).
            what = f"accelerate num_processes {n}" + (f" over num_machines {m}" if m > 1 else "")
            out.append(Fact(n, acc, ("num_processes",), what, m))
    for cfg, i, cmd in commands(setup):
        kind = launcher_of(cmd)
        if kind == "torchrun":
            nproc, j = _flag(cmd, "nproc_per_node", "nproc-per-node")
            nnodes, _ = _flag(cmd, "nnodes")
            n = _int(nproc)
            nodes = _int(nnodes.split(":")[-1]) if isinstance(nnodes, str) else 1
            if n and nodes:
                out.append(Fact(n * nodes, cfg, ("command", i, j), f"torchrun --nproc_per_node {n} x --nnodes {nodes}", nodes))
        elif kind == "deepspeed":
            n, j = _flag(cmd, "num_gpus", "num-gpus")
            nodes, _ = _flag(cmd, "num_nodes", "num-nodes")
            if _int(n):
                out.append(Fact(_int(n) * (_int(nodes) or 1), cfg, ("command", i, j), f"deepspeed --num_gpus {n}", _int(nodes) or 1))
        elif kind == "accelerate":
            n, j = _flag(cmd, "num_processes", "num-processes")
            if _int(n):
                out.append(Fact(_int(n), cfg, ("command", i, j), f"accelerate launch --num_processes {n}"))
        elif kind == "llamafactory-cli":
            n, nodes = cmd.env.get("NPROC_PER_NODE"), cmd.env.get("NNODES", "1")
            if _int(n) and _int(nodes):
                out.append(Fact(_int(n) * _int(nodes), cfg, ("command", i), f"NPROC_PER_NODE {n} x NNODES {nodes}", _int(nodes)))
    if setup.options.gpus and not out:
        return [Fact(setup.options.gpus, None, (), f"--gpus {setup.options.gpus}")]
    return out


def trainer_batches(setup):
    """(micro, accum) facts from trainer configs and script flags: [(micro Fact|None, accum Fact|None)]."""
    out = []
    for kind in ("trl", "llamafactory"):
        for cfg in setup.of(kind):
            if not isinstance(cfg.data, dict):
                continue
            overridden = getattr(cfg, "overridden", {})  # a launch line's value wins; its fact is below
            m, a = (None if k in overridden else cfg.data.get(k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps"))
            out.append((
                Fact(m, cfg, ("per_device_train_batch_size",), f"{kind} per_device_train_batch_size") if m is not None else None,
                Fact(a, cfg, ("gradient_accumulation_steps",), f"{kind} gradient_accumulation_steps") if a is not None else None,
            ))
    for cfg, i, cmd in commands(setup):
        m, jm = _flag(cmd, "per_device_train_batch_size")
        a, ja = _flag(cmd, "gradient_accumulation_steps")
        if launcher_of(cmd) == "llamafactory-cli":  # `llamafactory-cli train x.yaml key=value`
            m, jm = _assignment(cmd, "per_device_train_batch_size")
            a, ja = _assignment(cmd, "gradient_accumulation_steps")
        if m is not None or a is not None:
            out.append((
                Fact(_int(m), cfg, ("command", i, jm), "--per_device_train_batch_size") if _int(m) else None,
                Fact(_int(a), cfg, ("command", i, ja), "--gradient_accumulation_steps") if _int(a) else None,
            ))
    return out


def hf_trainer_present(setup):
    """True when an HF Trainer (which fills "auto") consumes the DeepSpeed config."""
    if setup.of("accelerate") or setup.of("trl") or setup.of("llamafactory") or setup.of("axolotl"):
        return True
    for _, _, cmd in commands(setup):
        kind = launcher_of(cmd)
        if kind in ("accelerate", "llamafactory-cli", "trl"):
            return True
        if kind and "--deepspeed" in cmd.words:  # HF TrainingArguments' flag
            return True
    return False


def plain_deepspeed_launch(setup):
    """A launch script that hands the DeepSpeed config to a non-HF program (no "auto" filling)."""
    for cfg, i, cmd in commands(setup):
        if launcher_of(cmd) in ("deepspeed", "torchrun") and "--deepspeed" not in cmd.words:
            if any(w.startswith("--deepspeed_config") for w in cmd.words) or "openrlhf.cli." in " ".join(cmd.words):
                return cfg, i
    return None
