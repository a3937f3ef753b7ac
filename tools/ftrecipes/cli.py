"""Command line: ftrecipes list | show | render | lint | regen | estimate | ...; and `render`."""

import argparse
import contextlib
import gc
import json
import os
import sys

from . import __version__, detect, stdio
from .errors import UserError, one_line, printable


def _cmd_list(args):
    from . import recipe

    rows = []
    for r in recipe.all_recipes():
        m = r.meta
        hw = m["hardware"]
        rows.append(
            {
                "name": r.name,
                "version": r.version,
                "model": m["model"]["name"],
                "method": m["method"] if m["finetuning"] == "full" else f"{m['method']}+{m['finetuning']}",
                "framework": m["framework"]["name"],
                "hardware": f"{hw['nodes'] * hw['gpus_per_node']}x{hw['gpu']}",
                "summary": m["summary"],
            }
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    cols = ["name", "model", "method", "framework", "hardware", "version"]
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())
    return 0


def _cmd_show(args):
    import textwrap

    from . import recipe

    r = recipe.load(args.name)
    m = r.meta
    out = [f"{r.label()} — {m['summary']}", ""]
    out.append(f"model:      {m['model']['name']} ({m['model']['hf_id']})")
    out.append(f"method:     {m['method']} ({m['finetuning']})")
    out.append(f"framework:  {m['framework']['name']} via {m['framework']['launcher']}")
    hw = m["hardware"]
    out.append(f"hardware:   {hw['nodes']} node(s) x {hw['gpus_per_node']} x {hw['gpu']}")
    out.append("tested with: " + ", ".join(f"{k} {v}" for k, v in m["tested_with"].items()))
    out.append("files:      " + ", ".join(
        f.name + (" (primary)" if f.primary else "") + (f" (when {f.when})" if f.when else "") for f in r.files))
    supported = m["framework"].get("supported_versions")
    if supported:
        out.append("supports:   " + "; ".join(f"{k} {v if isinstance(v, str) else ' | '.join(v)}" for k, v in supported.items()))
    out.append("")
    out.append("default values:")
    width = max(len(k) for k in r.defaults)
    for k, v in r.defaults.items():
        out.append(f"  {k.ljust(width)}  {json.dumps(v)}")
    out.append("")
    for part in ("symptom", "cause", "fix"):
        out.append(f"{part}:")
        out.extend(textwrap.wrap(" ".join(m["story"][part].split()), 96, initial_indent="  ", subsequent_indent="  "))
    for src in m["story"].get("sources", []):
        out.append(f"  source: {src}")
    print(printable("\n".join(out)))
    return 0


def _add_render_args(p):
    p.add_argument("name", help="recipe name (see `ftrecipes list`) or path to a recipe folder")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="override a value (repeatable)")
    p.add_argument("--values", action="append", default=[], metavar="FILE", help="YAML/JSON file of values (repeatable; --set wins)")
    p.add_argument("--file", "-f", help="print this file of the recipe instead of its primary file")
    p.add_argument("-o", "--output-dir", help="write every file of the recipe into this directory")
    p.add_argument("--force", action="store_true", help="with -o: replace existing files")


def _cmd_render(args):
    from . import atomic, recipe, render, values

    r = recipe.load(args.name)
    overrides = {}
    for path in args.values:
        overrides.update(values.load_file(r, path))
    overrides.update(values.parse_sets(r, args.sets))
    if args.output_dir is not None:
        if not args.output_dir:
            raise UserError("-o: an empty folder name")
        if args.file is not None:
            raise UserError("use either --file or -o, not both")
        files = render.render(r, overrides)
        written = atomic.write_all(args.output_dir, {f.name: (text, f.executable) for f, text in files}, force=args.force)
        for path in written:
            print(one_line(path), file=sys.stderr)
        _warn_memory(r, overrides)
        return 0
    # `--file ''` is a name that names nothing, not "no --file" (it printed the primary file)
    name = args.file if args.file is not None else r.primary.name
    if not name:
        raise UserError(f"--file '': an empty file name (files: {', '.join(f.name for f in r.files)})")
    [(rfile, text)] = render.render(r, overrides, only=name)
    sys.stdout.write(text)
    _warn_memory(r, overrides)
    return 0


