"""memory-fit: the memory model's verdict on a linted setup, when the hardware is known. The files
are read by the memory model's own reader (memory.configs), as `estimate --config` reads them."""

from ..errors import UserError
from . import ERROR, WARNING, rule
from .facts import count, world_sizes


@rule("memory-fit", ERROR, "the memory model says the setup does not fit the GPUs, or will not run")
def memory_fit(setup):
    """
    With `--gpu` (and the world size from the launch files or `--gpus`), lint runs the memory
    model on the setup's files exactly as `ftrecipes estimate --config FILE... --gpu GPU` reads
    them (DeepSpeed JSON, LLaMA-Factory / TRL / accelerate / axolotl YAML, OpenRLHF and torchrun
    launch scripts; the releases from `--framework-version`). An out-of-memory verdict is an error
    naming the phase and the cheapest remedy that fits; under 10 % headroom is a warning; a
    combination the estimate says fails whatever the memory (for example a frozen base under
    ZeRO-3 with non-reentrant checkpointing on DeepSpeed before 0.19.3) is an error. Setups whose
    model the catalog does not know, or which set something the memory model cannot express,
    are not judged (no guesses).
    """
    if not setup.options.gpu:
        return
    from ..memory import configs
    from ..memory.inputs import run
    from ..memory.report import cache_handed_back

    files = [c for c in setup.configs if c.kind in configs.KINDS]
    if any(c.kind == "llamafactory" and isinstance(c.data, dict) and c.data.get("do_train") is not True for c in files):
        # do_train is a TrainingArguments flag (default False) and LLaMA-Factory's workflows train
        # only under it: a predict, eval or export file holds no training step to judge
        return
    worlds = world_sizes(setup)
    gpus = worlds[0].value if worlds and len({f.value for f in worlds}) == 1 else setup.options.gpus
    gpus = count(gpus, minimum=1)
    try:
        s, _assumed = configs.setup_from_files(files, setup.options.framework_versions,
                                                given={"gpu": setup.options.gpu},
                                                defaults={"gpus": gpus} if gpus else None)
        if not s.model or (s.gpus > 1 and not _distribution_stated(files)):
            return
        r = run(s)
    except (KeyError, ValueError, TypeError, UserError):
        return  # a model the catalog does not know, or a setting the memory model cannot express
    where, at = _anchor(setup)
    for error in r.errors:
        yield where, (), f"will not run: {error}"
    j = r.to_json()
    gib = 1024**3
    what = f"{s.model}, {s.gpus} GPU{'s' if s.gpus > 1 else ''}, seq {s.seq_len}, micro batch {s.micro_batch}"
    # the verdict's figure: the card's, less the cache PyTorch hands back before an OOM
    needed = j["gpu_needed_bytes"]
    cache = (f"; nvidia-smi would show {j['gpu_card_bytes'] / gib:.1f} with the cache PyTorch hands back before an OOM"
             if cache_handed_back(j["gpu_card_bytes"], needed) else "")
    if j["verdict"] == "oom":
        fix = next((x["change"] for x in j.get("remedies") or [] if x.get("verdict") == "fits"), None)
        yield where, at, (
            f"estimated {needed / gib:.1f} GiB per GPU at the peak ({j['peak_phase']}: reserved "
            f"{j['gpu_reserved_bytes'] / gib:.1f} GiB plus the CUDA context{cache}) exceeds {j['gpu_bytes'] / gib:.1f} GiB "
            f"on {setup.options.gpu} ({what})" + (f"; cheapest fix: {fix}" if fix else "")
        )
    elif j["verdict"] == "tight":
        yield where, at, (
            f"estimated {needed / gib:.1f} of {j['gpu_bytes'] / gib:.1f} GiB per GPU at the peak on "
            f"{setup.options.gpu}: under 10 % headroom ({what}{cache})"
        ), WARNING


def _distribution_stated(files):
    """Whether the files say how several GPUs share the run. A TRL config alone does not: its
    recipes are started with `accelerate launch --config_file zero3.yaml` (open-r1,
    alignment-handbook), so DDP, ZeRO or FSDP is the launcher's choice, and judging it as DDP
    would be a guess. LLaMA-Factory and axolotl files name their DeepSpeed or FSDP config
    themselves and otherwise run DDP."""
    return any(c.kind != "trl" or (isinstance(c.data, dict) and (c.data.get("deepspeed") or c.data.get("fsdp")))
               for c in files)


# where a memory finding points: the DeepSpeed config's micro batch, else the trainer's
_MICRO_BATCH = {"deepspeed": "train_micro_batch_size_per_gpu", "llamafactory": "per_device_train_batch_size",
                "trl": "per_device_train_batch_size", "axolotl": "micro_batch_size"}


def _anchor(setup):
    """(config, key path) a memory finding is reported at."""
    order = ("deepspeed", "llamafactory", "trl", "axolotl", "openrlhf", "accelerate", "launch")
    cfg = min(setup.configs, key=lambda c: order.index(c.kind) if c.kind in order else len(order))
    key = _MICRO_BATCH.get(cfg.kind)
    return cfg, ((key,) if key and isinstance(cfg.data, dict) and key in cfg.data else ())
