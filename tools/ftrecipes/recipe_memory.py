"""The memory model applied to a recipe: its values, hardware and rendered DeepSpeed config.

One place turns a recipe (plus --set overrides) into the estimator's inputs, so
`ftrecipes estimate RECIPE`, the README memory tables, the chart, render's
warning and lint's memory-fit rule all agree.
"""

import json

from . import derive, render, values
from .errors import UserError, one_line

GIB = 1024**3
_TRAINERS = {"hf-trainer": "hf"}  # recipe framework name -> Setup.trainer


def estimate(recipe, overrides=None, memory=None):
    """memory: memory-only Setup fields (`estimate NAME --set quantization=4bit`): what-if
    settings the recipe's files do not render."""
    from .memory import estimate_from_values

    overrides = overrides or {}
    resolved = values.resolve(recipe, overrides)
    ctx = derive.derive(recipe, resolved, [f"{k}={v}" for k, v in overrides.items()])
    hw = recipe.meta["hardware"]
    meta = {
        "model": recipe.meta["model"]["name"],
        "gpu": hw["gpu"],
        "method": recipe.meta["method"],
        # the trainer whose quirks apply: a recipe for the plain HF Trainer runs in the trl test stack
        # but builds transformers' own loss, not TRL's
        "framework": _TRAINERS.get(recipe.meta["framework"]["name"], recipe.meta["framework"]["name"]),
        "world_size": ctx["world_size"],
        "gpus_per_node": resolved.get("gpus_per_node", hw["gpus_per_node"]),
    }
    if recipe.primary.format == "deepspeed":
        [(_, ds_text)] = render.render(recipe, overrides, only=recipe.primary.name, check=False)
        meta["deepspeed"] = json.loads(ds_text)
    else:
        memory = {**_file_settings(recipe, overrides), **(memory or {})}
        # the accelerate release the recipe targets (tested_with, or an accelerate_version value):
        # what accelerate's FSDP preparation casts depends on it (memory.model_states.fsdp_upcast)
        targeted = recipe.framework_versions(resolved).get("accelerate")
        if targeted and not memory.get("accelerate_version"):
            memory["accelerate_version"] = targeted
    if hw.get("host_ram_gib"):
        meta["host_ram_gb"] = hw["host_ram_gib"]
    targeted = recipe.framework_versions(resolved)
    if meta["framework"] == "trl" and "trl" in targeted and not (memory or {}).get("trl_version"):
        # the TRL release the rendered files target decides its loss path (memory/trl_head.py)
        memory = {**(memory or {}), "trl_version": targeted["trl"]}
    if memory:
        meta["setup"] = memory
    schema_keys = set((recipe.values_schema or {}).get("properties") or {})

    def allowed(changed):
        # a remedy is offered only if the recipe's values schema accepts it (the keys it knows)
        trial = {k: v for k, v in changed.items() if k in schema_keys or k in resolved}
        return values.first_problem(recipe, trial) is None

    _check_catalog_names(recipe)
    try:
        return estimate_from_values(resolved, meta, allowed=allowed)
    except (KeyError, ValueError) as exc:
        # a KeyError's str() is its message in quotes
        raise UserError(f"{recipe.name}: cannot estimate memory: {exc.args[0] if exc.args else exc}") from None


def _check_catalog_names(recipe):
    """The model and GPU recipe.yaml names must be ones the memory model knows: an unknown one is
    recipe.yaml's error at its key (it was '<recipe>: cannot estimate memory: "unknown model
    ...: pass ... --params"', a flag that cannot go with a recipe, and no file or key)."""
    from .memory import catalog

    for key, lookup in ((("model", "name"), catalog.model), (("hardware", "gpu"), catalog.gpu)):
        try:
            lookup(recipe.meta[key[0]][key[1]])
        except KeyError as exc:
            line, col = recipe.doc.where(key)
            raise UserError(exc.args[0], path=recipe.dir / "recipe.yaml", line=line, column=col, key=".".join(key)) from None
        except (OSError, ValueError) as exc:  # a path to a config.json that cannot be read
            line, col = recipe.doc.where(key)
            raise UserError(str(exc), path=recipe.dir / "recipe.yaml", line=line, column=col, key=".".join(key)) from None


# Rendered formats whose keys configs.read maps to estimate settings (sharding, precision policy).
_SETTING_FORMATS = ("accelerate", "llamafactory", "trl")


