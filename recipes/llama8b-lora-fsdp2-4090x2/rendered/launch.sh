#!/usr/bin/env bash
# Rendered by ftrecipes from llama8b-lora-fsdp2-4090x2@1.0.8; edit the recipe, not this file.
# LoRA SFT on 2 24 GB cards: accelerate starts 2 processes and shards the frozen base with FSDP2.
# Run from the folder holding fsdp2.yaml and sft.yaml; dataset_dir (data) is relative to it.
set -euo pipefail
cd "$(dirname "$0")"

# llamafactory.launcher run as a module trains (run_exp), as LLaMA-Factory's src/train.py does
# in a checkout; its own torchrun launch runs the same file.
accelerate launch --config_file fsdp2.yaml -m llamafactory.launcher sft.yaml
