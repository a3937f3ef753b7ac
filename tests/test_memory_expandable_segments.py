"""PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and what the verdict counts.

Facts checked, each read in source:
- torch's caching allocator, before it raises OOM, runs release_cached_blocks. Without
  expandable segments release_blocks frees only blocks with no neighbours (whole segments with
  nothing live in them); with them it unmaps the whole pages of every free block, split or not,
  and maps pages again where an allocation needs them (pytorch/pytorch
  c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::release_blocks and unmap_block).
  So the free pieces between live blocks, what the estimate's fragmentation term stands for, stay
  in max_memory_reserved and nvidia-smi but no longer decide whether the run fits.
- torch parses the setting from PYTORCH_ALLOC_CONF (torch >= 2.9) or PYTORCH_CUDA_ALLOC_CONF,
  words split at ',' ':' '[' ']', with "True" or "False" as its only values.
- llamafactory-cli >= 0.9.3 (hiyouga/LlamaFactory 7c61b3510, src/llamafactory/cli.py) starts
  torchrun (more than one GPU, or FORCE_TORCHRUN) with PYTORCH_CUDA_ALLOC_CONF=
  expandable_segments:True over the user's value, unless OPTIM_TORCH is off (is_env_enabled:
  true, y or 1).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.configs import setup_from_files
from ftrecipes.memory.estimate import ALLOCATOR_EXPANDABLE

GiB = 1024 ** 3
# one LoRA process with checkpointing at a long context: short-lived layer tensors, so a large
# fragmentation term
LONG = Setup(model="Llama-3.1-8B-Instruct", gpu="A100-80GB", gpus=1, framework="torch", trainer="trl",
             seq_len=65536, micro_batch=1, precision="bf16", gradient_checkpointing=True, lora_rank=16,
             load_dtype="bf16")


def test_allocated_stays_the_shown_reserve_shrinks_and_the_verdict_drops_the_cache():
    off, on = estimate(LONG), estimate(replace(LONG, expandable_segments=True))
    assert on.gpu_allocated_bytes == off.gpu_allocated_bytes
    assert off.gpu_needed_bytes == off.gpu_card_bytes  # nothing cached is handed back without them
    # the fragmented part is a sizeable share of the reserve at this length
    assert off.gpu_card_bytes - on.gpu_needed_bytes > 2 * GiB
    assert on.gpu_needed_bytes >= on.gpu_allocated_bytes + on.cuda_context_bytes
    # the share of that cache nvidia-smi still shows is the fitted ALLOCATOR_EXPANDABLE
    assert on.gpu_card_bytes - on.gpu_needed_bytes == pytest.approx(
        ALLOCATOR_EXPANDABLE * (off.gpu_card_bytes - on.gpu_needed_bytes), rel=1e-6)


def test_the_fitted_share_is_what_its_benchmark_chose():
    # bench/fit_allocator.py --expandable writes the chosen value; the constant is copied from it
    import os
    import re

    md = open(os.path.join(os.path.dirname(__file__), "..", "bench", "fit_allocator_expandable.md")).read()
    chosen = float(re.search(r"chosen on train: ALLOCATOR_EXPANDABLE = ([0-9.]+)", md).group(1))
    assert ALLOCATOR_EXPANDABLE == chosen


def test_a_run_over_the_card_only_by_fragmentation_is_no_longer_called_oom():
    # the longest context whose allocation, context and fixed reserve still fit the card
    fits = [n for n in range(32768, 262145, 8192)
            if estimate(replace(LONG, seq_len=n, expandable_segments=True)).verdict != "oom"]
    n = max(fits)
    off, on = estimate(replace(LONG, seq_len=n)), estimate(replace(LONG, seq_len=n, expandable_segments=True))
    assert off.verdict == "oom" and on.verdict in ("fits", "tight")
    # what nvidia-smi shows never passes the card
    assert on.gpu_card_bytes <= on.gpu_bytes


def _setup(tmp_path, script: str, yaml: str | None = None):
    if yaml is not None:
        (tmp_path / "sft.yaml").write_text(yaml)
    (tmp_path / "run.sh").write_text("#!/bin/bash\n" + script)
    return setup_from_files([str(tmp_path / "run.sh")])[0]


TRAIN = ("torchrun --nproc_per_node 2 train.py --model_name_or_path Qwen/Qwen2.5-7B "
         "--per_device_train_batch_size 1 --bf16 True --output_dir o\n")


@pytest.mark.parametrize("env,expected", [
    ("", False),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ", True),
    ("PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:128,expandable_segments:True' ", True),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False ", False),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true ", False),  # torch takes only True / False
    ("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 ", False),
    ("PYTORCH_ALLOC_CONF=expandable_segments:False PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ", False),
])
def test_a_launch_scripts_allocator_setting(tmp_path, env, expected):
    assert _setup(tmp_path, env + TRAIN).expandable_segments is expected


def test_an_exported_setting_counts_for_the_command_after_it(tmp_path):
    s = _setup(tmp_path, "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + TRAIN)
    assert s.expandable_segments is True


LF = ("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
      "dataset: identity\ntemplate: qwen\noutput_dir: o\nper_device_train_batch_size: 1\nbf16: true\n")


@pytest.mark.parametrize("launch,expected", [
    ("NPROC_PER_NODE=2 llamafactory-cli train sft.yaml\n", True),  # torchrun: the launcher sets it
    ("FORCE_TORCHRUN=1 NPROC_PER_NODE=1 llamafactory-cli train sft.yaml\n", True),
    ("OPTIM_TORCH=0 NPROC_PER_NODE=2 llamafactory-cli train sft.yaml\n", False),
    # OPTIM_TORCH off leaves the user's own value
    ("OPTIM_TORCH=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NPROC_PER_NODE=2 llamafactory-cli train sft.yaml\n", True),
    # the launcher writes its value over the user's
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False NPROC_PER_NODE=2 llamafactory-cli train sft.yaml\n", True),
    ("CUDA_VISIBLE_DEVICES=0 llamafactory-cli train sft.yaml\n", False),  # one GPU: no torchrun
    ("export CUDA_VISIBLE_DEVICES=0,1\nllamafactory-cli train sft.yaml\n", True),
])
def test_llamafactory_clis_torchrun_launch(tmp_path, launch, expected):
    assert _setup(tmp_path, launch, LF).expandable_segments is expected


def test_the_recipe_value_reaches_the_estimate():
    from ftrecipes.memory.inputs import setup_from_values

    meta = {"model": "Qwen2.5-7B-Instruct", "gpu": "V100-32GB", "framework": "llamafactory", "method": "dpo"}
    assert setup_from_values({"expandable_segments": True}, meta).expandable_segments is True
    assert setup_from_values({}, meta).expandable_segments is False


AXOLOTL = ("base_model: Qwen/Qwen2.5-7B\nsequence_len: 2048\nmicro_batch_size: 1\nadapter: lora\nlora_r: 16\n"
           "lora_target_linear: true\ngradient_checkpointing: true\nbf16: true\n"
           "datasets:\n  - path: d.jsonl\n    type: alpaca\n")


@pytest.mark.parametrize("launch,expected", [
    (None, True),  # `axolotl train` sets it when the variable is unset (cli/main.py, 8ddc18ec8)
    ("axolotl train ax.yaml\n", True),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False axolotl train ax.yaml\n", False),  # the user's value stays
])
def test_axolotl_train_sets_it_unless_the_user_did(tmp_path, launch, expected):
    (tmp_path / "ax.yaml").write_text(AXOLOTL)
    if launch is None:
        s = setup_from_files([str(tmp_path / "ax.yaml")])[0]
    else:
        s = _setup(tmp_path, launch)
    assert s.expandable_segments is expected


def test_it_is_offered_as_the_free_remedy_where_the_cache_alone_puts_a_run_over():
    from ftrecipes.memory.inputs import run

    n = max(n for n in range(32768, 262145, 8192)
            if estimate(replace(LONG, seq_len=n, expandable_segments=True)).verdict != "oom")
    r = run(replace(LONG, seq_len=n))
    [m] = [m for m in r.remedies if m["change"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")]
    assert m["verdict"] != "oom" and m["gpu_peak_bytes"] == round(r.gpu_peak_bytes)  # nothing else changes
    assert not any("expandable" in m["change"] for m in run(replace(LONG, seq_len=n, expandable_segments=True)).remedies)


def test_the_text_report_shows_the_verdicts_figure_beside_the_cards():
    from ftrecipes.memory.report import render_text

    on, off = estimate(replace(LONG, expandable_segments=True)), estimate(LONG)
    peak_on = next(l for l in render_text(on).splitlines() if l.startswith("peak"))
    assert f"{on.gpu_needed_bytes / GiB:.1f} GiB once PyTorch hands back" in peak_on
    assert "hands back" not in next(l for l in render_text(off).splitlines() if l.startswith("peak"))
