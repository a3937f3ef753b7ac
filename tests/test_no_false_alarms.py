"""No false alarms: lint reports no errors on setups that work.

Every recipe's rendered files (also with each recipe's hardware given), and the
real-world-shaped setups in tests/realworld (axolotl, alignment-handbook,
LLaMA-Factory, TRL and plain DeepSpeed styles).
"""

from pathlib import Path

import pytest

from ftrecipes import lint, recipe, rules

REALWORLD = sorted(p for p in (Path(__file__).resolve().parent / "realworld").iterdir() if p.is_dir())


@pytest.mark.parametrize("setup", REALWORLD, ids=lambda p: p.name)
def test_realworld_setups_have_no_errors(setup):
    result = lint.run([str(setup)])
    assert not result.unusable, [str(e) for e in result.unusable]
    assert len(result.checked) >= 1
    errors = [f"{f.path}:{f.line}: {f.rule} {f.message}" for f in result.findings if f.severity == "error"]
    assert errors == []


@pytest.mark.parametrize("name", recipe.names())
def test_rendered_recipes_have_no_findings_on_their_hardware(name):
    r = recipe.load(name)
    hw = r.meta["hardware"]
    result = lint.run([str(r.dir / "rendered")], options=rules.Options(gpu=hw["gpu"], host_ram_gib=hw.get("host_ram_gib")))
    assert not result.unusable and result.findings == []
