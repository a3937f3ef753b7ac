"""Regenerate the committed rendered/ files of recipes, or report which are stale."""

import sys

from . import atomic, recipe, render


def expected(r):
    """{file name: (text, executable)} that rendered/ must hold for the defaults."""
    return {f.name: (text, f.executable) for f, text in render.render(r)}


def stale(r):
    """Names of rendered/ files that differ from a fresh render, are missing, or are extra."""
    want = expected(r)
    out_dir = r.dir / "rendered"
    have = {p.name for p in out_dir.iterdir() if p.is_file()} if out_dir.is_dir() else set()
    problems = [name for name in sorted(have - set(want))]
    for name, (text, _) in want.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            problems.append(name)
    return sorted(problems)


def main(names, check=False):
    recipes = [recipe.load(n) for n in names] if names else recipe.all_recipes()
    bad = 0
    for r in recipes:
        problems = stale(r)
        if check:
            for name in problems:
                print(f"{r.dir / 'rendered' / name}: stale; run `ftrecipes regen {r.name}`", file=sys.stderr)
            bad += len(problems)
            continue
        want = expected(r)
        atomic.write_all(r.dir / "rendered", want, force=True)
        for extra in set(p.name for p in (r.dir / "rendered").iterdir()) - set(want):
            (r.dir / "rendered" / extra).unlink()
        if problems:
            print(f"{r.name}: rewrote {', '.join(problems)}", file=sys.stderr)
    return 1 if bad else 0
