"""Regenerate the committed rendered/ files of recipes, or report which are stale."""

import sys

from . import atomic, markers, paths, recipe, render
from .errors import one_line


def recipe_table():
    rows = ["| recipe | model | method | framework | hardware | version | summary |", "|---|---|---|---|---|---|---|"]
    for r in recipe.all_recipes():
        m = r.meta
        hw = m["hardware"]
        method = m["method"] if m["finetuning"] == "full" else f"{m['method']} + {m['finetuning']}"
        rows.append(
            f"| [`{r.name}`](recipes/{r.name}/README.md) | {m['model']['name']} | {method} | {m['framework']['name']} "
            f"| {hw['nodes'] * hw['gpus_per_node']}×{hw['gpu']} | {r.version} | {m['summary']} |"
        )
    return "\n".join(rows) + "\n"


def readme_updates(names=None):
    """{path: new text} for every README section or chart that differs from a fresh render."""
    out = {}
    root = paths.repo_root()
    if root is None:
        return out
    top = root / "README.md"
    if top.is_file() and not names:
        text = top.read_text(encoding="utf-8")
        new = markers.replace(text, "recipes", recipe_table())
        if new != text:
            out[top] = new
    for r in ([recipe.load(n) for n in names] if names else recipe.all_recipes()):
        path = r.dir / "README.md"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if not markers.has(text, "memory"):
            continue
        from . import recipe_memory

        # The README's memory table and the chart beside it come from one estimate.
        result = recipe_memory.estimate(r)
        new = markers.replace(text, "memory", recipe_memory.markdown_table(r, result))
        if markers.has(new, "plan"):
            from . import recipe_plan

            new = markers.replace(new, "plan", recipe_plan.markdown(recipe_plan.compare(r)))
        if new != text:
            out[path] = new
        chart = r.dir / "memory.svg"
        want = recipe_memory.svg(r, result)
        if not chart.is_file() or chart.read_text(encoding="utf-8") != want:
            out[chart] = want
    return out


def expected(r):
    """{file name: (text, executable)} that rendered/ must hold for the defaults."""
    return {f.name: (text, f.executable) for f, text in render.render(r)}


def stale(r, want=None):
    """Names of rendered/ files that differ from a fresh render, are missing, or are extra."""
    want = expected(r) if want is None else want
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
    for path, text in readme_updates(names).items():
        if check:
            print(one_line(f"{path}: generated content stale; run `ftrecipes regen`"), file=sys.stderr)
            bad += 1
        else:
            atomic.write_one(path, text)
            print(one_line(f"rewrote {path}"), file=sys.stderr)
    for r in recipes:
        want = expected(r)
        problems = stale(r, want)
        if check:
            for name in problems:
                print(one_line(f"{r.dir / 'rendered' / name}: stale; run `ftrecipes regen {r.name}`"), file=sys.stderr)
            bad += len(problems)
        elif problems:
            # One swap: rendered/ holds the old set or exactly the new one, never a mix.
            atomic.write_all(r.dir / "rendered", want, force=True, exact=True)
            print(one_line(f"{r.name}: rewrote {', '.join(problems)}"), file=sys.stderr)
    return 1 if bad else 0
