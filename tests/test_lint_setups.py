"""What lint takes a file to be and which files it takes to be used together.

Layouts copy real repositories (LLaMA-Factory, TRL, OpenRLHF, QwenLM/Qwen, open-r1); each test
has a near-identical case that must come out the other way.
"""

import json
import textwrap

import pytest

from ftrecipes import cli, extras, lint, rules, shellcmd
from ftrecipes.errors import UserError

DS_AUTO = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}


def write(root, files):
    for name, content in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
    return root


def errors(result, rule=None):
    return [f for f in result.findings if f.severity == "error" and (rule is None or f.rule == rule)]


# --- detection -------------------------------------------------------------------------------------

AXOLOTL = textwrap.dedent("""\
    base_model: NousResearch/Meta-Llama-3-8B
    load_in_8bit: true
    datasets:
      - path: mhenrichsen/alpaca_2k_test
        type: alpaca
    output_dir: ./outputs/lora-out
    sequence_len: 4096
    sample_packing: true
    adapter: lora
    lora_r: 32
    gradient_accumulation_steps: 4
    micro_batch_size: 2
    num_epochs: 4
    learning_rate: 0.0002
    bf16: auto
    gradient_checkpointing: true
    logging_steps: 1
""")


def test_axolotl_yaml_is_axolotl_not_trl(tmp_path):
    # axolotl examples/llama-3/lora-8b.yml shares output_dir, learning_rate, bf16, ... with TRL.
    write(tmp_path, {"lora-8b.yml": AXOLOTL})
    result = lint.run([str(tmp_path / "lora-8b.yml")])
    assert result.checked == [(str(tmp_path / "lora-8b.yml"), "axolotl")]
    assert not errors(result)


def test_axolotl_key_typo_is_reported_and_an_empty_unknown_key_is_not(tmp_path):
    # axolotl's validate_config returns model_dump() of a model that ignores unknown keys: a typo is
    # dropped silently; an unknown key left empty (`debug:` in examples/llama-3/sparse-finetuning.yaml)
    # asks for nothing, and nothing is what happens.
    write(tmp_path, {"typo.yml": AXOLOTL.replace("learning_rate:", "lerning_rate:"), "empty.yml": AXOLOTL + "debug:\n"})
    found = errors(lint.run([str(tmp_path / "typo.yml")]))
    assert len(found) == 1 and "'lerning_rate'" in found[0].message and "learning_rate" in found[0].message
    assert not errors(lint.run([str(tmp_path / "empty.yml")]))
    assert errors(lint.run([str(write(tmp_path / "v", {"e.yml": AXOLOTL + "debug: true\n"}) / "e.yml")]))


def test_trl_yaml_without_axolotl_keys_stays_trl(tmp_path):
    write(tmp_path, {"sft.yaml": "model_name_or_path: m\noutput_dir: o\nlearning_rate: 2e-5\nbf16: true\nper_device_train_batch_size: 2\n"})
    assert lint.run([str(tmp_path / "sft.yaml")]).checked[0][1] == "trl"


# --- shell: heredocs and variables -----------------------------------------------------------------

OPENRLHF_HEREDOC = textwrap.dedent("""\
    set -x

    read -r -d '' training_commands <<EOF
    openrlhf.cli.train_sft \\
       --data.max_len 2048 \\
       --train.batch_size 256 \\
       --train.micro_batch_size 2 \\
       --ds.zero_stage 2 \\
       --ds.param_dtype bf16
    EOF

    if [[ ${1} != "slurm" ]]; then
        deepspeed --module $training_commands
    fi
""")


def test_heredoc_variable_is_spliced_with_its_own_lines():
    cmd = next(c for c in shellcmd.commands(OPENRLHF_HEREDOC) if c.words[:1] == ["deepspeed"])
    assert cmd.words[:3] == ["deepspeed", "--module", "openrlhf.cli.train_sft"]
    assert cmd.word_lines[cmd.words.index("--train.micro_batch_size")] == 7


@pytest.mark.parametrize("kind", [None, "openrlhf"])
def test_openrlhf_heredoc_script_is_linted_as_openrlhf(tmp_path, kind):
    # OpenRLHF examples/scripts/train_sft.sh keeps its flags in `read -r -d '' cmd <<EOF`.
    bad = OPENRLHF_HEREDOC.replace("--train.micro_batch_size", "--train.micro_batch_sizes")
    write(tmp_path, {"train_sft.sh": bad, "ok/train_sft.sh": OPENRLHF_HEREDOC})
    result = lint.run([str(tmp_path / "train_sft.sh")], kind=kind)
    assert result.checked[0][1] == "openrlhf"
    found = errors(result, "unknown-key")
    assert len(found) == 1 and "train.micro_batch_sizes" in found[0].message and found[0].line == 7
    assert not errors(lint.run([str(tmp_path / "ok/train_sft.sh")], kind=kind))