def _file_settings(recipe, overrides):
    """Settings a recipe without a DeepSpeed config states only in its rendered files (FSDP2 in
    an accelerate config, pure_bf16 in a LLaMA-Factory config): read from those files the way
    `estimate --config` reads them, keeping only what the values do not carry (MEMORY_KEYS).
    Trainer files first, the launcher's config last: a later file wins, as with --config."""
    import os
    import tempfile

    from .memory.configs import MEMORY_KEYS, read

    files = sorted((f for f in render.render(recipe, overrides, check=False)),
                   key=lambda item: item[0].format == "accelerate")
    with tempfile.TemporaryDirectory(prefix="ftrecipes-memory-") as tmp:
        paths = []
        for rfile, text in files:
            if rfile.format in _SETTING_FORMATS:
                path = os.path.join(tmp, rfile.name)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
                paths.append(path)
        _ds, found = read(paths)
    return {k: v for k, v in found.items() if k in MEMORY_KEYS}


def _gib(b):
    return f"{b / GIB:.1f}"


def markdown_table(recipe, result):
    """The README's memory section: GiB per GPU by phase and category, verdicts, host RAM."""
    j = result.to_json()
    cats = [c for c in ("params", "grads", "master", "optimizer", "activations", "temporaries", "runtime", "generation")
            if any(p["by_category"].get(c, 0) for p in j["phases"])]
    hw = recipe.meta["hardware"]
    lines = [
        f"Estimated by `ftrecipes estimate {recipe.name}` for the default values "
        f"({hw['nodes']}×{hw['gpus_per_node']}×{hw['gpu']}, {j['gpu_bytes'] / GIB:.1f} GiB usable per GPU). "
        "GiB per GPU, by phase of one training step:",
        "",
        "| phase | " + " | ".join(cats) + " | total |",
        "|---|" + "---:|" * (len(cats) + 1),
    ]
    for p in j["phases"]:
        cells = [_gib(p["by_category"].get(c, 0)) for c in cats]
        lines.append(f"| {p['name']} | " + " | ".join(cells) + f" | **{_gib(p['total_bytes'])}** |")
    lines += [
        "",
        f"GPU peak ({j['peak_phase']}): allocated {_gib(j['gpu_allocated_bytes'])} GiB, reserved by PyTorch's "
        f"allocator {_gib(j['gpu_reserved_bytes'])} GiB; with the CUDA context the card holds "
        f"**{_gib(j['gpu_card_bytes'])} GiB** of {_gib(j['gpu_bytes'])}: **{j['verdict']}**. "
        f"Host RAM per node: peak {_gib(j['host_peak_bytes'])} GiB"
        + (f" of {hw['host_ram_gib']} GiB assumed: **{j['host_verdict']}**." if hw.get("host_ram_gib") else "."),
    ]
    host = {k: v for k, v in (j.get("host") or {}).items() if isinstance(v, (int, float)) and v}
    if host:
        lines.append("Host RAM by category (GiB): " + ", ".join(f"{k.replace('_', ' ')} {_gib(v)}" for k, v in host.items()) + ".")
    for note in j.get("notes") or []:
        lines.append(f"- {note}")
    lines += ["", "![memory by phase](memory.svg)", ""]
    return "\n".join(lines)


def svg(recipe, result):
    from .memory.report import render_svg

    return render_svg(result)


def warn_if_tight(recipe, overrides, stream):
    """render's warning: the overrides make the recipe tight or out of memory."""
    try:
        result = estimate(recipe, overrides)
    except UserError:
        return
    j = result.to_json()
    problems = []
    if j["verdict"] != "fits":
        problems.append(f"GPU peak {_gib(j['gpu_card_bytes'])} of {_gib(j['gpu_bytes'])} GiB ({j['verdict']}), "
                        f"{_gib(j['gpu_allocated_bytes'])} allocated, {_gib(j['gpu_reserved_bytes'])} reserved")
    if j.get("host_verdict") not in (None, "fits", "unknown"):
        problems.append(f"host RAM peak {_gib(j['host_peak_bytes'])} GiB ({j['host_verdict']})")
    if not problems:
        return
    fix = ""
    # remedies come ordered fits, tight, oom: the first one that is not oom
    for rem in j.get("remedies") or []:
        if rem.get("verdict") != "oom":
            fix = f"; cheapest fix: {rem['change']}"
            break
    stream.write(one_line(f"warning: {recipe.name} with these values: {'; '.join(problems)}{fix} (ftrecipes estimate {recipe.name} --set ...)") + "\n")
