"""Deterministic mutants of DeepSpeed configs, for comparing `ftrecipes lint` with DeepSpeed itself.

Bases: every recipe's rendered ds.json and the real-world-shaped valid schema examples
(tests/schema_examples/deepspeed/valid). Each base yields the unmutated config plus mutants made by
one (sometimes two) of these operators, chosen by a seeded RNG:

  typo      rename a key at any level: insert/delete/swap a letter, plural 's', underscore changes
  remove    delete a key at any level
  type      change a value's type (number -> string/bool/list, dict -> list/number, ...)
  range     out-of-range or unknown values (negative sizes, stage 4, device "gpu", bad enum strings)
  conflict  sections that contradict each other (bf16+fp16, offload_param below stage 3,
            offload_optimizer at stage 0, gradient_allreduce_op sum at stage 3, ...)
  auto      "auto" at a random place (HF-filled places and wrong ones)
  batch     batch numbers that no longer multiply out, or a batch key removed
  unknown   a plausible key DeepSpeed does not know, at any level

Every mutant records ``world_size``: derived from the base's batch numbers (the recipe's own world
size when that is consistent), and ``fill``: the values an HF Trainer would put where the config
says "auto" (transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_process;
only top-level batch/clipping keys and optimizer/scheduler params matter to DeepSpeedConfig:
inside pydantic sections DeepSpeed itself drops "auto" and keeps the default).
"""

import copy
import json
import random
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261121
PER_BASE = 220
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
# Paths HfTrainerDeepSpeedConfig fills that DeepSpeedConfig itself would choke on as "auto".
HF_FILLED = BATCH_KEYS + (
    "gradient_clipping",
    "optimizer.params.lr",
    "optimizer.params.betas",
    "optimizer.params.eps",
    "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
    "zero_optimization.stage",  # accelerate's zero_stage (DeepSpeedPlugin)
)
UNKNOWN_KEYS = ["enable", "offload", "precision", "bucket_size", "zero3_init", "fp32_reduce", "use_cache", "dtype", "num_gpus", "lr_decay", "zero_stage", "gradient_checkpointing"]
LETTERS = "abcdefghijklmnopqrstuvwxyz_"


def bases():
    """[(name, config, preferred world size or None)] in a fixed order."""
    out = []
    for ds in sorted(ROOT.glob("recipes/*/rendered/ds.json")):
        recipe = yaml.safe_load((ds.parent.parent / "recipe.yaml").read_text(encoding="utf-8"))
        hw = recipe.get("hardware", {})
        world = hw.get("nodes", 1) * hw.get("gpus_per_node", 1)
        vals = recipe.get("values", {})
        # GPUs given to vLLM are not DeepSpeed processes.
        world -= vals.get("vllm_gpus", 0) or 0
        out.append((f"recipe:{ds.parent.parent.name}", json.loads(ds.read_text(encoding="utf-8")), max(world, 1)))
    for ex in sorted((ROOT / "tests/schema_examples/deepspeed/valid").glob("*.json")):
        out.append((f"example:{ex.stem}", json.loads(ex.read_text(encoding="utf-8")), None))
    return out


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def world_size(cfg, preferred=None):
    """A world size consistent with the batch numbers, as DeepSpeed checks them."""
    t, m, a = (cfg.get(k) for k in BATCH_KEYS)
    candidates = ([preferred] if preferred else []) + [8, 4, 2, 1]
    if _int(t) and _int(m) and _int(a):
        return t // (m * a) if t % (m * a) == 0 and t // (m * a) > 0 else (preferred or 1)
    per = m if _int(m) else a if _int(a) else None
    if _int(t) and per:
        for w in candidates:
            if t % (per * w) == 0:
                return w
    if _int(t):
        for w in candidates:
            if t % w == 0:
                return w
    return preferred or 2