def _warn_memory(recipe, overrides):
    """Hook for the memory model: warn when overrides make a recipe tight or OOM."""
    if not overrides:
        return
    from . import recipe_memory

    recipe_memory.warn_if_tight(recipe, overrides, sys.stderr)


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off for a while. A 10 MB config becomes millions of dicts, lists
    and tuples (data, positions, findings) that live until lint ends and form no cycles; the
    collector walked them again and again as they grew, a quarter of lint's time on a 9 MB
    YAML, to free nothing. What does form cycles is collected when it is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _cmd_lint(args):
    from . import lint, report, rules
    from . import versions as versions_mod

    if args.explain:
        r = rules.get(args.explain)
        if r is None:
            from .schemas import suggest

            raise UserError(f"no rule '{args.explain}'{suggest(args.explain, list(rules.all_rules()))}")
        print(f"{r.id} ({r.severity}): {r.summary}\n\n{r.doc}")
        return 0
    if args.list_rules:
        for r in rules.all_rules().values():
            print(f"{r.id:28} {r.severity:8} {r.summary}")
        return 0
    if not args.paths:
        raise UserError("lint needs FILE_OR_DIR arguments (or --explain RULE / --list-rules)")
    versions = versions_mod.parse_framework_versions(args.framework_version)
    if args.root is not None and not os.path.isdir(args.root):
        # a --root that is no folder was ignored (references resolved from the repository's top
        # instead), so a typo in it passed unnoticed
        raise UserError("--root: no such folder" if not os.path.lexists(args.root) else "--root: not a folder",
                        path=args.root or "''")
    if args.gpu is not None:
        from .memory import catalog

        try:
            catalog.gpu(args.gpu)
        except KeyError as exc:
            raise UserError(f"--gpu: {exc.args[0]}") from None
    from . import extras

    options = rules.Options(gpu=args.gpu, gpus=args.gpus, host_ram_gib=args.host_ram, framework_versions=versions,
                            config_extras=extras.load(args.config_extras))
    with _collector_paused():
        result = lint.run(args.paths, kind=args.kind, options=options, ignore=args.ignore, skip_unknown=args.skip_unknown, root=args.root)
        report.FORMATTERS[args.format](result, sys.stdout)
    for note in result.notes:
        print(one_line(f"ftrecipes: note: {note}"), file=sys.stderr)
    if result.unusable:
        return 2
    return 1 if any(f.severity == "error" for f in result.findings) else 0


def _cmd_regen(args):
    from . import regen

    return regen.main(args.names, check=args.check)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other error (exit status 2), and an
    option must be spelt in full: with abbreviations `estimate --framework fsdp` was taken as
    --framework-version and failed on a message about NAME=VERSION."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, one_line(f"{self.prog}: error: {message}") + "\n")


