"""Test-only stand-in for QwenLM/Qwen `finetune.py` (copied as `finetune.py` into a smoke run dir).

Why a stand-in: the real script is not a package, needs Qwen v1's remote modeling and
tokenizer code (trust_remote_code, written for transformers 4.x) and a model hub. This file
keeps what the recipe relies on and tests:

- the SAME command-line surface: ModelArguments, DataArguments, TrainingArguments (a
  transformers.TrainingArguments subclass with the script's extra fields) and LoraArguments,
  with the field names, types and defaults of QwenLM/Qwen finetune.py (main branch, the
  revision with the loading fix of QwenLM/Qwen#964), parsed with HfArgumentParser as the
  script does;
- the FIXED loading the recipe README describes: low_cpu_mem_usage unless ZeRO-3 is on,
  a device_map only for Q-LoRA, the compute dtype from --bf16/--fp16;
- PEFT LoRA from the LoraArguments, the "chat in the model path -> no modules_to_save"
  rule, enable_input_require_grads with gradient checkpointing, HF Trainer, and saving the
  LoRA state at the end.

Differences from upstream, all forced by the test set-up or by transformers 5 (the recipe's
tested stack): the tokenizer is the tiny fast tokenizer (special-token ids looked up by name
instead of Qwen's tokenizer attributes); the data formatting is our own short ChatML
version of the script's; `Trainer(processing_class=...)` instead of the removed
`tokenizer=`; `transformers.integrations` instead of the removed `transformers.deepspeed`;
Q-LoRA (GPTQ on a GPU) is refused.
"""

import json
import os
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import transformers
from torch.utils.data import Dataset

IGNORE = -100


# ---- the script's argument dataclasses (names, types, defaults as upstream) ----------------
@dataclass
class ModelArguments:
    model_name_or_path: Optional[str] = field(default="Qwen/Qwen-7B")


@dataclass
class DataArguments:
    data_path: str = field(default=None, metadata={"help": "Path to the training data."})
    eval_data_path: str = field(default=None, metadata={"help": "Path to the evaluation data."})
    lazy_preprocess: bool = False


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    cache_dir: Optional[str] = field(default=None)
    optim: str = field(default="adamw_torch")
    model_max_length: int = field(default=8192, metadata={"help": "Maximum sequence length."})
    use_lora: bool = False


@dataclass
class LoraArguments:
    lora_r: int = 64
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_target_modules: List[str] = field(default_factory=lambda: ["c_attn", "c_proj", "w1", "w2"])
    lora_weight_path: str = ""
    lora_bias: str = "none"
    q_lora: bool = False


DATACLASSES = (ModelArguments, DataArguments, TrainingArguments, LoraArguments)


# ---- data: finetune.py's JSON format, a list of {"conversations": [{"from", "value"}]} -------
def _encode(conversation, tok, max_len):
    """ChatML ids and labels: only assistant replies are learned (as the script does)."""
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    nl = tok("\n").input_ids

    def turn(role, text):
        return [start] + tok(role).input_ids + nl + tok(text).input_ids + [end] + nl

    ids = turn("system", "You are a helpful assistant.")
    labels = [IGNORE] * len(ids)
    for msg in conversation:
        role = {"user": "user", "assistant": "assistant"}[msg["from"]]
        part = turn(role, msg["value"])
        ids += part
        labels += part if role == "assistant" else [IGNORE] * len(part)
    ids, labels = ids[:max_len], labels[:max_len]
    pad = max_len - len(ids)
    return {
        "input_ids": torch.tensor(ids + [tok.pad_token_id] * pad),
        "labels": torch.tensor(labels + [IGNORE] * pad),
        "attention_mask": torch.tensor([1] * len(ids) + [0] * pad),
    }


class ConversationDataset(Dataset):
    def __init__(self, path, tok, max_len):
        with open(path, encoding="utf-8") as fh:
            self.rows = json.load(fh)
        self.tok, self.max_len = tok, max_len

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return _encode(self.rows[i]["conversations"], self.tok, self.max_len)


