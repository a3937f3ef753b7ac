"""The memory model applied to recipes: estimate RECIPE, render's warning, README tables."""

import json

import pytest

from ftrecipes import recipe, recipe_memory


@pytest.mark.parametrize("name", recipe.names())
def test_every_recipe_fits_its_own_hardware(name):
    r = recipe.load(name)
    j = recipe_memory.estimate(r).to_json()
    assert j["verdict"] in ("fits", "tight"), (name, j["gpu_peak_bytes"] / 2**30)
    assert j["host_verdict"] in ("fits", "tight", "unknown", None), name


def test_estimate_recipe_json(run_cli):
    code, out, _ = run_cli("estimate", "qwen7b-lora-h100x8", "--json")
    j = json.loads(out)
    assert code == 0
    assert {"gpu_peak_bytes", "host_peak_bytes", "verdict", "phases", "remedies"} <= set(j)
    assert [p["name"] for p in j["phases"]] == ["setup", "forward", "backward", "step"]


def test_estimate_recipe_with_overrides_is_oom_with_remedies(run_cli):
    # Recipe 2.x keeps the whole fp16 base on every GPU (ZeRO-2): micro batch 4 at its own cutoff
    # does not fit, and going back to micro batch 1 (the recipe's own value) is the first remedy.
    code, out, _ = run_cli("estimate", "qwen7b-dpo-v100x8", "--set", "micro_batch_size=4", "--json")
    j = json.loads(out)
    assert code == 3 and j["verdict"] == "oom"
    assert j["remedies"] and j["remedies"][0]["verdict"] == "fits"
    assert j["remedies"][0]["change"].startswith("micro_batch 4 -> 1")


def test_render_warns_when_overrides_do_not_fit(run_cli):
    code, out, err = run_cli("render", "qwen7b-dpo-v100x8", "--set", "seq_len=8192", "--set", "micro_batch_size=4")
    assert code == 0 and json.loads(out)
    assert err.startswith("warning: qwen7b-dpo-v100x8 with these values: GPU peak") and "(oom)" in err
    code, out, err = run_cli("render", "qwen7b-dpo-v100x8", "--set", "grad_accum=8")
    assert code == 0 and err == ""


def test_readme_memory_table_comes_from_the_estimator():
    r = recipe.load("llama8b-sft-a100x1")
    text = (r.dir / "README.md").read_text()
    table = recipe_memory.markdown_table(r, recipe_memory.estimate(r))
    assert table in text
    assert (r.dir / "memory.svg").read_text() == recipe_memory.svg(r, recipe_memory.estimate(r))


def test_a10g_recipe_story_agrees_with_the_memory_model():
    """llama8b-sft-a10gx4's README: full SFT of Llama-3-8B on 24 GB A10Gs. Without Adam offload,
    ZeRO-3 needs 16 cards (anyscale/templates#198, templates/fine-tune-llm_v2/README.md: "Llama-3-8B
    ... require 16 A10Gs"); the memory model must not fit it on 4 or 8 and must fit it on 16, and the
    recipe (ZeRO-3 + offload) must fit on one g5.12xlarge's 4 cards and 192 GiB host."""
    from ftrecipes import values

    r = recipe.load("llama8b-sft-a10gx4")

    def verdict(*sets):
        return recipe_memory.estimate(r, values.parse_sets(r, list(sets))).to_json()["verdict"]

    assert verdict("offload_optimizer=none") == "oom"
    assert verdict("offload_optimizer=none", "zero_stage=2") == "oom"
    assert verdict("offload_optimizer=none", "nodes=2", "grad_accum=8") == "oom"
    assert verdict("offload_optimizer=none", "nodes=4", "grad_accum=4") in ("fits", "tight")
    assert verdict() in ("fits", "tight")


def test_qlora_recipe_is_estimated_from_its_trainer_files(run_cli, tmp_path):
    """mistral7b-qlora-4090x1 has no DeepSpeed file: the 4-bit base, double quantisation, 8-bit
    AdamW and the one-process wrapper come from its rendered sft.yaml and accelerate.yaml, read as
    `estimate --config` reads them, so both ways give the same figure."""
    r = recipe.load("mistral7b-qlora-4090x1")
    res = recipe_memory.estimate(r)
    s = res.setup
    assert (s.quantization, s.double_quant, s.optimizer, s.framework, s.trainer) == ("4bit", True, "adamw_8bit", "torch", "trl")
    assert (s.gpus, s.micro_batch, s.seq_len, s.lora_rank, s.gradient_checkpointing) == (1, 2, 8192, 32, True)
    code, out, _ = run_cli("estimate", "--config", str(r.dir / "rendered" / "sft.yaml"), "--config",
                           str(r.dir / "rendered" / "accelerate.yaml"), "--model", "Mistral-7B", "--gpu", "RTX-4090", "--json")
    assert code == 0 and json.loads(out)["gpu_card_bytes"] == res.to_json()["gpu_card_bytes"]


