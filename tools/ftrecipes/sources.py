"""Parse JSON and YAML while remembering where every key and value stands.

Lint findings and value errors must name a line and column, and duplicate keys
must be caught (DeepSpeed's loader rejects them, YAML loaders keep the last one
silently), so neither ``json.loads`` nor ``yaml.safe_load`` is enough.
"""

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring

import yaml

from .errors import UserError

# An alias that expands into millions of nodes ("billion laughs") must not hang
# or exhaust memory: real configs have a few hundred nodes at most.
MAX_NODES = 200_000
MAX_DEPTH = 200  # nesting levels, as for JSON below


@dataclass
class Document:
    """Parsed data plus the position (1-based line, column) of each path.

    A path is a tuple of keys and list indices; ``positions[path]`` is where the
    value starts and ``key_positions[path]`` where its key is written.
    """

    path: str
    data: object
    positions: dict = field(default_factory=dict)
    key_positions: dict = field(default_factory=dict)
    duplicates: list = field(default_factory=list)  # (path, line, column)
    text: str = ""

    def where(self, path):
        """Best position for a path: its key, else its value, else its nearest parent's."""
        path = tuple(path)
        while True:
            if path in self.key_positions:
                return self.key_positions[path]
            if path in self.positions:
                return self.positions[path]
            if not path:
                return (1, 1)
            path = path[:-1]


