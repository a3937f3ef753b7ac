"""Smoke: MiniCPM-V finetune.py full fine-tune under ZeRO-3 with optimizer + parameter offload to pinned CPU.

The rendered launch.sh runs as the README says (`MINICPMV_FINETUNE_DIR=... bash launch.sh`,
default LAUNCHER=torchrun) with tests/frameworks/minicpmv_finetune.py as `finetune.py`: a
stand-in with the script's argument dataclasses and the fixed loading, training a tiny causal
LM that stands in for MiniCPM-V's language model (no vision tower or resampler; see its
docstring).

Overrides (recipe.yaml `smoke:`): tiny random model, generated text-only conversations in the
script's JSON format, gpus_per_node=2, seq_len 128, max_slice_nums 1, max_steps 3, a free
master port. CPU necessities: `--use_cpu true` appended to the torchrun command by a
`torchrun` wrapper first on PATH (TrainingArguments refuses bf16 without a GPU), and
FTRECIPES_CPU_DS_COMM=1 (tests/frameworks/cpu_ds_comm.py: deepspeed.comm initialised before
zero.Init, which accelerate's use_cpu path skips). ZeRO-3, offload devices, pinning, bf16,
the ds.json AdamW section, full fine-tuning and gradient checkpointing stay as rendered.

Why not OpenBMB/MiniCPM-V's own finetune/finetune.py under a transformers 4.x venv (the
recipe's transformers_version=4.44.2 variant; its flags are checked by transformers 4.44.2's
HfArgumentParser in test_framework_truth.py): the script (finetune/finetune.py, commit
d2db62b034fba20c7273db7acd039973c48690f4) loads `AutoModel.from_pretrained(...,
trust_remote_code=True)` and then needs what only MiniCPM-V's modeling code provides:
`model.vpm`, `model.llm`, `model.resampler`, `model.transform`, `model.config.slice_config`,
`patch_size` and `query_num`; dataset.py builds image slices for that vision tower. That code
(modeling_minicpmv.py, resampler.py) is published with the model on the Hugging Face Hub, not
in the GitHub repository, and this project reaches no model hub, so no tiny model can be
built for it and the stand-in stays.
"""

import json
import shutil

import pytest

from ftrecipes import devenv
from smoke_harness import FRAMEWORKS, assert_engine, free_port, launch, make_assets, read_probe, render_into
from test_smoke_qwen7b_lora_zero2_a100x2 import torchrun_shim

pytestmark = pytest.mark.smoke
NAME = "minicpmv-full-a100-40gx2"


def minicpmv_conversations(sft_jsonl, path):
    """finetune.py's data format: [{"id", "image", "conversations": [{"role", "content"}]}]; images unused."""
    rows = []
    for i, line in enumerate(open(sft_jsonl, encoding="utf-8")):
        user, assistant = json.loads(line)["messages"]
        rows.append({"id": str(i), "image": "unused.jpg", "conversations": [
            {"role": "user", "content": "<image>\n" + user["content"]},
            {"role": "assistant", "content": assistant["content"]}]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def test_full_zero3_offload_trains_through_launch_sh(tmp_path):
    assets = make_assets("trl", tmp_path / "assets")
    data = minicpmv_conversations(assets["sft"], tmp_path / "data" / "train.json")
    run, out = tmp_path / "run", tmp_path / "out"
    sets = [
        f"model={assets['model']}", f"dataset={data}", "gpus_per_node=2", "seq_len=128", "max_slice_nums=1",
        "max_steps=3", "logging_steps=1", f"output_dir={out}", f"master_port={free_port()}",
    ]
    render_into(NAME, sets, run)
    shutil.copy(FRAMEWORKS / "minicpmv_finetune.py", run / "finetune.py")
    env = devenv.run_env("trl")
    shim = torchrun_shim(tmp_path / "bin", shutil.which("torchrun", path=env["PATH"]), ["--use_cpu", "true"])
    launch("trl", ["bash", str(run / "launch.sh")], cwd=tmp_path, probe_dir=tmp_path / "probe", label=NAME,
           extra_env={"MINICPMV_FINETUNE_DIR": str(run), "PATH": f"{shim}:{env['PATH']}", "FTRECIPES_CPU_DS_COMM": "1"})

    ds = json.loads((run / "ds.json").read_text())
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and ds["bf16"]["enabled"] and ds["optimizer"]["type"] == "AdamW"
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True} == zero["offload_param"]
    # assert_engine: ZeRO-3, optimizer and params offloaded to cpu, both pinned, bf16, DeepSpeedCPUAdam, no LoRA.
    records = assert_engine(read_probe(tmp_path / "probe"), ds, world_size=2, lora=False, gradient_checkpointing=True)
    for recs in records.values():
        engine = next(r for r in recs if r["event"] == "engine")
        assert engine["optimizer"] == "DeepSpeedZeroOptimizer_Stage3", engine
        assert engine["trainable_params"] > 0 and engine["module_class"] != "PeftModelForCausalLM", engine
    # The fixed loading ran: ZeRO-3 seen before loading, model built partitioned, no device_map.
    for rank in (0, 1):
        load = json.loads((out / f"load_rank{rank}.json").read_text())
        assert load == {"zero3": True, "device_map": None, "partitioned_at_load": True, "dtype": "torch.bfloat16"}, load
    # The full 16-bit weights gathered for saving (needs stage3_gather_16bit_weights_on_model_save).
    assert (out / "model.safetensors").stat().st_size > 100_000
