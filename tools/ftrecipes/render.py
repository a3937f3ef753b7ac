"""Render a recipe's templates with resolved values, and check every file produced."""

import functools
from pathlib import Path

import jinja2

from . import derive, formats, launch, paths, sources, versions
from . import values as values_mod
from .errors import UserError
from .findings import Finding


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
    # {% if version_in("openrlhf", ">=0.9.2") %}: branch on the framework version the file targets.
    env.globals["version_in"] = _version_in
    return env


@jinja2.pass_context
def _version_in(ctx, framework, spec):
    targeted = ctx.get("framework_versions", {})
    if framework not in targeted:
        raise ValueError(f"version_in: no version of {framework} is known for this recipe")
    return versions.in_range(targeted[framework], spec)


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
    # JSON with YAML's other line breaks (NEL, U+2028/9) escaped too: a raw one would end the
    # comment and turn the rest of the value into YAML content.
    return formats.yaml_quoted(value)


def _normalise(text):
    # Stable bytes whatever the template's whitespace habits: no trailing spaces,
    # exactly one newline at the end.
    # Only "\n" is a line end and only ASCII blanks are trimmed: str.splitlines()/rstrip() would
    # also cut at \x1e, \x85 or U+2028 inside a quoted value and change it.
    body = "\n".join(line.rstrip(" \t\r") for line in text.split("\n")).strip("\n")
    return body + "\n"


def render_file(recipe, rfile, context, overrides=None):
    fmt = formats.get(rfile.format)
    env = _environment(str(recipe.dir / "templates"), fmt.name)
    template = rfile.template_for(context.get("framework_versions", {}))
    try:
        text = env.get_template(template).render(context)
    except jinja2.UndefinedError as exc:
        raise UserError(f"template uses an undefined value: {exc.message}", path=recipe.dir / "templates" / template) from None
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise UserError(f"template error: {exc}", path=recipe.dir / "templates" / template, line=line) from None
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


def check_output(rfile, text, label, framework_versions=None):
    """Parse a rendered file and validate it against its format's schema; findings list.

    With framework_versions, keys are also checked against schemas/versions.json at those
    versions, and keys the schema (generated from another version) cannot judge are left to it.
    """
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
    problems = []
    for key, severity, message in versions.key_problems(doc.data, fmt.name, framework_versions or {}):
        if severity == "error":
            line, col = doc.where((key,))
            problems.append(Finding(str(doc.path), line, col, "framework-version", severity, message))
    return problems + versions.schema_findings(doc, fmt, framework_versions)


def render(recipe, overrides=None, only=None, check=True):
    """Render all files of a recipe (or just `only`): [(RecipeFile, text)].

    Values are validated before any template runs, and each output is validated
    against its format's schema before anything is returned, so callers never
    write a file that failed.
    """
    overrides = overrides or {}
    resolved = values_mod.resolve(recipe, overrides)
    framework_versions = recipe.check_versions(resolved)
    context = derive.derive(recipe, resolved, [f"{k}={v}" for k, v in overrides.items()])
    context["framework_versions"] = framework_versions
    selected = [recipe.file(only)] if only else list(recipe.files)
    out = []
    for rfile in selected:
        if rfile.when and not context.get(rfile.when):
            if only:
                raise UserError(f"{recipe.name}: {rfile.name} is rendered only when {rfile.when} is true")
            continue
        text = render_file(recipe, rfile, context, overrides)
        if check:
            problems = check_output(rfile, text, recipe.name, framework_versions)
            if problems:
                p = problems[0]
                what = "with these --set values" if overrides else "(a recipe bug)"
                raise UserError(f"rendered file fails its schema {what}: {p.rule}: {p.message}", path=p.path, line=p.line, column=p.column)
        out.append((rfile, text))
    return out