def build_parser():
    from .memory import cli as memory_cli  # its argparse types check numbers the same way for every verb

    parser = OneLineParser(prog="ftrecipes", description="Fine-tuning recipes that fit: render, lint, estimate.")
    parser.add_argument("--version", action="version", version=f"ftrecipes {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("list", help="list recipes")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="show a recipe's metadata, default values and story")
    p.add_argument("name")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("render", help="render a recipe's files (primary file to stdout)")
    _add_render_args(p)
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("lint", help="check config files against the schemas and rules")
    p.add_argument("paths", nargs="*", metavar="FILE_OR_DIR")
    p.add_argument("--kind", choices=list(detect.KINDS), help="skip detection")
    p.add_argument("--format", choices=["text", "json", "github", "sarif"], default="text")
    p.add_argument("--gpu", help="GPU type (e.g. V100-32GB, A100-80GB): enables hardware and memory rules")
    p.add_argument("--gpus", type=memory_cli.count(1), help="GPUs in the job, when the files don't say")
    p.add_argument("--host-ram", type=memory_cli.amount(0, 1e9), metavar="GIB", help="host RAM per node in GiB, for pinned-offload checks")
    p.add_argument("--framework-version", action="append", default=[], metavar="NAME=VER", help="check keys against this framework version")
    p.add_argument("--ignore", action="append", default=[], metavar="GLOB", help="skip files/folders matching (repeatable)")
    p.add_argument("--config-extras", action="append", default=[], metavar="FILE",
                   help="keys a custom training script adds: a YAML declaration {kind: {class: [keys]}} or the .py module defining its config dataclasses (repeatable)")
    p.add_argument("--root", metavar="DIR", help="working directory launches start in: config paths in files resolve from here (default: the repository's top)")
    p.add_argument("--skip-unknown", action="store_true", help="skip named files that are not configs lint knows (for pre-commit)")
    p.add_argument("--explain", metavar="RULE", help="print a rule's documentation")
    p.add_argument("--list-rules", action="store_true", help="list every rule")
    p.set_defaults(func=_cmd_lint)

    p = sub.add_parser("regen", help="re-render every recipe's committed rendered/ files")
    p.add_argument("names", nargs="*", help="recipes (default: all)")
    p.add_argument("--check", action="store_true", help="report stale files and exit 1 instead of writing")
    p.set_defaults(func=_cmd_regen)

    _register_optional(sub)
    return parser


def _register_optional(sub):
    # Sub-commands living in their own subpackages register themselves.
    from . import plan, smoke
    from .memory import cli as memory_cli

    memory_cli.register(sub)
    plan.register(sub)
    smoke.register(sub)
    sub.choices["estimate"].set_defaults(func=_cmd_estimate)


def _cmd_estimate(args):
    """Recipe mode here (resolve the recipe, its values and ds.json); config mode in memory.cli."""
    from .memory import cli as memory_cli

    if not args.recipe:
        return memory_cli.main(args)
    # a recipe's setup comes from its values; a flag that would be silently dropped is an error
    given = [f"--{k.replace('_', '-')}" for k in memory_cli.setup_options(args.estimate_parser)
             if getattr(args, k, None) not in (None, False, 0, [])]
    if given:
        raise UserError(f"estimate {args.recipe}: {', '.join(given)} describe a setup without a recipe and "
                        "cannot be combined with one; change a recipe with --set KEY=VALUE (its values, e.g. "
                        "micro_batch_size, or memory settings)")
    from . import recipe, recipe_memory, values
    from .memory.report import exit_status, render_text

    from .memory import configs as memory_configs
    from .versions import parse_framework_versions

    r = recipe.load(args.recipe)
    rendered, what_if = memory_configs.split_sets(r.values_schema.get("properties", {}), args.set)
    memory = {**memory_configs.parse_sets(what_if),
              **memory_configs.setup_version_fields(parse_framework_versions(args.framework_version))}
    result = recipe_memory.estimate(r, values.parse_sets(r, rendered), memory)
    if args.svg:
        from . import atomic

        atomic.write_one(args.svg, recipe_memory.svg(r, result))
    print(json.dumps(result.to_json(), indent=1) if args.json else printable(render_text(result)))
    return exit_status(result)


def run_parsed(parser, argv):
    # Keys and values from the user's files are echoed back; a lone surrogate (a JSON "\ud800"
    # escape, an undecodable argv byte) must not turn a one-line report into a traceback.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    out = stdio.guard()
    try:
        args = parser.parse_args(argv)  # --help and usage errors write too
        status = args.func(args)
        stdio.finish(out)
        return status
    except UserError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except FileNotFoundError:
        # Run from a folder deleted since (a shell still sitting in it): every relative path, and
        # os.path.abspath / os.getcwd on the way to absolute ones, fail with ENOENT deep inside
        # whichever verb asked first. That is the user's setting, not our bug: one line.
        if not _cwd_gone():
            raise
        print(f"{parser.prog}: error: the current folder no longer exists (deleted while in use); "
              "cd to a folder that exists", file=sys.stderr)
        return 2
    finally:
        with contextlib.suppress(UserError):
            out.flush()  # what --help left buffered, so the exit's own flush has nothing to fail on
        if sys.stdout is out:  # in-process callers (tests) get their stream back
            sys.stdout = out.stream


def _cwd_gone():
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def main(argv=None):
    return run_parsed(build_parser(), argv)


def render_main(argv=None):
    parser = OneLineParser(prog="render", description="Render a fine-tuning recipe (same as `ftrecipes render`).")
    _add_render_args(parser)
    parser.set_defaults(func=_cmd_render)
    return run_parsed(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
