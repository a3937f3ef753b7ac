"""What TRL's trainers build for the LM head and the loss, by release (memory/trl_head.py), and
TRL's vLLM mode default.

The release facts are checked against the released wheels themselves (the archives
tools/schemagen/key_history.py leaves in ~/.cache/ftrecipes/wheels, PyPI trl 0.16.1-1.16.0), by
plain text search, so a wrong threshold or tile size in trl_head.py fails here; without the
archives those tests skip and say so. The memory tests check the consequences the source implies
(which V-wide tensors exist), not numbers read back from the code.
"""
from __future__ import annotations

import functools
import re
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from ftrecipes import recipe, recipe_memory
from ftrecipes.errors import UserError
from ftrecipes.memory import Setup, estimate
from ftrecipes.memory import trl_head
from ftrecipes.memory.activations import loss_terms
from ftrecipes.memory.catalog import model
from ftrecipes.memory.configs import read
from ftrecipes.versions import parse

CACHE = Path.home() / ".cache" / "ftrecipes" / "wheels"
QWEN = model("Qwen2.5-7B")


def phase(r, name):
    return next(p for p in r.phases if p.name == name).by_category


@functools.lru_cache(maxsize=None)
def wheel(version):
    """{path: text} of trl/trainer and trl/kernels in a cached TRL wheel."""
    z = zipfile.ZipFile(CACHE / f"trl-{version}-py3-none-any.whl")
    return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
            if re.fullmatch(r"trl/(trainer|kernels)/[a-z_]+\.py", n)}


def cached_versions():
    found = sorted((p.name.split("-")[1] for p in CACHE.glob("trl-*-py3-none-any.whl")), key=parse)
    if len(found) < 10:
        pytest.skip(f"TRL wheels not in {CACHE}: run tools/schemagen/key_history.py once to fetch them")
    return found


def test_default_release_is_the_trl_stack_pin():
    pins = (ROOT / "tests" / "envs" / "trl" / "requirements.txt").read_text()
    assert re.search(r"^trl==(\S+)$", pins, re.M).group(1) == trl_head.TRL_DEFAULT


def test_fused_lm_head_is_unconditional_in_sft_dpo_grpo_exactly_from_1_15():
    """add_fused_lm_head() is called by the three trainers' constructors with no condition around
    it from 1.15.0 on, and by none of them before; use_liger_kernel then forces Liger's fused
    cross-entropy off. The tile is TOKEN_CHUNK_SIZE x _CHUNKED_LOGPROB_CHUNK_SIZE."""
    for v in cached_versions():
        src = wheel(v)
        fused = [("add_fused_lm_head(" in src.get(f"trl/trainer/{t}_trainer.py", "")) for t in ("sft", "dpo", "grpo")]
        since = parse(v) >= parse(trl_head.FUSED_SINCE)
        assert fused == [since] * 3, v
        if since:
            kernels = src["trl/kernels/chunked_logprob.py"]
            tokens, cols, _ = trl_head.FUSED_TILE
            assert f"TOKEN_CHUNK_SIZE = {tokens}\n" in kernels, v
            assert f"_CHUNKED_LOGPROB_CHUNK_SIZE = {cols}\n" in src["trl/trainer/utils.py"], v
            for t in ("sft", "dpo", "grpo"):
                assert '"fused_linear_cross_entropy": False' in src[f"trl/trainer/{t}_trainer.py"], (v, t)
            # the mm buffer is the only [tokens x cols] tensor of the forward (CUDA path)
            assert kernels.count("torch.empty((min(N, TOKEN_CHUNK_SIZE), chunk_size)") == 2, v


