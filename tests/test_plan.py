"""`ftrecipes plan`: never proposes what the memory model calls oom, respects host RAM, finds a
fitting setup for each post-mortem's hardware, and rejects bad input in one line."""
from dataclasses import replace

import pytest

from ftrecipes import cli, plan
from ftrecipes.memory import catalog
from ftrecipes.memory.estimate import Setup, estimate

GiB = 1024 ** 3
# Issue 13's grid: one 24 GB card up to two nodes of eight H100, with the 24 GB A10G, 40 GB and
# V100 (fp16, no flash-attention) budgets between
BUDGETS = [("RTX-4090", 1, 1), ("A10G", 2, 1), ("A100-40GB", 2, 1), ("A100-80GB", 1, 1), ("V100-32GB", 8, 1),
           ("A100-80GB", 8, 1), ("H100-80GB", 8, 2)]
# catalog models, one per shape (the -Instruct / -it / -Chat aliases share their base's)
MODELS = sorted({(m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.num_key_value_heads, m.vocab_size,
                  m.vision): m.name for m in catalog.MODELS.values()}.values())


def _base(model, gpu, per_node, nodes, seq=1024, host=None):
    return Setup(model=model, gpu=gpu, gpus=per_node * nodes, gpus_per_node=per_node, nodes=nodes, seq_len=seq,
                 precision="bf16" if catalog.gpu(gpu).bf16 else "fp16", host_ram_bytes=host)


@pytest.mark.parametrize("model", MODELS)
def test_plan_never_proposes_oom(model):
    """The grid (every catalog model shape x sft/lora/qlora/dpo/grpo x BUDGETS, 8 sequences per
    GPU), in-process: no crash, and no candidate plan returns is oom or flagged by lint, each adds
    up to the global batch, and prints; the first five, re-estimated from their Setup alone, are
    still not oom (the search's own estimates are reproducible)."""
    for gpu, per_node, nodes in BUDGETS:
        for method in plan.METHODS:
            base = _base(model, gpu, per_node, nodes, host=512 * GiB)
            batch = 8 * per_node * nodes
            ranked = plan.search(base, method, "trl", batch)
            for i, c in enumerate(ranked):
                again = estimate(c.setup) if i < 5 else c.memory
                assert again.verdict != "oom", (model, gpu, method, plan.describe(c.setup))
                assert again.host_verdict != "oom", (model, gpu, method, plan.describe(c.setup))
                assert plan.lint_flags(c.setup) is None
                assert c.setup.micro_batch * c.setup.grad_accum * c.setup.gpus == batch
                assert c.speed.tokens_per_s > 0 and 0 < c.speed.mfu < 1
            assert plan.render_text(ranked, 3).count("#") == min(3, len(ranked))
            if ranked:
                top = ranked[0]
                assert all(top.speed.tokens_per_s >= c.speed.tokens_per_s for c in ranked
                           if c.memory.verdict == top.memory.verdict)


def test_host_ram_excludes_offload_that_does_not_fit_it():
    base = _base("Llama-3-8B", "RTX-4090", 1, 1, seq=1024)
    roomy = plan.search(replace(base, host_ram_bytes=512 * GiB), "sft", "trl", 8)
    assert roomy and all(c.setup.offload_optimizer != "none" or c.setup.fsdp_offload for c in roomy)
    # full fine-tuning of 8B parameters needs >100 GiB of CPU Adam states: 64 GiB cannot hold them
    assert plan.search(replace(base, host_ram_bytes=64 * GiB), "sft", "trl", 8) == []


def _top(model, gpu, per_node, method, seq, batch, framework, host=None, adapter="none", nodes=1):
    ranked = plan.search(_base(model, gpu, per_node, nodes, seq, host), method, framework, batch, 16, adapter)
    assert ranked, (model, gpu, method)
    assert estimate(ranked[0].setup).verdict != "oom"
    return ranked[0]