def hf_fill(cfg, world, stage=2):
    """What an HF Trainer configured consistently with the numeric values would write for "auto"."""
    get = lambda k: cfg.get(k)  # noqa: E731
    t, m, a = (get(k) for k in BATCH_KEYS)
    micro = m if _int(m) else None
    accum = a if _int(a) else None
    if micro is None:
        micro = t // (world * accum) if _int(t) and accum and t % (world * accum) == 0 else 1
    if accum is None:
        accum = t // (world * micro) if _int(t) and t % (world * micro) == 0 and t // (world * micro) > 0 else 1
    return {
        "train_batch_size": micro * accum * world,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "gradient_clipping": 1.0,
        "optimizer.params.lr": 1e-5,
        "optimizer.params.betas": [0.9, 0.999],
        "optimizer.params.eps": 1e-8,
        "optimizer.params.weight_decay": 0.0,
        "scheduler.params.warmup_min_lr": 0,
        "scheduler.params.warmup_max_lr": 1e-5,
        "scheduler.params.warmup_num_steps": 10,
        "scheduler.params.total_num_steps": 100,
        "zero_optimization.stage": stage,
    }


# ---------------------------------------------------------------- paths


def key_paths(node, path=()):
    """Every key path (tuples of dict keys) in document order."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append(path + (k,))
            out += key_paths(v, path + (k,))
    return out


def parent_of(cfg, path):
    node = cfg
    for p in path[:-1]:
        node = node[p]
    return node


def set_path(cfg, path, value):
    node = cfg
    for p in path[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[path[-1]] = value


def dotted(path):
    return ".".join(map(str, path))


# ---------------------------------------------------------------- operators


def typo(rng, key):
    k = str(key)
    how = rng.choice(["insert", "delete", "swap", "plural", "underscore", "underscore", "case"])
    if how == "insert":
        i = rng.randrange(len(k) + 1)
        return k[:i] + rng.choice(LETTERS) + k[i:], how
    if how == "delete" and len(k) > 1:
        i = rng.randrange(len(k))
        return k[:i] + k[i + 1 :], how
    if how == "swap" and len(k) > 1:
        i = rng.randrange(len(k) - 1)
        return k[:i] + k[i + 1] + k[i] + k[i + 2 :], how
    if how == "plural":
        return (k[:-1] if k.endswith("s") else k + "s"), how
    if how == "underscore":
        if "_" in k and rng.random() < 0.6:
            idx = [i for i, c in enumerate(k) if c == "_"]
            i = rng.choice(idx)
            return k[:i] + rng.choice(["", "-", "__", " "]) + k[i + 1 :], how
        i = rng.randrange(1, len(k)) if len(k) > 1 else 1
        return k[:i] + "_" + k[i:], how
    if how == "case":
        return (k.upper() if rng.random() < 0.3 else k[:1].upper() + k[1:]), how
    return k + "s", "plural"


def mut_typo(rng, cfg):
    path = rng.choice(key_paths(cfg))
    parent = parent_of(cfg, path)
    new, how = typo(rng, path[-1])
    if new == path[-1] or new in parent or not new:
        return None
    items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(items)
    return f"typo({how}) {dotted(path)} -> {new}"


def mut_remove(rng, cfg):
    path = rng.choice(key_paths(cfg))
    del parent_of(cfg, path)[path[-1]]
    return f"remove {dotted(path)}"


def _retype(rng, v):
    if isinstance(v, bool):
        return rng.choice(["true" if v else "false", int(v), None, [v], "yes"])
    if isinstance(v, int):
        return rng.choice([str(v), float(v) + 0.5, bool(v), None, [v], {"value": v}, f"{v}k"])
    if isinstance(v, float):
        return rng.choice([str(v), True, None, [v], "1e-5x"])
    if isinstance(v, str):
        return rng.choice([1, True, None, [v], {"name": v}, 0.5])
    if isinstance(v, dict):
        return rng.choice([[], True, "on", 1, None, [v]])
    if isinstance(v, list):
        return rng.choice([{}, "0.9,0.999", 0.9, None, [str(x) for x in v]])
    return rng.choice(["null", 0, {}])


def mut_type(rng, cfg):
    path = rng.choice(key_paths(cfg))
    parent = parent_of(cfg, path)
    old = parent[path[-1]]
    new = _retype(rng, old)
    if new == old and type(new) is type(old):
        return None
    parent[path[-1]] = new
    return f"type {dotted(path)}: {json.dumps(old)[:40]} -> {json.dumps(new)[:40]}"


ENUM_BAD = {
    "device": ["gpu", "CPU", "disk", ""],
    "type": ["adamw_torch", "Adamm", "SGDX", "cosine", ""],
    "tag_validation": ["Maybe", "strict"],
    "grad_accum_dtype": ["float64", "int8", "bfloat16"],
    "communication_data_type": ["fp8", "float32"],
    "gradient_allreduce_op": ["avg", "max"],
}


def mut_range(rng, cfg):
    paths = [p for p in key_paths(cfg) if not isinstance(parent_of(cfg, p)[p[-1]], (dict, list))]
    if not paths:
        return None
    path = rng.choice(paths)
    parent = parent_of(cfg, path)
    old = parent[path[-1]]
    key = path[-1]
    if key == "stage":
        new = rng.choice([4, 5, -1, 2.5, 100])
    elif key in ENUM_BAD:
        new = rng.choice(ENUM_BAD[key])
    elif isinstance(old, bool):
        new = rng.choice([2, -1])
    elif isinstance(old, (int, float)):
        new = rng.choice([-1, 0, -0.5, 10**12, -(10**9), 1e30])
    elif isinstance(old, str):
        new = rng.choice(["", "none", "auto_", "  ", "-1"])
    else:
        new = rng.choice([-1, 0, "x"])
    if new == old and type(new) is type(old):
        return None
    parent[key] = new
    return f"range {dotted(path)}: {json.dumps(old)[:40]} -> {json.dumps(new)[:40]}"


def _zero(cfg):
    z = cfg.get("zero_optimization")
    if not isinstance(z, dict):
        z = {}
        cfg["zero_optimization"] = z
    return z


def mut_conflict(rng, cfg):
    how = rng.choice(["bf16+fp16", "bf16+fp16", "offload_param_low_stage", "offload_param_low_stage", "offload_opt_stage0",
                      "stage3_knob_low_stage", "allreduce_sum_z3", "fp16_master_stage0", "bf16_opt_states", "bfloat16+bf16",
                      "legacy_zero_bool", "offload_nvme_no_path"])
    if how == "bf16+fp16":
        cfg["bf16"] = dict(cfg.get("bf16") or {}, enabled=True) if isinstance(cfg.get("bf16"), dict) or "bf16" not in cfg else {"enabled": True}
        cfg["fp16"] = dict(cfg.get("fp16") or {}, enabled=True) if isinstance(cfg.get("fp16"), dict) or "fp16" not in cfg else {"enabled": True}
    elif how == "offload_param_low_stage":
        z = _zero(cfg)
        z["stage"] = rng.choice([0, 1, 2])
        z["offload_param"] = {"device": rng.choice(["cpu", "nvme"]), "pin_memory": True, **({"nvme_path": "/nvme"} if rng.random() < 0.5 else {})}
    elif how == "offload_opt_stage0":
        z = _zero(cfg)
        z["stage"] = 0
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    elif how == "stage3_knob_low_stage":
        z = _zero(cfg)
        z["stage"] = rng.choice([1, 2])
        z[rng.choice(["stage3_max_live_parameters", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"])] = 100000
    elif how == "allreduce_sum_z3":
        _zero(cfg)["stage"] = 3
        cfg["gradient_allreduce_op"] = "sum"
    elif how == "fp16_master_stage0":
        _zero(cfg)["stage"] = 0
        cfg["fp16"] = {"enabled": True, "fp16_master_weights_and_grads": True}
        cfg.pop("bf16", None)
    elif how == "bf16_opt_states":
        cfg["bf16"] = {"enabled": True, "bf16_optimizer_states": True}
        cfg.pop("fp16", None)
    elif how == "bfloat16+bf16":
        cfg["bfloat16"] = {"enabled": not bool((cfg.get("bf16") or {}).get("enabled")) if isinstance(cfg.get("bf16"), dict) else True}
        cfg.setdefault("bf16", {"enabled": False})
    elif how == "legacy_zero_bool":
        cfg["zero_optimization"] = rng.choice([True, False])
    elif how == "offload_nvme_no_path":
        z = _zero(cfg)
        z["stage"] = 3
        z[rng.choice(["offload_param", "offload_optimizer"])] = {"device": "nvme"}
    return f"conflict {how}"


def mut_auto(rng, cfg):
    if rng.random() < 0.4:
        # A top-level scalar DeepSpeed reads itself (wrong place unless HF fills it).
        key = rng.choice(list(BATCH_KEYS) + ["gradient_clipping", "steps_per_print", "prescale_gradients", "wall_clock_breakdown", "gradient_predivide_factor", "communication_data_type"])
        path = (key,)
    else:
        paths = [p for p in key_paths(cfg) if not isinstance(parent_of(cfg, p)[p[-1]], (dict,))]
        if not paths:
            return None
        path = rng.choice(paths)
    old = cfg
    for p in path:
        old = old.get(p) if isinstance(old, dict) else None
    if old == "auto":
        return None
    set_path(cfg, path, "auto")
    return f"auto {dotted(path)}"


def mut_batch(rng, cfg):
    how = rng.choice(["bump", "bump", "remove", "scale", "zero", "all_three"])
    present = [k for k in BATCH_KEYS if k in cfg]
    if how == "remove" and present:
        k = rng.choice(present)
        del cfg[k]
        return f"batch remove {k}"
    if how == "all_three":
        for k in BATCH_KEYS:
            cfg[k] = rng.choice([1, 2, 3, 4, 8, 16, 32, 64])
        return "batch set " + ",".join(f"{k}={cfg[k]}" for k in BATCH_KEYS)
    k = rng.choice(present or list(BATCH_KEYS))
    v = cfg.get(k)
    v = v if _int(v) else rng.choice([2, 4, 8])
    if how == "bump":
        cfg[k] = v + rng.choice([1, -1, 3])
    elif how == "scale":
        cfg[k] = v * rng.choice([2, 3, 4])
    elif how == "zero":
        cfg[k] = rng.choice([0, -v])
    if cfg[k] == v and how != "zero":
        return None
    return f"batch {how} {k} -> {cfg[k]}"


def mut_unknown(rng, cfg):
    dicts = [()] + [p for p in key_paths(cfg) if isinstance(parent_of(cfg, p)[p[-1]], dict)]
    path = rng.choice(dicts)
    node = cfg
    for p in path:
        node = node[p]
    key = rng.choice(UNKNOWN_KEYS)
    if key in node:
        return None
    node[key] = rng.choice([True, 1, "cpu", 0.5])
    return f"unknown {dotted(path + (key,))}"


OPERATORS = [
    (mut_typo, 25),
    (mut_remove, 10),
    (mut_type, 15),
    (mut_range, 12),
    (mut_conflict, 10),
    (mut_auto, 8),
    (mut_batch, 12),
    (mut_unknown, 6),
]


def _pick(rng):
    total = sum(w for _, w in OPERATORS)
    x = rng.uniform(0, total)
    for op, w in OPERATORS:
        x -= w
        if x <= 0:
            return op
    return OPERATORS[-1][0]


def generate(seed=SEED, per_base=PER_BASE):
    """Mutant records: {id, base, ops, config, world_size, fill}; the same list for the same seed."""
    out = []
    for name, base, preferred in bases():
        world = world_size(base, preferred)
        z = base.get("zero_optimization")
        stage = z.get("stage", 0) if isinstance(z, dict) and isinstance(z.get("stage"), int) else 2
        rng = random.Random(f"{seed}:{name}")
        seen = {json.dumps(base, sort_keys=True)}
        out.append(_record(name, 0, ["none"], base, world))
        attempts = 0
        while len([r for r in out if r["base"] == name]) < per_base + 1 and attempts < per_base * 20:
            attempts += 1
            cfg = copy.deepcopy(base)
            ops = []
            for _ in range(2 if rng.random() < 0.12 else 1):
                if not key_paths(cfg) and _pick is not None:
                    break
                desc = _pick(rng)(rng, cfg)
                if desc:
                    ops.append(desc)
            if not ops:
                continue
            text = json.dumps(cfg, sort_keys=True)
            if text in seen:
                continue
            seen.add(text)
            out.append(_record(name, len(seen) - 1, ops, cfg, world, stage))
    return out


def _record(name, i, ops, cfg, world, stage=2):
    fill = {}
    flat = hf_fill(cfg if isinstance(cfg, dict) else {}, world, stage)
    for p in HF_FILLED:
        node = cfg
        for part in p.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node == "auto":
            fill[p] = flat[p]
    return {"id": f"{name}#{i}", "base": name, "ops": ops, "config": cfg, "world_size": world, "fill": fill}


if __name__ == "__main__":
    import sys

    recs = generate()
    for r in recs:
        sys.stdout.write(json.dumps(r) + "\n")
