#!/usr/bin/env bash
# Rendered by ftrecipes from mistral7b-qlora-4090x1@1.0.7; edit the recipe, not this file.
# QLoRA SFT on one GPU: mistralai/Mistral-7B-v0.1 in 4-bit NF4, LoRA r32, 2 x 8192 tokens per step.
# Run from the folder holding these files.
set -euo pipefail
cd "$(dirname "$0")"

CUDA_VISIBLE_DEVICES=0 accelerate launch \
  --config_file accelerate.yaml \
  -m trl.scripts.sft \
  --config sft.yaml
