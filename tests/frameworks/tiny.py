"""Tiny, local, deterministic test assets for the framework smoke tests.

Runs INSIDE a stack venv (tests/envs/<stack>): imports torch, tokenizers and
transformers, and must work with every stack's transformers (5.6 / 5.15 / 5.23).
Nothing is downloaded: the model has random weights built from a config and the
tokenizer is a byte-level BPE trained here on generated text.

    from tiny import make_tiny_assets
    paths = make_tiny_assets("/tmp/x")      # model/, sft.jsonl, dpo.jsonl, prompts.jsonl

CLI:  python tests/frameworks/tiny.py OUTDIR [--arch qwen2|llama|mistral]
"""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

# ChatML, the format Qwen uses; simple enough for every framework's chat handling.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PAD, BOS, EOS = "<|endoftext|>", "<|endoftext|>", "<|im_end|>"

_WORDS = (
    "the a one two three four five six seven eight nine ten red blue green cat dog bird "
    "fish tree house river road sun moon star runs jumps sees likes has makes big small "
    "old new fast slow happy sad and or but with near under over what is how many answer "
    "question please tell me about count add plus minus equals yes no"
).split()
_NUMS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _sentence(rng: random.Random, n_min: int = 4, n_max: int = 10) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(n_min, n_max))) + "."


def _qa(rng: random.Random):
    a, b = rng.randint(0, 5), rng.randint(0, 5)
    q = f"what is {_NUMS[a]} plus {_NUMS[b]}?"
    good = f"{_NUMS[a]} plus {_NUMS[b]} equals {_NUMS[a + b]}."
    wrong = (a + b + rng.randint(1, 3)) % 11
    bad = f"{_NUMS[a]} plus {_NUMS[b]} equals {_NUMS[wrong]}."
    return q, good, bad, _NUMS[a + b]


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------
def make_tiny_tokenizer(out_dir=None, vocab_size: int = 512, seed: int = 0,
                        model_max_length: int = 512):
    """Train a byte-level BPE on generated text; return a PreTrainedTokenizerFast
    (saved to out_dir when given) with ChatML chat template and pad/bos/eos set."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = [_sentence(rng) for _ in range(2000)]
    for _ in range(500):
        q, good, bad, _ = _qa(rng)
        corpus += [q, good, bad, "user assistant system"]

    tok = Tokenizer(models.BPE())
    # Qwen2's split regex + byte-level: transformers 5 loads a qwen2 checkpoint's tokenizer as
    # Qwen2Tokenizer, which rebuilds exactly this pre-tokenizer; training with the same one keeps
    # the raw tokenizer.json and the loaded tokenizer identical for both archs.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        unk_token=None, model_max_length=model_max_length, padding_side="right")
    hf.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        hf.save_pretrained(str(out_dir))
    return hf


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def make_tiny_model(out_dir, arch: str = "qwen2", hidden_size: int = 64, num_layers: int = 2,
                    num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128,
                    max_position_embeddings: int = 512, vocab_size: int = 512, seed: int = 0,
                    tokenizer=True, dtype: str = "float32"):
    """Save a randomly initialised tiny causal LM (and, unless tokenizer=False, the tiny
    tokenizer) to out_dir with save_pretrained. Returns out_dir as a Path."""
    import torch
    import transformers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = make_tiny_tokenizer(out if tokenizer else None, vocab_size=vocab_size, seed=seed,
                              model_max_length=max_position_embeddings) if tokenizer else None
    vocab = len(tok) if tok is not None else vocab_size
    ids = {}
    if tok is not None:
        ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id)
    common = dict(vocab_size=vocab, hidden_size=hidden_size, num_hidden_layers=num_layers,
                  num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                  intermediate_size=intermediate_size,
                  max_position_embeddings=max_position_embeddings, tie_word_embeddings=False,
                  **ids)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
    elif arch == "llama":
        cfg = transformers.LlamaConfig(**common)
    elif arch == "mistral":
        cfg = transformers.MistralConfig(**common)
    else:
        raise ValueError(f"unknown arch {arch!r} (qwen2|llama|mistral)")
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = model.to(getattr(torch, dtype))
    if tok is not None:
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.generation_config.bos_token_id = tok.bos_token_id
    model.save_pretrained(str(out))
    return out


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def _write_jsonl(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def write_sft_jsonl(path, n: int = 64, seed: int = 0, fmt: str = "messages"):
    """fmt: "messages" ({"messages": [user, assistant]}: TRL, OpenRLHF --data.input_key messages
    --data.apply_chat_template), "alpaca" ({"instruction","input","output"}: LLaMA-Factory),
    "prompt_completion" ({"prompt","completion"} plain strings), "text" ({"text"})."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        q, good, _, _ = _qa(rng) if rng.random() < 0.5 else (_sentence(rng), _sentence(rng), 0, 0)
        if fmt == "messages":
            rows.append({"messages": [{"role": "user", "content": q},
                                      {"role": "assistant", "content": good}]})
        elif fmt == "alpaca":
            rows.append({"instruction": q, "input": "", "output": good})
        elif fmt == "prompt_completion":
            rows.append({"prompt": q, "completion": " " + good})
        elif fmt == "text":
            rows.append({"text": q + " " + good})
        else:
            raise ValueError(fmt)
    return _write_jsonl(path, rows)


