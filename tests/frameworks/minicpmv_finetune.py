"""Test-only stand-in for OpenBMB/MiniCPM-V `finetune/finetune.py` (copied as `finetune.py` into a smoke run dir).

Why a stand-in: the real script needs MiniCPM-V's remote modeling code (SigLIP vision tower,
resampler, Qwen2 language model; trust_remote_code), its image dataset code and a model hub.
This file keeps what the recipe relies on and tests:

- the SAME command-line surface: ModelArguments, DataArguments, TrainingArguments (a
  transformers.TrainingArguments subclass with the script's extra fields, incl. tune_vision,
  tune_llm, llm_type, use_lora, max_slice_nums) and LoraArguments, with the field names,
  types and defaults of MiniCPM-V finetune/finetune.py (the revision that sets a device_map
  only for Q-LoRA), parsed with HfArgumentParser as the script does;
- the FIXED loading the recipe README describes: no device_map unless Q-LoRA (transformers
  refuses one under ZeRO-3), the compute dtype from --bf16/--fp16; under ZeRO-3 the model is
  built partitioned by zero.Init because TrainingArguments read --deepspeed before loading;
- full fine-tuning (every parameter trainable with --tune_llm true --use_lora false), the
  "LoRA and tune_llm together" refusal, HF Trainer, and the ZeRO-3 consolidated 16-bit save.

What it does NOT do: there is no vision tower or resampler. A tiny causal LM stands in for
MiniCPM-V's language model, the data are text-only conversations in the script's JSON format
(the "image" entry is ignored), and --tune_vision / --max_slice_nums are parsed but have
nothing to act on. Upstream's CPMTrainer is replaced by the plain HF Trainer (its
training_step/compute_loss override predates transformers 5's num_items_in_batch argument).
"""

import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
import transformers
from torch.utils.data import Dataset

IGNORE = -100


# ---- the script's argument dataclasses (names, types, defaults as upstream) ----------------
@dataclass
class ModelArguments:
    model_name_or_path: Optional[str] = field(default="openbmb/MiniCPM-V-2")


@dataclass
class DataArguments:
    data_path: str = field(default=None, metadata={"help": "Path to the training data."})
    eval_data_path: str = field(default=None, metadata={"help": "Path to the evaluation data."})


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    cache_dir: Optional[str] = field(default=None)
    optim: str = field(default="adamw_torch")
    model_max_length: int = field(default=2048, metadata={"help": "Maximum sequence length."})
    tune_vision: Optional[bool] = field(default=True)
    tune_llm: Optional[bool] = field(default=True)
    llm_type: str = field(default="minicpm")
    use_lora: Optional[bool] = field(default=False)
    max_slice_nums: Optional[int] = field(default=9)


@dataclass
class LoraArguments:
    lora_r: int = 64
    lora_alpha: int = 64
    lora_dropout: float = 0.05
    lora_target_modules: str = r"llm\..*layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)"
    lora_weight_path: str = ""
    lora_bias: str = "none"
    q_lora: bool = False
    lora_modules_to_save: str = ""
    lora_layer_replication: Optional[List[Tuple[int, int]]] = None
    lora_layers_to_transform: Optional[List[int]] = None
    lora_layers_pattern: Optional[str] = None


DATACLASSES = (ModelArguments, DataArguments, TrainingArguments, LoraArguments)


# ---- data: finetune.py's JSON format, [{"id", "image", "conversations": [{"role", "content"}]}]
class ConversationDataset(Dataset):
    """Chat-template ids; labels only on assistant turns. The image is not used (no vision tower)."""

    def __init__(self, path, tok, max_len):
        with open(path, encoding="utf-8") as fh:
            self.rows = json.load(fh)
        self.tok, self.max_len = tok, max_len

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, labels = [], []
        for msg in self.rows[i]["conversations"]:
            text = msg["content"].replace("<image>\n", "")
            part = self.tok.apply_chat_template([{"role": msg["role"], "content": text}], tokenize=True)
            part = list(part["input_ids"] if isinstance(part, dict) or hasattr(part, "keys") else part)
            ids += part
            labels += part if msg["role"] == "assistant" else [IGNORE] * len(part)
        ids, labels = ids[: self.max_len], labels[: self.max_len]
        return {"input_ids": ids, "labels": labels}


def collate(batch, pad_id):
    width = max(len(b["input_ids"]) for b in batch)
    pad = lambda seq, v: seq + [v] * (width - len(seq))  # noqa: E731
    return {
        "input_ids": torch.tensor([pad(b["input_ids"], pad_id) for b in batch]),
        "labels": torch.tensor([pad(b["labels"], IGNORE) for b in batch]),
        "attention_mask": torch.tensor([pad([1] * len(b["input_ids"]), 0) for b in batch]),
    }


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
        raise SystemExit("stand-in: Q-LoRA needs a GPU and is not smoke-tested")

    compute_dtype = torch.float16 if training_args.fp16 else (torch.bfloat16 if training_args.bf16 else torch.float32)
    zero3 = hf_deepspeed.is_deepspeed_zero3_enabled()
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    # The fix: DeepSpeed places the model; transformers refuses a device_map under ZeRO-3.
    device_map = None
    if lora_args.q_lora:
        device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)} if world_size > 1 else None

    # Upstream: AutoModel.from_pretrained(..., trust_remote_code=True) of the whole MiniCPM-V.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path, dtype=compute_dtype, device_map=device_map)
    tok = transformers.AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    _record_load(training_args, zero3=zero3, device_map=device_map, model=model)

    if not training_args.tune_llm:
        model.requires_grad_(False)
    if training_args.use_lora:
        if training_args.tune_llm:
            raise ValueError("The model cannot simultaneously adjust LLM parameters and apply LoRA.")
        model = get_peft_model(model, LoraConfig(
            r=lora_args.lora_r, lora_alpha=lora_args.lora_alpha, target_modules=lora_args.lora_target_modules,
            lora_dropout=lora_args.lora_dropout, bias=lora_args.lora_bias,
            layers_to_transform=lora_args.lora_layers_to_transform, task_type="CAUSAL_LM"))
        if training_args.gradient_checkpointing:
            model.enable_input_require_grads()

    train_dataset = ConversationDataset(data_args.data_path, tok, training_args.model_max_length)
    trainer = transformers.Trainer(
        model=model, processing_class=tok, args=training_args, train_dataset=train_dataset,
        data_collator=lambda b: collate(b, tok.pad_token_id))
    trainer.train()
    trainer.save_state()

    # As upstream: under ZeRO-3 the full 16-bit weights are gathered for saving
    # (needs stage3_gather_16bit_weights_on_model_save in ds.json).
    if zero3:
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
