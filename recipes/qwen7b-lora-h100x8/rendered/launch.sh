#!/usr/bin/env bash
# Rendered by ftrecipes from qwen7b-lora-h100x8@1.0.0; edit the recipe, not this file.
# GRPO + LoRA on one 8-GPU node: vLLM generation server on GPUs 0,1,2,3,
# training on GPUs 4,5,6,7. Run from the folder holding these files.
set -euo pipefail
cd "$(dirname "$0")"

# The server reserves 0.9 of each of its GPUs; it must not share them with training.
CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve \
  --model Qwen/Qwen2.5-7B-Instruct \
  --tensor_parallel_size 1 \
  --data_parallel_size 4 \
  --gpu_memory_utilization 0.9 \
  --max_model_len 2048 \
  --port 8000 &
VLLM_PID=$!
trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT

# The trainer waits for the server's health check (vllm_server_timeout) before its first step.
CUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch \
  --config_file accelerate.yaml \
  -m trl.scripts.grpo \
  --config grpo.yaml
