"""The step-time model's FLOP counts against published formulas, its collective volumes against
the ZeRO paper, and the committed constants against the throughput benchmark."""
import importlib.util
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ftrecipes.memory import catalog, steptime
from ftrecipes.memory.estimate import Setup
from ftrecipes.memory.steptime import Shape, comm_bytes_per_gpu, hardware_flops_per_token, model_flops_per_token

ROOT = Path(__file__).resolve().parents[1]


def _gpt(h=3072, layers=32, vocab=50304):
    # a GPT layer holds 12h^2 weights (4h^2 attention, 8h^2 MLP); the LM head V*h
    return Shape(12 * layers * h * h + vocab * h, layers, h, h, vocab * h)


def test_dense_training_is_6n_per_token_without_attention():
    """Kaplan et al. 2020 (C = 6N per token): with a vanishing context only weights count."""
    sh = _gpt()
    assert model_flops_per_token(sh, 0) == 6 * sh.matmul_params
    assert hardware_flops_per_token(sh, 0, frozen=False) == 6 * sh.matmul_params


def test_palm_mfu_formula_with_attention():
    """PaLM (Chowdhery et al. 2022, appendix B): 6N + 12 * L * H * Q * T per token."""
    sh, seq = _gpt(), 4096
    assert model_flops_per_token(sh, seq) == 6 * sh.matmul_params + 12 * sh.layers * sh.attn_dim * seq


def test_megatron_formula_with_recomputation():
    """Narayanan et al. 2021 eq. (3): 96·B·s·l·h²·(1 + s/6h + V/16lh) per batch with full
    activation recomputation; the logit layer runs forward once and backward once."""
    h, layers, vocab, seq = 3072, 32, 50304, 2048
    per_token = hardware_flops_per_token(_gpt(h, layers, vocab), seq, frozen=False, checkpointing=True)
    megatron = 96 * layers * h * h * (1 + seq / (6 * h) + vocab / (16 * layers * h))
    assert per_token == pytest.approx(megatron, rel=1e-12)


def test_frozen_weights_skip_weight_gradients():
    """LoRA: frozen base weights need input gradients only, so their backward costs one forward."""
    sh, seq, trainable = _gpt(), 1024, 40_000_000
    w, a = 2 * sh.matmul_params, 4 * sh.layers * sh.attn_dim * seq
    assert hardware_flops_per_token(sh, seq, frozen=True, trainable=trainable) == 2 * w + 3 * a + 6 * trainable
    full = hardware_flops_per_token(sh, seq, frozen=False)
    assert hardware_flops_per_token(sh, seq, frozen=True) < full


def test_dpo_reference_forward_and_pairs():
    s = Setup(model="Qwen2.5-7B", gpu="A100-80GB", gpus=8, seq_len=1024, micro_batch=1, zero_stage=2,
              method="dpo", gradient_checkpointing=True)
    dpo = steptime.step_time(s)
    sft = steptime.step_time(replace(s, method="sft"))
    pre = steptime.step_time(replace(s, dpo_reference="precomputed"))
    # a pair is two sequences; the reference adds a forward on top of fwd+bwd+recompute
    assert dpo.parts["compute"] > 2 * sft.parts["compute"]
    assert pre.parts["compute"] < dpo.parts["compute"]
    assert dpo.tokens_per_s == pytest.approx(2 * 8 * 1024 / dpo.seconds)


def test_collective_volumes_follow_the_zero_paper():
    """ZeRO paper §7: DDP and ZeRO-1/2 move 2Ψ per step, ZeRO-3 3Ψ (ring, (n-1)/n each)."""
    psi, n = 7_000_000_000, 8
    ring = (n - 1) / n
    base = Setup(gpus=n, grad_accum=1)
    assert comm_bytes_per_gpu(replace(base, framework="ddp"), psi, psi) == pytest.approx(2 * ring * 2 * psi)
    for stage in (1, 2):
        s = replace(base, framework="deepspeed", zero_stage=stage)
        assert comm_bytes_per_gpu(s, psi, psi) == pytest.approx(2 * ring * 2 * psi)
    z3 = comm_bytes_per_gpu(replace(base, framework="deepspeed", zero_stage=3), psi, psi)
    assert z3 == pytest.approx(3 * ring * 2 * psi)
    assert comm_bytes_per_gpu(replace(base, framework="fsdp2"), psi, psi) == pytest.approx(z3)
    assert comm_bytes_per_gpu(replace(base, gpus=1), psi, psi) == 0


def test_multi_node_is_slower_than_one_node_on_ethernet_parts():
    one = Setup(model="Qwen2.5-7B", gpu="L40S", gpus=8, gpus_per_node=8, zero_stage=3, seq_len=512)
    two = replace(one, gpus=16, nodes=2)
    assert steptime.step_time(two).parts["comm"] > steptime.step_time(one).parts["comm"]


