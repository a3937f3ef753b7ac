"""recipe.yaml and values schemas: examples, and every recipe's own files and metadata."""

import json
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from ftrecipes import recipe, schemas

EXAMPLES = Path(__file__).resolve().parent / "schema_examples"
NAMES = recipe.names()


def _examples(stem, kind):
    return sorted(p for p in (EXAMPLES / stem / kind).iterdir() if p.suffix in (".json", ".yaml"))


def _load(p):
    return json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())


@pytest.mark.parametrize("stem", ["recipe", "values"])
def test_examples(stem):
    v = schemas.validator(schemas.load_schema(f"{stem}.schema.json"))
    valid, invalid = _examples(stem, "valid"), _examples(stem, "invalid")
    assert len(valid) >= 4 and len(invalid) >= 4
    for p in valid:
        assert list(v.iter_errors(_load(p))) == [], p.name
    for p in invalid:
        assert list(v.iter_errors(_load(p))), f"{p.name} should fail"


@pytest.mark.parametrize("name", NAMES)
def test_recipe_layout(name):
    r = recipe.load(name)
    assert re.fullmatch(r"[a-z0-9.]+-[a-z0-9.-]+-[a-z0-9-]+x\d+", name)
    for f in r.files:
        assert (r.dir / "templates" / f.template).is_file()
    readme = (r.dir / "README.md").read_text()
    for heading in ("## Symptom", "## Cause and fix", "## What the recipe sets", "## Memory", "## Launch"):
        assert heading in readme, heading
    assert f"## {r.version}" in (r.dir / "CHANGELOG.md").read_text()
    assert sum(f.primary for f in r.files) == 1


@pytest.mark.parametrize("name", NAMES)
def test_values_schema_is_the_shared_vocabulary(name):
    r = recipe.load(name)
    s = r.values_schema
    Draft202012Validator.check_schema(s)
    assert s["additionalProperties"] is False
    assert set(s["properties"]) == set(r.defaults) == set(s["required"])
    vocab = schemas.load_schema("values.schema.json")["$defs"]
    for key, prop in s["properties"].items():
        refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(prop))
        assert f"https://ftrecipes.dev/schemas/values.schema.json#/$defs/{key}" in refs, key
        assert key in vocab


@pytest.mark.parametrize("name", NAMES)
def test_values_schema_rejects_wrong_types(name):
    """Each default replaced by a value of another type must fail: the schema really constrains it."""
    r = recipe.load(name)
    v = schemas.validator(r.values_schema)
    assert list(v.iter_errors(r.defaults)) == []
    for key, value in r.defaults.items():
        wrong = [] if not isinstance(value, list) else "x"
        bad = dict(r.defaults, **{key: {"nested": wrong}})
        assert list(v.iter_errors(bad)), key


def _pins(stack):
    pins = {}
    for line in (Path(__file__).resolve().parent / "envs" / stack / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


@pytest.mark.parametrize("name", NAMES)
def test_tested_with_equals_the_smoke_environment_pins(name):
    r = recipe.load(name)
    pins = _pins(r.meta["framework"]["stack"])
    for package, version in r.meta["tested_with"].items():
        assert pins.get(package.lower()) == version, f"{package}: recipe says {version}, stack pins {pins.get(package.lower())}"
    # The framework the recipe is about must be among them.
    framework = {"trl": "trl", "llamafactory": "llamafactory", "openrlhf": "openrlhf"}[r.meta["framework"]["stack"]]
    if r.meta["framework"]["name"] in ("trl", "llamafactory", "openrlhf"):
        assert framework in r.meta["tested_with"]


@pytest.mark.parametrize("name", NAMES)
def test_plan_proposes_the_recipe_setup_or_a_better_one(name):
    """Issue 13 item 4, for every recipe folder (new ones too): `ftrecipes plan`, asked the
    recipe's question (its model, method, GPUs, seq_len, global batch and host RAM from
    recipe.yaml), proposes a setup the memory model does not call oom, whose files lint would
    not flag, and which the step-time model rates at least as fast as the recipe's own setup.
    Where plan's setup differs, the README's plan section says so with both figures (and
    regen keeps it current)."""
    from ftrecipes import markers, plan, recipe_plan
    from ftrecipes.memory.estimate import estimate

    r = recipe.load(name)
    c = recipe_plan.compare(r)
    assert c.top is not None, f"plan finds nothing for {name}: " + " ".join(c.flags)
    again = estimate(c.top.setup)
    assert again.verdict != "oom" and again.host_verdict != "oom"
    assert plan.lint_flags(c.top.setup) is None
    assert c.top.speed.tokens_per_s >= c.speed.tokens_per_s * (1 - recipe_plan.SAME_SPEED), (
        f"the recipe's own setup ({plan.describe(c.setup)}) is faster than plan's first candidate "
        f"({plan.describe(c.top.setup)}): the search misses something")
    readme = (r.dir / "README.md").read_text(encoding="utf-8")
    assert markers.has(readme, "plan"), f"{name}/README.md needs a plan section (<!-- ftrecipes:plan:begin/end -->)"
    assert recipe_plan.markdown(c) in readme
    if c.gain >= recipe_plan.SAME_SPEED:
        assert f"{c.gain:+.0%} in tokens/s over the recipe" in readme