def test_pm4_llama8b_full_sft_one_a100_needs_offload_like_the_recipe():
    """Post-mortem 4 / recipe llama8b-sft-a100x1: ZeRO-2 without offload ran out of memory in the
    step; the recipe offloads the optimizer. The plan must offload too (no 8-bit optimizer under
    OpenRLHF)."""
    top = _top("Llama-3-8B", "A100-80GB", 1, "sft", 2048, 64, "openrlhf", host=256 * GiB)
    assert top.setup.framework == "deepspeed" and top.setup.offload_optimizer == "cpu"



def test_llama8b_full_sft_four_a10g_needs_zero3_and_offload_like_the_recipe():
    """Recipe llama8b-sft-a10gx4 (OpenRLHF#597: 24 GB cards, ZeRO-2 and ZeRO-3 alone ran out of
    memory): on 4xA10G with a g5.12xlarge's 192 GiB, plan must shard with ZeRO-3 and offload the
    optimizer, as the recipe does, and nothing it proposes may keep Adam on the cards."""
    top = _top("Llama-3-8B", "A10G", 4, "sft", 2048, 64, "openrlhf", host=192 * GiB)
    assert top.setup.framework == "deepspeed" and top.setup.zero_stage == 3 and top.setup.offload_optimizer == "cpu"
    ranked = plan.search(_base("Llama-3-8B", "A10G", 4, 1, 2048, 192 * GiB), "sft", "openrlhf", 64, 16, "none")
    assert ranked and all(c.setup.offload_optimizer == "cpu" for c in ranked)

def test_pm3_minicpmv_two_a100_40gb_with_128gib_host_finds_a_fit():
    """Post-mortem 3: full MiniCPM-V on 2x A100-40GB; the recipe uses ZeRO-3 + both offloads.
    With the reported 128 GiB host the memory model rejects offloading everything, so what plan
    proposes must be a setup that keeps host memory under it."""
    ranked = plan.search(_base("MiniCPM-V-2_6", "A100-40GB", 2, 1, 2048, 128 * GiB), "sft", "trl", 8)
    for c in ranked:
        assert c.memory.host_peak_bytes <= 128 * GiB


def test_pm5_qwen7b_lora_dpo_eight_v100_fits_in_fp16():
    """Post-mortem 5 / recipe qwen7b-dpo-v100x8 (LoRA DPO, cutoff 1536, fp16 ZeRO-2 + offload)."""
    top = _top("Qwen2.5-7B-Instruct", "V100-32GB", 8, "dpo", 1536, 32, "llamafactory", 500 * GiB, adapter="lora")
    assert top.setup.precision == "fp16" and top.setup.attn_implementation == "sdpa" and top.setup.lora_rank


def test_pm1_grpo_lora_eight_h100_fits():
    """Post-mortem 1 / recipe qwen7b-lora-h100x8: GRPO with LoRA, vLLM sharing the node."""
    top = _top("Qwen2.5-7B-Instruct", "H100-80GB", 8, "grpo", 2048, 128, "trl", adapter="lora")
    assert top.setup.vllm_mode in ("colocate", "server") and top.speed.parts["generation"] > 0


def test_recipe_mistral7b_qlora_one_4090_halves_the_micro_batch():
    """Recipe mistral7b-qlora-4090x1 (axolotl PR #708): QLoRA at 8,192 packed tokens on one 24 GB
    card ran out of memory at micro batch 4 and fits at 2. The plan must not propose micro 4 in
    GPU memory, and the recipe's own setup (single GPU, micro 2 x accum 4) must be a candidate."""
    ranked = plan.search(_base("Mistral-7B", "RTX-4090", 1, 1, 8192, None), "qlora", "trl", 8, 16)
    assert ranked and estimate(ranked[0].setup).verdict != "oom"
    top = ranked[0].setup
    assert top.quantization == "4bit" and top.micro_batch <= 2
    assert any(c.setup.framework == "torch" and (c.setup.micro_batch, c.setup.grad_accum) == (2, 4) for c in ranked)
    assert not any(c.setup.micro_batch == 4 and c.setup.offload_param == "none" for c in ranked)