def test_multiline_quoted_variable_and_simple_variable_expand():
    # QwenLM/Qwen finetune/finetune_ds.sh: DISTRIBUTED_ARGS over several lines, DS_CONFIG_PATH="..."
    text = 'DS_CONFIG_PATH="finetune/ds_config_zero3.json"\nARGS="\n    --nproc_per_node 8 \\\n    --nnodes 1\n"\ntorchrun $ARGS finetune.py --deepspeed ${DS_CONFIG_PATH}\n'
    cmd = [c for c in shellcmd.commands(text) if c.words][-1]
    assert cmd.words == ["torchrun", "--nproc_per_node", "8", "--nnodes", "1", "finetune.py", "--deepspeed", "finetune/ds_config_zero3.json"]
    assert cmd.word_lines[1] == 3


def test_unknown_variable_stays_as_written():
    cmd = next(shellcmd.commands("torchrun --nproc_per_node $GPUS train.py\n"))
    assert cmd.words[2] == "$GPUS"


# --- references from the launch's working directory -------------------------------------------------

LF_TRAIN = "model_name_or_path: m\nstage: sft\ndo_train: true\nfinetuning_type: full\ndataset: identity\ntemplate: qwen\noutput_dir: o\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 2\ndeepspeed: examples/deepspeed/ds_z3_config.json\n"


def test_reference_resolves_from_repo_root(tmp_path):
    # LLaMA-Factory examples/train_full/*.yaml name `deepspeed: examples/deepspeed/ds_z3_config.json`,
    # a path from the repository top, where `llamafactory-cli train` is run.
    write(tmp_path, {".git/HEAD": "ref: refs/heads/main\n", "examples/deepspeed/ds_z3_config.json": DS_AUTO,
                     "examples/train_full/sft.yaml": LF_TRAIN})
    cfg = lint.load(str(tmp_path / "examples/train_full/sft.yaml"), True)
    cfg.root = lint.launch_root(cfg.path)
    assert lint.references(cfg) == [str(tmp_path / "examples/deepspeed/ds_z3_config.json")]


def test_reference_root_option_and_fallback_to_own_folder(tmp_path):
    write(tmp_path, {"repo/examples/deepspeed/ds_z3_config.json": DS_AUTO, "repo/examples/train_full/sft.yaml": LF_TRAIN,
                     "other/sft.yaml": LF_TRAIN.replace("examples/deepspeed/", ""), "other/ds_z3_config.json": DS_AUTO})
    sft = str(tmp_path / "repo/examples/train_full/sft.yaml")
    cfg = lint.load(sft, True)
    cfg.root = lint.launch_root(sft)  # no .git: nothing above is a repository top
    assert lint.references(cfg) == []
    cfg.root = lint.launch_root(sft, str(tmp_path / "repo"))
    assert lint.references(cfg) == [str(tmp_path / "repo/examples/deepspeed/ds_z3_config.json")]
    other = lint.load(str(tmp_path / "other/sft.yaml"), True)
    other.root = lint.launch_root(other.path, str(tmp_path / "repo"))  # outside --root: its own folder
    assert lint.references(other) == [str(tmp_path / "other/ds_z3_config.json")]


def test_cross_file_rule_runs_once_linked_from_root(tmp_path):
    ds = dict(DS_AUTO, train_micro_batch_size_per_gpu=4)
    write(tmp_path, {"examples/deepspeed/ds_z3_config.json": ds, "examples/train_full/sft.yaml": LF_TRAIN})
    linked = lint.run([str(tmp_path / "examples")], root=str(tmp_path))
    assert [f.path for f in errors(linked, "batch-arithmetic")] == [str(tmp_path / "examples/train_full/sft.yaml")]
    assert not errors(lint.run([str(tmp_path / "examples")]), "batch-arithmetic")  # unlinked without the root


# --- groups: alternatives are not a setup; command-line overrides win ------------------------------

def acc(n, extra=""):
    return f"compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: {n}\n{extra}"


def test_folder_of_alternative_configs_is_not_one_setup(tmp_path):
    # TRL examples/accelerate_configs/: multi_gpu.yaml (8 processes), alst_ulysses_4gpu.yaml (4), single_gpu.yaml (1)
    write(tmp_path, {"multi_gpu.yaml": acc(8), "ulysses.yaml": acc(4), "single_gpu.yaml": acc(1)})
    assert not errors(lint.run([str(tmp_path)]))


