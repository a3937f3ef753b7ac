"""Every rendered file, defaults and a few overrides, accepted by its framework's own parser."""

import json
import subprocess

import pytest

from ftrecipes import devenv, recipe
from truth_jobs import jobs_for, run_truth

pytestmark = pytest.mark.framework

# A few overrides per recipe that users really make; each must still be accepted.
OVERRIDES = {
    "qwen7b-lora-h100x8": [["micro_batch_size=2", "grad_accum=8"], ["seq_len=4096", "max_completion_length=2048"], ["num_generations=16", "lora_rank=64", "lora_alpha=128"], ["nodes=3", "vllm_gpus=8"]],
    "llama8b-sft-a100x1": [["micro_batch_size=2", "grad_accum=16", "seq_len=4096"], ["gpus_per_node=8", "grad_accum=8", "zero_stage=3"], ["offload_optimizer=none", "gradient_checkpointing=false"], ["openrlhf_version=0.8.5"], ["openrlhf_version=0.9.2", "precision=fp16"], ["nodes=2", "gpus_per_node=8", "grad_accum=4"]],
    "llama8b-sft-a10gx4": [["micro_batch_size=2", "grad_accum=8"], ["gpus_per_node=8", "grad_accum=8"], ["offload_optimizer=none", "zero_stage=2"], ["precision=fp16", "seq_len=4096"], ["openrlhf_version=0.10.2"], ["nodes=2", "grad_accum=8"]],
    "qwen7b-dpo-v100x8": [["gpus_per_node=4", "grad_accum=8"], ["seq_len=1024", "lora_rank=16", "lora_alpha=32", "beta=0.05"], ["precision=fp32", "expandable_segments=false"], ["nodes=2", "grad_accum=2"]],
    "qwen7b-lora-zero2-a100x2": [["seq_len=4096", "micro_batch_size=1", "grad_accum=16"], ["gpus_per_node=8", "grad_accum=2"], ["lora_rank=16", "lora_alpha=32", "lora_target=c_attn,c_proj"], ["nodes=2", "gpus_per_node=8"], ["transformers_version=4.32.0"], ["transformers_version=4.57.6", "nodes=2"]],
    "llama8b-lora-fsdp2-4090x2": [["seq_len=4096", "grad_accum=4"], ["offload_param=cpu", "attn_implementation=flash_attention_2"], ["lora_rank=16", "lora_alpha=32", "lora_target=q_proj,v_proj", "gpus_per_node=4", "grad_accum=4"]],
    "llama8b-full-h100x8": [["micro_batch_size=2", "grad_accum=4", "seq_len=8192"], ["gradient_checkpointing=false"], ["nodes=2"]],
    "minicpmv-full-a100-40gx2": [["seq_len=4096", "max_slice_nums=4"], ["gpus_per_node=4", "grad_accum=2"], ["llm_type=qwen2", "learning_rate=2e-6", "pin_memory=false"], ["nodes=2"], ["transformers_version=4.44.2"]],
    "mistral7b-qlora-4090x1": [["micro_batch_size=1", "grad_accum=8"], ["seq_len=4096", "lora_rank=16", "lora_alpha=32"], ["lora_target=q_proj,k_proj,v_proj,o_proj", "gradient_checkpointing=false"]],
}
DEFAULT_OVERRIDES = [["micro_batch_size=2", "grad_accum=2"], ["seq_len=1024"]]


def _cases():
    for name in recipe.names():
        for sets in [[]] + OVERRIDES.get(name, DEFAULT_OVERRIDES):
            yield name, sets


@pytest.fixture(scope="session")
def truth_results(tmp_path_factory):
    """Render every case, then run each stack's jobs in one process of that stack's venv."""
    by_stack = {}
    for i, (name, sets) in enumerate(_cases()):
        stack, jobs = jobs_for(name, sets, tmp_path_factory.mktemp(f"truth-{name}-{i}"))
        for fname, job in jobs:
            by_stack.setdefault(stack, []).append(((name, tuple(sets), fname, job["check"]), job))
    results = {}
    for stack, items in by_stack.items():
        out = run_truth(stack, [job for _, job in items], tmp_path_factory.mktemp(f"truth-{stack}"))
        for (key, _), res in zip(items, out):
            results[key] = res
    return results


