"""Jobs for OpenRLHF launch scripts: `deepspeed ... --module openrlhf.cli.<trainer> ...`.

One job per such command, checked by tests/frameworks/truth_openrlhf.py (DeepSpeed's launcher
parser, OpenRLHF's own argparse, and for train_sft the DeepSpeed config OpenRLHF builds compared
with the recipe's rendered deepspeed-format file, when the recipe has one).
"""

from ftrecipes import shellcmd
from truth_jobs import command

PREFIX = "openrlhf.cli."


def _is_openrlhf_under_deepspeed(words):
    return bool(words) and words[0] == "deepspeed" and any(
        w.startswith(PREFIX) and i > 0 and words[i - 1] == "--module" for i, w in enumerate(words))


@command(_is_openrlhf_under_deepspeed)
def _openrlhf(ctx, path, cmd):
    idx = shellcmd.find_module(cmd, PREFIX)
    job = {"check": "openrlhf", "words": cmd.words, "module": cmd.words[idx], "world_size": ctx["world_size"]}
    ds_files = [f.name for f in ctx["_recipe"].files if f.format == "deepspeed"]
    if len(ds_files) == 1:
        job["ds_json"] = str(path.parent / ds_files[0])
    return [job]
