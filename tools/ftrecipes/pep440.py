"""A small PEP 440 subset with no dependencies: versions and version ranges.

No `packaging` dependency (the base install is jinja2, pyyaml, jsonschema), and no jsonschema
either: the memory model imports this where only the standard library is certain (a stack venv
tracing a step). Supported: release numbers of any length (``0.8.10``, ``5``), pre-releases
``a``/``b``/``rc``, ``.postN``, ``.devN``, a local part ``+cpu`` (ignored when comparing), and
specifiers ``==``, ``!=``, ``>=``, ``<=``, ``>``, ``<``, ``~=`` and ``==X.*`` / ``!=X.*``, joined with
commas (all must hold). Pre-releases are ordered before their release as PEP 440 says, but a
range such as ``>=0.9`` accepts them (simpler than PEP 440's opt-in; fine for ranges we write).
"""

import functools
import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc|alpha|beta|c)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?post[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[A-Za-z0-9.]+)?\s*$",
    re.IGNORECASE,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2}
_CLAUSE = re.compile(r"^\s*(~=|==|!=|>=|<=|>|<)\s*([^\s,]+)\s*$")


@dataclass(frozen=True)
class Version:
    text: str
    key: tuple

    # Written out rather than derived by functools.total_ordering: key histories compare
    # versions for every key of every file, and the derived ones cost a Python call more each.
    def __lt__(self, other):
        return self.key < other.key

    def __le__(self, other):
        return self.key <= other.key

    def __gt__(self, other):
        return self.key > other.key

    def __ge__(self, other):
        return self.key >= other.key

    def __eq__(self, other):
        return isinstance(other, Version) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __str__(self):
        return self.text

    @property
    def release(self):
        return self.key[0]


def parse(text):
    """A Version, or ValueError for text outside the supported PEP 440 subset."""
    m = _VERSION.match(str(text))
    if not m:
        raise ValueError(f"'{text}' is not a version (expected e.g. 0.8.5, 5.0, 1.2rc1, 0.9.1.post1)")
    release = tuple(int(x) for x in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # 5.0 == 5.0.0 == 5
    inf = float("inf")
    pre = (_PRE[m["pre"].lower()], int(m["pre_n"] or 0)) if m["pre"] else (inf, 0)
    post = int(m["post"] or 0) if m["post"] is not None else -1
    dev = int(m["dev"] or 0) if m["dev"] is not None else inf
    if m["dev"] is not None and not m["pre"] and m["post"] is None:
        pre = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    return Version(str(text).strip(), (release, pre, post, dev))


def _release_only(text):
    return tuple(int(x) for x in text.split("."))


class Specifier:
    """Comma-joined clauses (``>=0.8.10,<0.9.2``); ``contains(version)`` when all hold."""

    def __init__(self, text):
        self.text = str(text).strip()
        self.clauses = []
        if not self.text:
            raise ValueError("empty version range")
        for part in self.text.split(","):
            m = _CLAUSE.match(part)
            if not m:
                raise ValueError(f"'{part.strip()}' in '{self.text}' is not a version clause (e.g. >=0.10.2, <5, ==0.11.*)")
            op, ver = m.groups()
            if ver.endswith(".*"):
                if op not in ("==", "!="):
                    raise ValueError(f"'{part.strip()}': a .* suffix works with == and != only")
                _release_only(ver[:-2])  # validates the prefix
            else:
                parse(ver)
                if op == "~=" and "." not in ver:
                    raise ValueError(f"'{part.strip()}': ~= needs at least two release numbers")
            self.clauses.append((op, ver))

    def __str__(self):
        return self.text

    def contains(self, version):
        v = version if isinstance(version, Version) else parse(version)
        return all(_holds(op, ver, v) for op, ver in self.clauses)


def _holds(op, ver, v):
    if ver.endswith(".*"):
        prefix = _release_only(ver[:-2])
        padded = v.release + (0,) * max(0, len(prefix) - len(v.release))
        match = padded[: len(prefix)] == prefix
        return match if op == "==" else not match
    w = parse(ver)
    if op == "~=":
        prefix = _release_only(_VERSION.match(ver)["release"])[:-1]  # ~=0.9.2 means >=0.9.2,==0.9.*
        padded = v.release + (0,) * max(0, len(prefix) - len(v.release))
        return v >= w and padded[: len(prefix)] == prefix
    return {"==": v == w, "!=": v != w, ">=": v >= w, "<=": v <= w, ">": v > w, "<": v < w}[op]


@functools.lru_cache(maxsize=None)
def specifier(text):
    return Specifier(text)