def test_folder_with_one_config_of_each_kind_is_one_setup(tmp_path):
    write(tmp_path, {"acc.yaml": acc(4), "run.sh": "#!/bin/bash\ntorchrun --nproc_per_node 8 train.py --deepspeed ds.json\n",
                     "ds.json": dict(DS_AUTO)})
    assert errors(lint.run([str(tmp_path)]), "batch-arithmetic")


def test_two_scripts_sharing_a_config_are_two_setups(tmp_path):
    # QwenLM/Qwen finetune/: finetune_lora_ds.sh and finetune_qlora_ds.sh both pass ds_config_zero2.json;
    # nobody runs the two scripts together, so their world sizes are not compared with each other.
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}}
    files = {"ds_config_zero2.json": ds, "ds_config_zero3.json": dict(ds, zero_optimization={"stage": 3}),
             "lora.sh": "#!/bin/bash\ntorchrun --nproc_per_node 8 finetune.py --deepspeed ds_config_zero2.json --output_dir o\n",
             "qlora.sh": "#!/bin/bash\ntorchrun --nproc_per_node 2 finetune.py --deepspeed ds_config_zero2.json --output_dir o\n"}
    assert not errors(lint.run([str(write(tmp_path / "a", files))]))
    files["ds_config_zero2.json"] = dict(ds, train_batch_size=16, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1)
    found = errors(lint.run([str(write(tmp_path / "b", files))]), "batch-arithmetic")
    assert len(found) == 1 and "world size 2" in found[0].message  # 16 = 2 x 1 x 8 holds for lora.sh only


def test_launch_line_num_processes_overrides_the_file(tmp_path):
    ds = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}}
    extra = "deepspeed_config:\n  deepspeed_config_file: ds.json\n"
    files = {"ds.json": ds, "acc.yaml": acc(8, extra).replace("MULTI_GPU", "DEEPSPEED"),
             "run.sh": "#!/bin/bash\naccelerate launch --config_file acc.yaml --num_processes 8 train.py\n"}
    assert not errors(lint.run([str(write(tmp_path / "a", files))]))
    files["run.sh"] = files["run.sh"].replace("--num_processes 8", "--num_processes 4")
    found = errors(lint.run([str(write(tmp_path / "b", files))]), "batch-arithmetic")
    assert found and all("num_processes 8" not in f.message for f in found)
    assert any("--num_processes 4" in f.message for f in found)


@pytest.mark.parametrize("launch,ok", [
    ("accelerate launch train.py --config sft.yaml --per_device_train_batch_size 4", True),
    ("accelerate launch train.py --config sft.yaml --per_device_train_batch_size 3", False),
    ("accelerate launch train.py --config sft.yaml", False),
])
def test_trainer_flags_on_the_launch_line_override_the_yaml(tmp_path, launch, ok):
    # TrlParser.parse_args_and_config: the YAML sets defaults, command-line flags win.
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}}
    acc_yaml = acc(2, "deepspeed_config:\n  deepspeed_config_file: ds.json\n").replace("MULTI_GPU", "DEEPSPEED")
    files = {"ds.json": ds, "acc.yaml": acc_yaml, "sft.yaml": "model_name_or_path: m\noutput_dir: o\nper_device_train_batch_size: 2\n",
             "run.sh": f"#!/bin/bash\n{launch.replace('accelerate launch', 'accelerate launch --config_file acc.yaml')}\n"}
    found = errors(lint.run([str(write(tmp_path, files))]), "batch-arithmetic")
    assert (not found) == ok, [f.message for f in found]


@pytest.mark.parametrize("value,ok", [("4", True), ("3", False)])
def test_llamafactory_cli_key_value_overrides_the_yaml(tmp_path, value, ok):
    ds = dict(DS_AUTO, train_micro_batch_size_per_gpu=4)
    files = {"examples/deepspeed/ds_z3_config.json": ds, "examples/train_full/sft.yaml": LF_TRAIN,
             "run.sh": f"#!/bin/bash\nllamafactory-cli train examples/train_full/sft.yaml per_device_train_batch_size={value}\n"}
    found = errors(lint.run([str(write(tmp_path, files))], root=str(tmp_path)), "batch-arithmetic")
    assert (not found) == ok, [f.message for f in found]


# --- config extras ----------------------------------------------------------------------------------

GRPO = "model_name_or_path: m\noutput_dir: o\nnum_generations: 8\nper_device_train_batch_size: 8\ndataset_mixture:\n  datasets: []\nsystem_prompt: hi\nsystem_promt: typo\n"
CONFIGS_PY = textwrap.dedent("""\
    from dataclasses import dataclass, field
    import trl

    @dataclass
    class DatasetConfig:
        id: str
        split: str = "train"

    @dataclass
    class ScriptArguments(trl.ScriptArguments):
        dataset_mixture: dict = None
        mixture_items: list[DatasetConfig] = field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class GRPOConfig(trl.GRPOConfig):
        system_prompt: str = field(default=None)
""")


