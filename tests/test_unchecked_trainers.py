"""Configs of trainers lint does not check (formats.UNCHECKED) are recognised, not misjudged.

ms-swift's YAML and JSON argument files (`swift sft --config`) share most keys with the HF
Trainer's, so TRL's YAML format and DeepSpeed's one-marker JSON detection used to claim them and
call every ms-swift key ("model_author", "tuner_type") an error. Its launch scripts pass
`--warmup_ratio`, which its own TrainArguments keeps (swift/trainers/arguments.py) although
transformers 5 removed it. The files under tests/foreign are ms-swift's own, copied unchanged
(tests/foreign/SOURCES.yaml)."""

import json
import shutil
from pathlib import Path

from ftrecipes import lint

SWIFT = Path(__file__).resolve().parent / "foreign" / "modelscope__ms-swift"


def test_ms_swift_examples_get_no_findings():
    result = lint.run([str(SWIFT)])
    assert not result.unusable and result.findings == []
    # the launch script is still read (its accelerate command), only its trainer flags are ms-swift's
    assert any(str(path).endswith("train.sh") for path, _kind in result.checked)


def test_an_ms_swift_file_named_alone_says_whose_it_is(run_cli):
    code, out, _ = run_cli("lint", str(SWIFT / "examples/yaml/deepspeed/sft.yaml"))
    assert code == 2 and out.count("\n") == 1
    assert "a config for ms-swift (model_author, split_dataset_ratio, tuner_type)" in out
    code, out, _ = run_cli("lint", str(SWIFT / "examples/yaml/deepspeed/sft.json"))
    assert code == 2 and "ms-swift" in out


def test_the_ms_swift_keys_are_what_decides(run_cli, tmp_path):
    """Without its own keys the same script is an HF-Trainer script again (the removed flag is
    reported), and the same YAML is TRL's (its unknown keys are reported)."""
    script = (SWIFT / "examples/train/multi-gpu/fsdp2_lora/train.sh").read_text()
    assert "--tuner_type lora" in script and "--model_author swift" in script
    plain = script.replace("--tuner_type lora \\\n", "").replace("--model_author swift \\\n", "")
    (tmp_path / "train.sh").write_text(plain.replace("--model_name swift-robot", "--model_name x"))
    code, out, _ = run_cli("lint", str(tmp_path / "train.sh"))
    assert code == 1 and "removed-trainer-flag --warmup_ratio" in out, out
    yaml_text = (SWIFT / "examples/yaml/deepspeed/sft.yaml").read_text()
    kept = "\n".join(l for l in yaml_text.splitlines()
                     if not l.startswith(("tuner_type", "model_author", "split_dataset_ratio", "attn_impl")))
    (tmp_path / "sft.yaml").write_text(kept + "\n")
    code, out, _ = run_cli("lint", str(tmp_path / "sft.yaml"))
    assert code == 1 and "unknown key 'model_name'" in out, out


def test_a_trainer_arguments_json_is_not_taken_for_deepspeed(run_cli, tmp_path):
    """HfArgumentParser.parse_json_file reads TrainingArguments from JSON: gradient_accumulation_steps
    is a DeepSpeed marker too, but a file most of whose keys DeepSpeed does not have is not
    DeepSpeed's. A DeepSpeed file with one stray key still is."""
    args = {"output_dir": "out", "per_device_train_batch_size": 2, "learning_rate": 1e-5,
            "gradient_accumulation_steps": 4, "num_train_epochs": 1}
    (tmp_path / "args.json").write_text(json.dumps(args))
    code, out, _ = run_cli("lint", str(tmp_path / "args.json"))
    assert code == 2 and "cannot tell which kind" in out
    ds = {"train_batch_size": 8, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}, "bogus": 1}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    code, out, _ = run_cli("lint", str(tmp_path / "ds.json"))
    assert code == 1 and "unknown key 'bogus'" in out


def test_megatron_core_parallel_sizes_mark_a_file_lint_cannot_judge(run_cli, tmp_path):
    """LLaMA-Factory's examples/megatron/*.yaml run with USE_MCA=1, where mcore_adapter's
    McaSeq2SeqTrainingArguments takes Megatron-Core's keys (hparams/parser.py _TRAIN_MCA_ARGS,
    read at v0.9.5). Judged against the plain LLaMA-Factory schema every such key was an error."""
    text = ("model_name_or_path: Qwen/Qwen3-30B-A3B-Instruct-2507\nstage: sft\nfinetuning_type: full\n"
            "template: qwen3_nothink\ncutoff_len: 4096\noutput_dir: out\nper_device_train_batch_size: 1\n"
            "tensor_model_parallel_size: 1\npipeline_model_parallel_size: 4\nexpert_model_parallel_size: 2\n"
            "use_distributed_optimizer: true\n")
    (tmp_path / "mca.yaml").write_text(text)
    code, out, _ = run_cli("lint", str(tmp_path))
    assert out.strip() == "" or "unknown key" not in out, out
    code, out, _ = run_cli("lint", str(tmp_path / "mca.yaml"))
    assert code == 2 and "a config for Megatron-Core (expert_model_parallel_size" in out, out
    # with --kind it is judged as LLaMA-Factory's, and the keys plain LLaMA-Factory lacks are reported
    code, out, _ = run_cli("lint", "--kind", "llamafactory", str(tmp_path / "mca.yaml"))
    assert code == 1 and "unknown key 'tensor_model_parallel_size'" in out


ACCELERATE = Path(__file__).resolve().parent / "foreign" / "huggingface__accelerate"


def test_an_accelerate_sagemaker_config_is_not_judged_as_a_cluster_config(run_cli, tmp_path):
    """accelerate reads compute_environment AMAZON_SAGEMAKER files as SageMakerConfig, whose required
    fields are ec2_instance_type and iam_role_name; judged against ClusterConfig they were four false
    errors. accelerate's own test config (tests/foreign/SOURCES.yaml) is skipped in a walk."""
    result = lint.run([str(ACCELERATE)])
    assert result.findings == [] and result.checked == []
    code, out, _ = run_cli("lint", str(ACCELERATE / "tests/test_configs/0_30_0_sagemaker.yaml"))
    assert code == 2 and "a config for accelerate on SageMaker (ec2_instance_type, iam_role_name)" in out


def test_accelerate_keys_its_launcher_reads_are_not_unknown(run_cli, tmp_path):
    """fp8_config.backend: launch puts the YAML value into ACCELERATE_FP8_BACKEND as written and
    Accelerator reads it as FP8BackendType ("TE"), so the upper-case value accelerate's templates
    use is right. fsdp_config.fsdp_ignored_modules: utils/launch.py reads it with getattr though
    no flag names it. A made-up fsdp key is still reported."""
    text = ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: fp8\nnum_processes: 2\n"
            "fp8_config:\n  backend: TE\nfsdp_config:\n  fsdp_version: 2\n  fsdp_ignored_modules: vision_tower\n"
            "  fsdp_ignored_modulez: x\n")
    (tmp_path / "acc.yaml").write_text(text)
    code, out, _ = run_cli("lint", str(tmp_path / "acc.yaml"))
    assert code == 1 and out.count("\n") == 1 and "unknown key 'fsdp_ignored_modulez'" in out, out