def write_dpo_jsonl(path, n: int = 64, seed: int = 0, fmt: str = "messages"):
    """fmt: "messages" ({"prompt": [user], "chosen": [assistant], "rejected": [assistant]}:
    TRL conversational preference format and OpenRLHF with --data.apply_chat_template),
    "alpaca" ({"instruction","input","chosen","rejected"}: LLaMA-Factory ranking),
    "text" (plain strings prompt/chosen/rejected)."""
    rng = random.Random(seed + 1)
    rows = []
    for _ in range(n):
        q, good, bad, _ = _qa(rng)
        if fmt == "messages":
            rows.append({"prompt": [{"role": "user", "content": q}],
                         "chosen": [{"role": "assistant", "content": good}],
                         "rejected": [{"role": "assistant", "content": bad}]})
        elif fmt == "alpaca":
            rows.append({"instruction": q, "input": "", "chosen": good, "rejected": bad})
        elif fmt == "text":
            rows.append({"prompt": q, "chosen": " " + good, "rejected": " " + bad})
        else:
            raise ValueError(fmt)
    return _write_jsonl(path, rows)


def write_prompt_jsonl(path, n: int = 32, seed: int = 0, fmt: str = "messages"):
    """Prompts for RL (GRPO/PPO): {"prompt": [user] | str, "answer": str}."""
    rng = random.Random(seed + 2)
    rows = []
    for _ in range(n):
        q, _, _, ans = _qa(rng)
        prompt = [{"role": "user", "content": q}] if fmt == "messages" else q
        rows.append({"prompt": prompt, "answer": ans})
    return _write_jsonl(path, rows)


def write_llamafactory_dataset_info(dataset_dir, entries):
    """entries: {name: (file_name, kind)} with kind "sft" or "dpo" (alpaca-format files)."""
    info = {}
    for name, (file_name, kind) in entries.items():
        if kind == "sft":
            info[name] = {"file_name": file_name, "formatting": "alpaca",
                          "columns": {"prompt": "instruction", "query": "input",
                                      "response": "output"}}
        elif kind == "dpo":
            info[name] = {"file_name": file_name, "formatting": "alpaca", "ranking": True,
                          "columns": {"prompt": "instruction", "query": "input",
                                      "chosen": "chosen", "rejected": "rejected"}}
        else:
            raise ValueError(kind)
    p = Path(dataset_dir) / "dataset_info.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(info, indent=2))
    return p


def make_tiny_assets(out_dir, arch: str = "qwen2", n: int = 64, **model_kw) -> dict:
    """Model+tokenizer in out_dir/model plus every data file; returns their paths."""
    out = Path(out_dir)
    paths = {"model": make_tiny_model(out / "model", arch=arch, **model_kw)}
    paths["sft"] = write_sft_jsonl(out / "sft.jsonl", n)
    paths["dpo"] = write_dpo_jsonl(out / "dpo.jsonl", n)
    paths["prompts"] = write_prompt_jsonl(out / "prompts.jsonl", n)
    paths["sft_alpaca"] = write_sft_jsonl(out / "data" / "sft_alpaca.jsonl", n, fmt="alpaca")
    paths["dpo_alpaca"] = write_dpo_jsonl(out / "data" / "dpo_alpaca.jsonl", n, fmt="alpaca")
    paths["dataset_info"] = write_llamafactory_dataset_info(
        out / "data", {"tiny_sft": ("sft_alpaca.jsonl", "sft"),
                       "tiny_dpo": ("dpo_alpaca.jsonl", "dpo")})
    return {k: Path(v) for k, v in paths.items()}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--arch", default="qwen2", choices=["qwen2", "llama", "mistral"])
    ap.add_argument("-n", type=int, default=64)
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for k, v in make_tiny_assets(a.out_dir, arch=a.arch, n=a.n).items():
        print(f"{k}\t{v}")
    sys.exit(0)
