"""Smoke: TRL QLoRA SFT in one process, launched with the recipe's accelerate command.

Overrides (recipe.yaml `smoke:`): tiny local Mistral-shaped model and prompt-completion data,
seq_len 64, 3 optimizer steps; the recipe's micro batch (2), accumulation (4), LoRA settings,
packing, optimizer and 4-bit settings are kept. CPU necessities: use_cpu, sdpa attention.
bitsandbytes 0.50.2 registers CPU kernels for its 4-bit ops (bitsandbytes/backends/cpu/ops.py:
dequantize_4bit, gemv_4bit, the 8-bit blockwise optimizer update; quantize_4bit and gemm_4bit come
from backends/default/ops.py in PyTorch), so this is real QLoRA training: frozen NF4 base, LoRA
adapters, backward through the 4-bit layers, 8-bit AdamW steps.

Not exercised on CPU: bitsandbytes' CUDA kernels, flash attention (sdpa instead), real GPU
memory.
"""

import math

import pytest

from ftrecipes import shellcmd
from smoke_harness import free_port, launch, make_assets, read_probe, render_into

pytestmark = pytest.mark.smoke
NAME = "mistral7b-qlora-4090x1"
TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def _data(assets, data_dir):
    """The tiny assets' question-answer pairs as prompt-completion rows, the format of trl-lib/tldr.
    Packing puts several rows in one 64-token sequence, so the 64 rows are written four times:
    enough sequences for 3 full optimizer steps of micro 2 x accumulation 4 within one epoch."""
    import json

    rows = [json.loads(line) for line in open(assets["sft"])]
    data_dir.mkdir()
    with open(data_dir / "train.jsonl", "w") as fh:
        for row in rows * 4:
            user, assistant = row["messages"][0]["content"], row["messages"][1]["content"]
            fh.write(json.dumps({"prompt": user, "completion": " " + assistant}) + "\n")


def test_qlora_sft_trains_with_4bit_base(tmp_path):
    assets = make_assets("trl", tmp_path / "assets", arch="mistral")
    _data(assets, tmp_path / "data")
    run = tmp_path / "run"
    sets = [f"model={assets['model']}", f"dataset={tmp_path / 'data'}", "seq_len=64", "max_steps=3",
            "logging_steps=1", f"output_dir={tmp_path / 'out'}"]
    r = render_into(NAME, sets, run)
    defaults = r.meta["values"]
    [train] = [c for c in shellcmd.commands((run / "launch.sh").read_text()) if c.words[:2] == ["accelerate", "launch"]]
    argv = train.words + ["--use_cpu", "true", "--attn_implementation", "sdpa", "--save_strategy", "no"]
    launch("trl", argv, cwd=run, probe_dir=tmp_path / "probe", label=NAME,
           extra_env={"FTRECIPES_TRAINER_PROBE": "1", "MASTER_PORT": str(free_port())})
    records = read_probe(tmp_path / "probe")
    assert sorted(records) == [0], f"one process expected, ranks seen: {sorted(records)}"
    recs = records[0]
    assert not [x for x in recs if x["event"] == "probe-error"], recs
    [model] = [x for x in recs if x["event"] == "trainer"]

    # The frozen base: every linear layer of the decoder is bitsandbytes' 4-bit layer, NF4 with
    # nested quantisation, computing in bf16 (TRL: bnb_4bit_compute_dtype = dtype).
    decoder = [b for b in model["base_layers"] if ".layers." in b["name"]]
    assert len(decoder) == 2 * len(TARGETS), decoder  # tiny model: 2 layers x 7 linear layers
    for b in decoder:
        assert b["class"] == "bitsandbytes.nn.modules.Linear4bit" and b["weight_class"] == "Params4bit", b
        assert (b["quant_type"], b["nested"], b["compute_dtype"]) == ("nf4", True, "torch.bfloat16"), b
        assert b["weight_dtype"] == "torch.uint8" and not b["requires_grad"], b

    # LoRA: the recipe's rank, alpha and dropout; all-linear resolved to every decoder projection;
    # the adapters, and nothing else, train.
    [lora] = model["lora"].values()
    assert (lora["r"], lora["alpha"], lora["dropout"]) == (defaults["lora_rank"], defaults["lora_alpha"], defaults["lora_dropout"])
    # PEFT resolves all-linear to the module names it wrapped (lm_head excluded)
    assert {t.rsplit(".", 1)[-1] for t in lora["target_modules"]} == TARGETS, lora
    assert model["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in model["trainable"]), model["trainable"]
    assert len(model["trainable"]) == 2 * len(TARGETS) * 2
    assert model["gradient_checkpointing"] is True

    losses = [x["value"] for x in recs if x["event"] == "loss"]
    # 3 optimizer steps x gradient_accumulation_steps micro batches, each with a finite loss
    assert len(losses) == 3 * defaults["grad_accum"] and all(isinstance(v, float) and math.isfinite(v) for v in losses), losses

    # adamw_bnb_8bit: bitsandbytes' AdamW with 8-bit states, unpaged. bitsandbytes keeps 32-bit
    # states for tensors under min_8bit_size elements (bitsandbytes/optim/optimizer.py), so the
    # check is per tensor: uint8 moments exactly for the adapters at least that large.
    [done] = [x for x in recs if x["event"] == "trained"]
    assert done["global_step"] == 3
    assert done["optimizer"] == "bitsandbytes.optim.adamw.AdamW" and done["optim_bits"] == 8 and done["is_paged"] is False, done
    big = [s for s in done["states"] if s["numel"] >= done["min_8bit_size"]]
    assert big, "no adapter reaches min_8bit_size: the 8-bit path would not be exercised"
    for s in done["states"]:
        want = "torch.uint8" if s["numel"] >= done["min_8bit_size"] else "torch.float32"
        assert (s["state1"], s["state2"]) == (want, want), s
