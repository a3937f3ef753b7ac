"""GPUs and model shapes the memory model knows by name.

Model shapes are copied from each model's published Hugging Face config.json; the parameter
count is then computed from the shape (never stored), so a wrong shape shows up as a wrong count
in tests (Qwen2.5-7B must give 7,615,616,512 and Llama-3-8B 8,030,261,248).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace

GiB = 1024 ** 3
GB = 1000 ** 3


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: int
    bf16: bool  # bf16 needs compute capability >= 8.0 (Ampere); V100/T4 only have fp16


# Memory is the marketed size; the usable amount is lower (CUDA context, see estimate.py).
# "80GB" parts report 79.x GiB via nvidia-smi: vendors count 80 * 10^9-ish, so we use the
# nvidia-smi totals (MiB) where they are well known.
_GPUS = [
    GPU("V100-16GB", 16160 * 2**20, False),
    GPU("V100-32GB", 32510 * 2**20, False),
    GPU("T4", 15360 * 2**20, False),
    GPU("A10", 23028 * 2**20, True),
    GPU("L4", 23034 * 2**20, True),
    GPU("RTX-4090", 24564 * 2**20, True),
    GPU("A100-40GB", 40960 * 2**20, True),
    GPU("A100-80GB", 81920 * 2**20, True),
    GPU("H100-80GB", 81559 * 2**20, True),
    GPU("H200", 143771 * 2**20, True),
]
GPUS = {g.name: g for g in _GPUS}
_GPU_ALIASES = {
    "v100": "V100-32GB", "v100-32g": "V100-32GB", "v100-16g": "V100-16GB",
    "a100": "A100-80GB", "a100-80g": "A100-80GB", "a100-40g": "A100-40GB",
    "h100": "H100-80GB", "h100-80g": "H100-80GB", "h200-141gb": "H200",
    "4090": "RTX-4090", "rtx4090": "RTX-4090",
}


def gpu(name: str) -> GPU:
    key = name.strip()
    for g in GPUS:
        if g.lower() == key.lower():
            return GPUS[g]
    alias = _GPU_ALIASES.get(key.lower().replace("_", "-").replace(" ", ""))
    if alias:
        return GPUS[alias]
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")


@dataclass(frozen=True)
class ModelShape:
    """The numbers activation and parameter formulas need, in HF config.json vocabulary."""

    name: str
    hidden_size: int
    intermediate_size: int  # width of one MLP projection (gate/up/down)
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    model_type: str = "llama"
    # Parameters outside the decoder (e.g. a vision tower); counted in model states only.
    extra_params: int = 0
    note: str = ""
    hf_config: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def head_dim(self) -> int:
        return self.hf_config.get("head_dim") or self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer in one decoder layer, by HF module name."""
        h, i, q, kv = self.hidden_size, self.intermediate_size, self.num_attention_heads * self.head_dim, self.kv_dim
        return {
            "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }

    def layer_params(self) -> int:
        lin = sum(a * b for a, b in self.linear_shapes().values())
        bias = (self.num_attention_heads * self.head_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        return lin + bias + 2 * self.hidden_size  # two RMSNorm weights

    def decoder_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return emb + head + self.num_hidden_layers * self.layer_params() + self.hidden_size

    def param_count(self) -> int:
        return self.decoder_params() + self.extra_params


def _shape(name, h, i, layers, heads, kv, vocab, *, tie=False, bias=False, mtype="llama", extra=0, note="", **hf):
    cfg = dict(model_type=mtype, hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
               tie_word_embeddings=tie, **hf)
    return ModelShape(name, h, i, layers, heads, kv, vocab, tie, bias, mtype, extra, note, cfg)


# Sources: each model's config.json on huggingface.co (Qwen/Qwen2.5-7B, meta-llama/Meta-Llama-3-8B, ...).
_QWEN2 = dict(bias=True, mtype="qwen2", rms_norm_eps=1e-6)
_MODELS = [
    _shape("Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 151936, tie=True, **_QWEN2),
    _shape("Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 151936, tie=True, **_QWEN2),
    _shape("Qwen2.5-3B", 2048, 11008, 36, 16, 2, 151936, tie=True, **_QWEN2),
    _shape("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064, **_QWEN2),
    _shape("Qwen2.5-14B", 5120, 13824, 48, 40, 8, 152064, **_QWEN2),
    _shape("Qwen2.5-32B", 5120, 27648, 64, 40, 8, 152064, **_QWEN2),
    _shape("Qwen2-7B", 3584, 18944, 28, 28, 4, 152064, **_QWEN2),
    # QwenLM/Qwen (v1): config says intermediate_size 22016 but the MLP uses half of it per
    # projection (modeling_qwen.py: ff_dim_in = intermediate_size // 2); fused c_attn has a bias,
    # every head has its own K/V (no GQA).
    _shape("Qwen-7B", 4096, 11008, 32, 32, 32, 151936, bias=True, mtype="qwen",
           note="QwenLM/Qwen v1 (trust_remote_code); MHA, c_attn with bias"),
    _shape("Llama-3-8B", 4096, 14336, 32, 32, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0),
    _shape("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0),
    _shape("Llama-2-7B", 4096, 11008, 32, 32, 32, 32000, rms_norm_eps=1e-5),
    _shape("Mistral-7B", 4096, 14336, 32, 32, 8, 32000, mtype="mistral", rms_norm_eps=1e-5),
    # MiniCPM-V 2.6 = SigLIP-400M + resampler + Qwen2-7B (vocab 151666 in its config.json);
    # MiniCPM-Llama3-V 2.5 = SigLIP-400M + resampler + Llama-3-8B. Activations are modelled for the
    # language model only (the vision tower's activations are small next to a 7B decoder's);
    # the vision tower + resampler (~0.47B, approximate) count in model states.
    _shape("MiniCPM-V-2_6", 3584, 18944, 28, 28, 4, 151666, extra=470_000_000,
           note="language model is Qwen2-7B; +~0.47B SigLIP-400M vision tower and resampler (approximate)",
           **_QWEN2),
    _shape("MiniCPM-Llama3-V-2_5", 4096, 14336, 32, 32, 8, 128256, extra=470_000_000,
           note="language model is Llama-3-8B; +~0.47B SigLIP-400M vision tower and resampler (approximate)",
           rms_norm_eps=1e-5, rope_theta=500000.0),
]
MODELS = {m.name: m for m in _MODELS}
for _base in ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B",
              "Qwen2-7B", "Qwen-7B"):
    MODELS[_base + "-Instruct" if not _base.startswith("Qwen-") else "Qwen-7B-Chat"] = replace(
        MODELS[_base], name=_base + "-Instruct" if not _base.startswith("Qwen-") else "Qwen-7B-Chat")
for _base in ("Llama-3-8B", "Llama-3.1-8B"):
    MODELS[_base + "-Instruct"] = replace(MODELS[_base], name=_base + "-Instruct")
MODELS["MiniCPM-V"] = MODELS["MiniCPM-V-2_6"]


def model(name_or_path: str) -> ModelShape:
    """A catalog name (case-insensitive; an HF id's org prefix is ignored) or a local config.json."""
    if os.path.exists(name_or_path):
        path = name_or_path
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            return shape_from_hf_config(json.load(f), name=name_or_path)
    key = name_or_path.rsplit("/", 1)[-1].lower()
    key = key.replace("meta-llama-3", "llama-3").replace("minicpm-v-2.6", "minicpm-v-2_6")
    for n, m in MODELS.items():
        if n.lower() == key:
            return m
    raise KeyError(f"unknown model {name_or_path!r}: pass a local config.json or --params; known: {', '.join(MODELS)}")


def shape_from_hf_config(cfg: dict, name: str = "config.json") -> ModelShape:
    # Multimodal configs (MiniCPM-V, Llava) nest the language model under text_config.
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    mtype = text.get("model_type", cfg.get("model_type", "llama"))
    h = text["hidden_size"]
    heads = text.get("num_attention_heads", text.get("n_head"))
    inter = text.get("intermediate_size", 4 * h)
    if mtype == "qwen":  # Qwen v1 halves it, see the catalog entry above
        inter //= 2
    return ModelShape(
        name=name, hidden_size=h, intermediate_size=inter,
        num_hidden_layers=text.get("num_hidden_layers", text.get("n_layer")),
        num_attention_heads=heads, num_key_value_heads=text.get("num_key_value_heads") or heads,
        vocab_size=text["vocab_size"], tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
        qkv_bias=bool(text.get("attention_bias", mtype in ("qwen2", "qwen"))), model_type=mtype,
        hf_config=dict(text),
    )
