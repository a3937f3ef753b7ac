"""Read config files and parse JSON and YAML while remembering where every key and value stands.

Every file the tool reads comes through read_text: regular files only, size-limited,
UTF-8. Lint findings and value errors must name a line and column, and duplicate keys
must be caught (DeepSpeed's loader rejects them, YAML loaders keep the last one
silently), so neither ``json.loads`` nor ``yaml.safe_load`` is enough.
"""

import bisect
import errno
import functools
import json
import json.scanner
import math
import os
import re
import stat
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from json.decoder import scanstring

import yaml

from .errors import UserError, clip, refuse_dash

MAX_BYTES = 10 * 1024 * 1024  # configs are kilobytes; a huge file is a mistake, not a config
MAX_DEPTH = 200  # nesting levels
# Values in one document, aliases expanded: every value gets a recorded position, so
# this bounds memory too (about 200 bytes a value). A 10 MiB config of short keys has
# about 600,000; a list of 1,200,000 small numbers fits in 10 MB.
MAX_NODES = 2_000_000
# What YAML aliases may add on top of the text ("billion laughs" expands a 1 KB file
# into gigabytes; an error message that echoes the data would print all of it).
MAX_ALIAS_NODES = 100_000
MAX_ALIAS_CHARS = 1024 * 1024



# Folders a walk never enters: version control, caches and installed packages.
IGNORED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox",
                          ".mypy_cache", ".pytest_cache", "site-packages"})


def walk(top, suffixes, skip_dir=lambda name: False, skip_file=lambda path: False):
    """Regular files under top whose suffix is in suffixes, in sorted order, depth first.

    Links to folders are not followed (no loops), hidden and IGNORED_DIRS folders are not
    entered, an unreadable folder yields nothing, and a fifo or device with a matching name is
    never opened (nor waited on)."""
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in IGNORED_DIRS and not entry.name.startswith(".") and not skip_dir(entry.name):
                        subdirs.append(entry.path)
                elif os.path.splitext(entry.name)[1].lower() in suffixes and entry.is_file() and not skip_file(entry.path):
                    yield entry.path
            except OSError:
                continue
        stack.extend(reversed(subdirs))

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
            found = self.key_positions.get(path) or self.positions.get(path)
            if found:
                return found
            if not path:
                return (1, 1)
            path = path[:-1]


