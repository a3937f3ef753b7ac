"""The estimate's short-lived bytes of a ZeRO-3 step against DeepSpeed's own allocations.

bench/zero3_cpu_bytes.py runs tests/frameworks/zero3_step_bytes.py (real DeepSpeed ZeRO-3 steps
on two CPU ranks, the bytes each phase allocates beyond the resident tensors) and
`ftrecipes estimate --config` on the same LLaMA-Factory YAML, DeepSpeed JSON and config.json.

What this proves: the gathered-parameter window (max_live, prefetch, reuse distance), the
checkpointed activations, the recomputed layer, the logits and loss tensors, DeepSpeed 0.19.8's
frozen weights held through a reentrant backward, and for full fine-tuning the gradient
buckets and the foreach AdamW step, are counted as DeepSpeed and transformers allocate them, on
a Qwen2 with a 7B model's proportions. What it cannot prove: anything of the CUDA caching
allocator (reserve, fragmentation, side streams), NCCL or the CUDA context.

With one rank nothing is gathered (each partition is the whole parameter, used in place); the
unit test below pins the rule's edges, the framework case shows it in DeepSpeed's own step.
"""
import functools
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.05


@functools.cache
def bench():
    spec = importlib.util.spec_from_file_location("zero3_cpu_bytes", os.path.join(ROOT, "bench", "zero3_cpu_bytes.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.framework
@pytest.mark.parametrize("lora_rank,reentrant,ranks", bench().CASES)
def test_short_lived_bytes_match_deepspeed(lora_rank, reentrant, ranks):
    run, est = bench().compare(lora_rank, reentrant, ranks)
    assert run["deepspeed"] == "0.19.8", run
    assert all(loss == loss and loss < 20 for loss in run["losses"]), run
    # a LoRA step's optimizer moves a few hundred kilobytes here, too little to compare
    phases = ("forward", "backward") + (("step",) if not lora_rank else ())
    for phase in phases:
        measured = run["phases"][phase]
        assert abs(est[phase] - measured) <= TOLERANCE * measured, (phase, est[phase], measured, run)


def test_one_rank_gathers_only_offloaded_parameters():
    from ftrecipes.memory.estimate import Setup, estimate

    def temporaries(**kw):
        base = dict(model="Qwen2.5-7B", gpu="H100-80GB", gpus=1, seq_len=2048, micro_batch=1, precision="bf16",
                    framework="deepspeed", zero_stage=3, gradient_checkpointing=True)
        r = estimate(Setup(**{**base, **kw}))
        return next(ph for ph in r.phases if ph.name == "forward").by_category["temporaries"]

    layer = 2 * 233_000_000  # about one Qwen2.5-7B decoder layer in bf16
    # one rank, partitions on the GPU: no window; two ranks, or one rank fetching from the CPU: a window
    assert temporaries(gpus=2) - temporaries(gpus=1) > layer
    assert temporaries(offload_param="cpu", offload_optimizer="cpu") - temporaries() > layer
