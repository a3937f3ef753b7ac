"""Valid starting material the hostile cases bend: the repo's own committed rendered files.

Sources: recipes/qwen7b-dpo-v100x8/rendered/{ds.json,dpo.yaml} (LLaMA-Factory + DeepSpeed),
recipes/qwen7b-lora-h100x8/rendered/{accelerate.yaml,grpo.yaml,ds.json} (accelerate + TRL),
recipes/llama8b-sft-a100x1/rendered/launch.sh (OpenRLHF flags). The HF config is the shape of
Qwen/Qwen2.5-0.5B's config.json (hidden 896, 24 layers, 14 heads, 2 KV heads, vocab 151936).
"""

import json
from functools import lru_cache

from .harness import ROOT

DPO = "qwen7b-dpo-v100x8"
GRPO = "qwen7b-lora-h100x8"
SFT = "llama8b-sft-a100x1"


@lru_cache(maxsize=None)
def rendered(recipe, name):
    return (ROOT / "recipes" / recipe / "rendered" / name).read_text(encoding="utf-8")


def ds_json():
    return rendered(DPO, "ds.json")


def ds_dict():
    return json.loads(ds_json())


def lf_yaml():
    # The rendered dpo.yaml names ds.json beside it; cases put one there.
    return rendered(DPO, "dpo.yaml")


def accelerate_yaml():
    return rendered(GRPO, "accelerate.yaml")


def trl_yaml():
    return rendered(GRPO, "grpo.yaml")


def launch_sh():
    return rendered(SFT, "launch.sh")


HF_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


def hf_config(**changes):
    cfg = dict(HF_CONFIG)
    for k, v in changes.items():
        if v is _DROP:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


_DROP = object()
DROP = _DROP


def recipe_values(recipe=DPO):
    import yaml

    return yaml.safe_load((ROOT / "recipes" / recipe / "recipe.yaml").read_text(encoding="utf-8"))["values"]


def axolotl_yaml():
    # The shape of axolotl's examples/qwen2 LoRA configs (the repo renders no axolotl file).
    return ("base_model: Qwen/Qwen2.5-7B\nadapter: lora\nlora_r: 16\nlora_alpha: 32\nlora_dropout: 0.05\n"
            "lora_target_linear: true\nsequence_len: 2048\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\n"
            "optimizer: adamw_torch_fused\nbf16: auto\ngradient_checkpointing: true\nflash_attention: true\n"
            "datasets:\n  - path: mhenrichsen/alpaca_2k_test\n    type: alpaca\nnum_epochs: 1\n"
            "learning_rate: 0.0002\noutput_dir: ./out\n")