def test_offload_and_quantization_cost_time():
    s = Setup(model="Qwen2.5-7B", gpu="A100-80GB", gpus=8, zero_stage=2, seq_len=2048)
    off = steptime.step_time(replace(s, offload_optimizer="cpu"))
    assert off.parts["cpu_adam"] > 0 and off.seconds > steptime.step_time(s).seconds
    lora = replace(s, lora_rank=16, zero_stage=0, framework="ddp")
    assert steptime.step_time(replace(lora, quantization="4bit")).seconds > steptime.step_time(lora).seconds


def test_grpo_decode_is_bandwidth_bound():
    """One decode step at batch 1 reads every weight once: 2 bytes x params over HBM bandwidth."""
    s = Setup(model="Qwen2.5-7B", gpu="H100-80GB", gpus=1, seq_len=1024, micro_batch=1, method="grpo",
              vllm_mode="colocate", lora_rank=16)
    m, params = catalog.model("Qwen2.5-7B"), catalog.model("Qwen2.5-7B").param_count()
    perf = catalog.gpu_perf("H100-80GB")
    gen = steptime._generation_seconds(s, m, params, perf, 1, 512, 0.4)
    per_token_floor = 2 * params / (perf.hbm_gbps * 1e9 * steptime.DECODE_BW_EFFICIENCY)
    assert gen > 512 * per_token_floor
    assert gen < 512 * per_token_floor * 1.2  # KV reads and prefill stay small at batch 1
    longer = steptime.step_time(s, completion_len=768).parts["generation"]
    assert longer > steptime.step_time(s, completion_len=256).parts["generation"]


def test_every_catalog_gpu_has_speed_facts():
    assert set(catalog.GPU_PERF) == set(catalog.GPUS)
    for name, p in catalog.GPU_PERF.items():
        assert p.peak_tflops > 0 and p.hbm_gbps > 0 and p.link_gbps > 0 and p.source, name
    # datasheet figures the brief names
    assert catalog.gpu_perf("A100-80GB").peak_tflops == 312
    assert catalog.gpu_perf("H100").peak_tflops == 989
    assert catalog.gpu_perf("V100-32GB").peak_tflops == 125



# Parts sold without NVLink (vendor datasheets cited in catalog.py); RTX 3090 and A6000 take an
# optional two-card bridge, so they are not in this list.
PCIE_ONLY = ["T4", "A10", "A10G", "L4", "L40S", "RTX-4090", "RTX-5090"]


@pytest.mark.parametrize("name", PCIE_ONLY)
def test_pcie_only_cards_reach_their_peers_over_pcie(name):
    """The step-time model must not give NVLink bandwidth to a card that has none: peer traffic
    inside a node moves at the card's PCIe rate, far below the NVLink parts'."""
    p = catalog.gpu_perf(name)
    assert p.link_gbps == p.pcie_gbps <= 64, name  # PCIe 5.0 x16, one direction, at most
    assert p.link_gbps * 4 < catalog.gpu_perf("A100-80GB").link_gbps


def test_zero3_on_four_a10g_spends_longer_in_collectives_than_on_nvlink():
    """llama8b-sft-a10gx4's setup: ZeRO-3's 3Ψ of gathers and reduce-scatters over PCIe take as
    many times longer as the link is slower than an A100's NVLink (same model, same volume)."""
    s = Setup(model="Llama-3-8B", gpu="A10G", gpus=4, zero_stage=3, offload_optimizer="cpu", seq_len=2048,
              grad_accum=16, gradient_checkpointing=True)
    a10g = steptime.step_time(s).parts["comm"]
    a100 = steptime.step_time(replace(s, gpu="A100-80GB")).parts["comm"]
    ratio = catalog.gpu_perf("A100-80GB").link_gbps / catalog.gpu_perf("A10G").link_gbps
    assert a10g == pytest.approx(a100 * ratio, rel=1e-6)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_throughput", ROOT / "bench" / "throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_constants_are_the_train_fit_and_held_out_error_is_within_target():
    import yaml

    b = _bench()
    cases = yaml.safe_load((ROOT / "bench" / "throughput" / "cases.yaml").read_text())["cases"]
    assert len(cases) >= 25 and len({c["id"] for c in cases}) == len(cases)
    train = [c for c in cases if not b.held_out(c["id"])]
    test = [c for c in cases if b.held_out(c["id"])]
    fit = b.fit(train)
    assert fit["by_generation"] == steptime.ACHIEVED and fit["default"] == steptime.ACHIEVED_DEFAULT
    assert statistics.median(abs(b.rel_err(c)) for c in test) <= 0.25


def test_base_install_imports_no_torch():
    import subprocess

    code = "import sys, ftrecipes.plan, ftrecipes.memory.steptime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
