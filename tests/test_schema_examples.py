"""Every schema in schemas/ is a valid Draft 2020-12 schema; valid examples pass, invalid ones fail.

Independent of the ftrecipes package: plain json/yaml + jsonschema.
Layout: tests/schema_examples/<schema stem>/{valid,invalid}/*.{json,yaml,yml}
"""
import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
EXAMPLES = Path(__file__).resolve().parent / "schema_examples"
# Schemas this test file owns (others in schemas/ are still checked for validity if present).
STEMS = ["deepspeed", "accelerate", "trl", "llamafactory", "openrlhf"]
EXTS = {".json", ".yaml", ".yml"}


def load(path):
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def schema_for(stem):
    return load(SCHEMAS / f"{stem}.schema.json")


def example_files(kind):
    out = []
    for stem in STEMS:
        d = EXAMPLES / stem / kind
        for p in sorted(d.glob("*")) if d.is_dir() else []:
            if p.suffix in EXTS:
                out.append(pytest.param(stem, p, id=f"{stem}/{kind}/{p.name}"))
    return out


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_schema_is_valid(path):
    schema = load(path)
    Draft202012Validator.check_schema(schema)
    assert schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema"
    assert schema.get("$id") == f"https://ftrecipes.dev/schemas/{path.name}"


@pytest.mark.parametrize("stem", STEMS)
def test_schema_present_with_examples(stem):
    schema = schema_for(stem)
    assert schema.get("title") and schema.get("description")
    assert schema.get("additionalProperties") is False
    for kind in ("valid", "invalid"):
        files = [p for p in (EXAMPLES / stem / kind).glob("*") if p.suffix in EXTS]
        assert len(files) >= 4, f"{stem}/{kind} needs at least 4 examples"


@pytest.mark.parametrize("stem", STEMS)
def test_every_property_has_description(stem):
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and not sub.get("description"):
                    missing.append(f"{where}.{key}")
                walk(sub, f"{where}.{key}")
            for sub in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
                walk(sub, where)
            if isinstance(node.get("items"), dict):
                walk(node["items"], where + "[]")

    walk(schema_for(stem), stem)
    assert not missing, f"properties without description: {missing[:20]}"


@pytest.mark.parametrize("stem,path", example_files("valid"))
def test_valid_example_passes(stem, path):
    validator = Draft202012Validator(schema_for(stem))
    errors = sorted(validator.iter_errors(load(path)), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


@pytest.mark.parametrize("stem,path", example_files("invalid"))
def test_invalid_example_fails(stem, path):
    validator = Draft202012Validator(schema_for(stem))
    assert list(validator.iter_errors(load(path))), f"{path.name} unexpectedly validates"