def test_config_extras_from_python_module(tmp_path):
    # open-r1 src/open_r1/configs.py adds dataset_mixture and system_prompt to TRL's classes.
    write(tmp_path, {"configs.py": CONFIGS_PY, "grpo.yaml": GRPO})
    declared = extras.load([str(tmp_path / "configs.py")])
    assert declared == {"trl": {"dataset_mixture": "configs.ScriptArguments", "mixture_items": "configs.ScriptArguments",
                                "system_prompt": "configs.GRPOConfig"}}  # DatasetConfig is a nested value type
    plain = errors(lint.run([str(tmp_path / "grpo.yaml")]), "unknown-key")
    assert {m.message.split("'")[1] for m in plain} == {"dataset_mixture", "system_prompt", "system_promt"}
    found = errors(lint.run([str(tmp_path / "grpo.yaml")], options=rules.Options(config_extras=declared)), "unknown-key")
    assert len(found) == 1 and "'system_promt'" in found[0].message and "configs.GRPOConfig" in found[0].message


@pytest.mark.parametrize("runner", ["src/open_r1/grpo.py", "-m open_r1.grpo"])
def test_config_extras_from_the_launched_script(tmp_path, runner):
    # open-r1: `accelerate launch src/open_r1/grpo.py --config recipes/.../config_demo.yaml`, where
    # grpo.py imports its config classes from open_r1.configs (src/ layout).
    files = {".git/HEAD": "", "src/open_r1/configs.py": CONFIGS_PY, "src/open_r1/grpo.py": "from open_r1.configs import GRPOConfig\n",
             "recipes/demo/grpo.yaml": GRPO}
    write(tmp_path, files)
    plain = errors(lint.run([str(tmp_path / "recipes")]), "unknown-key")
    assert len(plain) == 3
    write(tmp_path, {"launch.sh": f"#!/bin/bash\naccelerate launch {runner} --config recipes/demo/grpo.yaml\n"})
    found = errors(lint.run([str(tmp_path / "recipes"), str(tmp_path / "launch.sh")]), "unknown-key")
    assert len(found) == 1 and "'system_promt'" in found[0].message and "configs.GRPOConfig" in found[0].message


def test_config_extras_declaration_file_and_bad_declaration(tmp_path):
    write(tmp_path, {"extras.yaml": "trl:\n  my.Args: [dataset_mixture, system_prompt]\n", "bad.yaml": "trl:\n  my.Args: dataset_mixture\n"})
    assert extras.load([str(tmp_path / "extras.yaml")]) == {"trl": {"dataset_mixture": "my.Args", "system_prompt": "my.Args"}}
    with pytest.raises(UserError) as err:
        extras.load([str(tmp_path / "bad.yaml")])
    assert err.value.line == 2 and "my.Args" in str(err.value)


def test_cli_config_extras_and_root(tmp_path, capsys):
    write(tmp_path, {"extras.yaml": "trl:\n  my.Args: [dataset_mixture, system_prompt]\n", "grpo.yaml": GRPO.replace("system_promt: typo\n", "")})
    assert cli.main(["lint", str(tmp_path / "grpo.yaml"), "--config-extras", str(tmp_path / "extras.yaml"), "--root", str(tmp_path)]) == 0
    assert cli.main(["lint", str(tmp_path / "grpo.yaml")]) == 1
    capsys.readouterr()


# --- FSDP1 / FSDP2 reshard_after_forward ------------------------------------------------------------

@pytest.mark.parametrize("version,value,ok", [
    (None, "FULL_SHARD", True), (1, "SHARD_GRAD_OP", True), (1, "true", False), (None, True, False),
    (2, True, True), (2, "false", True), (2, "FULL_SHARD", False),
])
def test_fsdp_reshard_after_forward_per_version(tmp_path, version, value, ok):
    # accelerate 1.15.0 FullyShardedDataParallelPlugin.__post_init__: FSDP1 maps a strategy name to
    # ShardingStrategy and raises on a bool; FSDP2 raises unless it gets a bool.
    fsdp = {"fsdp_reshard_after_forward": value}
    if version:
        fsdp["fsdp_version"] = version
    doc = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_processes": 2, "fsdp_config": fsdp}
    write(tmp_path, {"fsdp.yaml": json.dumps(doc)})
    found = errors(lint.run([str(tmp_path / "fsdp.yaml")], kind="accelerate"))
    assert (not found) == ok, [f.message for f in found]
