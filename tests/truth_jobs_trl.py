"""Launch lines of TRL's scripts (`accelerate launch ... -m trl.scripts.NAME --config F`): the
launcher's parser and the script's parser see the command as written, and TRL's own helpers
turn the parsed model arguments into the quantization and LoRA configs the trainer gets."""

from truth_jobs import command


def _runs_trl_script(words):
    w = words[words.index("accelerate"):] if "accelerate" in words else []
    # A word still holding a shell variable is only known at run time (multi-node launch lines).
    return w[:2] == ["accelerate", "launch"] and "-m" in w and not any("$" in x for x in w) and any(
        x.startswith("trl.scripts.") for x in w)


@command(_runs_trl_script)
def _trl_launch(ctx, path, cmd):
    words = cmd.words[cmd.words.index("accelerate"):]
    return [{"check": "trl-launch", "argv": words[2:], "line": cmd.line}]
