"""What TRL's trainers build for the LM head and the loss, by TRL release.

Read from the released wheels (trl/trainer/{sft,dpo,grpo}_trainer.py, sft_config.py,
trl/trainer/utils.py, trl/kernels/chunked_logprob.py; PyPI trl 0.16.1 to 1.16.0):

- 1.15.0 on: SFTTrainer, DPOTrainer and GRPOTrainer (and KTO, RLOO) always call
  add_fused_lm_head(): the forward projects the hidden states of the positions that have a label
  through the head in [4096 tokens x 32768 vocabulary] tiles (kernels/chunked_logprob.py,
  TOKEN_CHUNK_SIZE, trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE) and never builds the T x V
  logits. There is no setting that turns it off: loss_type nll and dft both run through it, and
  `use_liger_kernel` keeps only Liger's layer kernels (the trainers force
  liger_kernel_config["fused_linear_cross_entropy"] = False and refuse True). Only a
  compute_loss_func or label_smoothing_factor in SFT adds a second, full-logits forward (not
  modelled).
- 1.14.x: DPO and GRPO with `use_liger_kernel` run TRL's own _ChunkedLogProbFunction
  ([2048 x 8192] tiles, an fp32 copy of each tile) instead of Liger's losses; without it, full logits.
- 1.7.0 to 1.14.x: SFTConfig.loss_type left unset means "chunked_nll" unless use_liger_kernel
  (then "nll" with Liger's fused cross-entropy). chunked_nll (opt-in since 1.4.0) sorts the
  labelled tokens to the front and runs the head + fp32 log-softmax on 256 tokens at a time,
  each chunk under torch.utils.checkpoint.
- Before that the trainers build the full logits (transformers' ForCausalLMLoss, or the
  trainers' selective_log_softmax over them), and use_liger_kernel means Liger's fused losses.

Memory of each path is in loss_terms (below); the trainer side picks the path (loss_path).
Tokens are counted as the whole micro batch: the tiles run on the labelled positions only, so
prompt tokens without a label (GRPO's prompt, a prompt-completion SFT set) make the real
figure smaller. Derived from the source, not traced: the CUDA path needs Triton.
"""
from __future__ import annotations

from ..pep440 import parse

# The release tests/envs/trl/requirements.txt pins and every TRL recipe's supported range starts
# at: an estimate without a stated TRL version is about that release (test_memory_trl_head checks
# the two agree).
TRL_DEFAULT = "1.16.0"
# Unsloth installs only "trl>=0.18.2,!=0.19.0,<=0.24.0" (pyproject.toml at unslothai/unsloth
# 015bdef, 2026-08-22): under its layers an unstated release is the newest it accepts
UNSLOTH_TRL_MAX = "0.24.0"
FUSED_SINCE = "1.15.0"
LIGER_CHUNKED_SINCE = "1.14.0"
CHUNKED_NLL_DEFAULT_SINCE = "1.7.0"
CHUNKED_NLL_SINCE = "1.4.0"
# vLLM with use_vllm: GRPOConfig.vllm_mode defaults to "colocate" from 1.0.0; 0.18-0.29 default to
# "server", and before 0.18 (no vllm_mode field) the trainer always talked to `trl vllm-serve`
COLOCATE_DEFAULT_SINCE = "1.0.0"

# (tokens, vocabulary columns, bytes per tile element beyond the compute dtype) of a tile
FUSED_TILE = (4096, 32768, 0)        # 1.15+: one compute-dtype matmul buffer, folded by Triton
LIGER_CHUNKED_TILE = (2048, 8192, 16)  # 1.14: + fp32 logits copy, exp and their product
CHUNKED_NLL_TOKENS = 256             # 1.4-1.14 SFT chunked_nll: tokens per checkpointed chunk

TRL_KERNELS = ("trl-fused", "trl-chunked-logprob", "trl-chunked-nll")
LOSS_TYPES = ("", "nll", "dft", "chunked_nll")  # SFTConfig.loss_type across 1.x ("": unset)


def at_least(version: str, since: str) -> bool:
    # pep440 needs only the standard library: the memory model also runs in a stack venv
    # tracing a step, where ftrecipes.versions' jsonschema may be missing.
    try:
        return parse(version or TRL_DEFAULT) >= parse(since)
    except ValueError:
        raise ValueError(f"trl_version must be a release such as 1.16.0, got {version!r}") from None