def _keys():
    seen = []
    for name, sets in _cases():
        seen.append((name, tuple(sets)))
    return seen


@pytest.mark.parametrize("name, sets", _keys(), ids=lambda x: x if isinstance(x, str) else ",".join(x) or "defaults")
def test_framework_accepts_rendered_files(truth_results, name, sets):
    mine = {k: v for k, v in truth_results.items() if k[0] == name and k[1] == sets}
    r = recipe.load(name)
    checked = {k[2] for k in mine}
    # Every file with a framework format is checked, and launch scripts with a known command too.
    for f in r.files:
        if f.format in ("deepspeed", "accelerate", "trl", "llamafactory", "openrlhf"):
            assert f.name in checked, f"{f.name} was not checked by any framework parser"
        # A multi-node render's SLURM script is dry-run through the launchers' parsers (truth_jobs_multinode.py).
        if f.when == "multi_node" and any(s.startswith("nodes=") and s != "nodes=1" for s in sets):
            assert f.name in checked, f"{f.name} was not checked"
    failures = {f"{k[2]} ({k[3]})": v["error"] for k, v in mine.items() if not v["ok"]}
    assert not failures, failures


def test_deepspeed_sees_the_recipe_batch_and_stage(truth_results):
    for (name, sets, fname, check), res in truth_results.items():
        if check != "deepspeed" or sets:
            continue
        ds = json.loads((recipe.load(name).dir / "rendered" / fname).read_text())
        facts = res["facts"]
        assert facts["zero_stage"] == ds["zero_optimization"]["stage"], name
        assert facts["train_batch_size"] == ds["train_batch_size"], name
        assert facts["bf16"] == ds.get("bf16", {}).get("enabled", False), name
        assert facts["fp16"] == ds.get("fp16", {}).get("enabled", False), name


def test_deepspeed_rejects_a_batch_mismatch(tmp_path):
    """The check can fail: DeepSpeed's own batch assertion trips on a wrong world size."""
    src = recipe.load("qwen7b-lora-h100x8").dir / "rendered" / "ds.json"
    [res] = run_truth("trl", [{"check": "deepspeed", "path": str(src), "world_size": 3}], tmp_path, timeout=600)
    assert not res["ok"] and "train_batch_size" in res["error"]


# (recipe, the transformers release each variant is checked by): QwenLM/Qwen pins 4.32.0,
# OpenBMB/MiniCPM-V's finetune/requirements.txt 4.44.2; 5.23.0 is the trl stack's.
HF4 = {"qwen7b-lora-zero2-a100x2": "4.32.0", "minicpmv-full-a100-40gx2": "4.44.2"}


@pytest.mark.parametrize("name", sorted(HF4))
def test_hf_script_variants_are_parsed_by_their_own_release(truth_results, name):
    """The 4.x render was checked by that 4.x release, the default by the stack's transformers 5."""
    for (n, sets, fname, check), res in truth_results.items():
        if n == name and check == "hf-script" and sets in ((), (f"transformers_version={HF4[name]}",)):
            assert res["ok"], res["error"]
            assert res["facts"]["transformers"] == (HF4[name] if sets else recipe.load(name).meta["tested_with"]["transformers"])


@pytest.mark.parametrize("name", sorted(HF4))
def test_each_transformers_release_refuses_the_other_variant(tmp_path, name):
    """The check can fail both ways: transformers 4.x types --warmup_steps as an int, so the 5.x
    spelling (--warmup_steps 0.01) is refused; transformers 5.23 has no --warmup_ratio, so the 4.x
    spelling is refused as an argument no dataclass uses."""
    from ftrecipes import devenv

    _, five = jobs_for(name, [], tmp_path / "five")
    _, four = jobs_for(name, [f"transformers_version={HF4[name]}"], tmp_path / "four")
    five_job = next(job for _, job in five if job["check"] == "hf-script" and job["launcher"] == "torchrun")
    four_job = next(job for _, job in four if job["check"] == "hf-script" and job["launcher"] == "torchrun")
    five_on_four = dict(five_job, release=str(devenv.ensure_release("trl", HF4[name], package="transformers")))
    four_on_five = {k: v for k, v in four_job.items() if k not in ("release", "transformers_version")}
    res = run_truth("trl", [five_on_four, four_on_five], tmp_path, timeout=600)
    assert not res[0]["ok"] and "--warmup_steps: invalid int value: '0.01'" in res[0]["error"], res[0]
    assert not res[1]["ok"] and "--warmup_ratio" in res[1]["error"] and "not used by the HfArgumentParser" in res[1]["error"], res[1]


