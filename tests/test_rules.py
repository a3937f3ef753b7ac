"""Each lint rule: a setup it flags and a near-identical one it passes."""

import json

import pytest

from ftrecipes import lint, rules

DS = {
    "train_batch_size": 16,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2},
}
FP16 = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
LF_LORA = ("model_name_or_path: m\nstage: dpo\ndo_train: true\nfinetuning_type: lora\ndeepspeed: ds.json\ntemplate: qwen\ncutoff_len: 128\n"
           "dataset_dir: data\nlora_target: all\npref_beta: 0.1\n"
           "output_dir: o\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 2\nfp16: true\n")
ACC = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\nnum_processes: 4\nnum_machines: 1\n"


TRL_SFT = "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 2\n"
WRAP = "fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: "


def fsdp(keys):
    """An accelerate FSDP config; keys: extra fsdp_config lines, each indented by two spaces."""
    return ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: bf16\nnum_machines: 1\n"
            "num_processes: 4\nfsdp_config:\n  fsdp_offload_params: false\n  " + keys)


def setup_dir(tmp_path, files):
    for name, content in files.items():
        if not isinstance(content, str):
            content = json.dumps(content, indent=2)
        (tmp_path / name).write_text(content)
    return tmp_path


def rule_hits(tmp_path, files, rule_id, **options):
    d = setup_dir(tmp_path, files)
    result = lint.run([str(d)], options=rules.Options(**options))
    assert not result.unusable, [str(e) for e in result.unusable]
    return [f for f in result.findings if f.rule == rule_id]


def ds(**changes):
    out = json.loads(json.dumps(DS))
    for key, value in changes.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return out


