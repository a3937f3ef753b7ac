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
