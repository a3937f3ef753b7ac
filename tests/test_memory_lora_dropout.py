"""LoRA dropout in the activation model, read in source and checked on a real autograd graph.

peft (tuners/lora/layer.py, 0.12 and 0.17): `lora_dropout > 0` gives every adapted linear an
`nn.Dropout` of its own and computes `lora_B(lora_A(dropout(x)))`; with 0 the module is
`nn.Identity`. torch (aten/src/ATen/native/Dropout.cpp): `dropout` runs `native_dropout` on CUDA
(`is_fused_kernel_acceptable`: CUDA/XPU/lazy tensors, 0 < p < 1), whose backward keeps only the
bool mask (`result1`, derivatives.yaml); on the CPU it multiplies by a noise tensor of the input's
dtype and keeps that instead. The model follows the CUDA path: one mask byte per input element, and
lora_A keeps the dropped copy instead of the input, so no input is shared by q/k/v or gate/up.
Defaults read in source: PEFT LoraConfig 0.0, LLaMA-Factory FinetuningArguments 0.0, trl
ModelConfig 0.05 (trl/trainer/model_config.py), OpenRLHF `--lora_dropout` 0.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from ftrecipes.errors import UserError
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory.activations import activations
from ftrecipes.memory.catalog import model
from ftrecipes.memory.configs import parse_sets, read

QWEN = model("Qwen2.5-7B")
T = 2048


def _saved(**kw):
    return activations(QWEN, T, 1, 2, lora_rank=16, **kw).saved_layers


def test_dropout_adds_one_mask_byte_per_input_element_over_the_fp32_casts():
    h, i, L = QWEN.hidden_size, QWEN.intermediate_size, QWEN.num_hidden_layers
    fan_in = 6 * h + i  # q, k, v, o, gate, up read h; down reads i
    gap = _saved(lora_dropout=True) - _saved()
    # no checkpointing: every layer keeps its adapters' masks; the first layer's adapters too
    assert gap == L * fan_in * T


def test_dropout_ends_input_sharing_when_adapters_run_in_the_compute_dtype():
    h, i, L, p = QWEN.hidden_size, QWEN.intermediate_size, QWEN.num_hidden_layers, 2
    shared = p * (2 * h + i)          # q/k/v input once, gate/up input once, down_proj input
    own = (p + 1) * (6 * h + i)       # a dropped copy and a mask for each of the seven adapters
    gap = _saved(lora_dropout=True, adapter_fp32=False) - _saved(adapter_fp32=False)
    assert gap == L * (own - shared) * T


def test_checkpointing_keeps_only_the_recomputed_layers_masks():
    a = activations(QWEN, T, 1, 2, lora_rank=16, gradient_checkpointing=True)
    b = activations(QWEN, T, 1, 2, lora_rank=16, gradient_checkpointing=True, lora_dropout=True)
    assert b.saved_layers == a.saved_layers
    assert b.recompute_layer - a.recompute_layer == (6 * QWEN.hidden_size + QWEN.intermediate_size) * T


def test_full_fine_tuning_ignores_the_setting():
    base = dict(model="Qwen2.5-7B", framework="torch", seq_len=T)
    assert estimate(Setup(**base, lora_dropout=0.1)).gpu_allocated_bytes == estimate(Setup(**base)).gpu_allocated_bytes
    assert activations(QWEN, T, 1, 2, lora_dropout=True) == activations(QWEN, T, 1, 2)


def test_targets_limit_the_masks_to_the_adapted_layers():
    gap = (activations(QWEN, T, 1, 2, lora_rank=8, lora_target="q_proj,v_proj", lora_dropout=True).saved_layers
           - activations(QWEN, T, 1, 2, lora_rank=8, lora_target="q_proj,v_proj").saved_layers)
    assert gap == QWEN.num_hidden_layers * 2 * QWEN.hidden_size * T


def _settings(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p, read([str(p)])[1]


def test_config_files_give_the_dropout_or_their_trainers_default(tmp_path):
    lf = "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\n"
    assert _settings(tmp_path, lf)[1]["lora_dropout"] == 0.0
    assert _settings(tmp_path, lf + "lora_dropout: 0.1\n")[1]["lora_dropout"] == 0.1
    assert _settings(tmp_path, lf.replace("lora", "full"))[1]["lora_dropout"] == 0.0
    trl = "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nuse_peft: true\nmax_length: 1024\n"
    got = _settings(tmp_path, trl, "sft.yaml")[1]
    assert got["trainer"] == "trl" and got["lora_dropout"] == 0.05
    assert _settings(tmp_path, trl + "lora_dropout: 0.0\n", "sft.yaml")[1]["lora_dropout"] == 0.0


def test_finetune_py_launches_default_to_their_scripts_0_05(tmp_path):
    """QwenLM/Qwen's and MiniCPM-V's finetune.py: LoraArguments.lora_dropout = 0.05."""
    launch = "torchrun --nproc_per_node 2 finetune.py --model_name_or_path Qwen/Qwen-7B-Chat --use_lora {} --bf16 True\n"
    got = _settings(tmp_path, launch.format("True"), "run.sh")[1]
    # the script word ends torchrun's flags: --nproc_per_node takes "2" alone
    assert got["lora_dropout"] == 0.05 and got["gpus"] == 2
    assert _settings(tmp_path, launch.format("True --lora_dropout 0.2"), "run.sh")[1]["lora_dropout"] == 0.2
    assert "lora_dropout" not in _settings(tmp_path, launch.format("False"), "run.sh")[1]


def test_a_bad_dropout_names_file_line_and_key(tmp_path):
    text = "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\nlora_dropout: 1.5\n"
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        read([str(p)])
    assert e.value.line == 4 and e.value.key == "lora_dropout" and "probability" in str(e.value)


def test_set_takes_a_number_and_estimate_refuses_a_non_probability():
    assert parse_sets(["lora_dropout=0.05"]) == {"lora_dropout": 0.05}
    with pytest.raises(UserError):
        parse_sets(["lora_dropout=high"])
    with pytest.raises(ValueError, match="lora_dropout"):
        estimate(Setup(model="Qwen2.5-7B", lora_rank=8, lora_dropout=1.0))


def test_recipe_values_carry_their_dropout_into_the_estimate():
    """The qwen7b-lora-h100x8 recipe renders lora_dropout 0.05; --set 0 must lower its estimate."""
    def alloc(*extra):
        out = subprocess.run([sys.executable, "-m", "ftrecipes", "estimate", "qwen7b-lora-h100x8", "--json", *extra],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["gpu_allocated_bytes"]
    assert alloc("--set", "lora_dropout=0") < alloc()


# --- the same facts on a real autograd graph (the trl stack's torch and peft, on the CPU) ---------

_PROBE = r'''
import json, torch
from torch import nn
from peft import LoraConfig, get_peft_model

class Two(nn.Module):
    """Two adapted linears reading one input, like q_proj and k_proj."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 32, bias=False, dtype=torch.bfloat16)
        self.b = nn.Linear(64, 32, bias=False, dtype=torch.bfloat16)
    def forward(self, x):
        return self.a(x) + self.b(x)

