"""Render a recipe's templates with resolved values, and check every file produced."""

import contextlib
import copy
import functools
import os
import resource
import signal
import stat
import threading
import traceback
from pathlib import Path

import jinja2
from jinja2.loaders import split_template_path
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from . import checks, derive, formats, paths, readers, sources, versions
from . import values as values_mod
from .errors import UserError


# Recipe folders arrive in pull requests, so templates are untrusted code: they run in Jinja's
# sandbox and within these bounds. Real templates are a few KiB and render in milliseconds.
MAX_TEMPLATE_BYTES = 1024 * 1024
MAX_OUTPUT_CHARS = 4 * 1024 * 1024  # per rendered file, and for any one string or list a template builds
MAX_INT_BITS = 4096
TIME_LIMIT_S = 5
MEMORY_HEADROOM = 512 * 1024 * 1024  # address space a render may add to the process's


class TemplateLimit(SecurityError):
    """A template asked for more time, memory or output than any recipe needs."""


class _Sandbox(SandboxedEnvironment):
    """Jinja's sandbox, plus size checks on the operators that build big values.

    Not the immutable variant: templates build the DeepSpeed config as a dict and update() it
    (recipes/_lib/ds.json.j2). Each file renders from its own copy of the values, so a template
    that mutates them cannot change what another file sees.
    """

    intercepted_binops = frozenset(["*", "**", "+"])

    def call_binop(self, context, operator, left, right):
        if operator in ("*", "+"):
            for seq, other in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and not isinstance(other, bool):
                    n = len(seq) * other if operator == "*" and isinstance(other, int) else len(seq) + _len(other)
                    if n > MAX_OUTPUT_CHARS:
                        raise TemplateLimit(f"'{operator}' would build a value of {n} items (limit {MAX_OUTPUT_CHARS})")
        if operator in ("*", "**") and _int(left) and _int(right):
            bits = left.bit_length() * (abs(right) if operator == "**" else 1) + (right.bit_length() if operator == "*" else 0)
            if abs(left) > 1 and bits > MAX_INT_BITS:
                raise TemplateLimit(f"'{operator}' would build a number over {MAX_INT_BITS} bits")
        return super().call_binop(context, operator, left, right)


def _defined(value):
    # An Undefined that reaches output (one the sandbox returned for an unsafe attribute, say)
    # raises its error here instead of being handed to a YAML or JSON writer.
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined: raises UndefinedError or the SecurityError it holds
    return value


def _int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _len(x):
    return len(x) if isinstance(x, (str, list, tuple)) else 0


class _RecipeLoader(jinja2.BaseLoader):
    """Templates from the recipe's templates/ and from recipes/_lib only.

    A name resolving outside its folder (a symlink pointing elsewhere) and anything but a
    regular file are refused; files are read with a size limit.
    """

    def __init__(self, template_dir):
        self.roots = [(Path(template_dir), "")]
        for root in (Path(template_dir).parent.parent, paths.recipes_dir()):
            if (root / "_lib").is_dir() and all(r != root / "_lib" for r, _ in self.roots):
                self.roots.append((root / "_lib", "_lib/"))

    def get_source(self, environment, template):
        pieces = split_template_path(template)  # refuses '..' and empty parts
        for root, prefix in self.roots:
            name = "/".join(pieces)
            if prefix:
                if not name.startswith(prefix):
                    continue
                name = name[len(prefix):]
            path = root / name
            if not os.path.lexists(path):
                continue
            return self._read(root, path)
        raise jinja2.TemplateNotFound(template)

    @staticmethod
    def _read(root, path):
        # The folder itself must not be a link elsewhere (templates -> /etc), nor the file.
        home = os.path.join(os.path.realpath(root.parent), root.name)
        real = os.path.realpath(path)
        if os.path.realpath(root) != home or os.path.commonpath([real, home]) != home:
            raise UserError(f"template resolves outside {root} (to {real}); refusing", path=path)
        try:
            st = os.stat(real)
        except OSError as exc:
            raise UserError(f"cannot read template: {exc.strerror}", path=path) from None
        if not stat.S_ISREG(st.st_mode):
            raise UserError("template is not a regular file; refusing", path=path)
        text = sources.read_text(path, max_bytes=MAX_TEMPLATE_BYTES)
        return text, str(path), lambda: _unchanged(path, st.st_mtime_ns)