def test_chunked_paths_before_1_15_start_where_trl_head_says():
    """SFT: loss_type chunked_nll exists from 1.4.0 and is the unset default from 1.7.0 (unless
    use_liger_kernel); DPO and GRPO route use_liger_kernel to TRL's own chunked log-probs in 1.14."""
    for v in cached_versions():
        if parse(v) >= parse(trl_head.FUSED_SINCE) or parse(v) < parse("1.0"):
            continue
        src = wheel(v)
        sft, cfg = src["trl/trainer/sft_trainer.py"], src["trl/trainer/sft_config.py"]
        assert ("chunked_nll" in sft) == (parse(v) >= parse(trl_head.CHUNKED_NLL_SINCE)), v
        default_chunked = 'self.loss_type = "nll" if self.use_liger_kernel else "chunked_nll"' in cfg
        assert default_chunked == (parse(v) >= parse(trl_head.CHUNKED_NLL_DEFAULT_SINCE)), v
        if "chunked_nll" in sft:
            assert f"_CHUNKED_LM_HEAD_CHUNK_SIZE = {trl_head.CHUNKED_NLL_TOKENS}\n" in sft, v
        liger_chunked = [("_ChunkedLogProbFunction.apply(" in src[f"trl/trainer/{t}_trainer.py"]) for t in ("dpo", "grpo")]
        assert liger_chunked == [parse(v) >= parse(trl_head.LIGER_CHUNKED_SINCE)] * 2, v
        if any(liger_chunked):
            tokens, cols, _ = trl_head.LIGER_CHUNKED_TILE
            assert f"_CHUNKED_LOGPROB_TOKEN_CHUNK_SIZE = {tokens}\n" in src["trl/trainer/utils.py"], v
            assert f"_CHUNKED_LOGPROB_CHUNK_SIZE = {cols}\n" in src["trl/trainer/grpo_trainer.py"], v


def test_vllm_mode_default_follows_grpo_config():
    """GRPOConfig.vllm_mode (added in 0.18.0) defaults to "server" up to 0.29 and "colocate" from
    1.0.0; before 0.18 use_vllm meant a `trl vllm-serve` server (0.16.1 already says so)."""
    for v in cached_versions():
        cfg = wheel(v)["trl/trainer/grpo_config.py"]
        m = re.search(r'vllm_mode: str = field\(\s*default="(\w+)"', cfg)
        if m is None:
            assert parse(v) < parse("0.18"), v
            continue
        assert m.group(1) == trl_head.vllm_mode_default(v), v


def sft(**kw):
    base = dict(model="Qwen2.5-7B", gpu="A100-80GB", lora_rank=16, seq_len=8192, framework="ddp",
                gradient_checkpointing=True, attn_implementation="flash_attention_2", trainer="trl")
    return estimate(Setup(**{**base, **kw}))


def test_trl_1_16_builds_no_vocabulary_wide_tensor_over_the_sequence():
    """Against TRL 1.0 (full logits: p*V logits and their 4V fp32 copy transient, 4V log-probs
    kept), 1.16's fused head keeps the labelled hidden states (p*h), int64 targets, log-sum-exp
    and entropy (16 bytes) per token, and holds one 4096 x 32768 tile plus per-token fp32 stats."""
    T, V, h, p = 8192, QWEN.vocab_size, QWEN.hidden_size, 2
    old, new = (phase(sft(trl_version=v, gradient_checkpointing=False), "forward") for v in ("1.0.0", "1.16.0"))
    assert old["activations"] - new["activations"] == 4 * V * T - (p * h + 16) * T
    assert old["temporaries"] - new["temporaries"] == (p + 4) * V * T - (p * 4096 * 32768 + 40 * T)
    # with checkpointing the recomputed layer, not the head, is the forward's largest temporary now
    ckpt = phase(sft(trl_version="1.16.0"), "forward")
    assert ckpt["temporaries"] > p * 4096 * 32768


def test_use_liger_kernel_changes_nothing_in_trl_1_16_but_does_before():
    r16 = [sft(trl_version="1.16.0", loss_kernel=k) for k in ("none", "liger")]
    assert r16[0].gpu_card_bytes == r16[1].gpu_card_bytes
    assert any("Liger's layer kernels only" in n for n in r16[1].notes)
    r10 = [sft(trl_version="1.0.0", loss_kernel=k) for k in ("none", "liger")]
    assert r10[1].gpu_card_bytes < r10[0].gpu_card_bytes


