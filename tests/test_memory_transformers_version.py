"""What a transformers release or accelerate's mixed precision adds to the GPU, each read in source.

RoPE tables (model_states.ROPE_TABLES_UNTIL), read in the released transformers wheels:
- modeling_llama.py: LlamaRotaryEmbedding registers `cos_cached`/`sin_cached` for all
  max_position_embeddings positions up to 4.37, `_cos_cached`/`_sin_cached` "for BC" in 4.38 to
  4.40 (in torch.get_default_dtype(), which from_pretrained sets to torch_dtype), and none from
  4.41; every LlamaAttention builds its own (`self._init_rope()`) up to 4.42.
- modeling_mistral.py: tables up to 4.41, none in 4.42; modeling_qwen2.py: up to 4.44, none in 4.45.
The LlamaFactory#3638 log line "modeling_utils.py:1494 >> Instantiating LlamaForCausalLM model under
default dtype torch.float16" sits at that line in 4.40.2 (1417 in 4.39.3, 1519 in 4.41.2).

accelerate's output cast: Accelerator.prepare_model wraps the forward in convert_outputs_to_fp32
whenever native_amp is on (fp16/bf16 mixed precision, not DeepSpeed or Megatron), read in
accelerate 0.30.1 and 1.12.0 (accelerator.py); every fp16/bf16 tensor the model returns, the
logits included, is copied to fp32.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ftrecipes.errors import UserError
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.catalog import model
from ftrecipes.memory.model_states import rope_table_bytes

GiB = 2**30
LLAMA = dict(model="Llama-3.1-8B", gpu="A100-80GB", gpus=1, framework="torch", trainer="llamafactory",
             lora_rank=8, lora_target="q_proj,v_proj", seq_len=4096, gradient_checkpointing=True, precision="bf16")


def _params(r):
    return next(p for p in r.phases if p.name == "setup").by_category["params"]


@pytest.mark.parametrize("mtype, last, first_without", [("llama", "4.40.2", "4.41.0"),
                                                        ("mistral", "4.41.2", "4.42.0"),
                                                        ("qwen2", "4.44.2", "4.45.0")])
def test_rope_tables_until_the_release_that_dropped_them(tmp_path, mtype, last, first_without):
    cfg = dict(model_type=mtype, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=131072)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    base = {**LLAMA, "model": str(path)}
    current = _params(estimate(Setup(**base)))
    old = estimate(Setup(**base, transformers_version=last))
    # 32 layers x cos and sin x 131072 positions x head_dim 128 x 2 bytes (bf16 load) = 4 GiB
    assert _params(old) - current == 32 * 2 * 131072 * 128 * 2
    assert any("131,072 positions" in n for n in old.notes)
    assert _params(estimate(Setup(**base, transformers_version=first_without))) == current


def test_rope_tables_follow_the_load_dtype_and_need_the_position_count(tmp_path):
    fp32 = estimate(Setup(**{**LLAMA, "load_dtype": "fp32"}, transformers_version="4.37.2"))
    bf16 = estimate(Setup(**LLAMA, transformers_version="4.37.2"))
    # Llama-3.1-8B: 131072 positions; fp32 tables are twice the bf16 ones
    assert _params(fp32) - _params(estimate(Setup(**{**LLAMA, "load_dtype": "fp32"}))) == 32 * 2 * 131072 * 128 * 4
    assert _params(bf16) - _params(estimate(Setup(**LLAMA))) == 32 * 2 * 131072 * 128 * 2
    # a catalog model without a known position count: said, not guessed
    qwen = estimate(Setup(**{**LLAMA, "model": "Qwen2-7B"}, transformers_version="4.44.0"))
    assert any("max_position_embeddings is unknown" in n for n in qwen.notes)
    with pytest.raises(ValueError, match="transformers_version"):
        estimate(Setup(**LLAMA, transformers_version="four"))


def test_a_config_json_with_a_bad_position_count_is_refused_at_its_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096, "vocab_size": 32000,\n'
                    ' "num_hidden_layers": 32, "num_attention_heads": 32,\n "max_position_embeddings": "1M"}\n')
    with pytest.raises(UserError) as exc:
        model(str(path))
    assert exc.value.line == 3 and "max_position_embeddings" in str(exc.value)


def test_framework_version_reaches_the_estimate():
    def run(*extra):
        proc = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "--model", "Llama-3.1-8B",
                               "--gpu", "A100-80GB", "--seq-len", "2048", *extra, "--json"],
                              capture_output=True, text=True)
        assert proc.returncode in (0, 3), proc.stderr
        return json.loads(proc.stdout)

    old, new = run("--framework-version", "transformers=4.40.2"), run()
    assert old["setup"]["transformers_version"] == "4.40.2"
    assert old["gpu_allocated_bytes"] - new["gpu_allocated_bytes"] == 32 * 2 * 131072 * 128 * 2


UNSLOTH = dict(model="Llama-3-8B", gpu="A100-80GB", gpus=1, framework="torch", trainer="llamafactory",
               quantization="4bit", lora_rank=8, lora_target="q_proj,v_proj", seq_len=32768, precision="fp16",
               gradient_checkpointing=True, checkpoint_offload=True, loss_kernel="chunked",
               attn_implementation="flash_attention_2")


def _forward_temporaries(s):
    return next(p for p in estimate(s).phases if p.name == "forward").by_category["temporaries"]


def test_accelerate_copies_the_returned_logits_to_fp32():
    fp32_logits = 4 * 128256 * 32768
    amp = _forward_temporaries(Setup(**UNSLOTH))
    assert amp >= fp32_logits
    # no native AMP: DeepSpeed runs its own precision, mixed_precision "no" runs no autocast
    assert _forward_temporaries(Setup(**UNSLOTH, mixed_precision="no")) < fp32_logits
    # torchtune's chunked loss runs in its own loop, not through accelerate
    assert _forward_temporaries(Setup(**{**UNSLOTH, "trainer": ""})) < fp32_logits


# transformers' Trainer under FSDP1 built the optimizer on the unwrapped model and let accelerate
# wrap it afterwards in 4.30.0-4.31.x and 4.36.0-4.37.x (trainer.py delay_optimizer_creation,
# read in the 4.29.2, 4.30.0, 4.31.0, 4.32.0, 4.34.1, 4.35.2, 4.36.2, 4.37.2 and 4.38.2 wheels);
# accelerate's _prepare_fsdp (v0.21.0) makes a new optimizer and the first keeps the whole
# unwrapped model alive per GPU (transformers#25580). use_orig_params=True (the Trainer's default
# from 4.36) keeps the original Parameters as views, so nothing is left behind.
FSDP_ALPACA = dict(model="Llama-2-7B", gpu="A100-80GB", gpus=4, framework="fsdp", trainer="hf", seq_len=512,
                   micro_batch=1, grad_accum=1, load_dtype="fp32", mixed_precision="bf16", precision="bf16")


@pytest.mark.parametrize("release, orig, kept", [
    ("4.29.2", None, False), ("4.30.0", None, True), ("4.31.0", None, True), ("4.31.0", True, False),
    ("4.32.0", None, False), ("4.35.2", False, False), ("4.36.2", None, False), ("4.36.2", False, True),
    ("4.37.2", False, True), ("4.38.2", False, False), ("", None, False)])
def test_trainer_releases_that_keep_the_first_optimizers_weights(release, orig, kept):
    base = estimate(Setup(**FSDP_ALPACA, use_orig_params=orig))
    r = estimate(Setup(**FSDP_ALPACA, use_orig_params=orig, transformers_version=release))
    s = Setup(**FSDP_ALPACA, use_orig_params=orig, transformers_version=release)
    extra = _params(r) - _params(base) - rope_table_bytes(s, s.shape(), 2)[0]  # that release's RoPE tables
    whole = 4 * model("Llama-2-7B").param_count()
    assert extra == pytest.approx(whole if kept else 0.0), release
    assert any("#25580" in n for n in r.notes) == kept


def test_only_the_trainable_weights_and_only_fsdp1_under_a_trainer():
    lora = estimate(Setup(**{**FSDP_ALPACA, "lora_rank": 8}, use_orig_params=False, transformers_version="4.31.0"))
    assert any("#25580" in n for n in lora.notes) and lora.gpu_peak_bytes < 40 * GiB  # adapters only
    for other in (dict(framework="fsdp2"), dict(trainer="torchtune"), dict(framework="deepspeed", zero_stage=3)):
        r = estimate(Setup(**{**FSDP_ALPACA, **other}, transformers_version="4.31.0"))
        assert not any("#25580" in n for n in r.notes), other


def test_base_and_instruct_checkpoints_keep_tables_of_their_own_position_count():
    """Qwen2.5-7B's config.json says 131072 positions and Qwen2.5-7B-Instruct's 32768 (catalog
    _POSITIONS, each quoted from a public copy): under transformers 4.44 every qwen2 attention
    layer keeps cos/sin tables that long. A release no source quoted stays uncounted, with a note."""
    def tables(name):
        s = Setup(model=name, gpu="A100-80GB", framework="torch", lora_rank=8, transformers_version="4.44.2")
        return rope_table_bytes(s, s.shape(), 2)
    assert tables("Qwen2.5-7B")[0] == 28 * 2 * 131072 * 128 * 2
    assert tables("Qwen2.5-7B-Instruct")[0] == 28 * 2 * 32768 * 128 * 2
    unknown = tables("Qwen2.5-14B-Instruct")
    assert unknown[0] == 0 and "max_position_embeddings is unknown" in unknown[1]
