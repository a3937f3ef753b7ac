"""Feed the corpus's axolotl YAMLs to axolotl's own config model and compare with lint.

    PYTHONPATH=/tmp/axolotl VENV/bin/python tools/schemagen/crosscheck_axolotl.py [FILE_OR_FOLDER ...]

(VENV as for axolotl_schema.py: imports axolotl.utils.schemas.config; default: tests/corpus/
axolotl-ai-cloud__axolotl.) Each file goes through axolotl's validate_config without GPU
capabilities (the path `axolotl train` takes with use_ray, so no GPU is probed): accepted or the
first ValidationError. Beside it, lint's value findings (wrong-type, bad-value, out-of-range) for
the file. A value finding on a file axolotl accepts is a false alarm of the generated schema; a
rejection with no value finding is a check lint lacks (model validators, cross-field rules).
"""
import pathlib
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from ftrecipes import lint  # noqa: E402

VALUE_RULES = ("wrong-type", "bad-value", "out-of-range")


def axolotl_verdict(path):
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault

    cfg = DictDefault(yaml.safe_load(path.read_text()))
    try:
        validate_config(cfg)
        return "accepted"
    except BaseException as e:  # noqa: BLE001
        first = str(e).splitlines()
        return f"rejected: {type(e).__name__}: {' '.join(first[:3])[:160]}"


def main(targets):
    files = []
    for t in targets or [REPO / "tests/corpus/axolotl-ai-cloud__axolotl"]:
        t = pathlib.Path(t)
        files += sorted(p for p in t.rglob("*.y*ml")) if t.is_dir() else [t]
    disagree = 0
    for p in files:
        found = [f for f in lint.run([str(p)], kind="axolotl").findings if f.rule in VALUE_RULES]
        verdict = axolotl_verdict(p)
        bad = found and verdict == "accepted"
        disagree += bool(bad)
        print(f"{'FALSE ALARM ' if bad else ''}{p.relative_to(REPO) if p.is_relative_to(REPO) else p}: axolotl {verdict}; "
              f"lint {len(found)} value finding(s)" + "".join(f"\n    {f.line}:{f.column} {f.rule} {f.message}" for f in found))
    print(f"{len(files)} files, {disagree} value findings on files axolotl accepts")


if __name__ == "__main__":
    main(sys.argv[1:])
