"""Jobs for launch scripts that start a repository's own HF Trainer script (pytest side, no framework imports).

QwenLM/Qwen finetune.py and OpenBMB/MiniCPM-V finetune/finetune.py, launched by `torchrun`
(or `accelerate launch`) in a recipe's launch.sh. The checker (frameworks/truth_hfscripts.py)
parses the launcher's flags with the launcher's own parser and the script's flags with
HfArgumentParser over the script's argument dataclasses, strictly; a script rendered for
transformers 4.x is parsed by that release.
"""

import re
import shlex

from ftrecipes import devenv
from truth_jobs import command

# recipe.yaml framework.script names the upstream repository; the checker has its dataclasses.
SCRIPTS = {"QwenLM/Qwen": "qwen-finetune", "MiniCPM-V": "minicpmv-finetune"}
REPORT = ["per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16", "gradient_checkpointing",
          "use_lora", "lora_r", "lora_target_modules", "max_grad_norm", "model_max_length", "deepspeed",
          "tune_vision", "tune_llm", "llm_type", "max_slice_nums", "q_lora"]
# TrainingArguments refuses bf16 on a machine without a GPU: the one CPU necessity added.
CPU_ARGS = ["--use_cpu", "true"]


def _script(ctx):
    text = ctx["_recipe"].meta["framework"]["script"]
    return next((v for k, v in SCRIPTS.items() if k in text), None)


def _arrays(text):
    """Bash arrays assigned as NAME=( words ... ) over several lines."""
    out = {}
    for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)=\(\s*$(.*?)^\)\s*$", text, re.M | re.S):
        out[m.group(1)] = shlex.split(m.group(2), comments=True)
    return out


def _expand(words, text):
    arrays = _arrays(text)
    out = []
    for w in words:
        m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}", w)
        out.extend(arrays[m.group(1)] if m else [w])
    return out


def _launch_words(words):
    return words[1:] if words[:1] == ["exec"] else words


def _runs_finetune(words):
    w = _launch_words(words)
    runs = w[:1] == ["torchrun"] or w[:2] == ["accelerate", "launch"]
    return runs and any(x.endswith("/finetune.py") or x == "finetune.py" for x in w)


@command(_runs_finetune)
def _hf_script(ctx, path, cmd):
    script = _script(ctx)
    if script is None:
        return []
    words = _expand(_launch_words(cmd.words), path.read_text())
    launcher = "torchrun" if words[0] == "torchrun" else "accelerate"
    argv = words[1:] if launcher == "torchrun" else words[2:]
    return [{"check": "hf-script", "script": script, "launcher": launcher, "argv": argv,
             "extra": CPU_ARGS, "report": REPORT, "line": cmd.line, **release(ctx)}]


def release(ctx):
    """{"transformers_version", "release"} when the files were rendered for a transformers release
    other than the stack's (value transformers_version): that release, installed beside the
    stack, parses the command; {} otherwise."""
    r = ctx["_recipe"]
    version = r.framework_versions(ctx).get("transformers")
    if not version or version == r.meta["tested_with"].get("transformers"):
        return {}
    return {"transformers_version": version, "release": str(devenv.ensure_release(r.meta["framework"]["stack"], version, package="transformers"))}
