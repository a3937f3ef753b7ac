"""Readers: a config file's text turned into a sources.Document, the one way for every format.

render checks each file it writes and lint each file it finds through read(); a format's entry
in formats.FORMATS says how: its syntax (JSON, YAML) or, for a launch script, the module prefix
of the command whose flags are the document.
"""

from . import schemas, shellcmd, sources
from .formats import FORMATS
from .scalars import coerce, kind_of


def read(text, path, fmt):
    """The Document of a file of format fmt, or None for a script that runs no such command."""
    if fmt.syntax in ("json", "yaml"):
        return sources.parse(text, path, fmt.syntax)
    if fmt.command:
        return command_document(text, path, fmt.command, fmt.schema)
    return None


def module_commands(text, prefix, schema_name=None):
    """(command, module index) for every command in the script that runs a module under prefix.

    Where the schema lists the modules it was generated from (x-framework.commands), only those
    count: `openrlhf.cli.serve_rm` parses flags of its own (--port, --batch_size), and judging them
    by the trainers' argparse would call each an unknown key."""
    listed = schemas.load_schema(schema_name).get("x-framework", {}).get("commands") if schema_name else None
    for cmd in shellcmd.commands(text):
        idx = shellcmd.find_module(cmd, prefix)
        if idx is not None and (not listed or cmd.words[idx][len(prefix):] in listed):
            yield cmd, idx


def command_document(text, path, prefix, schema_name):
    """The flags of the script's (first) command running a module under prefix, typed by the schema.

    Shell words are strings; the schema says which flags are numbers or switches,
    so a value that doesn't convert stays a string and the schema reports it.
    """
    found = list(module_commands(text, prefix, schema_name))
    if not found:
        return None
    doc = sources.Document(path=path, data={}, text=text)
    cmd, idx = found[0]
    flags, dups = shellcmd.flags_after(cmd, idx + 1)
    props = schemas.load_schema(schema_name).get("properties", {}) if schema_name else {}
    data = {}
    lines = text.split("\n")
    for name, (raw, line) in flags.items():
        prop = props.get(name)
        value = raw
        if prop is not None and isinstance(raw, list):
            item = prop.get("items", {}) if isinstance(prop.get("items"), dict) else {}
            value = [_typed(x, item) for x in raw]
        elif prop is not None and raw is not True:
            value = _typed(raw, prop)
        data[name] = value
        col = shellcmd.column(lines, line, "--" + name)
        doc.key_positions[(name,)] = (line, col)
        doc.positions[(name,)] = (line, col)
    doc.data = data
    doc.duplicates = [((name,), line, shellcmd.column(lines, line, "--" + name)) for name, line in dups]
    doc.module = cmd.words[idx]
    return doc


def openrlhf_document(text, path):
    """An OpenRLHF launch script's trainer flags (the `openrlhf` format's reader)."""
    return read(text, path, FORMATS["openrlhf"])


def _typed(raw, prop):
    try:
        return coerce(raw, kind_of(prop))
    except ValueError:
        return raw  # the schema reports the wrong type