def test_sft_chunked_nll_is_the_default_from_1_7_unless_loss_type_says_nll():
    default, nll = sft(trl_version="1.10.0"), sft(trl_version="1.10.0", loss_type="nll")
    assert any("chunked_nll" in n for n in default.notes)
    assert phase(nll, "forward") == phase(sft(trl_version="1.0.0"), "forward")
    assert sum(phase(default, "forward").values()) < sum(phase(nll, "forward").values())
    # from 1.15 loss_type nll runs through the fused head too
    assert sft(trl_version="1.16.0", loss_type="nll").gpu_card_bytes == sft(trl_version="1.16.0").gpu_card_bytes
    with pytest.raises(ValueError, match="loss_type"):
        sft(loss_type="chunked")


def test_other_trainers_keep_their_own_loss():
    assert sft(trainer="llamafactory").gpu_card_bytes == sft(trainer="trl", trl_version="1.0.0").gpu_card_bytes


def test_a_trained_head_adds_its_fp32_gradient_to_the_fused_backward():
    """ChunkedLogProbFunction.backward accumulates grad_weight in fp32 (V x h) and casts it to the
    weight dtype on return; a frozen head (LoRA) has neither."""
    V, h, T = QWEN.vocab_size, QWEN.hidden_size, 4096
    frozen = loss_terms(QWEN, 2, T, "trl-fused")[2]
    assert loss_terms(QWEN, 2, T, "trl-fused", head_weight_bytes=2)[2] - frozen == 6 * V * h
    assert loss_terms(QWEN, 2, T, "trl-fused", head_weight_bytes=4)[2] - frozen == 4 * V * h


def test_dpo_reference_forward_adds_only_its_own_tiles_in_1_16():
    """1.0: the policy's logits (p*V) and fp32 copy (4V), then the reference's logits, fp32 copy and
    log-probs under no_grad (4V more on top); 1.16: the policy's tile, freed before the reference
    runs the same fused head. Without checkpointing the head is the forward's largest temporary."""
    base = dict(model="Qwen2.5-7B", gpus=8, zero_stage=3, seq_len=4096, attn_implementation="flash_attention_2",
                lora_rank=16, method="dpo", trainer="trl")
    old, new = (phase(estimate(Setup(**base, trl_version=v)), "forward") for v in ("1.0.0", "1.16.0"))
    T = 2 * 4096  # chosen + rejected
    assert old["temporaries"] - new["temporaries"] == (2 + 4 + 4) * QWEN.vocab_size * T - (2 * 4096 * 32768 + 40 * T)


def test_loss_backward_frees_what_the_loss_kept_whatever_the_kernel():
    for kernel in ("none", "liger", "chunked", "trl-fused", "trl-chunked-nll"):
        saved = loss_terms(QWEN, 2, 1000, kernel)[0]
        from ftrecipes.memory.activations import activations

        assert activations(QWEN, 1000, 1, 2, loss_kernel=kernel).loss_saved == saved


def trl_grpo(tmp_path, text):
    p = tmp_path / "grpo.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nuse_vllm: true\nnum_generations: 8\n"
                 "per_device_train_batch_size: 8\nmax_completion_length: 1024\n" + text)
    return p


def test_grpo_file_without_vllm_mode_is_colocated_from_trl_1_0(tmp_path):
    p = trl_grpo(tmp_path, "")
    assert read([str(p)])[1]["vllm_mode"] == "colocate"
    assert read([str(p)], {"trl": "0.29.1"})[1]["vllm_mode"] == "server"
    assert read([str(trl_grpo(tmp_path, "vllm_mode: server\n"))])[1]["vllm_mode"] == "server"
    # the repository's pins decide when no --framework-version is given, as for lint
    pinned = tmp_path / "pinned"
    pinned.mkdir()
    (pinned / "requirements.txt").write_text("trl==0.25.1\n")
    _ds, f = read([str(trl_grpo(pinned, ""))])
    assert (f["vllm_mode"], f["trl_version"]) == ("server", "0.25.1")


