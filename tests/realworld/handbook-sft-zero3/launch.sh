#!/bin/bash
ACCELERATE_LOG_LEVEL=info accelerate launch --config_file deepspeed_zero3.yaml \
  -m trl.scripts.sft --config config_full.yaml
