"""Batch arithmetic across files: DeepSpeed, the launcher and the trainer must agree."""

from . import ERROR, rule
from .facts import ds_configs, is_number, trainer_batches, world_sizes


def _ds_batch(ds):
    d = ds.data
    return d.get("train_batch_size"), d.get("train_micro_batch_size_per_gpu"), d.get("gradient_accumulation_steps")


def _unfillable(total, micro, accum, world):
    """With train_batch_size a number and micro/accumulation missing or "auto", DeepSpeed derives
    the missing ones by integer division (the trainer fills "auto" from its own numbers) and then
    asserts the product; say why no positive whole numbers can satisfy it, or None."""
    if not is_number(total) or total <= 0 or all(is_number(x) for x in (micro, accum)):
        return None
    known = [(name, v) for name, v in (("micro", micro), ("accumulation", accum)) if is_number(v)]
    if any((not is_number(v)) and v not in (None, "auto") for v in (micro, accum)) or any(v <= 0 for _, v in known):
        return None  # a wrong type or a non-positive number is the schema's finding
    per = world
    for _, v in known:
        per *= v
    if total % per == 0 and total >= per:
        return None
    what = " x ".join([f"{name} {v}" for name, v in known] + [f"world size {world}"]) + (f" = {per}" if known else "")
    return f"train_batch_size {total} is not a multiple of {what}; no whole number fills in the rest"


@rule("batch-arithmetic", ERROR, "train_batch_size is not micro x accumulation x world size")
def batch_arithmetic(setup):
    """
    DeepSpeed asserts `train_batch_size == train_micro_batch_size_per_gpu x
    gradient_accumulation_steps x world size` at start-up (DeepSpeed#6914), and the HF
    Trainer stops when the DeepSpeed values differ from its own
    `per_device_train_batch_size` / `gradient_accumulation_steps` (transformers#27830).
    The world size comes from the launcher: accelerate's `num_processes x num_machines`,
    torchrun's `--nproc_per_node x --nnodes`, `deepspeed --num_gpus`, LLaMA-Factory's
    `NPROC_PER_NODE x NNODES`, or `--gpus`. Values set to "auto" are filled by the trainer
    and not compared.
    """
    worlds = world_sizes(setup)
    distinct = {f.value for f in worlds}
    if len(distinct) > 1:
        first = worlds[0]
        for f in worlds[1:]:
            if f.value != first.value and f.cfg is not None:
                yield f.cfg, f.path, f"world size {f.value} ({f.what}) differs from {first.value} ({first.what} in {first.cfg.path if first.cfg else 'options'})"
    world = worlds[0].value if len(distinct) == 1 else None
    for ds in ds_configs(setup):
        total, micro, accum = _ds_batch(ds)
        if world and all(is_number(x) for x in (total, micro, accum)) and total != micro * accum * world:
            yield ds, ("train_batch_size",), (
                f"train_batch_size {total} != micro {micro} x accumulation {accum} x world size {world} "
                f"({worlds[0].what}) = {micro * accum * world}"
            )
        if total is None and micro is None:
            yield ds, (), "neither train_batch_size nor train_micro_batch_size_per_gpu is set; DeepSpeed needs at least one"
        elif world and _unfillable(total, micro, accum, world):
            yield ds, ("train_batch_size",), _unfillable(total, micro, accum, world) + f" ({worlds[0].what})"
        for m_fact, a_fact in trainer_batches(setup):
            if m_fact and is_number(micro) and is_number(m_fact.value) and m_fact.value != micro:
                yield m_fact.cfg, m_fact.path, f"{m_fact.what} {m_fact.value} but {ds.path} has train_micro_batch_size_per_gpu {micro}"
            if a_fact and is_number(accum) and is_number(a_fact.value) and a_fact.value != accum:
                yield a_fact.cfg, a_fact.path, f"{a_fact.what} {a_fact.value} but {ds.path} has gradient_accumulation_steps {accum}"


@rule("grpo-batch-divisible", ERROR, "GRPO's generation batch is not divisible by num_generations")
def grpo_divisible(setup):
    """
    GRPO samples `num_generations` completions per prompt and computes advantages within
    each group, so a generation batch (per-device batch x processes x steps_per_generation,
    which defaults to gradient_accumulation_steps) must hold whole groups. TRL refuses
    other values at start-up (trl#2842); this rule says so before the job queues.
    """
    worlds = world_sizes(setup)
    world = worlds[0].value if worlds and len({f.value for f in worlds}) == 1 else None
    for cfg in setup.of("trl"):
        d = cfg.data if isinstance(cfg.data, dict) else {}
        gens = d.get("num_generations")
        if not is_number(gens) or world is None:
            continue
        if is_number(d.get("generation_batch_size")):
            batch, how = d["generation_batch_size"], "generation_batch_size"
        else:
            micro = d.get("per_device_train_batch_size", 8)
            steps = d.get("steps_per_generation") or d.get("gradient_accumulation_steps", 1)
            if not (is_number(micro) and is_number(steps)):
                continue
            batch, how = micro * world * steps, f"{micro} per device x {world} processes x {steps} steps"
        if batch % gens:
            yield cfg, ("num_generations",), f"generation batch {batch} ({how}) is not divisible by num_generations {gens}"
