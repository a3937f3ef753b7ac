"""False alarms found by linting public repositories lint had never seen, as whole trees.

Each test holds a cause fixed in general; the files under tests/foreign are copied unchanged from
those repositories (tests/foreign/SOURCES.yaml).
"""

import shutil
from pathlib import Path

from ftrecipes import lint, pins

FOREIGN = Path(__file__).resolve().parent / "foreign"


def _copy(tmp_path, repo, *paths):
    for rel in paths:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FOREIGN / repo / rel, tmp_path / rel)
    return tmp_path


def _errors(result):
    return [f"{Path(f.path).name}:{f.line}: {f.rule} {f.message}" for f in result.findings if f.severity == "error"]


def test_an_install_script_pins_the_release_a_config_is_judged_at(tmp_path):
    """HALOs states its environment only in install.sh (`pip install accelerate==0.33.0`). 0.33.0's
    launch still reads fsdp_backward_prefetch_policy (deprecated, copied to fsdp_backward_prefetch:
    utils/launch.py); 1.0 dropped it. Judged at today's accelerate that is an error; at the pinned
    release, older than every one the key history read, it is a warning that says so."""
    repo = _copy(tmp_path / "halos", "ContextualAI__HALOs", "install.sh", "accelerate_config/fsdp_2gpu.yaml")
    result = lint.run([str(repo)])
    assert _errors(result) == []
    warned = [f.message for f in result.findings if f.rule == "unknown-key"]
    assert len(warned) == 1 and "fsdp_backward_prefetch_policy" in warned[0] and "accelerate 0.33.0" in warned[0], warned
    bare = _copy(tmp_path / "bare", "ContextualAI__HALOs", "accelerate_config/fsdp_2gpu.yaml")
    assert [e.split(": ", 1)[1] for e in _errors(lint.run([str(bare)]))] == [
        "unknown-key unknown key 'fsdp_backward_prefetch_policy' in fsdp_config (accelerate launch ignores it "
        "silently); did you mean 'fsdp_backward_prefetch'?"]


def test_only_install_commands_of_a_script_pin():
    script = ("#!/bin/bash\necho 'needs trl==0.9.6'\n# pip install peft==0.3.0\ngit checkout v4.40.0\n"
              "pip install \\\n    transformers==4.40.0 \\\n    'trl>=0.9,<0.12'  # tested\n"
              "python -m pip install deepspeed==0.14.5\nconda install -y accelerate=0.30.1\n")
    assert pins.shell_requirements(script) == [("transformers", "==4.40.0", 5), ("trl", ">=0.9,<0.12", 5),
                                               ("deepspeed", "==0.14.5", 8), ("accelerate", "==0.30.1", 9)]


def test_null_process_counts_are_left_to_the_launch_line(tmp_path):
    """smollm's vloom templates write `num_machines: null` / `num_processes: null` and pass both
    with each job's `accelerate launch --num_machines N --num_processes M`. launch copies a file's
    value only where its flag is None (commands/launch.py _validate_launch_command; ClusterConfig
    does not check types), so null means "not set here", like -1 for num_processes. A count of
    the wrong type is still an error."""
    rel = "vision/experiments/evaluation/vloom/common/accelerate_config.yaml"
    repo = _copy(tmp_path / "smollm", "huggingface__smollm", rel)
    result = lint.run([str(repo / rel)])
    assert result.checked and _errors(result) == []
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text((FOREIGN / "huggingface__smollm" / rel).read_text().replace("num_processes: null", "num_processes: all"))
    assert [e.split(": ", 1)[1] for e in _errors(lint.run([str(wrong)]))] == [
        "wrong-type num_processes: expected integer or null >= -1, got 'all'"]