CASES = [
    # rule, flagged setup, passing setup, options
    ("bf16-unsupported", {"ds.json": ds()}, {"ds.json": ds(**{"bf16": None, "fp16": {"enabled": True, "loss_scale": 0}})}, {"gpu": "V100-32GB"}),
    ("precision-mismatch",
     {"ds.json": ds(), "acc.yaml": ACC, "grpo.yaml": "model_name_or_path: m\noutput_dir: o\nbf16: false\nfp16: true\nper_device_train_batch_size: 2\n"},
     {"ds.json": ds(), "acc.yaml": ACC, "grpo.yaml": "model_name_or_path: m\noutput_dir: o\nbf16: true\nfp16: false\nper_device_train_batch_size: 2\n"}, {}),
    ("fp16-no-loss-scaling", {"ds.json": ds(**{"bf16": None, "fp16": {"enabled": True, "loss_scale": 1}})},
     {"ds.json": ds(**{"bf16": None, "fp16": {"enabled": True, "loss_scale": 0}})}, {}),
    ("batch-arithmetic", {"ds.json": ds(train_batch_size=32), "acc.yaml": ACC}, {"ds.json": ds(), "acc.yaml": ACC}, {}),
    ("batch-arithmetic", {"ds.json": ds(train_batch_size=32)}, {"ds.json": ds(train_batch_size=16)}, {"gpus": 4}),
    ("batch-arithmetic",
     {"ds.json": ds(), "acc.yaml": ACC, "sft.yaml": "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"},
     {"ds.json": ds(), "acc.yaml": ACC, "sft.yaml": "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 2\n"}, {}),
    ("batch-arithmetic",
     {"ds.json": ds(), "run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 8 train.py --deepspeed ds.json\n"},
     {"ds.json": ds(), "run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 4 train.py --deepspeed ds.json\n"}, {}),
    ("grpo-batch-divisible",
     {"acc.yaml": ACC, "ds.json": ds(), "grpo.yaml": "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 2\nnum_generations: 6\nuse_vllm: false\n"},
     {"acc.yaml": ACC, "ds.json": ds(), "grpo.yaml": "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 2\nnum_generations: 8\nuse_vllm: false\n"}, {}),
    ("auto-without-trainer",
     {"ds.json": ds(train_batch_size="auto"), "run.sh": "#!/bin/bash\ndeepspeed --num_gpus 4 train.py --deepspeed_config ds.json\n"},
     {"ds.json": ds(train_batch_size="auto"), "run.sh": "#!/bin/bash\ndeepspeed --num_gpus 4 train.py --deepspeed ds.json\n"}, {}),
    ("stage-ignored-key", {"ds.json": ds(**{"zero_optimization.offload_param": {"device": "cpu"}})},
     {"ds.json": ds(**{"zero_optimization.stage": 3, "zero_optimization.offload_param": {"device": "cpu"}})}, {}),
    ("stage-ignored-key", {"ds.json": ds(**{"zero_optimization.stage3_max_live_parameters": 1000})},
     {"ds.json": ds(**{"zero_optimization.stage": 3, "zero_optimization.stage3_max_live_parameters": 1000})}, {}),
    ("offload-optimizer-type",
     {"ds.json": ds(**{"zero_optimization.offload_optimizer": {"device": "cpu"}, "optimizer": {"type": "Lamb", "params": {"lr": 0.001}}})},
     {"ds.json": ds(**{"zero_optimization.offload_optimizer": {"device": "cpu"}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})}, {}),
    ("optimizer-max-grad-norm",
     {"ds.json": ds(**{"optimizer": {"type": "AdamW", "params": {"lr": 0.001, "max_grad_norm": 1.0}}})},
     {"ds.json": ds(**{"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "gradient_clipping": 1.0})}, {}),
    ("processes-vs-devices",
     {"ds.json": ds(), "acc.yaml": ACC, "run.sh": "#!/bin/bash\nCUDA_VISIBLE_DEVICES=0,1 accelerate launch --config_file acc.yaml train.py\n"},
     {"ds.json": ds(), "acc.yaml": ACC, "run.sh": "#!/bin/bash\nCUDA_VISIBLE_DEVICES=0,1,2,3 accelerate launch --config_file acc.yaml train.py\n"}, {}),
    ("vllm-gpu-overlap",
     {"ds.json": ds(), "acc.yaml": ACC, "run.sh": "#!/bin/bash\nCUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve --model m &\nCUDA_VISIBLE_DEVICES=3,4,5,6 accelerate launch --config_file acc.yaml -m trl.scripts.grpo\n"},
     {"ds.json": ds(), "acc.yaml": ACC, "run.sh": "#!/bin/bash\nCUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve --model m &\nCUDA_VISIBLE_DEVICES=4,5,6,7 accelerate launch --config_file acc.yaml -m trl.scripts.grpo\n"}, {}),
    ("vllm-gpu-overlap",
     {"run.sh": "#!/bin/bash\ntrl vllm-serve --model m &\naccelerate launch --num_processes 8 -m trl.scripts.grpo\n"},
     {"run.sh": "#!/bin/bash\nCUDA_VISIBLE_DEVICES=0 trl vllm-serve --model m &\nCUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --num_processes 7 -m trl.scripts.grpo\n"}, {}),
    # LLaMA-Factory LoRA + fp16: ZeRO-3 leaves the fp32 adapters as they are (static scale 1.0);
    # at ZeRO-2 DeepSpeed casts them to fp16 and scales dynamically (smoke test of qwen7b-dpo-v100x8).
    ("fp16-static-loss-scale",
     {"ds.json": ds(**{"bf16": None, "fp16": FP16, "zero_optimization.stage": 3}), "dpo.yaml": LF_LORA},
     {"ds.json": ds(**{"bf16": None, "fp16": FP16, "zero_optimization.stage": 2}), "dpo.yaml": LF_LORA}, {}),
    ("fp16-static-loss-scale",  # "auto" takes the trainer's fp16; the default finetuning_type is lora
     {"ds.json": ds(**{"bf16": None, "fp16": {"enabled": "auto"}, "zero_optimization.stage": 3}),
      "dpo.yaml": LF_LORA.replace("finetuning_type: lora\n", "")},
     {"ds.json": ds(**{"bf16": None, "fp16": {"enabled": "auto"}, "zero_optimization.stage": 3}),
      "dpo.yaml": LF_LORA.replace("finetuning_type: lora", "finetuning_type: full")}, {}),
    ("zero3-loading",
     {"ds.json": ds(**{"zero_optimization.stage": 3}), "run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 4 finetune.py --deepspeed ds.json --low_cpu_mem_usage True\n"},
     {"ds.json": ds(**{"zero_optimization.stage": 2}), "run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 4 finetune.py --deepspeed ds.json --low_cpu_mem_usage True\n"}, {}),
    # FSDP rules: facts from accelerate 1.15 (utils/dataclasses.py, utils/launch.py) as read in the trl stack.
    ("fsdp-version-key", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_use_orig_params: true\n")},
     {"acc.yaml": fsdp("fsdp_version: 1\n  fsdp_use_orig_params: true\n")}, {}),
    ("fsdp-version-key", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_backward_prefetch: BACKWARD_PRE\n")},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_backward_prefetch: NO_PREFETCH\n")}, {}),
    ("fsdp-version-key", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_state_dict_type: LOCAL_STATE_DICT\n")},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n")}, {}),
    ("fsdp-version-key", {"acc.yaml": fsdp("fsdp_activation_checkpointing: true\n  fsdp_activation_checkpointing_offload: true\n")},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_activation_checkpointing: true\n  fsdp_activation_checkpointing_offload: true\n")}, {}),
    ("fsdp-with-deepspeed", {"acc.yaml": fsdp("fsdp_version: 2\n") + "deepspeed_config:\n  zero_stage: 3\n"},
     {"acc.yaml": fsdp("fsdp_version: 2\n")}, {}),
    ("fsdp-with-deepspeed", {"acc.yaml": fsdp("fsdp_version: 2\n"), "ds.json": ds(), "sft.yaml": TRL_SFT + "deepspeed: ds.json\n"},
     {"acc.yaml": fsdp("fsdp_version: 2\n"), "sft.yaml": TRL_SFT}, {}),
    ("fsdp-cpu-ram-loading", {"acc.yaml": fsdp("fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: false\n")},
     {"acc.yaml": fsdp("fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: true\n")}, {}),
    ("fsdp-cpu-ram-loading", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_sync_module_states: false\n")},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_cpu_ram_efficient_loading: false\n  fsdp_sync_module_states: false\n")}, {}),
    ("fsdp-qlora-dtype", {"acc.yaml": fsdp("fsdp_version: 1\n"), "sft.yaml": TRL_SFT + "load_in_4bit: true\ndtype: bfloat16\n"},
     {"acc.yaml": fsdp("fsdp_version: 1\n"), "sft.yaml": TRL_SFT + "load_in_4bit: true\ndtype: bfloat16\nbnb_4bit_quant_storage: bfloat16\n"}, {}),
    ("fsdp-qlora-dtype", {"acc.yaml": fsdp(""), "sft.yaml": TRL_SFT + "load_in_4bit: true\nbnb_4bit_quant_storage: bfloat16\n"},
     {"acc.yaml": fsdp("fsdp_version: 2\n"), "sft.yaml": TRL_SFT + "load_in_4bit: true\nbnb_4bit_quant_storage: bfloat16\n"}, {}),
    ("fsdp-wrap-class",
     {"acc.yaml": fsdp(WRAP + "LlamaDecoderLayer\n"), "sft.yaml": TRL_SFT.replace("model_name_or_path: m", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct")},
     {"acc.yaml": fsdp(WRAP + "Qwen2DecoderLayer\n"), "sft.yaml": TRL_SFT.replace("model_name_or_path: m", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct")}, {}),
    # transformers 5.23 refuses FSDP's and the Trainer's checkpointing together; TRL turns the latter on by default
    ("fsdp-checkpointing-twice", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_activation_checkpointing: true\n"), "sft.yaml": TRL_SFT},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_activation_checkpointing: true\n"), "sft.yaml": TRL_SFT + "activation_checkpointing: false\n"}, {}),
    ("fsdp-checkpointing-twice", {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_activation_checkpointing: true\n"), "sft.yaml": TRL_SFT + "gradient_checkpointing: true\n"},
     {"acc.yaml": fsdp("fsdp_version: 2\n  fsdp_activation_checkpointing: false\n"), "sft.yaml": TRL_SFT + "gradient_checkpointing: true\n"}, {}),
    # QwenLM/Qwen finetune/finetune_ds.sh passes --evaluation_strategy, which transformers 5 renamed.
    ("removed-trainer-flag",
     {"run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 2 finetune.py --output_dir o --evaluation_strategy no\n"},
     {"run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 2 finetune.py --output_dir o --eval_strategy no --torch_dtype bfloat16\n"}, {}),
]


def assert_flags_bad_passes_good(tmp_path, rule_id, bad, good, options):
    """The pattern every rule's test follows (test_versions uses it too)."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    hits = rule_hits(tmp_path / "bad", bad, rule_id, **options)
    assert hits, f"{rule_id} did not flag"
    assert all(h.line >= 1 and h.column >= 1 for h in hits)
    assert rule_hits(tmp_path / "good", good, rule_id, **options) == []


@pytest.mark.parametrize("rule_id, bad, good, options", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_flags_bad_and_passes_good(tmp_path, rule_id, bad, good, options):
    assert_flags_bad_passes_good(tmp_path, rule_id, bad, good, options)


def test_bf16_is_fine_on_a_gpu_with_bf16(tmp_path):
    assert rule_hits(tmp_path, {"ds.json": ds()}, "bf16-unsupported", gpu="A100-80GB") == []
    assert rule_hits(tmp_path, {"ds.json": ds()}, "bf16-unsupported", gpu="T4")


def test_removed_trainer_flag_follows_the_named_transformers_version(tmp_path):
    """--warmup_ratio is what a transformers 4.x script takes (the 4.x variant of the HF-script
    recipes renders it) and what 5.15+ removed: an error unless the user names (or the repository
    pins) a release that has it, where it is a warning that an upgrade breaks the script."""
    run = {"run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 2 finetune.py --output_dir o --warmup_ratio 0.01\n"}
    for sub in "abcde":
        (tmp_path / sub).mkdir()

    def severities(sub, files=run, **options):
        return [f.severity for f in rule_hits(tmp_path / sub, files, "removed-trainer-flag", **options)]

    assert severities("a") == ["error"]
    assert severities("b", framework_versions={"transformers": "5.23.0"}) == ["error"]
    assert severities("c", framework_versions={"transformers": "4.52.3"}) == ["warning"]  # in the key history
    assert severities("d", framework_versions={"transformers": "4.32.0"}) == ["warning"]  # older than all of it
    # The repository's pin counts as the named version does (QwenLM/Qwen's requirements.txt).
    (tmp_path / "e" / ".git").mkdir()
    assert severities("e", {**run, "requirements.txt": "transformers>=4.32.0,<4.38.0\n"}) == ["warning"]


def test_every_rule_has_doc_and_a_test():
    from test_versions import CASES as VERSION_CASES  # framework-version's cases live there

    tested = {c[0] for c in CASES + VERSION_CASES}
    for r in rules.all_rules().values():
        assert len(r.doc) > 80, r.id
        if r.check is not None and r.id != "memory-fit":
            assert r.id in tested, f"{r.id} has no flag/pass test"


def test_explain(run_cli):
    code, out, _ = run_cli("lint", "--explain", "vllm-gpu-overlap")
    assert code == 0 and "gpu_memory_utilization" in out
    code, out, _ = run_cli("lint", "--explain", "fp16-static-loss-scale")
    assert code == 0 and "static scale of 1.0" in out and "CreateLossScaler" in out
    code, _, err = run_cli("lint", "--explain", "vllm-gpu-overlp")
    assert code == 2 and "did you mean 'vllm-gpu-overlap'" in err


def test_referenced_file_outside_targets_joins_the_setup(tmp_path, run_cli):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "ds.json").write_text(json.dumps(ds(train_batch_size=32)))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "acc.yaml").write_text(ACC.replace("ds.json", "../cfg/ds.json"))
    code, out, _ = run_cli("lint", str(tmp_path / "run" / "acc.yaml"))
    assert code == 1 and "batch-arithmetic" in out and "cfg/ds.json" in out


def test_github_format(tmp_path, run_cli):
    setup_dir(tmp_path, {"ds.json": ds(train_batch_size=32), "acc.yaml": ACC})
    code, out, _ = run_cli("lint", "--format", "github", str(tmp_path))
    assert code == 1
    line = out.strip().splitlines()[0]
    assert line.startswith(f"::error file={tmp_path}/ds.json,line=2,col=3,title=batch-arithmetic::")


def test_sarif_format(tmp_path, run_cli):
    setup_dir(tmp_path, {"ds.json": ds(train_batch_size=32), "acc.yaml": ACC})
    code, out, _ = run_cli("lint", "--format", "sarif", str(tmp_path))
    doc = json.loads(out)
    assert code == 1 and doc["version"] == "2.1.0"
    [res] = doc["runs"][0]["results"]
    assert res["ruleId"] == "batch-arithmetic"
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 3}
    assert [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]] == ["batch-arithmetic"]


def test_memory_fit_flags_post_mortem_4_and_passes_the_fix(tmp_path, run_cli):
    """OpenRLHF SFT of Llama-3-8B on one A100-80GB: OOM without adam_offload, fits with it."""
    import shutil

    from ftrecipes import recipe

    src = recipe.load("llama8b-sft-a100x1").dir / "rendered"
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(src, good)
    shutil.copytree(src, bad)
    (bad / "launch.sh").write_text((bad / "launch.sh").read_text().replace("  --ds.adam_offload \\\n", ""))
    d = json.loads((bad / "ds.json").read_text())
    d["zero_optimization"].pop("offload_optimizer")
    (bad / "ds.json").write_text(json.dumps(d, indent=2))
    code, out, _ = run_cli("lint", "--gpu", "A100-80GB", str(bad))
    assert code == 1 and "memory-fit" in out and "offload_optimizer" in out
    assert run_cli("lint", "--gpu", "A100-80GB", str(good))[0] == 0
    assert run_cli("lint", str(bad))[0] == 0  # no hardware given: not judged


def test_memory_fit_judges_every_recipe_on_its_own_hardware(run_cli):
    from ftrecipes import recipe

    for r in recipe.all_recipes():
        code, out, _ = run_cli("lint", "--gpu", r.meta["hardware"]["gpu"], str(r.dir / "rendered"))
        assert code == 0, out


LF_Z3_LORA = ("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
              "lora_target: all\ndeepspeed: ds.json\ntemplate: qwen\ncutoff_len: 1024\ndataset: d\noutput_dir: o\n"
              "per_device_train_batch_size: 1\nbf16: true\n")
Z3 = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}


@pytest.mark.parametrize("reentrant,version,fails", [
    ("false", "0.18.4", True),
    ("true", "0.18.4", False),   # LLaMA-Factory's default, and the fix the message names
    ("false", "0.19.3", False),  # PR #8148 (tests/test_memory_recompute_pins.py runs both sides)
])
def test_memory_fit_says_a_zero3_lora_run_will_not_run(tmp_path, reentrant, version, fails):
    """lint reads the files as `estimate --config` does, so the estimate's will-not-run errors reach
    it: LoRA under ZeRO-3 with non-reentrant checkpointing fails in DeepSpeed before 0.19.3."""
    files = {"sft.yaml": LF_Z3_LORA + f"use_reentrant_gc: {reentrant}\n", "ds.json": Z3}
    hits = rule_hits(tmp_path, files, "memory-fit", gpu="H100-80GB", gpus=2,
                     framework_versions={"deepspeed": version})
    assert [h.message for h in hits if "will not run" in h.message] == (
        [hits[0].message] if fails else []), [h.message for h in hits]
    if fails:
        assert "CheckpointError" in hits[0].message and "use_reentrant_gc: true" in hits[0].message
        assert hits[0].severity == "error"


def test_memory_fit_reads_settings_beyond_the_deepspeed_json(tmp_path):
    """No DeepSpeed file at all, and a 4-bit base: judged the way `estimate --config` judges it.
    Qwen2.5-14B LoRA in bf16 needs ~28 GiB of weights per card; its QLoRA fits a 24 GB card."""
    lf = ("model_name_or_path: Qwen/Qwen2.5-14B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
          "lora_target: all\ntemplate: qwen\ncutoff_len: 1024\ndataset: d\noutput_dir: o\n"
          "per_device_train_batch_size: 1\nbf16: true\n")
    (tmp_path / "bf16").mkdir()
    (tmp_path / "qlora").mkdir()
    [hit] = rule_hits(tmp_path / "bf16", {"sft.yaml": lf}, "memory-fit", gpu="RTX-4090", gpus=1)
    assert "exceeds" in hit.message and hit.path.endswith("sft.yaml")
    assert rule_hits(tmp_path / "qlora", {"sft.yaml": lf + "quantization_bit: 4\n"}, "memory-fit",
                     gpu="RTX-4090", gpus=1) == []
    # the same file without do_train (TrainingArguments' default False) trains nothing
    (tmp_path / "predict").mkdir()
    assert rule_hits(tmp_path / "predict", {"sft.yaml": lf.replace("do_train: true\n", "do_predict: true\n")},
                     "memory-fit", gpu="RTX-4090", gpus=1) == []


def test_memory_fit_judges_what_the_card_needs_with_expandable_segments(tmp_path):
    """`axolotl train` runs with expandable segments, so before an OOM PyTorch hands back the free
    pages between live blocks too (tests/test_memory_expandable_segments.py): at a length where the
    estimate needs less than the card but the cached figure is over it, lint flags the run only when
    the launch turns the setting off, and says what nvidia-smi would show."""
    ax = ("base_model: meta-llama/Llama-3.1-8B-Instruct\nadapter: lora\nlora_r: 16\nlora_target_linear: true\n"
          "gradient_checkpointing: true\nbf16: true\nmicro_batch_size: 1\nflash_attention: true\n"
          "datasets:\n  - path: d.jsonl\n    type: alpaca\nsequence_len: {n}\n")
    off = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False axolotl train ax.yaml\n"
    for n in range(16384, 65537, 2048):
        (tmp_path / f"on{n}").mkdir()
        (tmp_path / f"off{n}").mkdir()
        on_hits = rule_hits(tmp_path / f"on{n}", {"ax.yaml": ax.format(n=n)}, "memory-fit", gpu="A100-80GB", gpus=1)
        off_hits = rule_hits(tmp_path / f"off{n}", {"ax.yaml": ax.format(n=n), "run.sh": off}, "memory-fit",
                             gpu="A100-80GB", gpus=1)
        if any("exceeds" in h.message for h in off_hits) and on_hits and not any("exceeds" in h.message for h in on_hits):
            # tight: what the card needs is within 10 % of it, the cached figure is over it
            assert "headroom" in on_hits[0].message and "nvidia-smi would show" in on_hits[0].message, on_hits[0].message
            return
    pytest.fail("no length at which only the cache the allocator hands back puts the run over the card")


def test_memory_fit_leaves_a_trl_config_without_its_launcher_alone(tmp_path):
    """open-r1's full SFT recipe style: a TRL config whose ZeRO-3 comes from the accelerate
    config on the command line. Alone on 8 GPUs it is not judged (DDP would be a guess); with its
    accelerate config beside it, or on one GPU, it is."""
    # 14B in bf16 with bf16 AdamW states: 4 x 2 bytes a parameter, more than one 80 GB card
    trl = ("model_name_or_path: Qwen/Qwen2.5-14B\noutput_dir: o\nper_device_train_batch_size: 1\n"
           "max_length: 4096\nbf16: true\ndtype: bfloat16\n")
    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
           "  zero3_init_flag: true\nmixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n")
    for sub in ("alone", "one", "acc"):
        (tmp_path / sub).mkdir()
    assert rule_hits(tmp_path / "alone", {"sft.yaml": trl}, "memory-fit", gpu="A100-80GB", gpus=8) == []
    assert rule_hits(tmp_path / "one", {"sft.yaml": trl}, "memory-fit", gpu="A100-80GB", gpus=1)
    assert rule_hits(tmp_path / "acc", {"sft.yaml": trl, "zero3.yaml": acc}, "memory-fit",
                     gpu="A100-80GB", gpus=8) == []


def test_fp16_static_loss_scale_on_llamafactorys_own_zero3_lora_example(tmp_path):
    """tests/realworld/llamafactory-lora-sft-ds3, a LoRA SFT setup in LLaMA-Factory's example style whose
    DeepSpeed file has the fp16 and zero_optimization sections of LLaMA-Factory's own
    examples/deepspeed/ds_z3_config.json (hiyouga/LLaMA-Factory@1d6e8b218240): clean in bf16; flagged
    when switched to fp16 as a V100 user must (bf16-unsupported's advice): its fp16 section is inert."""
    from pathlib import Path

    src = Path(__file__).resolve().parent / "realworld" / "llamafactory-lora-sft-ds3"
    files = {p.name: p.read_text() for p in src.iterdir()}
    assert rule_hits(tmp_path, files, "fp16-static-loss-scale") == []
    files["llama3_lora_sft_ds3.yaml"] = files["llama3_lora_sft_ds3.yaml"].replace("bf16: true", "fp16: true")
    (tmp_path / "fp16").mkdir()
    [hit] = rule_hits(tmp_path / "fp16", files, "fp16-static-loss-scale")
    assert hit.path.endswith("ds_z3_config.json") and "static loss scale of 1.0" in hit.message


def test_fsdp_rules_stay_silent_where_the_facts_are_unknown(tmp_path):
    """An uncatalogued model gives no wrap class to compare with; LLaMA-Factory sets
    bnb_4bit_quant_storage to the compute dtype itself (model/model_utils/quantization.py,
    "crucial for fsdp+qlora"), so its QLoRA under FSDP1 has one dtype."""
    for sub in "ab":
        (tmp_path / sub).mkdir()
    wrong_class = {"acc.yaml": fsdp(WRAP + "LlamaDecoderLayer\n"), "sft.yaml": TRL_SFT.replace("model_name_or_path: m", "model_name_or_path: org/unknown-7b")}
    assert rule_hits(tmp_path / "a", wrong_class, "fsdp-wrap-class") == []
    lf_qlora = {"acc.yaml": fsdp("fsdp_version: 1\n"),
                "sft.yaml": "model_name_or_path: m\nstage: sft\ndo_train: true\nfinetuning_type: lora\nquantization_bit: 4\ntemplate: qwen\n"
                            "dataset_dir: data\noutput_dir: o\nper_device_train_batch_size: 2\nbf16: true\n"}
    assert rule_hits(tmp_path / "b", lf_qlora, "fsdp-qlora-dtype") == []


@pytest.mark.parametrize("prefix", ["srun -p gpu --gres=gpu:8 --job-name=python_job ", "nohup ", "env A=1 B=2 ",
                                    "mpirun -np 8 -x PYTHONPATH ", "time nohup ", "/usr/bin/env "])
def test_wrapped_commands_are_judged_like_bare_ones(tmp_path, prefix):
    """InternVL launches its training scripts as `srun -p $PARTITION --gres=gpu:8 ... python -u
    train.py --evaluation_strategy ...`; a wrapper's own options come before the program it runs,
    so the command judged is the first word naming a launcher or a Python interpreter after it."""
    text = f"#!/bin/bash\n{prefix}python -u finetune.py --output_dir o --evaluation_strategy no\n"
    hits = rule_hits(tmp_path, {"run.sh": text}, "removed-trainer-flag")
    assert [f.severity for f in hits] == ["error"] and hits[0].column == text.split("\n")[1].index("--eval") + 1, hits


def test_a_wrapper_with_no_program_after_it_is_left_as_written():
    from ftrecipes import shellcmd

    (cmd,) = shellcmd.commands("nohup ./run_all.sh --fast\n")
    assert cmd.words[0] == "nohup"
    (cmd,) = shellcmd.commands("env CUDA_VISIBLE_DEVICES=0 torchrun --nproc_per_node 1 t.py\n")
    assert cmd.words[0] == "torchrun" and cmd.env == {"CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.parametrize("line, tasks", [
    ("srun -p llm --ntasks=16 --ntasks-per-node=8 --gres=gpu:8 python -u train.py\n", "16"),
    ("srun -N 2 --ntasks-per-node=8 python train.py\n", "16"),
    ("srun --ntasks 4 python train.py\n", "4"),
    ("srun -n $NGPU python train.py\n", "$NGPU"),
    ("mpirun -np 8 -x PYTHONPATH python train.py\n", "8"),
    # one launcher per node: torchrun's own flags count the processes
    ("srun -N 2 --ntasks-per-node=1 torchrun --nnodes 2 --nproc_per_node 8 train.py\n", None),
    ("srun -p gpu --gres=gpu:8 python train.py\n", None)])
def test_a_job_launchers_task_count_is_the_process_count_of_a_python_command(line, tasks):
    """srun(1) starts --ntasks copies of its command (or --ntasks-per-node on each of --nodes),
    Open MPI's mpirun -np that many: for a Python training script each is one training process
    (InternVL's `srun ... --ntasks=${GPUS} python -u train.py`)."""
    from ftrecipes import shellcmd

    (cmd,) = shellcmd.commands(line)
    assert (cmd.tasks[0] if cmd.tasks else None) == tasks


def test_a_flag_the_scripts_own_dataclass_defines_is_not_a_removed_trainer_flag(tmp_path, run_cli):
    """s1's gpt-accelera finetune.py parses its flags with dataclasses of its own that still define
    warmup_ratio, and its scripts_finetune/*.sh run `torchrun ... finetune.py` from the project
    folder above them: the flag is the script's, not transformers'. The same flag passed to a
    script without such a field is still reported."""
    (tmp_path / ".git").mkdir()
    proj = tmp_path / "proj"
    (proj / "scripts").mkdir(parents=True)
    (proj / "finetune.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass TrainingArguments:\n"
        "    output_dir: str = 'o'\n    warmup_ratio: float = 0.0\n")
    (proj / "scripts" / "sft.sh").write_text(
        "#!/bin/bash\ntorchrun --nproc_per_node 2 finetune.py --output_dir o --warmup_ratio 0.03\n")
    code, out, _ = run_cli("lint", str(tmp_path))
    assert code == 0 and "removed-trainer-flag" not in out, out
    (proj / "finetune.py").write_text("import transformers\nparser = transformers.HfArgumentParser(transformers.TrainingArguments)\n")
    code, out, _ = run_cli("lint", str(tmp_path))
    assert code == 1 and "removed-trainer-flag --warmup_ratio" in out, out


def test_removed_trainer_flags_come_from_the_key_history_too(tmp_path):
    """The schema names five removed TrainingArguments keys; the key history of transformers saw
    33 leave (FastChat's train scripts pass --fsdp_transformer_layer_cls_to_wrap, gone in 5.0)."""
    text = "#!/bin/bash\ntorchrun --nproc_per_node 2 train.py --output_dir o --fsdp_transformer_layer_cls_to_wrap X\n"
    hits = rule_hits(tmp_path, {"run.sh": text}, "removed-trainer-flag")
    assert [f.severity for f in hits] == ["error"] and "up to transformers 4.57" in hits[0].message, hits
