#!/usr/bin/env bash
# Rendered by ftrecipes from qwen7b-dpo-v100x8@2.0.6; edit the recipe, not this file.
# LoRA DPO on 8 V100s: llamafactory-cli starts torchrun with 8 processes.
# Run from the folder holding dpo.yaml and ds.json; dataset_dir (data) is relative to it.
set -euo pipefail
cd "$(dirname "$0")"

# Expandable segments cut fragmentation from DPO's varying pair lengths. LLaMA-Factory's
# launcher sets the same value itself unless OPTIM_TORCH=0; it is written out here so the
# script says what runs.
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
FORCE_TORCHRUN=1 NNODES=1 NPROC_PER_NODE=8 MASTER_PORT=29500 \
  llamafactory-cli train dpo.yaml