def test_estimate_config_takes_the_trl_release_from_the_command_line(tmp_path, run_cli):
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nmax_length: 8192\nper_device_train_batch_size: 1\n"
                 "bf16: true\nuse_peft: true\nlora_r: 16\n")
    args = ["estimate", "--config", str(p), "--gpu", "A100-80GB", "--json"]
    code16, out16, _ = run_cli(*args)
    code10, out10, _ = run_cli(*args, "--framework-version", "trl=1.0.0")
    import json

    j16, j10 = json.loads(out16), json.loads(out10)
    assert code16 == code10 == 0 and j16["setup"]["trl_version"] == "" and j10["setup"]["trl_version"] == "1.0.0"
    assert j16["gpu_card_bytes"] < j10["gpu_card_bytes"]
    code, _out, err = run_cli(*args, "--framework-version", "trl=one")
    assert code == 2 and "--framework-version trl=one" in err


def test_a_bad_loss_type_names_the_file_and_key(tmp_path):
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nloss_type: chunked\n")
    with pytest.raises(UserError) as e:
        read([str(p)])
    assert e.value.key == "loss_type" and e.value.line == 2


def test_recipe_estimate_uses_the_trl_release_its_files_target():
    for name in ("mistral7b-qlora-4090x1", "qwen7b-lora-h100x8"):
        r = recipe.load(name)
        res = recipe_memory.estimate(r)
        assert res.setup.trl_version == r.meta["tested_with"]["trl"]
        assert any("fused LM head" in n for n in res.notes)


@pytest.mark.framework
def test_installed_trl_builds_tiles_not_logits():
    """TRL 1.16 in the trl stack venv, one forward + backward of a tiny Llama (V 40,000 > one
    tile's 32,768 columns): the fused head's largest tensor is one [labelled tokens x 32,768] tile
    and it zero-fills an fp32 [V x h] weight-gradient accumulator; the model's own loss builds the
    [T x V] logits. What trl_head.FUSED_TILE and the head term of loss_terms say."""
    import json
    import subprocess

    from ftrecipes import devenv

    if not devenv.is_complete("trl"):
        pytest.skip("trl stack venv not built: python -m ftrecipes.devenv ensure trl")
    V, H, T = 40000, 64, 1000
    proc = subprocess.run([str(devenv.env_python("trl")), str(ROOT / "tests" / "frameworks" / "trl_fused_head.py"),
                           str(V), str(H), str(T)], env=devenv.run_env("trl"), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    tokens, cols, _ = trl_head.FUSED_TILE
    assert got["fused"]["largest"] == [min(T - 1, tokens) * cols, [min(T - 1, tokens), cols]]
    assert got["fused"]["fp32_head_zeros"] is True
    assert got["full"]["largest"] == [T * V, [1, T, V]] or got["full"]["largest"] == [T * V, [T, V]]
    assert got["full"]["fp32_head_zeros"] is False


def test_estimate_config_keeps_the_grpo_files_vllm_mode(tmp_path, run_cli):
    """`estimate --config` without --vllm-mode takes the file's mode, or its TRL release's
    default; the flag still overrides."""
    import json

    p = trl_grpo(tmp_path, "bf16: true\nuse_peft: true\nlora_r: 16\n")
    base = ["estimate", "--config", str(p), "--gpu", "H100-80GB", "--json"]
    modes = {}
    for extra in ([], ["--framework-version", "trl=0.29.1"], ["--vllm-mode", "none"]):
        code, out, _ = run_cli(*base, *extra)
        assert code in (0, 3)
        modes[" ".join(extra)] = json.loads(out)["setup"]["vllm_mode"]
    assert modes == {"": "colocate", "--framework-version trl=0.29.1": "server", "--vllm-mode none": "none"}
