"""Linting a whole repository judges its training configs and nothing else.

Found by linting public repositories as trees (unsloth, Liger-Kernel, PEFT, axolotl, OpenRLHF,
open-r1, philschmid's recipes): every error in the first three was a file of another tool, and
most of open-r1's were keys its own scripts define. The files under tests/foreign are copied
unchanged from those repositories (tests/foreign/SOURCES.yaml).
"""

import shutil
import subprocess
from pathlib import Path

from ftrecipes import extras, lint

FOREIGN = Path(__file__).resolve().parent / "foreign"


def test_files_of_other_tools_are_skipped_in_a_walk(tmp_path):
    """tsconfig.json (JSON with comments), a metrics JSON with NaN, mkdocs.yml with a Python tag:
    none parses as a config and none names a key of a format lint checks."""
    for rel in ("unslothai__unsloth/studio/frontend/tsconfig.app.json",
                "unslothai__unsloth/tests/kaggle/t4_smoke/references/t4_qwen2.5-0.5b.json",
                "linkedin__Liger-Kernel/mkdocs.yml"):
        shutil.copy(FOREIGN / rel, tmp_path / Path(rel).name)
    (tmp_path / "notes.yaml").write_text("")
    result = lint.run([str(tmp_path)], skip_unknown=False)
    assert result.findings == [] and result.checked == []
    assert result.unusable == [] and result.notes == [f"no configs found in {tmp_path}; nothing was checked"]


def test_a_broken_config_in_a_walk_is_still_reported(tmp_path):
    """The keys are read off the text: a DeepSpeed JSON with a trailing comma or a NaN, or a TRL
    YAML with a tab, names its format's keys and stays an error."""
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 3},}')
    (tmp_path / "ds_nan.json").write_text('// ZeRO-3\n{"train_batch_size": 8, "gradient_clipping": NaN}')
    (tmp_path / "sft.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B\nlearning_rate: 1e-5\n"
                                       "per_device_train_batch_size:\n\t- 2\n")
    result = lint.run([str(tmp_path)])
    messages = sorted(f"{Path(e.path).name}: {e}" for e in result.unusable)
    assert len(messages) == 3, messages
    assert "invalid JSON" in messages[0] and "NaN is not a JSON number" in messages[1] or \
        "unexpected character" in messages[1], messages
    assert messages[2].startswith("sft.yaml") and "invalid YAML" in messages[2], messages


def test_a_foreign_file_named_alone_is_still_an_error(run_cli):
    code, out, _ = run_cli("lint", str(FOREIGN / "unslothai__unsloth/studio/frontend/tsconfig.app.json"))
    assert code == 2 and out.count("\n") == 1 and "invalid JSON" in out, out


def test_an_openrlhf_script_running_another_cli_is_not_judged_by_the_trainers_flags(run_cli, tmp_path):
    """openrlhf.cli.serve_rm parses --port and --batch_size itself (openrlhf/cli/serve_rm.py);
    the schema holds the flags of the four training modules it names in x-framework.commands.
    The same flags after openrlhf.cli.train_sft are still unknown."""
    script = FOREIGN / "OpenRLHF__OpenRLHF/examples/scripts/serve_remote_rm.sh"
    code, out, _ = run_cli("lint", str(script))
    assert code == 0 and out == "", out
    (tmp_path / "sft.sh").write_text(script.read_text().replace("openrlhf.cli.serve_rm", "openrlhf.cli.train_sft"))
    code, out, _ = run_cli("lint", str(tmp_path / "sft.sh"))
    assert code == 1 and "unknown key 'port'" in out and "unknown key 'batch_size'" in out, out