def test_qlora_recipe_postmortem_micro_batch_4_is_oom(run_cli):
    """axolotl PR #708: micro batch 4 of packed 8,192-token sequences did not fit a 24 GB RTX 4090,
    micro batch 2 did. The memory model agrees on both; a 16-bit base (what-if quantization=none)
    does not fit either, which is why the recipe is QLoRA."""
    code, out, _ = run_cli("estimate", "mistral7b-qlora-4090x1", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "fits"
    code, out, _ = run_cli("estimate", "mistral7b-qlora-4090x1", "--set", "micro_batch_size=4", "--json")
    j = json.loads(out)
    assert code == 3 and j["verdict"] == "oom" and j["remedies"][0]["verdict"] == "fits"
    code, out, _ = run_cli("estimate", "mistral7b-qlora-4090x1", "--set", "quantization=none", "--json")
    assert code == 3 and json.loads(out)["verdict"] == "oom"


def test_remedies_respect_what_the_recipe_allows():
    """qwen7b-dpo-v100x8 pins zero_stage to 2 (fp16 dynamic loss scaling of the LoRA adapters needs
    ZeRO-2): a ZeRO-3 remedy would be refused by its own values schema, so none is offered, while
    the same setting estimated outside the recipe does get one."""
    from dataclasses import replace

    from ftrecipes.memory.inputs import setup_from_values, values_after
    from ftrecipes.memory.remedies import remedies

    r = recipe.load("qwen7b-dpo-v100x8")
    res = recipe_memory.estimate(r, {"seq_len": 4096})
    assert res.verdict == "oom" and res.remedies
    assert not any("zero_stage" in m["change"] for m in res.remedies)
    bare = remedies(res.setup, res.gpu_peak_bytes)
    assert any(m["change"].startswith("zero_stage 2 -> 3") for m in bare)
    # a remedy's values: only the fields it changes move, under their recipe names
    s = setup_from_values({"seq_len": 1024, "zero_stage": 2, "micro_batch_size": 2}, {"model": "Qwen2.5-7B"})
    after = values_after({"seq_len": 1024, "zero_stage": 2, "micro_batch_size": 2}, s,
                         replace(s, zero_stage=3, micro_batch=1, seq_len=512))
    assert after == {"seq_len": 512, "zero_stage": 3, "micro_batch_size": 1}


# --- An FSDP recipe: no DeepSpeed config; the rendered accelerate + trainer files say it all ---
FSDP_RECIPE = "llama8b-full-h100x8"


def test_fsdp_recipe_is_estimated_from_its_rendered_accelerate_and_trl_files():
    """accelerate.yaml says FSDP2 with FSDP's own checkpointing; sft.yaml turns the Trainer's off.
    The estimate must model FSDP2 with checkpointing on (what the run does), and fp32 sharded
    weights: accelerate 1.15's fsdp2_prepare_model upcasts trainable parameters when mixed
    precision is on, so a full fine-tune holds 4 + 4 + 8 bytes a parameter over 8 ranks."""
    res = recipe_memory.estimate(recipe.load(FSDP_RECIPE))
    s = res.setup
    assert (s.framework, s.gradient_checkpointing, s.fsdp_offload, s.trainer) == ("fsdp2", True, False, "trl")
    assert (s.gpus, s.seq_len, s.micro_batch, s.load_dtype) == (8, 4096, 4, "bf16")
    setup_phase = next(p for p in res.phases if p.name == "setup")
    step_phase = next(p for p in res.phases if p.name == "step")
    per_rank = res.params / 8
    assert setup_phase.by_category["params"] == pytest.approx(4 * per_rank, rel=0.01)
    assert step_phase.by_category["grads"] == pytest.approx(4 * per_rank, rel=0.01)


def test_fsdp_recipe_without_checkpointing_is_oom_and_says_why(run_cli):
    # The post-mortem's third outcome: neither FSDP's nor the Trainer's checkpointing at 4 x 4,096 tokens
    code, out, _ = run_cli("estimate", FSDP_RECIPE, "--set", "gradient_checkpointing=false", "--json")
    j = json.loads(out)
    assert code == 3 and j["verdict"] == "oom"
    assert any("gradient_checkpointing" in r["change"] and r["verdict"] != "oom" for r in j["remedies"])


@pytest.mark.parametrize("order", [("accelerate.yaml", "sft.yaml"), ("sft.yaml", "accelerate.yaml")])
def test_config_mode_merges_fsdp_checkpointing_in_any_order(order):
    """`estimate --config` on the rendered files: a TRL file without `deepspeed:` does not turn an
    FSDP2 run into DDP, and FSDP's checkpointing counts although the trainer file says false."""
    from ftrecipes.memory import configs

    folder = recipe.load(FSDP_RECIPE).dir / "rendered"
    _, out = configs.read([str(folder / name) for name in order])
    assert (out["framework"], out["gradient_checkpointing"], out["fsdp_offload"]) == ("fsdp2", True, False)
    _, trl_only = configs.read([str(folder / "sft.yaml")])
    assert (trl_only["framework"], trl_only["gradient_checkpointing"]) == ("ddp", False)


def test_fsdp_recipe_readme_verdicts():
    """The verdicts llama8b-full-h100x8's README quotes (memory and plan sections)."""
    from ftrecipes import values

    r = recipe.load(FSDP_RECIPE)

    def verdict(*sets):
        return recipe_memory.estimate(r, values.parse_sets(r, list(sets))).to_json()["verdict"]

    assert verdict() == "fits"
    assert verdict("micro_batch_size=8", "grad_accum=1") == "fits"
    assert verdict("gradient_checkpointing=false") == "oom"
    assert verdict("gradient_checkpointing=false", "micro_batch_size=1", "grad_accum=8") == "fits"
    assert verdict("gradient_checkpointing=false", "micro_batch_size=1", "grad_accum=8", "seq_len=8192") == "oom"
    assert verdict("seq_len=8192", "micro_batch_size=2", "grad_accum=4") == "fits"
