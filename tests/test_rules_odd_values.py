"""Lint rules never crash on parseable-but-odd values (issue 9).

Every rendered recipe setup (recipes/*/rendered: DeepSpeed JSON, accelerate/TRL/LLaMA-Factory
YAML, launch scripts) is loaded as lint loads it; hypothesis then replaces the value at one
path (every key the files hold, at any depth, plus every top-level key the format's schema
knows, so keys the recipes leave out are read too) or one word of a launch command with an
odd value: a string where a number is expected, a list where a mapping is, nulls, huge and
negative integers, floats at the edge of the range. The schema check and every rule must
return findings, never raise. With --gpu the memory model runs too.
"""

import copy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ftrecipes import formats, lint, rules, schemas

ROOT = Path(__file__).resolve().parents[1]
SETUPS = sorted(p for p in (ROOT / "recipes").glob("*/rendered") if p.is_dir())

ODD = st.one_of(
    st.sampled_from(["", "auto", "none", "nan", "-1", "1e999", "0x10", "true", "cpu", "9" * 500, "a\nb", "$X"]),
    st.sampled_from([None, True, False, 0, -1, -(2**63), 2**63, 10**300, 1e308, -1e-308, 0.5, 2.0]),
    st.sampled_from([[], [None], [1, "x"], {}, {"x": None}, {"enabled": "x"}, {"stage": [3]}, [[{}]]]),
    st.text(max_size=8),
    st.integers(),
)


def _paths(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,)
            yield from _paths(v, path + (i,))


def _load(folder):
    configs = []
    for path, _explicit, _top in lint.discover([str(folder)]):
        cfg = lint.load(path, False)
        if cfg is not None:
            configs.append(cfg)
    return configs


LOADED = {folder.parent.name: _load(folder) for folder in SETUPS}


def _targets(cfg):
    """Paths whose value a mutation may replace: what the file holds and what its schema knows."""
    found = list(_paths(cfg.data))
    fmt = formats.FORMATS.get(cfg.kind)
    if fmt is not None and fmt.schema:
        found += [(k,) for k in schemas.load_schema(fmt.schema).get("properties", {})]
    return found


def _set(data, path, value):
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _mutated(configs, data):
    out = []
    for cfg in configs:
        new = copy.copy(cfg)
        new.doc = copy.copy(cfg.doc)
        new.doc.data = copy.deepcopy(cfg.data)
        new.commands = [copy.copy(c) for c in cfg.commands]
        for c in new.commands:
            c.words = list(c.words)
        out.append(new)
    cfg = data.draw(st.sampled_from(out))
    for _ in range(data.draw(st.integers(1, 3))):
        if cfg.commands and data.draw(st.booleans()):
            cmd = data.draw(st.sampled_from(cfg.commands))
            if cmd.words:
                j = data.draw(st.integers(0, len(cmd.words) - 1))
                cmd.words[j] = str(data.draw(ODD))
        elif isinstance(cfg.doc.data, dict) and _targets(cfg):
            path = data.draw(st.sampled_from(_targets(cfg)))
            try:
                _set(cfg.doc.data, path, copy.deepcopy(data.draw(ODD)))  # sampled lists are shared objects
            except (KeyError, IndexError, TypeError):  # a parent replaced by an earlier mutation
                pass
    return out


@pytest.mark.parametrize("recipe", sorted(LOADED))
# No shrinking: the traceback of the first crash names the rule, and CI stays fast.
@settings(max_examples=120, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), gpu=st.sampled_from([None, "A100-80GB", "V100-32GB"]))
def test_rules_survive_odd_values(recipe, data, gpu):
    configs = _mutated(LOADED[recipe], data)
    options = rules.Options(gpu=gpu)
    for cfg in configs:
        lint.check_config(cfg)
    rules.run(rules.Setup(configs, options))


def test_every_recipe_setup_was_loaded():
    assert LOADED and all(LOADED.values()), {k: len(v) for k, v in LOADED.items()}