def _repo(tmp_path, script=True):
    """A repository whose recipe no launch command links to the script that reads it (open-r1's
    layout: recipes/ run from a Slurm file with variables, src/pkg/grpo.py + src/pkg/configs.py)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "grpo.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nsystem_prompt: You are helpful.\ncode_language: python\n"
        "learning_rate: 1.0e-06\nnum_generations: 8\nmax_completion_length: 256\nbf16: true\n"
        "output_dir: data/out\nper_device_train_batch_sise: 4\n")
    if script:
        (tmp_path / "src" / "pkg").mkdir(parents=True)
        (tmp_path / "src" / "pkg" / "configs.py").write_text(
            "from dataclasses import dataclass, field\nimport trl\n\n@dataclass\nclass GRPOConfig(trl.GRPOConfig):\n"
            "    system_prompt: str = None\n\n@dataclass\nclass GRPOScriptArguments(trl.ScriptArguments):\n"
            "    code_language: str = \"python\"\n")
        (tmp_path / "src" / "pkg" / "grpo.py").write_text(
            "from trl import ModelConfig, TrlParser\nfrom pkg.configs import GRPOConfig, GRPOScriptArguments\n\n"
            "parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))\n")
    return tmp_path / "recipes" / "grpo.yaml"


def test_keys_the_repositorys_own_scripts_define_are_not_unknown(tmp_path):
    extras.from_repository.cache_clear()
    recipe = _repo(tmp_path)
    errors = [f.message for f in lint.run([str(recipe)]).findings if f.severity == "error"]
    assert len(errors) == 1 and "unknown key 'per_device_train_batch_sise'" in errors[0], errors


def test_without_such_a_script_the_same_keys_are_unknown(tmp_path):
    extras.from_repository.cache_clear()
    recipe = _repo(tmp_path, script=False)
    errors = " ".join(f.message for f in lint.run([str(recipe)]).findings if f.severity == "error")
    for key in ("system_prompt", "code_language", "per_device_train_batch_sise"):
        assert f"unknown key '{key}'" in errors, errors


def test_a_script_that_builds_no_parser_declares_nothing(tmp_path):
    """Only a script that builds TrlParser / HfArgumentParser is an entry point: a dataclass in a
    module nobody parses arguments with says nothing about the YAML."""
    extras.from_repository.cache_clear()
    recipe = _repo(tmp_path)
    grpo = tmp_path / "src" / "pkg" / "grpo.py"
    grpo.write_text(grpo.read_text().replace("TrlParser((", "print(("))
    errors = " ".join(f.message for f in lint.run([str(recipe)]).findings if f.severity == "error")
    assert "unknown key 'system_prompt'" in errors, errors


def test_a_parser_subclass_and_a_package_reexport_are_followed(tmp_path):
    """open-instruct builds `ArgumentParserPlus(HfArgumentParser)` of its own; alignment-handbook's
    scripts import their classes through the package (`from alignment import SFTConfig`, whose
    __init__ takes them from .configs). Both count; the typo is still reported."""
    extras.from_repository.cache_clear()
    recipe = _repo(tmp_path)
    pkg = tmp_path / "src" / "pkg"
    (pkg / "utils.py").write_text("from transformers import HfArgumentParser\n\n"
                                  "class ArgumentParserPlus(HfArgumentParser):\n    pass\n")
    (pkg / "__init__.py").write_text("from .configs import GRPOConfig, GRPOScriptArguments\n")
    (pkg / "grpo.py").write_text("from pkg import GRPOConfig, GRPOScriptArguments\nfrom pkg.utils import ArgumentParserPlus\n\n"
                                 "parser = ArgumentParserPlus((GRPOScriptArguments, GRPOConfig))\n")
    errors = [f.message for f in lint.run([str(recipe)]).findings if f.severity == "error"]
    assert len(errors) == 1 and "unknown key 'per_device_train_batch_sise'" in errors[0], errors


def test_a_parser_from_an_installed_package_and_a_sibling_module_are_followed(tmp_path):
    """Online-RLHF's run_dpo.py builds alignment-handbook's H4ArgumentParser, imported from the
    installed `alignment` package (so no class of the repository says it is a parser: the call's
    shape does, a tuple of argument dataclasses); SimPO's scripts/run_simpo.py imports
    `from simpo_config import SimPOConfig`, which Python finds beside the script (the script's
    folder is first on sys.path). Both scripts' keys count; the typo is still reported."""
    extras.from_repository.cache_clear()
    recipe = _repo(tmp_path, script=False)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "my_config.py").write_text(
        "from dataclasses import dataclass\nimport trl\n\n@dataclass\nclass MyConfig(trl.GRPOConfig):\n"
        "    system_prompt: str = None\n    code_language: str = 'python'\n")
    (tmp_path / "scripts" / "run.py").write_text(
        "from alignment import H4ArgumentParser, ModelArguments\nfrom my_config import MyConfig\n\n"
        "parser = H4ArgumentParser((ModelArguments, MyConfig))\nargs = parser.parse()\n")
    errors = [f.message for f in lint.run([str(recipe)]).findings if f.severity == "error"]
    assert len(errors) == 1 and "unknown key 'per_device_train_batch_sise'" in errors[0], errors