@pytest.mark.parametrize("name", recipe.names())
def test_tested_with_is_what_the_environment_runs(name):
    """tested_with must name the versions installed in the venv the smoke test runs in."""
    r = recipe.load(name)
    stack = r.meta["framework"]["stack"]
    packages = sorted(r.meta["tested_with"])
    code = "import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in %r}))" % packages
    proc = subprocess.run([str(devenv.ensure_env(stack)), "-c", code], env=devenv.run_env(stack), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    installed = json.loads(proc.stdout.strip().splitlines()[-1])
    # A local build label (torch 2.13.0+cpu) names the same release.
    assert {p: v.split("+")[0] for p, v in installed.items()} == {p: str(v) for p, v in r.meta["tested_with"].items()}


def test_vllm_serve_command_is_checked_by_vllms_own_parser(tmp_path):
    """The server command of launch.sh goes through `vllm serve`'s parser (vLLM 0.31.0, the recipe's
    vllm_version). The check can fail: a misspelt flag and a wrong choice are refused by vLLM
    itself; a command without the dev-mode environment or the NCCL weight-transfer engine TRL needs
    is refused by the TRL requirements the check adds (trl/scripts/vllm_serve.py)."""
    _, jobs = jobs_for("qwen7b-lora-h100x8", [], tmp_path / "render")
    [job] = [j for _, j in jobs if j["check"] == "vllm-serve-native"]

    def edit(old, new):
        assert old in job["args"]
        return {**job, "args": [new if w == old else w for w in job["args"]]}

    no_dev = {**job, "env": {k: v for k, v in job["env"].items() if k != "VLLM_SERVER_DEV_MODE"}}
    no_wt = {**job, "args": job["args"][: job["args"].index("--weight-transfer-config")]
             + job["args"][job["args"].index("--weight-transfer-config") + 2:]}
    ok, flag, choice, dev, wt = run_truth("trl", [job, edit("--weight-transfer-config", "--weight-transfer-confg"),
                                                edit("processed_logprobs", "processed_logprob"), no_dev, no_wt],
                                          tmp_path, timeout=600)
    assert ok["ok"], ok
    facts = ok["facts"]
    assert facts["vllm"] == "0.31.0" and facts["weight_transfer_backend"] == "nccl"
    assert (facts["data_parallel_size"], facts["tensor_parallel_size"], facts["port"]) == (4, 1, 8000)
    assert facts["max_model_len"] == 2048 + 1024 and facts["max_logprobs"] == -1
    assert not flag["ok"] and "unrecognized arguments: --weight-transfer-confg" in flag["error"], flag
    assert not choice["ok"] and "invalid choice: 'processed_logprob'" in choice["error"], choice
    assert not dev["ok"] and "VLLM_SERVER_DEV_MODE" in dev["error"], dev
    assert not wt["ok"] and "nccl" in wt["error"], wt


def test_trl_qlora_launch_gives_the_trainer_nf4_and_the_recipes_lora(truth_results):
    """mistral7b-qlora-4090x1's launch line through accelerate's launch parser and TRL's SFT parser;
    TRL's own get_quantization_config / get_peft_config then build what SFTTrainer receives: NF4
    with nested quantisation computing in bf16 (dtype), LoRA r32/alpha16 on every linear layer."""
    [res] = [v for k, v in truth_results.items() if k[0] == "mistral7b-qlora-4090x1" and not k[1] and k[3] == "trl-launch"]
    assert res["ok"], res["error"]
    f = res["facts"]
    assert (f["script"], f["num_processes"], f["distributed_type"]) == ("trl.scripts.sft", 1, "NO")
    assert f["quantization"] == {"load_in_4bit": True, "quant_type": "nf4", "double_quant": True, "compute_dtype": "torch.bfloat16"}
    assert f["lora"] == {"r": 32, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"}
    assert (f["optim"], f["bf16"], f["fp16"], f["activation_checkpointing"]) == ("adamw_bnb_8bit", True, False, True)
    assert (f["micro_batch"], f["grad_accum"], f["max_length"], f["packing"]) == (2, 4, 8192, True)


def test_trl_launch_check_can_fail(tmp_path):
    """TRL's ModelConfig refuses 4-bit and 8-bit loading together, and its parser an unknown key."""
    _, jobs = jobs_for("mistral7b-qlora-4090x1", [], tmp_path / "render")
    [(_, job)] = [(n, j) for n, j in jobs if j["check"] == "trl-launch"]
    sft = tmp_path / "render" / "sft.yaml"
    both = tmp_path / "render" / "both.yaml"
    both.write_text(sft.read_text() + "load_in_8bit: true\n")
    typo = tmp_path / "render" / "typo.yaml"
    typo.write_text(sft.read_text().replace("bnb_4bit_quant_type:", "bnb_4bit_quant_typ:"))
    cases = [{**job, "argv": [str(p) if w == "sft.yaml" else w for w in job["argv"]]} for p in (both, typo)]
    res_both, res_typo = run_truth("trl", cases, tmp_path, timeout=600)
    assert not res_both["ok"] and "8 bit and 4 bit" in res_both["error"], res_both
    assert not res_typo["ok"] and "bnb_4bit_quant_typ" in res_typo["error"], res_typo


def test_fsdp_plugin_is_what_the_recipe_renders(truth_results):
    """accelerate 1.15's own launcher and FullyShardedDataParallelPlugin, fed each FSDP recipe's
    rendered accelerate config (defaults and overrides), build what the file says: version,
    resharding, wrapping, offload, state-dict type, rank-0 loading, FSDP's checkpointing,
    precision, processes and machines; and where a TRL file goes with it, transformers 5.23's
    rule holds (FSDP's and the Trainer's checkpointing are not both on)."""
    import yaml

    from ftrecipes import render, values

    seen = 0
    for (name, sets, fname, check), res in truth_results.items():
        if check != "accelerate-fsdp":
            continue
        assert res["ok"], res
        r = recipe.load(name)
        [text] = [t for f, t in render.render(r, values.parse_sets(r, list(sets))) if f.name == fname]
        acc = yaml.safe_load(text)
        fc = {k.removeprefix("fsdp_"): v for k, v in acc["fsdp_config"].items()}
        facts = res["facts"]
        assert (facts["use_fsdp"], facts["fsdp_version"]) == (True, int(fc.get("version", 1))), facts
        assert facts["reshard_after_forward"] is fc.get("reshard_after_forward", True), facts
        assert facts["auto_wrap_policy"] == {"TRANSFORMER_BASED_WRAP": "transformer_auto_wrap_policy"}.get(
            fc.get("auto_wrap_policy"), facts["auto_wrap_policy"]), facts
        assert facts["cpu_offload"] is fc.get("offload_params", False), facts
        assert facts["state_dict_type"] == fc.get("state_dict_type", "SHARDED_STATE_DICT"), facts
        assert facts["cpu_ram_efficient_loading"] is fc.get("cpu_ram_efficient_loading", True), facts
        assert facts["activation_checkpointing"] is fc.get("activation_checkpointing", False), facts
        assert facts["mixed_precision"] == acc.get("mixed_precision", "no"), facts
        assert (facts["num_processes"], facts["num_machines"]) == (acc["num_processes"], acc["num_machines"]), facts
        assert not facts["refused_by_transformers"], facts
        if name == "llama8b-full-h100x8":
            # the recipe's point: FSDP's checkpointing follows the value, the Trainer's stays off
            v = dict(r.defaults, **dict(s.split("=", 1) for s in sets))
            assert facts["activation_checkpointing"] is (str(v["gradient_checkpointing"]).lower() == "true"), facts
            assert facts["trainer_activation_checkpointing"] is False, facts
        seen += 1
    if not seen:
        pytest.skip("no FSDP recipe")