def saved(p, fp32):
    net = get_peft_model(Two(), LoraConfig(r=4, target_modules=["a", "b"], lora_dropout=p),
                         autocast_adapter_dtype=fp32)
    net.train()
    x = torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True)
    params = {q.untyped_storage().data_ptr() for q in net.parameters()}
    seen = {}
    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = [t.untyped_storage().nbytes(), str(t.dtype).replace("torch.", "")]
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = net(x)
    y.float().sum().backward()
    return sorted(seen.values())

y, _ = torch.native_dropout(torch.randn(8, 8, requires_grad=True), 0.1, True)
print(json.dumps({"fp32": [saved(0.0, True), saved(0.1, True)], "bf16": [saved(0.0, False), saved(0.1, False)],
                  "native_mask": str(y.grad_fn._saved_result1.dtype).replace("torch.", "")}))
'''


@pytest.mark.framework
def test_peft_adapters_keep_what_the_model_counts():
    """Two adapters on one 16 x 64 bf16 input, rank 4. fp32 adapters (PEFT's default): each keeps
    its own fp32 cast (4,096 bytes) and lora_A's output (256); with dropout the dropped copy takes
    the cast's place and a mask is added. On the CPU that mask is torch's fp32 noise tensor
    (4,096 bytes, Dropout.cpp's non-fused path); native_dropout, which CUDA runs, keeps a bool
    mask, a quarter of that: the model counts 1 byte per element. bf16 adapters: without dropout
    both lora_A read the one input (2,048 bytes, kept once); with dropout each keeps its own
    dropped copy plus its mask (bf16 noise on the CPU)."""
    from ftrecipes import devenv

    python = devenv.ensure_env("trl")
    out = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["native_mask"] == "bool"
    no, yes = got["fp32"]
    assert no == [[256, "float32"]] * 2 + [[4096, "float32"]] * 2
    assert yes == [[256, "float32"]] * 2 + [[4096, "float32"]] * 4
    no, yes = got["bf16"]
    assert no == [[128, "bfloat16"]] * 2 + [[2048, "bfloat16"]]
    assert yes == [[128, "bfloat16"]] * 2 + [[2048, "bfloat16"]] * 4
