"""Jobs for `vllm serve` commands in launch scripts (pytest side; no framework imports).

One job per command, checked by tests/frameworks/truth_vllm.py with vLLM's own `vllm serve`
argument parser, of the release the recipe targets (value vllm_version, else tested_with),
installed beside the trl stack by devenv.ensure_release("trl", version).
"""

from ftrecipes import devenv
from truth_jobs import command


def _is_vllm_serve(words):
    return words[:2] == ["vllm", "serve"]


@command(_is_vllm_serve)
def _vllm_serve(ctx, path, cmd):
    version = ctx["_recipe"].framework_versions(ctx).get("vllm")
    if version is None:
        raise ValueError(f"{path}: runs `vllm serve` but the recipe names no vLLM version (value vllm_version)")
    return [{"check": "vllm-serve-native", "args": cmd.words[2:], "env": dict(cmd.env), "vllm_version": version,
             "release": str(devenv.ensure_release("trl", version))}]