def _record_load(training_args, model, **facts):
    """Test-only: how this process loaded the model, for the smoke test to assert on."""
    facts["partitioned_at_load"] = any(hasattr(p, "ds_id") for p in model.parameters())
    facts["dtype"] = str(next(model.parameters()).dtype)
    os.makedirs(training_args.output_dir, exist_ok=True)
    path = os.path.join(training_args.output_dir, f"load_rank{os.environ.get('RANK', '0')}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(facts, fh)


def train():
    # Imported here, not at the top: the truth check imports only DATACLASSES, also under a
    # transformers 4.x release (devenv.ensure_release) where this peft does not import.
    from peft import LoraConfig, get_peft_model
    from transformers.integrations import deepspeed as hf_deepspeed

    parser = transformers.HfArgumentParser(DATACLASSES)
    model_args, data_args, training_args, lora_args = parser.parse_args_into_dataclasses()
    if lora_args.q_lora:
        raise SystemExit("stand-in: Q-LoRA (GPTQ) needs a GPU and is not smoke-tested")

    compute_dtype = torch.float16 if training_args.fp16 else (torch.bfloat16 if training_args.bf16 else torch.float32)
    zero3 = hf_deepspeed.is_deepspeed_zero3_enabled()
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    # The fix (QwenLM/Qwen#954, #964): DeepSpeed places the model; a device_map only for Q-LoRA.
    device_map = None
    if lora_args.q_lora:
        device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)} if world_size > 1 else "auto"

    config = transformers.AutoConfig.from_pretrained(model_args.model_name_or_path, cache_dir=training_args.cache_dir)
    config.use_cache = False
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        config=config,
        cache_dir=training_args.cache_dir,
        dtype=compute_dtype,
        low_cpu_mem_usage=not zero3,  # the fix; ZeRO-3's zero.Init partitions at load instead
        device_map=device_map,  # never together with ZeRO-3
    )
    tok = transformers.AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, model_max_length=training_args.model_max_length, padding_side="right")
    tok.pad_token_id = tok.convert_tokens_to_ids("<|endoftext|>")  # Qwen's eod token
    _record_load(training_args, zero3=zero3, low_cpu_mem_usage=not zero3, device_map=device_map, model=model)

    if training_args.use_lora:
        chat = "chat" in model_args.model_name_or_path.lower()
        lora_config = LoraConfig(
            r=lora_args.lora_r,
            lora_alpha=lora_args.lora_alpha,
            target_modules=lora_args.lora_target_modules,
            lora_dropout=lora_args.lora_dropout,
            bias=lora_args.lora_bias,
            task_type="CAUSAL_LM",
            modules_to_save=None if chat else ["embed_tokens", "lm_head"],  # upstream: wte, lm_head
        )
        model = get_peft_model(model, lora_config)
        model.print_trainable_parameters()
        if training_args.gradient_checkpointing:
            model.enable_input_require_grads()

    train_dataset = ConversationDataset(data_args.data_path, tok, training_args.model_max_length)
    trainer = transformers.Trainer(model=model, processing_class=tok, args=training_args, train_dataset=train_dataset)
    trainer.train()
    trainer.save_state()

    # As upstream: LoRA weights only (ZeRO-2 keeps full parameters on every rank).
    if training_args.use_lora and not zero3:
        state = {k: v.detach().cpu().clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    elif zero3:
        state = trainer.model_wrapped._zero3_consolidated_16bit_state_dict()
    else:
        state = trainer.model.state_dict()
    if training_args.should_save and training_args.local_rank in (0, -1):
        trainer._save(training_args.output_dir, state_dict=state)
    # Leave the process group together: a rank that exits while its peer is still saving can
    # abort in gloo's threads at interpreter shutdown (seen once in CI on CPU).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    train()
