"""`ftrecipes smoke NAME`: one recipe's framework truth checks and smoke training.

For contributors adding a recipe, in a checkout: it runs the same tests CI runs,
restricted to that recipe, in the pinned stack environments.
"""

import subprocess
import sys

from .errors import UserError


def register(sub):
    p = sub.add_parser("smoke", help="run one recipe's framework truth checks and CPU smoke training (checkout only)")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--truth-only", action="store_true", help="parser checks only, no training")
    p.set_defaults(func=main)


def main(args):
    from . import paths, recipe

    root = paths.repo_root()
    if root is None or not (root / "tests").is_dir():
        raise UserError("`ftrecipes smoke` runs the repository's tests; run it from a checkout")
    for name in args.names:
        recipe.load(name)
    try:
        import pytest  # noqa: F401
    except ImportError:
        raise UserError("pytest is not installed; use tools/run-tests, or pip install -e '.[test]'") from None
    tests = [str(root / "tests" / "test_framework_truth.py")]
    if not args.truth_only:
        tests += sorted(str(p) for p in (root / "tests").glob("test_smoke_*.py"))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *tests]
    for name in args.names:
        cmd += ["--recipe", name]
    return subprocess.call(cmd, cwd=root)
