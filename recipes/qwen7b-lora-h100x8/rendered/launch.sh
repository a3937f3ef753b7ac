#!/usr/bin/env bash
# Rendered by ftrecipes from qwen7b-lora-h100x8@1.1.8; edit the recipe, not this file.
# GRPO + LoRA on one 8-GPU node: vLLM generation server on GPUs 0,1,2,3,
# training on GPUs 4,5,6,7. Run from the folder holding these files.
set -euo pipefail
cd "$(dirname "$0")"

# The server reserves 0.9 of each of its GPUs; it must not share them with training.
CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen2.5-7B-Instruct \
  --host 0.0.0.0 \
  --port 8000 \
  --tensor-parallel-size 1 \
  --data-parallel-size 4 \
  --gpu-memory-utilization 0.9 \
  --max-model-len 3072 \
  --dtype auto \
  --weight-transfer-config '{"backend": "nccl"}' \
  --logprobs-mode processed_logprobs \
  --max-logprobs -1 &
VLLM_PID=$!
trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT

# The trainer waits for the server's /health (vllm_server_timeout) before its first step.
CUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch \
  --config_file accelerate.yaml \
  -m trl.scripts.grpo \
  --config grpo.yaml
