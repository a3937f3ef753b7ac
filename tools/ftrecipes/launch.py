"""Launch scripts as lintable documents: the OpenRLHF trainer flags they pass."""

from . import schemas, shellcmd, sources, values

OPENRLHF_PREFIX = "openrlhf.cli."


def openrlhf_commands(text):
    """(command, module index) for every command in the script that runs an OpenRLHF trainer."""
    for cmd in shellcmd.commands(text):
        idx = shellcmd.find_module(cmd, OPENRLHF_PREFIX)
        if idx is not None:
            yield cmd, idx


def openrlhf_document(text, path):
    """The flags of the script's (first) OpenRLHF command as a Document, typed by the schema.

    Shell words are strings; the schema says which flags are numbers or switches,
    so a value that doesn't convert stays a string and the schema reports it.
    """
    found = list(openrlhf_commands(text))
    doc = sources.Document(path=path, data={}, text=text)
    if not found:
        return None
    cmd, idx = found[0]
    flags, dups = shellcmd.flags_after(cmd, idx + 1)
    props = schemas.load_schema("openrlhf.schema.json").get("properties", {})
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


def _typed(raw, prop):
    try:
        return values.coerce(raw, values.kind_of(prop))
    except ValueError:
        return raw  # the schema reports the wrong type