def read_text(path, max_bytes=MAX_BYTES):
    """Read a regular file as UTF-8, turning every failure into a one-line UserError.

    Whatever a path names is checked before a byte is read: a fifo would block
    forever, /dev/zero never ends, and a config in a pull request may name either.
    The file is opened non-blocking and checked again through its descriptor, so a
    path swapped between the two checks cannot slip through.
    """
    refuse_dash(path, "standard input")
    _check_regular(path, os.stat, max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UserError(_os_reason(exc), path=path) from None
    try:
        _check_regular(fd, os.fstat, max_bytes, path)
        raw = _read_fd(fd, max_bytes + 1)
    except OSError as exc:
        raise UserError(_os_reason(exc), path=path) from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise UserError(_too_large(max_bytes), path=path)
    return decode(raw, path)


def regular_file(path, max_bytes=MAX_BYTES):
    """True when path is a regular file (after symlinks) that read_text would accept by size."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= max_bytes


def _check_regular(target, stat_fn, max_bytes, path=None):
    path = target if path is None else path
    try:
        st = stat_fn(target)
    except OSError as exc:
        raise UserError(_os_reason(exc), path=path) from None
    except ValueError:  # a NUL byte in the path
        raise UserError("invalid path", path=path) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise UserError("is a directory", path=path)
    if not stat.S_ISREG(mode):
        raise UserError(f"not a regular file ({_file_type(mode)}); not a config", path=path)
    if st.st_size > max_bytes:
        raise UserError(_too_large(max_bytes), path=path)


def _file_type(mode):
    for test, name in ((stat.S_ISFIFO, "a fifo"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _os_reason(exc):
    if exc.errno == errno.ELOOP:
        return "cannot read: symbolic link loop"
    if exc.errno == errno.ENOENT:
        return "cannot read: no such file"
    return f"cannot read: {exc.strerror or exc}"


def _too_large(max_bytes):
    return f"file larger than {max_bytes / (1024 * 1024):g} MiB; not a config"


def _read_fd(fd, limit):
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(limit - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def decode(raw, path):
    """Bytes of a config → text: UTF-8 only, a leading BOM dropped, no NUL bytes."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserError("UTF-16 text; configs must be UTF-8", path=path, line=1, column=1)
    if b"\x00" in raw:
        raise UserError("binary file (contains NUL bytes); not a config", path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserError(f"invalid UTF-8 at byte {exc.start}", path=path, line=line, column=column) from None
    return text.removeprefix("\ufeff")


def load(path, syntax, max_bytes=MAX_BYTES):
    """Read and parse a file in one step; syntax: 'json' or 'yaml'."""
    return parse(read_text(path, max_bytes), str(path), syntax)


# ---------------------------------------------------------------- JSON

# ASCII digits only: JSON has no others, and int() would read '1\u0661' as 11.
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WS = re.compile(r"[ \t\n\r]*")
_WS_CHARS = (" ", "\t", "\n", "\r")  # not a str: '' in a str is True, and '' is the end of the text
_LITERALS = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}


def check_number(value, fail):
    """A parsed number a config can hold: finite, and an integer Python can print.

    fail(message) raises; 1e400 is infinity and NaN compares unequal to itself, so
    neither is a size, a rate or a count.
    """
    if isinstance(value, float) and not math.isfinite(value):
        fail("number is not finite (NaN or out of range)")
    return value


class _JsonParser:
    def __init__(self, text, path):
        self.text = text
        self.path = path
        self.doc = Document(path=path, data=None, text=text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.count = 0

    def pos(self, idx):
        line = bisect.bisect_right(self.line_starts, idx) - 1
        return line + 1, idx - self.line_starts[line] + 1

    def fail(self, msg, idx, at=None):
        # at: the key path of a value that is wrong in itself (NaN, a number too large), named too.
        line, col = self.pos(min(idx, len(self.text)))
        key = ".".join(map(str, at)) if at else None
        raise UserError(f"invalid JSON: {msg}", path=self.path, line=line, column=col, key=key)

    def ws(self, idx):
        # Called around every token: skip the regex when no whitespace follows (compact JSON).
        if self.text[idx : idx + 1] not in _WS_CHARS:
            return idx
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
        self.count += 1
        if self.count > MAX_NODES:
            self.fail(f"more than {MAX_NODES:,} values; not a config", idx)
        self.doc.positions[path] = self.pos(idx)
        ch = self.text[idx : idx + 1]
        if ch == "{":
            return self.obj(idx + 1, path, depth)
        if ch == "[":
            return self.arr(idx + 1, path, depth)
        if ch == '"':
            return self.string(idx + 1)
        if ch in _LITERALS:
            word, val = _LITERALS[ch]
            if self.text.startswith(word, idx):
                return val, idx + len(word)
        m = _NUMBER.match(self.text, idx)
        if m and m.end() > idx:
            return self.number(m, idx, path), m.end()
        if not ch:
            self.fail("unexpected end of file", idx)
        for word in ("NaN", "Infinity", "-Infinity"):
            if self.text.startswith(word, idx):  # Python's json module reads them; JSON has no such numbers
                self.fail(f"{word} is not a JSON number", idx, path)
        self.fail(f"unexpected character {ch!r}", idx)

    def number(self, m, idx, path):
        num = m.group(0)
        if m.group(1) or m.group(2):
            return check_number(float(num), lambda msg: self.fail(msg, idx, path))
        try:
            return int(num)
        except ValueError:  # over sys.get_int_max_str_digits() digits
            self.fail(f"integer with {len(num):,} digits is too large", idx, path)

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
            kpos = self.pos(key_idx)
            if key in result:
                self.doc.duplicates.append((child, *kpos))
            self.doc.key_positions[child] = kpos
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
    doc = _fast_json(text, path)
    return doc if doc is not None else _JsonParser(text, path).parse()


# ------------------------------------------------ JSON, the fast way
# The parser above records a position for every value in Python: ~3 µs a value, seconds for a
# 10 MB file. A config with no problem in its syntax is parsed by the json module's C scanner
# instead, and the positions of the few paths a finding names are found on demand
# (_JsonIndex). Anything the C path does not accept exactly as the parser above would
# (duplicates, NaN, 1e400, huge integers, nesting or size over the limits, any syntax error)
# sends the text through the parser above, whose result and messages stay the reference.


class _Fallback(Exception):
    """The text needs the position-keeping parser (a duplicate key, a value it refuses, ...)."""


def _pairs(pairs):
    data = dict(pairs)
    if len(data) != len(pairs):
        raise _Fallback
    return data


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise _Fallback
    return value


def _no_constant(name):
    raise _Fallback  # NaN, Infinity, -Infinity: Python reads them, JSON has no such numbers


_STRICT = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_finite_float, parse_constant=_no_constant)
# Skips one value whose syntax is known to be good (the text parsed above): positions only.
_SKIP = json.scanner.make_scanner(json.JSONDecoder())


def _fast_json(text, path):
    """A Document for text the C scanner accepts within the limits, else None."""
    try:
        data = _STRICT.decode(text)
    except (_Fallback, ValueError, RecursionError):  # ValueError: JSONDecodeError, over 4,300 digits
        return None
    if not _within_limits(data):
        return None
    index = _JsonIndex(text)
    return Document(path=path, data=data, positions=_Positions(index, index.values),
                    key_positions=_Positions(index, index.keys), text=text)


def _within_limits(data):
    """Nesting and value count as the parser above counts them (it refuses past either)."""
    count, stack = 1, [(data, 0)] if isinstance(data, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if children and depth >= MAX_DEPTH:
            return False
        count += len(children)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return count <= MAX_NODES


# Between a key and its value, and after a value (the text is known to be well-formed).
_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_COMMA = re.compile(r"[ \t\n\r]*(?:,[ \t\n\r]*)?")


class _JsonIndex:
    """Where the values and keys of a well-formed JSON text stand, found one container at a
    time: asking for a path indexes the containers on its way and nothing else."""

    def __init__(self, text):
        self.text = text
        self.values = {(): self.ws(0)}  # path -> character offset of its value
        self.keys = {}  # path -> character offset of its key
        self.indexed = {}  # path -> paths of its children, for the containers indexed so far
        self.line_starts = None

    def ws(self, idx):
        return _WS.match(self.text, idx).end()

    def locate(self, path):
        """Index the containers along path; False when path cannot exist in the document."""
        for i in range(len(path)):
            parent = path[:i]
            if parent not in self.indexed:
                if parent not in self.values:
                    return False
                self.index(parent)
        return True

    def index(self, path):
        """Record where the children of the value at path stand; returns their paths."""
        self.indexed[path] = children = []
        text, idx = self.text, self.values[path]
        close = {"{": "}", "[": "]"}.get(text[idx])
        if close is None:
            return children  # a scalar has none
        idx = self.ws(idx + 1)
        n = 0
        values, keys = self.values, self.keys
        while text[idx] != close:
            if close == "}":
                key, end = scanstring(text, idx + 1, True)
                child = path + (key,)
                keys[child] = idx
                idx = _COLON.match(text, end).end()
            else:
                child, n = path + (n,), n + 1
            values[child] = idx
            children.append(child)
            idx = _COMMA.match(text, _SKIP(text, idx)[1]).end()
        return children

    def everything(self):
        stack = [()]
        while stack:
            path = stack.pop()
            stack.extend(self.indexed[path] if path in self.indexed else self.index(path))

    def pos(self, idx):
        if self.line_starts is None:
            self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self.line_starts, idx) - 1
        return line + 1, idx - self.line_starts[line] + 1


class _Positions(MutableMapping):
    """path -> (line, column), read from a _JsonIndex when asked; entries set here win."""

    def __init__(self, index, table):
        self.index, self.table, self.own = index, table, {}

    def __getitem__(self, path):
        if path in self.own:
            return self.own[path]
        path = tuple(path)
        if self.index.locate(path) and path in self.table:
            return self.index.pos(self.table[path])
        raise KeyError(path)

    def __setitem__(self, path, pos):
        self.own[path] = pos

    def __delitem__(self, path):
        raise TypeError("positions of a parsed document are fixed")

    def __iter__(self):
        self.index.everything()
        return iter({**dict.fromkeys(self.table), **dict.fromkeys(self.own)})

    def __len__(self):
        return sum(1 for _ in self)


# ---------------------------------------------------------------- YAML

# libyaml's parser when PyYAML was built with it (several times faster); the events and
# marks are the same as the pure-Python parser's, so positions do not change.
_Loader = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader
_TAG = "tag:yaml.org,2002:"
_PLAIN_COLLECTIONS = (None, "!", _TAG + "map", _TAG + "seq")
# Scalar tags a config may carry: what yaml.safe_load resolves plain scalars to.
_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_NOKEY = object()
# First characters of plain scalars an implicit resolver may turn into something other than a
# string ('' is null); any other plain scalar is a string, whatever the resolver would try.
_RESOLVED_FIRST = frozenset(_Loader.yaml_implicit_resolvers) | {""}


class _Frame:
    __slots__ = ("value", "path", "is_map", "key", "key_pos", "anchor", "nodes", "chars")

    def __init__(self, value, path, anchor, nodes, chars):
        self.value, self.path, self.anchor = value, path, anchor
        self.is_map = isinstance(value, dict)
        self.key, self.key_pos = _NOKEY, None
        self.nodes, self.chars = nodes, chars  # counters when it started: its size for an anchor


class _YamlComposer:
    """Build data and positions straight from parser events.

    Composing a node tree first (PyYAML's way) costs time and memory before any limit
    can apply, and recurses once per nesting level. Here depth, values and alias
    expansion are counted as each event arrives, and an anchor is only usable once
    its node is complete (no recursive aliases).
    """

    def __init__(self, loader, path, text):
        self.loader = loader
        self.doc = Document(path=path, data=None, text=text)
        self.stack = []
        self.anchors = {}  # name -> (value, nodes, chars)
        self.nodes = self.chars = self.alias_nodes = self.alias_chars = 0

    def fail(self, msg, mark):
        raise UserError(msg, path=self.doc.path, line=mark.line + 1, column=mark.column + 1)

    def run(self):
        get = self.loader.get_event
        get()  # StreamStart
        if isinstance(get(), yaml.StreamEndEvent):  # else DocumentStart
            return self.doc
        handlers = {
            yaml.ScalarEvent: self.scalar,
            yaml.AliasEvent: self.alias,
            yaml.MappingStartEvent: self.start,
            yaml.SequenceStartEvent: self.start,
            yaml.MappingEndEvent: self.end,
            yaml.SequenceEndEvent: self.end,
        }
        event = get()
        while not isinstance(event, (yaml.DocumentEndEvent, yaml.StreamEndEvent)):
            if not (type(event) is yaml.ScalarEvent and self.plain_in_mapping(event)):
                handlers[type(event)](event)
            event = get()
        if isinstance(event, yaml.DocumentEndEvent):
            event = get()
            if not isinstance(event, yaml.StreamEndEvent):
                self.fail("invalid YAML: expected a single document, found another", event.start_mark)
        return self.doc

    def plain_in_mapping(self, event):
        """scalar() for the bulk of a big config, a string key or value of a mapping with no tag,
        anchor or first character a resolver looks at; False (nothing done) for any other scalar.
        The same steps as place(), set_key() and attach(), in one call instead of three."""
        text, stack = event.value, self.stack
        if event.tag is not None or event.anchor is not None or not stack or text[:1] in _RESOLVED_FIRST:
            return False
        top = stack[-1]
        if not top.is_map:
            return False
        mark = event.start_mark
        self.chars += len(text)
        if top.key is _NOKEY:
            path = top.path + (text,)
            if text in top.value:
                self.doc.duplicates.append((path, mark.line + 1, mark.column + 1))
            top.key = text
            self.doc.key_positions[path] = (mark.line + 1, mark.column + 1)
            return True
        path = top.path + (top.key,)
        if len(path) > MAX_DEPTH:
            self.fail("invalid YAML: nested too deeply", mark)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(f"YAML holds more than {MAX_NODES:,} values; not a config", mark)
        self.doc.positions[path] = (mark.line + 1, mark.column + 1)
        top.value[top.key] = text
        top.key = _NOKEY
        return True

    def place(self, event):
        """The path of the node an event starts; None when it is a mapping key."""
        if not self.stack:
            path = ()
        else:
            top = self.stack[-1]
            if top.is_map and top.key is _NOKEY:
                return None
            path = top.path + ((top.key,) if top.is_map else (len(top.value),))
        if len(path) > MAX_DEPTH:
            self.fail("invalid YAML: nested too deeply", event.start_mark)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(f"YAML holds more than {MAX_NODES:,} values; not a config", event.start_mark)
        mark = event.start_mark
        self.doc.positions[path] = (mark.line + 1, mark.column + 1)
        return path

    def attach(self, value, anchor, nodes=1, chars=0):
        if anchor is not None:
            self.anchors[anchor] = (value, nodes, chars)
        if not self.stack:
            self.doc.data = value
            return
        top = self.stack[-1]
        if top.is_map:
            top.value[top.key] = value
            top.key = _NOKEY
        else:
            top.value.append(value)

    def set_key(self, key, event):
        top = self.stack[-1]
        mark = event.start_mark
        if key is None or isinstance(key, (dict, list)):
            self.fail("invalid YAML: mapping keys must be plain scalars", mark)
        if key in top.value:
            self.doc.duplicates.append((top.path + (key,), mark.line + 1, mark.column + 1))
        top.key = key
        self.doc.key_positions[top.path + (key,)] = (mark.line + 1, mark.column + 1)

    def scalar(self, event):
        path = self.place(event)
        tag = event.tag
        if tag is None and event.value[:1] not in _RESOLVED_FIRST:
            # No implicit resolver starts with this character: the resolver would say str.
            # Skipping it matters for files of hundreds of thousands of keys.
            tag = _TAG + "str"
        elif tag is None:
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        elif tag == "!":
            # PyYAML's parser resolves a '!' scalar as if plain, libyaml's as quoted: follow yaml.safe_load.
            tag = self.loader.resolve(yaml.ScalarNode, event.value, (True, False))
        if path is None and tag == _TAG + "merge":
            self.fail("invalid YAML: merge keys ('<<') are not supported in configs", event.start_mark)
        value = event.value if tag == _TAG + "str" else self.construct(tag, event)
        self.chars += len(event.value)
        if path is None:
            self.set_key(value, event)
            if event.anchor is not None:
                self.anchors[event.anchor] = (value, 1, len(event.value))
        else:
            self.attach(value, event.anchor, 1, len(event.value))

    def construct(self, tag, event):
        short = tag.replace(_TAG, "!!")
        if tag not in _SCALAR_TAGS:
            self.fail(f"invalid YAML: tag '{short}' is not supported in configs", event.start_mark)
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            value = self.loader.yaml_constructors[tag](self.loader, node)
        except (ValueError, TypeError, AttributeError, OverflowError, KeyError, yaml.YAMLError) as exc:
            too_long = isinstance(exc, ValueError) and "digits" in str(exc)
            what = "integer is too large" if too_long else f"{clip(event.value)!r} is not a valid {short}"
            self.fail(f"invalid YAML: {what}", event.start_mark)
        return check_number(value, lambda msg: self.fail(f"invalid YAML: {msg}", event.start_mark))

    def alias(self, event):
        if event.anchor not in self.anchors:
            self.fail(f"invalid YAML: alias '*{event.anchor}' names no complete anchor before it", event.start_mark)
        value, nodes, chars = self.anchors[event.anchor]
        path = self.place(event)
        self.nodes += nodes - 1
        self.chars += chars
        self.alias_nodes += nodes
        self.alias_chars += chars
        if self.alias_nodes > MAX_ALIAS_NODES or self.alias_chars > MAX_ALIAS_CHARS or self.nodes > MAX_NODES:
            self.fail("YAML aliases expand too far (alias bomb?); refusing", event.start_mark)
        if path is None:
            self.set_key(value, event)
        else:
            self.attach(value, None, nodes, chars)

    def start(self, event):
        path = self.place(event)
        if path is None:
            self.fail("invalid YAML: mapping keys must be plain scalars", event.start_mark)
        if event.tag not in _PLAIN_COLLECTIONS:
            # yaml.safe_load (what the frameworks use) refuses these; don't quietly read a list instead.
            self.fail(f"invalid YAML: tag '{event.tag}' is not supported in configs", event.start_mark)
        value = {} if isinstance(event, yaml.MappingStartEvent) else []
        self.stack.append(_Frame(value, path, event.anchor, self.nodes - 1, self.chars))

    def end(self, event):
        frame = self.stack.pop()
        self.attach(frame.value, frame.anchor, self.nodes - frame.nodes, self.chars - frame.chars)


# Configs this size or smaller go through PyYAML's pure-Python parser: it is the one
# yaml.safe_load uses, and so the frameworks; libyaml accepts a few odd inputs it refuses
# ('!' followed by a tab, ...). Larger files (data dumps, generated configs) would take
# tens of seconds there and go through libyaml.
_PYTHON_PARSER_CHARS = 64 * 1024


def parse_yaml(text, path="<string>"):
    if len(text) <= _PYTHON_PARSER_CHARS:
        return _compose(yaml.SafeLoader, text, path)
    doc = _block_mapping(text, path)
    return doc if doc is not None else _compose(_Loader, text, path)


# ------------------------------------------------ YAML, the fast way
# Even libyaml hands over every token as Python event and mark objects: ~4 µs a key, seconds for
# a generated config of 300,000 keys (libyaml's own node composer is slower still: it asks the
# Python resolver about every scalar). Most big configs are block mappings and block sequences
# of one-line scalars (plain, or quoted without escapes) and one-line flow collections of such
# scalars, which a line at a time reads exactly; _block_mapping reads those and returns None at
# the first line outside that subset (an escape, an anchor, a tag, a comment it is unsure of, a
# continued or block scalar, nested flow collections, a tab...), and the composer above reads
# the text.
_PLAIN_KEY = r"[A-Za-z_][A-Za-z0-9_./-]*"
_LINE = re.compile(
    # Each run of spaces can be matched one way only (a lookahead or lookbehind pins its ends):
    # nested or adjacent repeats of the same characters backtrack exponentially or
    # quadratically on a line that does not match, and a line can be megabytes long.
    r"( *)(?=[^ ]|$)(-(?: +(?=[^ ])| *$))?"  # indentation, a sequence entry's dash and the spaces after it
    rf"(?:({_PLAIN_KEY}):(?: +(?=[^ ])| *$))?"  # a plain key
    # A one-line plain value, taken whole ((?=(x))\4 is x without backtracking into it: a shorter
    # one never lets the rest of the line match, and giving it back a piece at a time costs
    # seconds on a megabyte line),
    r"(?:(?=([^\s#'\"\[\]{}&*!|>%@`,?:-](?:[^\s#:\[\]{}]+|:(?=[^ ])| +(?=[^ #]))*))\4"
    r"|\"([^\"\\\\]*)\"|'([^']*)'"  # or a quoted one without escapes,
    r"|([\[{][^\n]*?[\]}]))?"  # or a one-line flow collection (_Lines.flow reads it)
    r"(?:(?<= )#.*|(?<! ) +(?:#.*)?)?",  # spaces, a comment after a space
    re.ASCII,
)
# Inside a flow collection PyYAML ends a plain scalar at , : ? [ ] { } (scanner.scan_plain), and
# here it holds no # either. An entry, the spaces, and the ',' or closing bracket after it.
_FLOW_VALUE = r"(?:([^\s#'\"\[\]{}&*!|>%@`,?:-](?:[^#:?,\[\]{}]*[^\s#:?,\[\]{}])?)|\"([^\"\\\\]*)\"|'([^']*)') *([,\]}]?) *"
_FLOW_ITEM = re.compile(r"()" + _FLOW_VALUE, re.ASCII)  # an empty group 1 where a pair has its key
_FLOW_PAIR = re.compile(rf"({_PLAIN_KEY}): +{_FLOW_VALUE}", re.ASCII)
_SPACES = re.compile(" *")
_BLANK_LINE = re.compile(r" *(?:#.*)?")
# Characters that make PyYAML stop, break a line other than \n, or change what a line means.
_NOT_PLAIN_TEXT = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_TYPED = {_TAG + t for t in ("int", "float", "bool", "null")}


class _Unsure(Exception):
    """The text leaves the subset _Lines reads: the composer reads it instead."""


class _Open:
    """A block collection still taking entries: a mapping's keys or a sequence's dashes stand at
    column indent (0-based)."""

    __slots__ = ("indent", "value", "path", "is_seq")

    def __init__(self, indent, value, path):
        self.indent, self.value, self.path, self.is_seq = indent, value, path, isinstance(value, list)


class _Lines:
    """Reads the subset described above into a Document, one line at a time; raises _Unsure."""

    def __init__(self, text, path):
        self.doc = Document(path=path, data={}, text=text)
        self.positions = self.doc.positions
        self.open = [_Open(0, self.doc.data, ())]
        # A key or dash whose value is not on its line: (line, column after the indicator,
        # path, the collection holding it); its value is a block collection below it, or null.
        self.pending = None
        self.nodes = 1  # values, as the composer counts them (the top-level mapping is one)

    def read(self, text):
        positions, key_positions, duplicates = self.positions, self.doc.key_positions, self.doc.duplicates
        match, resolved_first, plain = _LINE.fullmatch, _RESOLVED_FIRST, _plain  # locals: 350,000 lines
        top = self.open[-1]
        for number, line in enumerate(text.split("\n"), 1):
            m = match(line)
            if m is None:
                if _BLANK_LINE.fullmatch(line):
                    continue
                raise _Unsure
            spaces, dash, key, raw, double, single, flow = m.groups()
            if dash is None and key is None:
                if raw is None and double is None and single is None and flow is None:
                    continue  # blank or a comment
                raise _Unsure  # a scalar on a line of its own: a continued one
            if self.nodes > MAX_NODES:  # counted a line at a time: a line adds a few at most
                raise _Unsure
            indent = len(spaces)
            if self.pending is not None:
                self.settle(number, indent, dash is not None)
                top = self.open[-1]
            if indent != top.indent or top.is_seq != (dash is not None):
                top = self.close(indent, dash is not None)
            if dash is not None:
                if key is None:
                    self.item(m, number, top, indent)
                    continue
                # "- key: value": a mapping in the sequence whose keys stand in this column; the
                # key is then read as on a line of its own.
                indent += len(dash)
                mapping = {}
                self.open.append(_Open(indent, mapping, self.add(top, mapping, number, indent + 1)))
                top = self.open[-1]
            if key[:1] in resolved_first and type(plain(key)) is not str:
                raise _Unsure  # a key that is no string (yes:, null:, on:)
            mapping, child = top.value, top.path + (key,)
            if len(child) > MAX_DEPTH:
                raise _Unsure
            if key in mapping:
                duplicates.append((child, number, indent + 1))
            elif not positions:
                positions[()] = (number, 1)  # a mapping starts at its first key
            key_positions[child] = (number, indent + 1)
            self.nodes += 1
            if raw is None and double is None and single is None and flow is None:
                mapping[key] = None  # a duplicate keeps the first one's place, as in a dict
                self.pending = (number, indent + len(key) + 2, child, mapping)
            else:
                mapping[key], column = self.value(m, raw, double, single, flow, child, number)
                positions[child] = (number, column + 1)
        if self.pending is not None:
            positions[self.pending[2]] = self.pending[:2]
        if not key_positions or self.nodes > MAX_NODES:
            raise _Unsure  # no mapping at all, or too many values: the composer says what the text is
        return self.doc

    def close(self, indent, dash):
        """The open collection a line at indent belongs to (closing those it ends)."""
        top = self.open[-1]
        while top.indent > indent or top.indent == indent and top.is_seq and not dash:
            self.open.pop()
            top = self.open[-1]
        if top.indent != indent or top.is_seq != dash:
            raise _Unsure  # an indentation no open collection has (a continued scalar, an error)
        return top

    def settle(self, number, indent, dash):
        """The pending value: a block collection starting on this line, or null. A mapping's key
        also takes a sequence whose dashes stand in the key's own column."""
        line, column, path, parent = self.pending
        self.pending = None
        holder = self.open[-1]
        if indent > holder.indent or dash and not holder.is_seq and indent == holder.indent:
            if len(path) >= MAX_DEPTH:
                raise _Unsure
            value = [] if dash else {}
            parent[path[-1]] = value
            self.positions[path] = (number, indent + 1)  # the first dash or key
            self.open.append(_Open(indent, value, path))
        else:
            self.positions[path] = (line, column)

    def add(self, seq, value, number, column):
        """Append value to a block sequence; its path."""
        path = seq.path + (len(seq.value),)
        if len(path) > MAX_DEPTH:
            raise _Unsure
        seq.value.append(value)
        self.nodes += 1
        self.positions[path] = (number, column)
        return path

    def item(self, m, number, seq, indent):
        """A "- value" line, or a dash whose value follows on the lines below."""
        raw, double, single, flow = m.group(4, 5, 6, 7)
        if raw is None and double is None and single is None and flow is None:
            self.pending = (number, indent + 2, self.add(seq, None, number, indent + 2), seq.value)
            return
        path = seq.path + (len(seq.value),)
        value, column = self.value(m, raw, double, single, flow, path, number)
        self.add(seq, value, number, column + 1)

    def value(self, m, raw, double, single, flow, path, number):
        """A value of the line (groups 4-7 of _LINE) and its column (0-based)."""
        if raw is not None:
            raw = raw.rstrip(" ")  # the spaces before a comment or the end of the line
            value = _plain(raw) if raw[:1] in _RESOLVED_FIRST else raw
            if value is _scalar:
                raise _Unsure
            return value, m.start(4)
        if double is not None:  # a quoted string is never resolved to anything else
            return double, m.start(5) - 1
        if single is not None:
            return single, m.start(6) - 1
        value, end = self.flow(m.string, m.start(7), path, number)
        if end != m.end(7):
            raise _Unsure
        return value, m.start(7)

    def flow(self, line, start, path, number):
        """The flow collection of scalars at line[start] ('{' or '['), and the index after it."""
        if len(path) >= MAX_DEPTH:
            raise _Unsure
        is_map = line[start] == "{"
        close, out, entry = ("}", {}, _FLOW_PAIR) if is_map else ("]", [], _FLOW_ITEM)
        at = _SPACES.match(line, start + 1).end()
        if line[at : at + 1] == close:
            return out, at + 1
        positions, key_positions, duplicates = self.positions, self.doc.key_positions, self.doc.duplicates
        resolved_first, plain, nodes = _RESOLVED_FIRST, _plain, 0
        while True:
            m = entry.match(line, at)
            if m is None:
                raise _Unsure
            key, raw, double, single, after = m.groups()
            if raw is not None:
                value = plain(raw) if raw[:1] in resolved_first else raw
                if value is _scalar:
                    raise _Unsure
                column = m.start(2)
            else:
                value, column = (double, m.start(3) - 1) if double is not None else (single, m.start(4) - 1)
            if is_map:
                if key[:1] in resolved_first and type(plain(key)) is not str:
                    raise _Unsure
                child = path + (key,)
                if key in out:
                    duplicates.append((child, number, at + 1))
                key_positions[child] = (number, at + 1)
                out[key] = value
            else:
                child = path + (len(out),)
                out.append(value)
            nodes += 1
            positions[child] = (number, column + 1)
            at = m.end()
            if after == close:
                self.nodes += nodes
                return out, m.end(5)
            if after != ",":
                raise _Unsure


def _block_mapping(text, path):
    """A Document for a text of the subset _Lines reads, else None."""
    if _NOT_PLAIN_TEXT.search(text):
        return None
    try:
        return _Lines(text, path).read(text)
    except _Unsure:
        return None


def _scalar(raw):
    """A plain scalar as yaml.safe_load reads it: raw itself for a string, the value for an int,
    float, bool or null; _scalar (the function) for anything it leaves to the composer."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, raw, (True, False))
    if tag == _TAG + "str":
        return raw
    if tag not in _TYPED:
        return _scalar
    try:
        value = _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, yaml.ScalarNode(tag, raw))
    except (ValueError, TypeError, OverflowError, yaml.YAMLError):
        return _scalar
    if isinstance(value, float) and not math.isfinite(value):
        return _scalar
    return value


@functools.lru_cache(maxsize=4096)
def _plain(raw):
    """_scalar, remembered: keys and values repeat through a big config (every dataset entry
    has a `name:`, `split: train`, `weight: 0.5`)."""
    return _scalar(raw)


def _compose(loader_class, text, path):
    loader = None
    try:
        loader = loader_class(text)  # the pure-Python reader checks characters here
        return _YamlComposer(loader, path, text).run()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = exc.problem or exc.context or "invalid YAML"
        if msg == "exceeded maximum nesting depth":
            # libyaml's own limit (PyYAML 6.0.4 wheels: 1,000 flow levels) can fire before the
            # composer's MAX_DEPTH check sees the events; one message whichever stops it
            msg = "nested too deeply"
        line, column = _clamp(text, mark) if mark else (None, None)
        raise UserError(f"invalid YAML: {msg}", path=path, line=line, column=column) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise _bad_char(text, path, char, exc.reason) from None
    except UnicodeEncodeError as exc:
        # libyaml takes UTF-8: a lone surrogate (from a JSON-style escape upstream) cannot be one.
        raise _bad_char(text, path, ord(text[exc.start]), "not a Unicode scalar value") from None
    except yaml.YAMLError as exc:
        raise UserError("invalid YAML: " + " ".join(str(exc).split()), path=path) from None
    finally:
        if loader is not None:
            loader.dispose()


def _clamp(text, mark):
    """A parser mark as (line, column), never past the end of the text (libyaml's can be)."""
    lines = text.split("\n")
    line = min(mark.line, len(lines) - 1)
    column = mark.column if line == mark.line else len(lines[line])
    return line + 1, min(column, len(lines[line])) + 1


def _bad_char(text, path, char, reason):
    """A character YAML does not allow (C1 controls, U+FFFE...): one line, with its position."""
    at = text.find(chr(char))
    line = text.count("\n", 0, at) + 1 if at >= 0 else None
    column = at - (text.rfind("\n", 0, at) + 1) + 1 if at >= 0 else None
    return UserError(f"invalid YAML: character U+{char:04X} is not allowed ({reason})", path=path, line=line, column=column)


def parse(text, path, syntax):
    """syntax: 'json' or 'yaml'."""
    return parse_json(text, path) if syntax == "json" else parse_yaml(text, path)