def vllm_mode_default(version: str) -> str:
    return "colocate" if at_least(version, COLOCATE_DEFAULT_SINCE) else "server"


def release(s) -> str:
    """The TRL release a Setup runs: its trl_version, else the newest the rest of the setup allows
    ("": TRL_DEFAULT)."""
    return s.trl_version or (UNSLOTH_TRL_MAX if s.layer_kernels == "unsloth" else "")


def loss_path(trainer: str, method: str, version: str, requested: str, loss_type: str = "") -> tuple[str, str | None]:
    """(the loss kernel the run really uses, a note when it differs from the requested one).

    requested: Setup.loss_kernel (none | liger | chunked); loss_type: SFTConfig.loss_type as the
    file states it ("" when unset)."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES[1:])}, got {loss_type!r}")
    if trainer != "trl" or method not in ("sft", "dpo", "grpo"):
        return requested, None
    v = version or TRL_DEFAULT
    if at_least(v, FUSED_SINCE):
        note = (f"TRL {v} computes the loss with its own fused LM head in 4096 x 32768 tiles "
                "(add_fused_lm_head): the full logits are never built")
        if requested == "liger":
            note += "; use_liger_kernel keeps Liger's layer kernels only (its fused cross-entropy is turned off)"
        return "trl-fused", note
    if method != "sft":
        if requested == "liger" and at_least(v, LIGER_CHUNKED_SINCE):
            return "trl-chunked-logprob", (f"TRL {v} {method.upper()} with use_liger_kernel computes log-probs with "
                                           "its own chunked LM head (2048 x 8192 tiles), not Liger's loss")
        return requested, None
    chunked = loss_type == "chunked_nll" and at_least(v, CHUNKED_NLL_SINCE)
    if not loss_type and requested != "liger" and at_least(v, CHUNKED_NLL_DEFAULT_SINCE):
        chunked = True
    if chunked and requested != "liger":
        return "trl-chunked-nll", (f"TRL {v} SFT loss_type chunked_nll: LM head and cross-entropy in "
                                   f"checkpointed chunks of {CHUNKED_NLL_TOKENS} tokens")
    return requested, None


def loss_terms(kernel: str, V: int, h: int, p: int, T: int, head_weight_bytes: int = 0) -> tuple[float, float, float]:
    """(saved, forward transient, backward transient) bytes of TRL's own LM-head paths.

    head_weight_bytes: bytes per element of the head's weight when it trains (0: frozen, as with
    LoRA); the fused kernels accumulate its gradient in fp32 and cast it to that dtype at the end.
    """
    if kernel == "trl-chunked-nll":
        # sft_trainer.py _chunked_cross_entropy_loss: the labelled hidden states are gathered into a
        # sorted copy (kept for the checkpointed chunks) with their labels and order (int64); one
        # chunk at a time holds its p-byte logits, the fp32 upcast, log_softmax, its exp and the
        # entropy product; its backward holds the same again as gradients, plus the gradient of
        # the sorted copy
        n = min(T, CHUNKED_NLL_TOKENS)
        chunk = (p + 16) * n * V
        return (p * h + 16) * T, chunk, 2 * chunk + p * h * T
    tokens, cols, extra = FUSED_TILE if kernel == "trl-fused" else LIGER_CHUNKED_TILE
    tile = (p + extra) * min(T, tokens) * cols
    # Saved for backward: the hidden states of the labelled positions (a copy: hidden[mask]),
    # their int64 targets, log-sum-exp and entropy (fp32). Forward: the tile, seven fp32 running
    # statistics per token and the per-token outputs scattered back to the batch shape.
    saved = (p * h + 16) * T
    forward = tile + 40 * T
    # Backward: an fp32 gradient of the hidden states (4h) cast to p at the end, the tile again,
    # the fp32 head gradient cast to the weight dtype when the head trains
    head = (4 + (head_weight_bytes if head_weight_bytes != 4 else 0)) * V * h if head_weight_bytes else 0
    backward = (4 * h + p * h + 4) * T + tile + head
    return saved, forward, backward
