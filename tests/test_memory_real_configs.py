"""`estimate --config` on public training files nobody here wrote: each test holds one cause of a
misread or an unclear refusal, fixed in general. The files under tests/foreign are copied
unchanged from their repositories (tests/foreign/SOURCES.yaml); the rest are minimal files the
test writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

FOREIGN = Path(__file__).resolve().parent / "foreign"


def setup_of(run_cli, *args):
    code, out, err = run_cli("estimate", *args, "--gpu", "A100-80GB", "--json")
    assert code in (0, 3), err
    return json.loads(out)["setup"]


def test_a_launch_scripts_files_resolve_from_the_directory_the_job_starts_in(run_cli, monkeypatch):
    """LLaMA-Factory's examples/extras/fsdp_qlora/train.sh runs, from the repository's top,
    `accelerate launch --config_file examples/accelerate/fsdp_config.yaml src/train.py
    examples/extras/fsdp_qlora/llama3_lora_sft.yaml`. Both names are relative to the working
    directory, not to the script's folder; unresolved, the estimate read nothing and asked for a
    model. The trainer YAML gives the QLoRA settings, the accelerate file FSDP on 2 processes."""
    monkeypatch.chdir(FOREIGN / "hiyouga__LLaMA-Factory")
    s = setup_of(run_cli, "--config", "examples/extras/fsdp_qlora/train.sh")
    assert s["model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert (s["framework"], s["gpus"], s["fsdp_offload"]) == ("fsdp", 2, False)
    assert (s["quantization"], s["lora_rank"], s["seq_len"], s["micro_batch"]) == ("4bit", 8, 2048, 1)

