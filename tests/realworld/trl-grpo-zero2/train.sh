#!/bin/bash
# One GPU generates, seven train.
CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen2.5-1.5B-Instruct &
CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --config_file zero2.yaml \
  -m trl.scripts.grpo --config grpo.yaml