def test_recipe_lora_zero2_two_a100():
    top = _top("Qwen-7B-Chat", "A100-80GB", 2, "lora", 2048, 32, "trl")
    assert top.setup.lora_rank == 16 and top.memory.verdict == "fits"


def test_recipe_llama8b_full_fsdp2_eight_h100():
    """Recipe llama8b-full-h100x8 (FSDP2, 4 x 2, FSDP checkpointing, 4,096 tokens, global batch 64):
    plan finds its setting fitting, and whatever it ranks first is predicted at least as fast and
    fits too - what the recipe README states (plan prefers no checkpointing at micro batch 1)."""
    ranked = plan.search(_base("Llama-3.1-8B", "H100-80GB", 8, 1, 4096), "sft", "trl", 64)
    # plan searches TRL with Liger's fused loss only; the recipe's sharding, split and checkpointing
    mine = [c for c in ranked if c.setup.framework == "fsdp2" and not c.setup.fsdp_offload and c.setup.micro_batch == 4
            and c.setup.gradient_checkpointing]
    assert mine and mine[0].memory.verdict == "fits"
    assert ranked[0].memory.verdict != "oom" and ranked[0].speed.tokens_per_s >= mine[0].speed.tokens_per_s


@pytest.mark.parametrize("argv, needle", [
    (["--model", "nope"], "--model"),
    (["--gpus", "8xZ100"], "unknown GPU"),
    (["--global-batch", "12"], "not a multiple"),
    (["--seq-len", "0"], "--seq-len"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    args = dict(zip(["--model", "--method", "--gpus", "--seq-len", "--global-batch"],
                    ["Qwen2.5-7B", "sft", "8xA100-80GB", "1024", "16"]))
    args.update(dict(zip(argv[::2], argv[1::2])))
    try:
        rc = cli.main(["plan", *[x for kv in args.items() for x in kv]])
    except SystemExit as exc:  # a flag's type refuses the value: argparse exits itself
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and "\n" not in err and "Traceback" not in err


def test_cli_json_and_text(capsys):
    import json

    rc = cli.main(["plan", "--model", "Qwen2.5-7B", "--method", "lora", "--gpus", "2xA100-80GB",
                   "--seq-len", "2048", "--global-batch", "32", "--json", "--top", "3"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and 1 <= len(out["candidates"]) <= 3
    first = out["candidates"][0]
    assert first["verdict"] in ("fits", "tight") and first["tokens_per_s"] > 0 and "why" in first
    rc = cli.main(["plan", "--model", "Qwen2.5-7B", "--method", "lora", "--gpus", "2xA100-80GB",
                   "--seq-len", "2048", "--global-batch", "32"])
    text = capsys.readouterr().out
    assert rc == 0 and text.startswith("#1 ") and "headroom" in text and "why:" in text


def test_grid_finds_a_fit_where_the_memory_model_has_one():
    """Sanity of the grid's exit 3: 8B full fine-tuning on one 24 GB card with 512 GiB of host
    RAM fits with everything offloaded (ZeRO-3 + both offloads), so plan must not give up."""
    base = _base("Llama-3-8B", "RTX-4090", 1, 1, seq=2048, host=512 * GiB)
    ranked = plan.search(base, "sft", "trl", 8)
    assert ranked and all(c.setup.offload_optimizer != "none" or c.setup.fsdp_offload for c in ranked)


def test_plan_never_proposes_what_lint_flags():
    """LoRA DPO in fp16 on V100s under LLaMA-Factory: ZeRO-3 is what the memory model likes best,
    but lint's fp16-static-loss-scale rejects its files; plan leaves those setups out, counts
    them, and still proposes one (the recipe qwen7b-dpo-v100x8's question)."""
    passed = {}
    base = _base("Qwen2.5-7B-Instruct", "V100-32GB", 8, 1, seq=1536, host=512 * GiB)
    ranked = plan.search(base, "dpo", "llamafactory", 32, 8, "lora", passed=passed)
    assert ranked and passed.get("fp16-static-loss-scale", 0) > 0
    assert all(not (c.setup.framework == "deepspeed" and c.setup.zero_stage == 3) for c in ranked)
    # the same request in TRL is not LLaMA-Factory's adapter handling: ZeRO-3 stays allowed
    trl = plan.search(base, "dpo", "trl", 32, 8, "lora")
    assert any(c.setup.framework == "deepspeed" and c.setup.zero_stage == 3 for c in trl)


def test_grpo_server_takes_gpus_of_its_own():
    """GRPO: plan searches trl vllm-serve on 1..n-1 GPUs of one node (the recipe serves on 4 of
    8) besides colocate; a server candidate trains on the remaining GPUs only."""
    base = _base("Qwen2.5-7B-Instruct", "H100-80GB", 8, 1, seq=3072)
    modes = plan._generation_modes("grpo", base, 64)
    assert {(m.get("vllm_gpus"), m.get("gpus")) for m in modes if m["vllm_mode"] == "server"} == {(4, 4), (6, 2), (7, 1)}
    ranked = plan.search(base, "grpo", "trl", 64, 16, "lora")
    servers = [c for c in ranked if c.setup.vllm_mode == "server"]
    assert servers and all(c.setup.gpus + c.setup.vllm_gpus == 8 for c in servers)
    two_nodes = plan._generation_modes("grpo", _base("Qwen2.5-7B", "H100-80GB", 8, 2), 64)
    assert [(m["vllm_gpus"], m["gpus"]) for m in two_nodes if m["vllm_mode"] == "server"] == [(8, 8)]


def test_liger_only_where_the_trainer_applies_it():
    """Liger's fused loss is offered for supervised methods of models whose type Liger patches:
    not for Qwen v1 (remote code), not for a VLM, not for DPO or GRPO, and not for TRL from 1.15
    on, whose trainers turn it off for their own fused LM head."""
    def kernels(model, method, fw="trl", trl_version=""):
        base = replace(_base(model, "A100-80GB", 2, 1), trl_version=trl_version)
        return {s.loss_kernel for s in plan.candidates(base, method, fw, 16)}
    assert kernels("Qwen2.5-7B", "sft", "llamafactory") == {"none", "liger"}
    assert kernels("Qwen2.5-7B", "sft") == {"none"}
    assert kernels("Qwen2.5-7B", "sft", trl_version="1.0.0") == {"none", "liger"}
    assert kernels("Qwen-7B-Chat", "lora", "accelerate") == {"none"}
    assert kernels("MiniCPM-V-2_6", "sft", "accelerate") == {"none"}
    assert kernels("Llama-3-8B", "dpo", "llamafactory") == {"none"}


def test_ranking_says_what_plan_o_would_not_write(capsys):
    """Each candidate `plan -o` cannot write carries one line saying why (here LLaMA-Factory LoRA
    under FSDP2 on fp16-only V100s: its FSDP2 blocks train LoRA in pure bf16; its DDP they
    write), the JSON the same reason, and the lint filter's count is printed."""
    import json

    argv = ["plan", "--model", "Qwen2.5-7B-Instruct", "--method", "dpo", "--adapter", "lora", "--gpus",
            "8xV100-32GB", "--seq-len", "1536", "--global-batch", "32", "--framework", "llamafactory", "--top", "20"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "plan -o: not written yet (LoRA under FSDP2 in fp16: LLaMA-Factory's FSDP2 LoRA recipe trains in pure bf16)" in text
    assert "left out because `ftrecipes lint` would flag their files" in text and "fp16-static-loss-scale" in text
    assert cli.main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    reasons = {c["setup"]["framework"]: c["not_written"] for c in out["candidates"]}
    # which DeepSpeed/DDP candidates fit depends on the fitted allocator constants; whichever do
    # are written
    assert reasons["deepspeed"] is None and reasons.get("ddp") is None and "pure bf16" in reasons["fsdp2"]
    assert out["left_out_for_lint"]["fp16-static-loss-scale"] > 0
    # a request plan -o refuses as a whole: every candidate says so
    assert cli.main(argv[:4] + ["grpo"] + argv[5:] + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all("--method grpo is not written" in c["not_written"] for c in out["candidates"])


def test_vllm_engine_must_hold_the_model():
    """GRPO: an engine whose reservation cannot hold the bf16 weights and one full-length
    sequence's KV cache does not start (vLLM checks max_model_len against its KV cache), so plan
    does not offer it. A 7B (15 GB of weights) on 24 GB cards: colocated vLLM needs more than
    TRL's default 0.3 (7.2 GB), about two thirds of the card, past what plan tries; a server GPU
    at 0.9 holds it. A 1.5B colocates at the default."""
    big = plan._generation_modes("grpo", _base("Qwen2.5-7B", "RTX-4090", 2, 1, seq=2048), 16)
    assert [m["vllm_mode"] for m in big] == ["server"] and big[0]["vllm_gpu_memory_utilization"] == 0.9
    small = plan._generation_modes("grpo", _base("Qwen2.5-1.5B", "RTX-4090", 2, 1, seq=2048), 16)
    assert small[0] == {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}
    # 14B on one 24 GB card: no engine can hold it, so GRPO has no candidate at all
    assert plan._generation_modes("grpo", _base("Qwen2.5-14B", "RTX-4090", 1, 1, seq=2048), 8) == []
    assert plan.search(_base("Qwen2.5-14B", "RTX-4090", 1, 1, seq=2048), "grpo", "trl", 8, 16, "lora") == []


def test_openrlhf_plans_render_no_parameter_offload():
    """OpenRLHF 0.11 builds its training DeepSpeed config with offload=False (utils/deepspeed/
    deepspeed.py get_ds_train_config; only --ds.adam_offload on the CLI): a plan for it must not
    rank a ZeRO-3 parameter-offload setup its launch cannot render."""
    ranked = plan.search(_base("Llama-3-8B", "A10G", 4, 1, 2048, 192 * GiB), "sft", "openrlhf", 64)
    assert ranked, "no candidate"
    assert all(c.setup.offload_param == "none" for c in ranked)


def test_plan_leaves_out_setups_that_will_not_run():
    """TRL LoRA with non-reentrant checkpointing on DeepSpeed 0.18.4 (TRL 1.8, before it forced
    reentrant for PEFT under ZeRO-3): every ZeRO-3 setup with gradient checkpointing fails in its
    first backward (estimate's errors), so plan counts and drops them; 0.19.8 keeps them."""
    base = replace(_base("Qwen2.5-7B-Instruct", "A100-80GB", 8, 1, seq=2048, host=512 * GiB),
                   deepspeed_version="0.18.4", checkpoint_reentrant=False, trl_version="1.8.0")
    passed = {}
    ranked = plan.search(base, "sft", "trl", 32, 16, "lora", passed=passed)
    assert ranked and passed.get("will not run", 0) > 0
    assert not any(c.setup.framework == "deepspeed" and c.setup.zero_stage == 3 and c.setup.gradient_checkpointing
                   for c in ranked)
    assert "will not run" in plan.render_text(ranked, 3, passed=passed)
    assert plan.to_json(ranked, 3, passed=passed)["left_out_will_not_run"] == passed["will not run"]
    ok = plan.search(replace(base, deepspeed_version="0.19.8"), "sft", "trl", 32, 16, "lora")
    assert any(c.setup.framework == "deepspeed" and c.setup.zero_stage == 3 and c.setup.gradient_checkpointing
               for c in ok)
