"""Jobs for OpenRLHF launch scripts: `deepspeed ... --module openrlhf.cli.<trainer> ...`.

One job per such command, checked by tests/frameworks/truth_openrlhf.py (DeepSpeed's launcher
parser, OpenRLHF's own argparse, and for train_sft the DeepSpeed config OpenRLHF builds compared
with the recipe's rendered deepspeed-format file, when the recipe has one). A launch script
rendered for an older OpenRLHF release (value openrlhf_version) is checked by that release.
"""

from ftrecipes import devenv, shellcmd
from truth_jobs import command

PREFIX = "openrlhf.cli."


def _is_openrlhf_under_deepspeed(words):
    return bool(words) and words[0] == "deepspeed" and any(
        w.startswith(PREFIX) and i > 0 and words[i - 1] == "--module" for i, w in enumerate(words))


@command(_is_openrlhf_under_deepspeed)
def _openrlhf(ctx, path, cmd):
    idx = shellcmd.find_module(cmd, PREFIX)
    job = {"check": "openrlhf", "words": cmd.words, "module": cmd.words[idx], "world_size": ctx["world_size"]}
    r = ctx["_recipe"]
    version = r.framework_versions(ctx).get("openrlhf")
    if version and version != r.meta["tested_with"].get("openrlhf"):
        # A file rendered for an older release: that release's own parser and DeepSpeed config,
        # installed beside the stack (devenv.ensure_release) and run in a process of its own.
        job["openrlhf_version"] = version
        job["release"] = str(devenv.ensure_release("openrlhf", version))
    ds_files = [f.name for f in ctx["_recipe"].files if f.format == "deepspeed"]
    if len(ds_files) == 1:
        job["ds_json"] = str(path.parent / ds_files[0])
    return [job]