def _unchanged(path, mtime_ns):
    try:
        return os.stat(path).st_mtime_ns == mtime_ns
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def _environment(template_dir, fmt_name):
    fmt = formats.get(fmt_name)
    env = _Sandbox(
        # recipes/_lib holds templates shared by recipes (the DeepSpeed config).
        loader=_RecipeLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # Every {{ }} goes through the format's writer: values stay data.
        finalize=lambda value: fmt.emit(_defined(value)),
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
    top = recipe.dir / "templates" / template
    try:
        with _bounded():
            text = _generate(env.get_template(template), copy.deepcopy(context))
    except UserError:
        raise
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"template error: {exc.message}", path=exc.filename or top, line=exc.lineno) from None
    except Exception as exc:  # templates are untrusted code: whatever they raise is the recipe's fault
        path, line = _where(exc, top)
        raise UserError(_failure(exc, rfile), path=path, line=line) from None
    text = _normalise(text)
    if fmt.comment:
        if text.startswith("#!"):
            shebang, _, rest = text.partition("\n")
            text = shebang + "\n" + _header(recipe, overrides, fmt) + rest
        else:
            text = _header(recipe, overrides, fmt) + text
    return text


def _failure(exc, rfile):
    """One line saying why a template failed, by what kind of failure it was."""
    text = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, jinja2.UndefinedError):
        return f"template undefined value: {text}"
    if isinstance(exc, SecurityError):
        return f"template refused: {text}"
    if isinstance(exc, (OverflowError, MemoryError, RecursionError)):
        return f"template refused: {type(exc).__name__}: {text or 'too large'}"
    if isinstance(exc, jinja2.TemplateError):
        return f"template error: {text}"
    if isinstance(exc, ValueError):
        return f"cannot write a value into {rfile.name}: {text}"
    return f"template error: {type(exc).__name__}: {text}"


def _generate(template, context):
    out, size = [], 0
    for chunk in template.generate(context):
        size += len(chunk)
        if size > MAX_OUTPUT_CHARS:
            raise TemplateLimit(f"output over {MAX_OUTPUT_CHARS} characters")
        out.append(chunk)
    return "".join(out)


def _where(exc, top):
    """(template file, line) of the innermost template frame of exc's traceback."""
    found = (top, None)
    for frame, line in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if name.endswith((".j2", ".jinja")) or name == str(top):
            found = (name, line)
    return found


@contextlib.contextmanager
def _bounded():
    """Time and address-space limits while a template runs (main thread only, where signals work).

    A loop that emits nothing is stopped by the clock; a value built by concatenation in a loop
    (no operator we can intercept) by the address-space limit, as a MemoryError.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise TemplateLimit(f"rendering took over {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    old_timer = signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    old_as = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + MEMORY_HEADROOM
    limited = (old_as[0] == resource.RLIM_INFINITY or cap < old_as[0]) and (old_as[1] == resource.RLIM_INFINITY or cap <= old_as[1])
    if limited:
        resource.setrlimit(resource.RLIMIT_AS, (cap, old_as[1]))
    try:
        yield
    finally:
        if limited:
            resource.setrlimit(resource.RLIMIT_AS, old_as)
        signal.setitimer(signal.ITIMER_REAL, *old_timer)
        signal.signal(signal.SIGALRM, previous)


def _address_space():
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 1 << 62


def check_output(rfile, text, label, framework_versions=None):
    """Parse a rendered file and check it the way lint checks a file it finds; findings list.

    With framework_versions, keys are also checked against schemas/versions.json at those
    versions, and keys the schema (generated from another version) cannot judge are left to it.
    """
    fmt = formats.get(rfile.format)
    if fmt.schema is None:
        return []
    path = f"{label}/{rfile.name}"
    doc = readers.read(text, path, fmt)
    if doc is None:
        raise UserError(f"launch script runs no {fmt.command} command", path=path)
    return checks.check_document(doc, fmt, framework_versions, key_versions=True)


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