def read_text(path, max_bytes=None):
    """Read a file as UTF-8, turning every failure into a one-line UserError."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except IsADirectoryError:
        raise UserError("is a directory", path=path) from None
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise UserError(f"file larger than {max_bytes // (1024 * 1024)} MiB; not a config", path=path)
    if b"\x00" in raw:
        raise UserError("binary file (contains NUL bytes); not a config", path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UserError(f"invalid UTF-8 at byte {exc.start}", path=path, line=line) from None
    return text.removeprefix("\ufeff")


# ---------------------------------------------------------------- JSON

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_WS = re.compile(r"[ \t\n\r]*")


class _JsonParser:
    def __init__(self, text, path):
        self.text = text
        self.path = path
        self.doc = Document(path=path, data=None, text=text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def pos(self, idx):
        # Binary search over line starts: configs are small, but a 100 MB input must not be quadratic.
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= idx:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, idx - self.line_starts[lo] + 1

    def fail(self, msg, idx):
        line, col = self.pos(min(idx, len(self.text)))
        raise UserError(f"invalid JSON: {msg}", path=self.path, line=line, column=col)

    def ws(self, idx):
        return _WS.match(self.text, idx).end()

    def parse(self):
        idx = self.ws(0)
        if idx >= len(self.text):
            self.fail("empty document", idx)
        value, idx = self.value(idx, (), 0)
        idx = self.ws(idx)
        if idx != len(self.text):
            self.fail("extra data after the top-level value", idx)
        self.doc.data = value
        return self.doc

    def value(self, idx, path, depth):
        if depth > MAX_DEPTH:
            self.fail("nested too deeply", idx)
        self.doc.positions[path] = self.pos(idx)
        ch = self.text[idx : idx + 1]
        if ch == "{":
            return self.obj(idx + 1, path, depth)
        if ch == "[":
            return self.arr(idx + 1, path, depth)
        if ch == '"':
            return self.string(idx + 1)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, idx):
                return val, idx + len(word)
        m = _NUMBER.match(self.text, idx)
        if m and m.end() > idx:
            num = m.group(0)
            return (float(num) if m.group(1) or m.group(2) else int(num)), m.end()
        if not ch:
            self.fail("unexpected end of file", idx)
        self.fail(f"unexpected character {ch!r}", idx)

    def string(self, idx):
        try:
            return scanstring(self.text, idx, True)
        except json.JSONDecodeError as exc:
            self.fail(exc.msg.lower(), exc.pos)

    def obj(self, idx, path, depth):
        result = {}
        idx = self.ws(idx)
        if self.text[idx : idx + 1] == "}":
            return result, idx + 1
        while True:
            if self.text[idx : idx + 1] != '"':
                self.fail("expected a quoted key", idx)
            key_idx = idx
            key, idx = self.string(idx + 1)
            child = path + (key,)
            if key in result:
                self.doc.duplicates.append((child, *self.pos(key_idx)))
            self.doc.key_positions[child] = self.pos(key_idx)
            idx = self.ws(idx)
            if self.text[idx : idx + 1] != ":":
                self.fail("expected ':' after key", idx)
            idx = self.ws(idx + 1)
            result[key], idx = self.value(idx, child, depth + 1)
            idx = self.ws(idx)
            ch = self.text[idx : idx + 1]
            if ch == "}":
                return result, idx + 1
            if ch != ",":
                self.fail("expected ',' or '}'", idx)
            idx = self.ws(idx + 1)

    def arr(self, idx, path, depth):
        result = []
        idx = self.ws(idx)
        if self.text[idx : idx + 1] == "]":
            return result, idx + 1
        while True:
            value, idx = self.value(idx, path + (len(result),), depth + 1)
            result.append(value)
            idx = self.ws(idx)
            ch = self.text[idx : idx + 1]
            if ch == "]":
                return result, idx + 1
            if ch != ",":
                self.fail("expected ',' or ']'", idx)
            idx = self.ws(idx + 1)


def parse_json(text, path="<string>"):
    return _JsonParser(text, path).parse()


# ---------------------------------------------------------------- YAML


_PLAIN_COLLECTIONS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class _YamlBuilder:
    def __init__(self, path, text):
        self.doc = Document(path=path, data=None, text=text)
        self.count = 0

    def build(self, node, path):
        self.count += 1
        if len(path) > MAX_DEPTH:
            raise UserError("invalid YAML: nested too deeply", path=self.doc.path, line=node.start_mark.line + 1, column=node.start_mark.column + 1)
        if self.count > MAX_NODES:
            line = node.start_mark.line + 1
            raise UserError(
                f"YAML expands to more than {MAX_NODES} nodes (alias bomb?); refusing",
                path=self.doc.path,
                line=line,
            )
        self.doc.positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_COLLECTIONS:
            # yaml.safe_load (what the frameworks use) refuses these; don't quietly read a list instead.
            raise UserError(
                f"invalid YAML: tag '{node.tag}' is not supported in configs",
                path=self.doc.path,
                line=node.start_mark.line + 1,
                column=node.start_mark.column + 1,
            )
        if isinstance(node, yaml.MappingNode):
            result = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise UserError(
                        "YAML merge keys ('<<') are not supported in configs",
                        path=self.doc.path,
                        line=key_node.start_mark.line + 1,
                        column=key_node.start_mark.column + 1,
                    )
                key = self.scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
                if key is None or isinstance(key, (list, dict)):
                    raise UserError(
                        "mapping keys must be plain scalars",
                        path=self.doc.path,
                        line=key_node.start_mark.line + 1,
                        column=key_node.start_mark.column + 1,
                    )
                child = path + (key,)
                kpos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in result:
                    self.doc.duplicates.append((child, *kpos))
                self.doc.key_positions[child] = kpos
                result[key] = self.build(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self.scalar(node)

    def scalar(self, node):
        return yaml.SafeLoader.construct_scalar_value(node)


def _construct_scalar(node):
    # SafeLoader's resolver already tagged the node (int, float, bool, null, str,
    # timestamp); construct it with a throwaway loader so tags mean what they
    # mean in yaml.safe_load.
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


yaml.SafeLoader.construct_scalar_value = staticmethod(_construct_scalar)


def parse_yaml(text, path="<string>"):
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except RecursionError:
        # PyYAML composes nested collections recursively: 100,000 '[' would crash it.
        raise UserError("invalid YAML: nested too deeply", path=path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = exc.problem or exc.context or "invalid YAML"
        raise UserError(
            f"invalid YAML: {msg}",
            path=path,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.reader.ReaderError as exc:
        # A character YAML does not allow (C1 controls, U+FFFE...): one line, with its position.
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise UserError(f"invalid YAML: character U+{char:04X} is not allowed ({exc.reason})", path=path, line=line, column=column) from None
    except yaml.YAMLError as exc:
        raise UserError("invalid YAML: " + " ".join(str(exc).split()), path=path) from None
    builder = _YamlBuilder(path, text)
    if node is None:
        builder.doc.data = None
        return builder.doc
    try:
        builder.doc.data = builder.build(node, ())
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        raise UserError(
            f"invalid YAML: {exc.problem}",
            path=path,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    return builder.doc


def parse(text, path, syntax):
    """syntax: 'json' or 'yaml'."""
    return parse_json(text, path) if syntax == "json" else parse_yaml(text, path)
