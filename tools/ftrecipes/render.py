"""Render a recipe's templates with resolved values, and check every file produced."""

import functools
import json
from pathlib import Path

import jinja2

from . import derive, formats, launch, paths, schemas, sources
from . import values as values_mod
from .errors import UserError


def _search_path(template_dir):
    # A recipe's own templates first, then the shared recipes/_lib (beside the recipe,
    # or in the installed recipes when the recipe is a folder elsewhere).
    out = [template_dir]
    for root in (Path(template_dir).parent.parent, paths.recipes_dir()):
        if (root / "_lib").is_dir() and str(root) not in out:
            out.append(str(root))
    return out


@functools.lru_cache(maxsize=None)
def _environment(template_dir, fmt_name):
    fmt = formats.get(fmt_name)
    env = jinja2.Environment(
        # recipes/_lib holds templates shared by recipes (the DeepSpeed config).
        loader=jinja2.FileSystemLoader(_search_path(template_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # Every {{ }} goes through the format's writer: values stay data.
        finalize=fmt.emit,
    )
    env.filters["json"] = formats.json_document
    env.filters["shell_words"] = lambda items: formats.Raw(" ".join(fmt.emit(i) for i in items))
    return env


def _header(recipe, overrides, fmt):
    lines = [f"{fmt.comment} Rendered by ftrecipes from {recipe.label()}; edit the recipe, not this file."]
    if overrides:
        # One comment line whatever the values hold: newlines are escaped, never written.
        settings = " ".join(f"{k}={_describe(v)}" for k, v in sorted(overrides.items()))
        lines.append(f"{fmt.comment} Overrides: {settings}")
    return "\n".join(lines) + "\n"


def _describe(value):
    if isinstance(value, str) and formats.SAFE_WORD.match(value):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def _normalise(text):
    # Stable bytes whatever the template's whitespace habits: no trailing spaces,
    # exactly one newline at the end.
    body = "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")
    return body + "\n"


def render_file(recipe, rfile, context, overrides=None):
    fmt = formats.get(rfile.format)
    env = _environment(str(recipe.dir / "templates"), fmt.name)
    try:
        text = env.get_template(rfile.template).render(context)
    except jinja2.UndefinedError as exc:
        raise UserError(f"template uses an undefined value: {exc.message}", path=recipe.dir / "templates" / rfile.template) from None
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise UserError(f"template error: {exc}", path=recipe.dir / "templates" / rfile.template, line=line) from None
    except ValueError as exc:
        raise UserError(f"cannot write a value into {rfile.name}: {exc}") from None
    text = _normalise(text)
    if fmt.comment:
        if text.startswith("#!"):
            shebang, _, rest = text.partition("\n")
            text = shebang + "\n" + _header(recipe, overrides, fmt) + rest
        else:
            text = _header(recipe, overrides, fmt) + text
    return text


def check_output(rfile, text, label):
    """Parse a rendered file and validate it against its format's schema; findings list."""
    fmt = formats.get(rfile.format)
    path = f"{label}/{rfile.name}"
    if fmt.syntax in ("json", "yaml"):
        doc = sources.parse(text, path, fmt.syntax)
    elif fmt.name == "openrlhf":
        doc = launch.openrlhf_document(text, path)
        if doc is None:
            raise UserError("launch script runs no openrlhf.cli trainer", path=path)
    else:
        return []
    if fmt.schema is None:
        return []
    return schemas.check(doc, schemas.load_schema(fmt.schema), fmt.unknown_note)


def render(recipe, overrides=None, only=None, check=True):
    """Render all files of a recipe (or just `only`): [(RecipeFile, text)].

    Values are validated before any template runs, and each output is validated
    against its format's schema before anything is returned, so callers never
    write a file that failed.
    """
    overrides = overrides or {}
    resolved = values_mod.resolve(recipe, overrides)
    context = derive.derive(recipe, resolved, [f"{k}={v}" for k, v in overrides.items()])
    selected = [recipe.file(only)] if only else list(recipe.files)
    out = []
    for rfile in selected:
        if rfile.when and not context.get(rfile.when):
            if only:
                raise UserError(f"{recipe.name}: {rfile.name} is rendered only when {rfile.when} is true")
            continue
        text = render_file(recipe, rfile, context, overrides)
        if check:
            problems = check_output(rfile, text, recipe.name)
            if problems:
                p = problems[0]
                what = "with these --set values" if overrides else "(a recipe bug)"
                raise UserError(f"rendered file fails its schema {what}: {p.rule}: {p.message}", path=p.path, line=p.line, column=p.column)
        out.append((rfile, text))
    return out
