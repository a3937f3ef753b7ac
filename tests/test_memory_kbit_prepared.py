"""PEFT's prepare_model_for_kbit_training and the dtype of the hidden states.

Facts read in the release wheels (not in the estimate's own code):
- peft 0.3.0 prepare_model_for_int8_training and peft 0.4.0 on prepare_model_for_kbit_training
  (peft/utils/other.py) cast every fp16/bf16 parameter to fp32 (embeddings, norms, LM head);
  peft 0.6.0 on skip GPTQ models.
- bitsandbytes 0.39.0 Linear4bit.forward ends with `out = out.to(inp_dtype)` and MatMul8bitLt
  with `output.to(A.dtype)`: a quantized projection answers in its input's dtype, so an fp32
  norm output gives fp32 q/k/v and gate/up, and the residual stream stays fp32.
- TRL calls it on a model it wraps itself: sft_trainer.py from 0.4.x (prepare_model_for_int8_training,
  8-bit and 4-bit) to 0.25.x, models/utils.py prepare_peft_model (SFT and GRPO) from 0.22.0 to
  0.25.x, dpo_trainer.py to 0.28.x; 0.26.0's SFT/GRPO trainers and 0.29.0's DPOTrainer call
  get_peft_model alone. Sharded QLoRA (params on cpu/meta: FSDP, ZeRO-3) is skipped.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations
from ftrecipes.memory.catalog import model as resolve_model
from ftrecipes.memory.configs import parse_sets
from ftrecipes.memory.model_states import kbit_prepared

QLORA = Setup(model="Llama-3.1-8B-Instruct", gpu="A100-80GB", gpus=1, framework="torch", trainer="trl",
              seq_len=2048, micro_batch=4, precision="bf16", gradient_checkpointing=False, lora_rank=16,
              quantization="4bit", load_dtype="bf16")


@pytest.mark.parametrize("method, release, prepared", [
    ("sft", "0.4.7", True), ("sft", "0.25.1", True), ("sft", "0.26.0", False), ("sft", "", False),
    ("dpo", "0.12.2", True), ("dpo", "0.28.0", True), ("dpo", "0.29.0", False),
    ("grpo", "0.21.0", False), ("grpo", "0.22.0", True), ("grpo", "0.26.0", False)])
def test_trl_prepares_by_release_and_method(method, release, prepared):
    assert kbit_prepared(replace(QLORA, method=method, trl_version=release)) is prepared


@pytest.mark.parametrize("change", [
    {"quantization": "none"},                                   # nothing quantized: never called
    {"layer_kernels": "unsloth"},                               # Unsloth hands TRL a PeftModel
    {"framework": "fsdp"},                                      # sharded QLoRA is skipped
    {"framework": "deepspeed", "zero_stage": 3},
    {"framework": "deepspeed", "zero_stage": 2},                # the engine casts the module back
    {"trainer": "llamafactory"},                                # its own preparation, no PEFT cast
    {"trainer": "axolotl"},                                     # casts the norms back
])
def test_runs_that_keep_the_norms_in_the_compute_dtype(change):
    assert not kbit_prepared(replace(QLORA, trl_version="0.12.2", **change))


def test_a_stated_value_wins_over_the_trainer():
    assert kbit_prepared(replace(QLORA, trainer="hf", kbit_prepared=True))
    assert not kbit_prepared(replace(QLORA, trl_version="0.12.2", kbit_prepared=False))
    # it cannot apply without a quantized base: the cast is the kbit preparation's
    assert not kbit_prepared(replace(QLORA, quantization="none", kbit_prepared=True))
    # DeepSpeed's engine casts the whole module, norms included, to its compute dtype
    # (DeepSpeedEngine._configure_distributed_model: module.half() / .bfloat16())
    assert not kbit_prepared(replace(QLORA, framework="deepspeed", zero_stage=2, kbit_prepared=True))


def test_fp32_stream_doubles_the_checkpointed_inputs_and_the_mlp_tensors():
    shape = resolve_model("Llama-3.1-8B-Instruct")
    kw = dict(lora_rank=16, attn_implementation="flash_attention_2")
    T = 2 * 1024
    for gc in (True, False):
        plain = activations(shape, 1024, 2, 2, gradient_checkpointing=gc, **kw)
        fp32 = activations(shape, 1024, 2, 2, gradient_checkpointing=gc, stream_bytes=4, **kw)
        h, i, L = shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers
        if gc:
            # one checkpointed input per layer but the first (frozen embedding under LoRA), now 4 bytes
            assert fp32.saved_layers - plain.saved_layers == (L - 1) * 2 * h * T
        else:
            # gate, up and their product per layer, 2 more bytes each
            assert fp32.saved_layers - plain.saved_layers == L * 3 * 2 * i * T
        assert fp32.layer_backward_transient - plain.layer_backward_transient == (3 * 2 * i + 2 * 2 * h) * T
        # the loss terms do not depend on the stream
        assert fp32.forward_transient == plain.forward_transient


def test_estimate_counts_it_and_says_so():
    off = estimate(replace(QLORA, trl_version="0.26.0"))
    on = estimate(replace(QLORA, trl_version="0.25.1"))
    assert on.gpu_allocated_bytes > off.gpu_allocated_bytes
    assert any("prepare_model_for_kbit_training" in n for n in on.notes)
    assert not any("prepare_model_for_kbit_training" in n for n in off.notes)


def test_an_unstated_trl_release_is_named_where_an_older_one_would_prepare_the_model():
    def noted(**kw):
        return any("TRL release not stated" in n for n in estimate(replace(QLORA, **kw)).notes)

    assert noted()                                  # trl, 4-bit LoRA, no release: current TRL assumed
    assert not noted(trl_version="1.16.0")          # stated: nothing to say
    assert not noted(kbit_prepared=False)           # the user said what ran
    assert not noted(layer_kernels="unsloth")       # Unsloth's model is never prepared by TRL
    assert not noted(quantization="none")


def test_set_takes_it():
    assert parse_sets(["kbit_prepared=true"]) == {"kbit_prepared": True}


def test_a_trl_config_is_prepared_under_the_trl_release_it_runs():
    # alignment-handbook's zephyr QLoRA recipe (tests/corpus, cited in tests/corpus/SOURCES.yaml):
    # load_in_4bit with a LoRA config, read as TRL's SFT
    import os

    from ftrecipes.memory.configs import setup_from_files

    path = os.path.join(os.path.dirname(__file__), "corpus", "huggingface__alignment-handbook", "recipes",
                        "zephyr-7b-beta", "sft", "config_qlora.yaml")
    old = setup_from_files([path], framework_versions={"trl": "0.12.2"})[0]
    new = setup_from_files([path], framework_versions={"trl": "1.16.0"})[0]
    assert old.quantization == "4bit" and old.lora_rank and old.trainer == "trl"
    assert kbit_prepared(old) and not kbit_prepared(new)
    assert estimate(old).gpu_allocated_bytes > estimate(replace(old, kbit_prepared=False)).gpu_allocated_bytes


# --- the fp32 stream on a real autograd graph (the trl stack's torch, transformers and peft) ------

_PROBE = r'''
import json, torch, torch.nn as nn, torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model

class BnbLike(nn.Linear):
    """bitsandbytes 0.39 Linear4bit.forward's dtype handling: x.to(compute_dtype), matmul,
    out.to(inp_dtype); the packed weight itself does not matter for what autograd saves here."""
    def forward(self, x):
        inp = x.dtype
        return F.linear(x.to(torch.bfloat16), self.weight).to(inp)

CFG = dict(hidden_size=64, intermediate_size=224, num_hidden_layers=4, num_attention_heads=4,
           num_key_value_heads=4, vocab_size=128, max_position_embeddings=256)

def build(kbit, gc):
    torch.manual_seed(0)
    cfg = LlamaConfig(**CFG)
    cfg._attn_implementation = "sdpa"
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    for layer in m.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, mod in list(parent.named_children()):
                if isinstance(mod, nn.Linear):
                    new = BnbLike(mod.in_features, mod.out_features, bias=False, dtype=torch.bfloat16)
                    new.weight = mod.weight
                    setattr(parent, name, new)
    for p in m.parameters():
        p.requires_grad_(False)
    if kbit:  # what prepare_model_for_kbit_training does to every parameter bitsandbytes did not pack
        for name, p in m.named_parameters():
            if "layers." not in name or "norm" in name:
                p.data = p.data.float()
    if gc:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.enable_input_require_grads()
    return get_peft_model(m, LoraConfig(r=4, lora_dropout=0.0, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))

def saved(m, T=128):
    seen = {}
    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    ids = torch.randint(0, 128, (1, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m(input_ids=ids, labels=ids)
    return sum(seen.values())

with torch.autocast("cpu", dtype=torch.bfloat16):
    q = torch.randn(1, 2, 8, 4)
    sdpa = str(F.scaled_dot_product_attention(q, q, q).dtype).replace("torch.", "")
print(json.dumps({"cfg": CFG, "T": 128, "sdpa_under_autocast": sdpa,
                  "nogc": saved(build(True, False)) - saved(build(False, False)),
                  "gc": saved(build(True, True)) - saved(build(False, True))}))
'''


@pytest.mark.framework
def test_fp32_norms_make_the_stream_and_mlp_tensors_fp32_on_a_real_graph(tmp_path):
    """A 4-layer Llama with bitsandbytes' dtype handling on every projection, LoRA on all of them,
    under bf16 autocast on the CPU: casting the norms and embeddings to fp32 (the kbit preparation)
    adds what the model's stream_bytes=4 adds. Without checkpointing: 2 more bytes for each of the
    MLP's gate, up and product tensors per layer and token (the measured gap is within 3 % of it;
    the rest is the norms' own fp32 work); with it: 2 more bytes per checkpointed layer input.
    SDPA under autocast returns bf16, so attention keeps p-byte tensors (CPU autocast here; CUDA's
    op list casts scaled_dot_product_attention the same way)."""
    from ftrecipes import devenv

    python = devenv.ensure_env("trl")
    out = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["sdpa_under_autocast"] == "bfloat16"
    cfg, T = got["cfg"], got["T"]
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, model_type="llama", architectures=["LlamaForCausalLM"])))
    shape = resolve_model(str(tmp_path / "config.json"))

    def widened(gc):
        kw = dict(lora_rank=4, attn_implementation="sdpa", gradient_checkpointing=gc)
        return (activations(shape, T, 1, 2, stream_bytes=4, **kw).saved_layers
                - activations(shape, T, 1, 2, **kw).saved_layers)

    assert got["nogc"] == pytest.approx(widened(False), rel=0.03)
    # every checkpointed layer input is 2 bytes wider per element; the model keeps the first
    # layer's input out under LoRA (frozen embedding), the probe's graph has it (the preparation
    # makes the embedding output require grad): at most one layer's worth apart
    L = cfg["num_hidden_layers"]
    assert widened(True) <= got["gc"] <= widened(True) * L / (L - 1) * 1.03
