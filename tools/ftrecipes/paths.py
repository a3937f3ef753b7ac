"""Where recipes and schemas live: the repo checkout, or the copy inside the wheel."""

import functools
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)  # the package does not move while it runs; asked per file linted
def _root(name):
    # A checkout has tools/ftrecipes next to recipes/ and schemas/: prefer it so
    # edits show up without reinstalling. An installed wheel carries _data/.
    repo = _PKG.parent.parent / name
    if repo.is_dir() and (_PKG.parent.parent / "pyproject.toml").is_file():
        return repo
    return _PKG / "_data" / name


def recipes_dir():
    return _root("recipes")


def schemas_dir():
    return _root("schemas")


def repo_root():
    """The checkout root, or None when running from an installed wheel."""
    root = _PKG.parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "recipes").is_dir() else None
