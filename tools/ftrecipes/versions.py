"""Framework versions: version ranges (the PEP 440 subset lives in pep440.py) and the
key-history table.

schemas/versions.json (validated by schemas/versions.schema.json) records, per framework, at
which version a key was renamed, removed or deprecated. ``history(framework)`` answers
"which spelling is right at version V" for render (template selection) and lint (the
``framework-version`` rule).
"""

import functools
import json
from dataclasses import dataclass

from . import paths, schemas
from .errors import UserError
from .findings import WARNING, Finding
from .pep440 import Specifier, Version, parse, specifier  # noqa: F401  (re-exported: callers say versions.parse)

def in_range(version, ranges):
    """True when version is in one of the ranges (a specifier string or a list of them)."""
    if isinstance(ranges, str):
        ranges = [ranges]
    v = parse(version)
    return any(specifier(r).contains(v) for r in ranges)


def parse_framework_versions(items):
    """{framework: version} from `--framework-version NAME=VER` items (lint, estimate)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--framework-version {item}: expected NAME=VERSION")
        name, version = item.split("=", 1)
        try:
            parse(version)
        except ValueError as exc:
            raise UserError(f"--framework-version {item}: {exc}") from None
        known = known_frameworks()
        if name.strip().lower() not in known:
            raise UserError(f"--framework-version {item}: unknown framework '{name.strip()}' (known: {', '.join(known)})")
        out[name.strip().lower()] = version.strip()
    return out


# ------------------------------------------------------------------------------------------
# The key-history table (schemas/versions.json)
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    version: Version
    kind: str  # renamed | removed | deprecated
    key: str
    replacement: str  # the new key (renamed, deprecated) or a hint (removed)


@dataclass(frozen=True)
class History:
    framework: str
    formats: tuple  # file formats whose keys this framework's history applies to
    prefix: str  # how a key is written in messages ("--" for command-line flags)
    changes: tuple
    note: str = ""

    def tracked(self):
        """Every key the table mentions (old and new names)."""
        out = set()
        for c in self.changes:
            out.add(c.key)
            if c.kind in ("renamed", "deprecated"):
                out.add(c.replacement)
        return out

    def introduced(self, key):
        """Version at which key appeared as the new name of a rename (or the replacement of a
        deprecated key), or None (always there, as far as the table knows). A deprecation may
        point to a key that already existed (transformers 5.0 deprecated warmup_ratio for the
        warmup_steps every 4.x release has): the key history read from the releases decides."""
        found = [c.version for c in self.changes if c.kind in ("renamed", "deprecated") and c.replacement == key]
        if not found:
            return None
        start = min(found)
        generated = key_history(self.framework)
        spans = generated.by_key.get(key, {}) if generated else {}
        earlier = any(a < start for sp in spans.values() for a, _ in sp)
        return None if earlier else start

    def retired(self, key):
        """The rename/removal that retired key, or None."""
        found = [c for c in self.changes if c.kind in ("renamed", "removed") and c.key == key]
        return min(found, key=lambda c: c.version) if found else None

    def spelled_at(self, key, version):
        """The name key had (or has) at version, following renames both ways; None if removed."""
        v = parse(version) if not isinstance(version, Version) else version
        seen = set()
        while key not in seen:
            seen.add(key)
            start = self.introduced(key)
            if start is not None and v < start:
                older = [c for c in self.changes if c.kind in ("renamed", "deprecated") and c.replacement == key and c.version == start]
                key = older[0].key
                continue
            end = self.retired(key)
            if end is not None and v >= end.version:
                if end.kind == "removed":
                    return None
                key = end.replacement
                continue
            return key
        return key

    def problems(self, key, version):
        """[(severity, message)] for key used with the framework at version."""
        v = parse(version) if not isinstance(version, Version) else version
        p, out = self.prefix, []
        fw = self.framework
        start = self.introduced(key)
        if start is not None and v < start:
            right = self.spelled_at(key, v)
            then = f"; {fw} {v} spells it {p}{right}" if right else ""
            out.append(("error", f"{p}{key} exists from {fw} {start} on{then}"))
            return out
        end = self.retired(key)
        if end is not None and v >= end.version:
            if end.kind == "removed":
                out.append(("error", f"{p}{key} was removed in {fw} {end.version}: {end.replacement}"))
            else:
                now = self.spelled_at(end.replacement, v)
                later = f" (in {fw} {v}: {p}{now})" if now and now != end.replacement else ""
                out.append(("error", f"{p}{key} was replaced by {p}{end.replacement} in {fw} {end.version}{later}"))
            return out
        for c in self.changes:
            if c.kind == "deprecated" and c.key == key and v >= c.version:
                out.append(("warning", f"{p}{key} is deprecated since {fw} {c.version}; use {p}{c.replacement}"))
        return out


@functools.lru_cache(maxsize=1)
def table():
    path = paths.schemas_dir() / "versions.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load the version table: {exc}", path=path) from None
    problems = schemas.validator(schemas.load_schema("versions.schema.json")).iter_errors(data)
    first = next(iter(problems), None)
    if first is not None:
        raise UserError(f"version table: {first.message}", path=path)
    out = {}
    for name, fw in data["frameworks"].items():
        changes = []
        for entry in fw["changes"]:
            v = parse(entry["version"])
            for kind in ("renamed", "removed", "deprecated"):
                for key, repl in entry.get(kind, {}).items():
                    changes.append(Change(v, kind, key, repl))
        out[name] = History(name, tuple(fw.get("formats", ())), fw.get("key_prefix", ""), tuple(changes), fw.get("note", ""))
    return out


def known_frameworks():
    """Frameworks whose versions mean something to lint: the rename table's and the key histories'."""
    generated = {p.stem for p in (paths.schemas_dir() / "key_history").glob("*.json")}
    return sorted(set(table()) | generated)


def history(framework):
    return table().get(framework)


def for_format(fmt):
    """Histories that apply to a file format (e.g. trl -> transformers, trl)."""
    return [h for h in table().values() if fmt in h.formats]


def schema_version(schema, framework):
    """The framework version a format schema was generated from (its x-framework), or None."""
    xf = schema.get("x-framework") if isinstance(schema, dict) else None
    if not isinstance(xf, dict):
        return None
    if xf.get("name") == framework:
        return xf.get("version")
    return xf.get(framework)


def companions(fmt):
    """(framework, release, {other framework: release}) the format's schema was generated from
    (llamafactory 0.9.5 with transformers 5.6.0), or (None, None, {}) for a format without one.
    The companions are what pip installed beside that release: the newest its requirements let in."""
    from .formats import FORMATS

    spec = FORMATS.get(fmt)
    xf = schemas.load_schema(spec.schema).get("x-framework") if spec is not None and spec.schema else None
    if not isinstance(xf, dict) or not xf.get("name"):
        return None, None, {}
    known = set(known_frameworks())
    return xf["name"], xf.get("version"), {k: v for k, v in xf.items() if k in known and k != xf["name"] and isinstance(v, str)}


def judged_elsewhere(data, fmt, framework_versions, schema):
    """Top-level keys the format schema cannot judge at the user's framework version.

    A key the history tracks that is either wrong at the version the user runs (the
    framework-version rule reports it, with the replacement: no second finding), or valid
    there but spelled differently at the version the schema describes (``--zero_stage`` for
    OpenRLHF 0.8.5 against the 0.11.2 schema, which would call it removed).
    """
    hidden = set()
    for h, version, key in _tracked_keys(data, fmt, framework_versions):
        at_schema = schema_version(schema, h.framework)
        if any(sev == "error" for sev, _ in h.problems(key, version)):
            hidden.add(key)
        elif at_schema is None or h.spelled_at(key, at_schema) != key:
            hidden.add(key)
    return hidden


def _tracked_keys(data, fmt, framework_versions):
    """(history, user's version, key) for each top-level key whose history is tracked."""
    if not isinstance(data, dict):
        return
    for h in for_format(fmt):
        version = framework_versions.get(h.framework)
        if version is None:
            continue
        tracked = h.tracked()
        for key in data:
            if key in tracked:
                yield h, version, key


def key_problems(data, fmt, framework_versions):
    """[(key, severity, message)] for the top-level keys of a document of format fmt."""
    return [(key, sev, msg) for h, version, key in _tracked_keys(data, fmt, framework_versions)
            for sev, msg in h.problems(key, version)]


def schema_findings(doc, fmt, framework_versions=None):
    """The format schema's findings for a document, at the user's framework versions.

    Keys whose history says the schema (made from one release) cannot judge them at these
    versions are left out; the framework-version rule reports those instead.
    """
    import copy

    schema = schemas.load_schema(fmt.schema)
    fv = framework_versions or {}
    hidden = judged_elsewhere(doc.data, fmt.name, fv, schema)
    if hidden:
        doc = copy.copy(doc)
        doc.data = {k: v for k, v in doc.data.items() if k not in hidden}
    # A key the release in use has (or one the version-skew rule reports) is not "unknown" or
    # "removed" because the schema was made from another release.
    # A removed-key finding (the schema's curated pointer to the successor) stays when the
    # release in use lacks the key too; version-skew then leaves that key alone.
    found = schemas.check(doc, schema, fmt.unknown_note, fmt.value_verdict)
    if not any(f.rule in ("unknown-key", "removed-key") for f in found):
        return found  # nothing the histories could take back (most files): no positions needed
    valid = {doc.where(p) for p in valid_by_history(doc.data, fmt.name, fv)}
    skewed = {doc.where(s.path) for s in skew(doc.data, fmt.name, fv, schema) if s.severity == "error"}
    kept = [f for f in found
            if not ((f.line, f.column) in valid and f.rule in ("unknown-key", "removed-key")
                    or (f.line, f.column) in skewed and f.rule == "unknown-key")]
    return _unjudged_sections(_unjudged_outside_history(kept, fmt.name, fv, doc), doc, fmt.name, fv)


def _unjudged_outside_history(found, fmt, framework_versions, doc=None):
    """Unknown and removed keys under a release outside every one the key histories read are warnings.

    A repository pinning trl==1.20 when the newest release read is 1.16 may use a key 1.20 added;
    one pinning transformers==4.44.2 when the oldest read is 4.50.3 may use a key 4.44.2 still
    had (SimPO's evaluation_strategy). The schema, made from another release, cannot tell either
    from a typo, and calling it an error would fail that repository's CI on a correct file."""
    outside, rules = {}, {"unknown-key"}
    for h, _sections in _owners(fmt, ())[0]:
        v = framework_versions.get(h.framework)
        if v is None:
            continue
        if parse(v) > h.newest:
            outside[h.framework] = f"{h.framework} {v} in use is newer than {h.newest}, the newest release ftrecipes read"
        elif h.sample_for(v) is None:
            outside[h.framework] = (f"{h.framework} {v} in use is older than {h.releases[0]}, "
                                    "the oldest release ftrecipes read")
            rules.add("removed-key")  # a key the schema's release removed may still be in an older one
    if not outside:
        return found
    note = "; not judged: " + ", ".join(outside.values())
    older = _known_before_history(doc, fmt, framework_versions) if doc is not None else {}
    return [Finding(f.path, f.line, f.column, "version-skew", WARNING, older[(f.line, f.column)]) if f.rule == "unknown-key"
            and (f.line, f.column) in older else
            Finding(f.path, f.line, f.column, f.rule, WARNING, f.message.rstrip(".") + note) if f.rule in rules else f
            for f in found]


def _known_before_history(doc, fmt, framework_versions):
    """{(line, column): message} for top-level keys that the oldest release a key history read
    still had and a later one dropped, under a pinned release older than every one read.

    "unknown key 'logging_dir' ... did you mean 'log_dir'?" was false there: a file pinning
    transformers==4.40.0 was written for a release whose TrainingArguments has logging_dir (4.50.3,
    the oldest read, still has it; 5.15 dropped it). The schema, made from today's release, does
    not know the key; the history does, and says what an upgrade does to it."""
    out = {}
    for h, sections in _owners(fmt, ())[0]:
        v = framework_versions.get(h.framework)
        if v is None or h.sample_for(v) is not None:
            continue
        first = h.releases[0]
        for key in doc.data if isinstance(doc.data, dict) else ():
            spans = h.spans(key, sections) if isinstance(key, str) else []
            last = max((b for a, b in spans if a == first), default=None)
            if last is not None and last < h.newest:
                out[doc.where((key,))] = (f"{key}: in {h.framework} {first} (the oldest release ftrecipes read) up to "
                                          f"{last}, gone from {h.after(last)} on; not judged at the {h.framework} in use "
                                          f"({v}), older than {first}: today's release refuses it")
    return out


_SCHEMA_VERDICTS = ("unknown-key", "wrong-type", "bad-value", "out-of-range")


def _unjudged_sections(found, doc, fmt, framework_versions):
    """Schema errors inside a section whose model the key history did not find in the release in
    use are warnings that say so.

    DeepSpeed 0.17.6 made bf16 and fp16 pydantic models that refuse extra keys; 0.15.4 to 0.17.0
    read them key by key (runtime/config.py get_bfloat16_enabled: get_scalar_param), so the fp16
    loss-scaling keys many repositories copy into bf16 (LongLoRA, FlagEmbedding) are ignored there.
    The schema, made from 0.19.8, says "DeepSpeed raises at start-up"; under a pinned 0.15.4 that
    was a false error. Where the history read the section at the release in use, its verdict on
    each key stands (version-skew)."""
    unjudged = {}
    for section, value in doc.data.items() if isinstance(doc.data, dict) else ():
        if not isinstance(section, str) or not isinstance(value, dict):
            continue
        for h, sections in _owners(fmt, (section,))[0]:
            v = framework_versions.get(h.framework)
            at = h.sample_for(v) if v is not None else None
            if at is None or h.judged(sections, at):
                continue  # the schema's own release, one older than all read (said elsewhere), or judged
            first = min(a for s_ in sections for a, _ in h.sections[s_][0])
            note = f"; not judged: ftrecipes read a model of {section} only from {h.framework} {first} on, and {v} is in use"
            for pos in _positions_under(doc, (section,), value):
                unjudged[pos] = note
    if not unjudged:
        return found
    return [Finding(f.path, f.line, f.column, f.rule, WARNING, f.message.rstrip(".") + unjudged[(f.line, f.column)])
            if f.rule in _SCHEMA_VERDICTS and (f.line, f.column) in unjudged else f for f in found]


def _positions_under(doc, path, value):
    """The positions of the keys and values inside the mapping at path."""
    for key, child in value.items():
        sub = path + (key,)
        yield doc.where(sub)
        if sub in doc.positions:
            yield doc.positions[sub]
        if isinstance(child, dict):
            yield from _positions_under(doc, sub, child)


def schema_removes(schema, path):
    """True when the format schema marks the key at path as removed (`"not": {}` with a pointer)."""
    node = schema
    for key in path:
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict) or key not in props:
            return False
        node = props[key]
    return isinstance(node, dict) and node.get("not") == {}


# ------------------------------------------------------------------------------------------
# Key histories generated from the releases (schemas/key_history/<framework>.json)
# ------------------------------------------------------------------------------------------
class KeyHistory:
    """Which sampled releases of a framework had which key, per section (class or flag set)."""

    def __init__(self, framework, data):
        self.framework = framework
        self.releases = sorted(parse(r) for r in data["releases"])
        self.sections = {}
        for name, sec in data["sections"].items():
            keys = {k: _spans(e["in"]) for k, e in sec["keys"].items()}
            self.sections[name] = (_spans(sec["releases"]), keys)
        # key -> {section: spans}: most keys of a big file are in no section at all, and asking
        # every section for each of them made a 300,000-key file take seconds.
        self.by_key = {}
        for name, (_, keys) in self.sections.items():
            for k, sp in keys.items():
                self.by_key.setdefault(k, {})[name] = sp

    @property
    def newest(self):
        return self.releases[-1]

    def sample_for(self, version):
        """The sampled release that stands for version: the nearest one of its minor release
        (the first at or after it), else the newest before it; None when older than all."""
        v = version if isinstance(version, Version) else parse(version)
        same = [r for r in self.releases if r.release[:2] == v.release[:2]]
        later = [r for r in same if r >= v]
        if later:
            return min(later)
        older = [r for r in self.releases if r <= v]
        return max(older) if older else None

    def select(self, selector):
        if selector == "*":
            return [s for s in self.sections if not s.startswith("_")]
        return [selector] if selector in self.sections else []

    def spans(self, key, sections):
        """[(first, last)] of the key over the given sections, or [] when none ever had it."""
        have = self.by_key.get(key)
        return [span for s in sections for span in have.get(s, ())] if have else []

    def judged(self, sections, release):
        """True when one of the sections was read from that release."""
        return any(a <= release <= b for s in sections for a, b in self.sections[s][0])

    def after(self, release):
        later = [r for r in self.releases if r > release]
        return min(later) if later else None


def _spans(text):
    out = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("..")
        out.append((parse(a), parse(b or a)))
    return out


@functools.lru_cache(maxsize=None)
def key_history(framework):
    """The generated history of a framework, or None when there is none."""
    from . import sources

    path = paths.schemas_dir() / "key_history" / f"{framework}.json"
    if not path.is_file():
        return None
    try:
        return KeyHistory(framework, json.loads(sources.read_text(path, max_bytes=32 * 1024 * 1024)))
    except (ValueError, KeyError) as exc:
        raise UserError(f"cannot load the key history: {exc}", path=path) from None


@functools.lru_cache(maxsize=4096)
def _owners(fmt, parent):
    """(history, sections) that define the keys of the mapping at path `parent` of a file, and
    every key they know (a key no history knows is never judged)."""
    from .formats import FORMATS

    out = []
    for spec in getattr(FORMATS.get(fmt), "histories", ()):
        fw, _, rest = spec.partition(":")
        selector, _, at = rest.partition("@")
        if selector == "<path>":
            selector = ".".join(parent)
        elif ".".join(parent) != at:
            continue
        h = key_history(fw)
        sections = h.select(selector) if h else []
        if sections:
            out.append((h, tuple(sections)))
    return tuple(out), frozenset().union(*(h.by_key for h, _ in out))


@dataclass(frozen=True)
class Skew:
    path: tuple
    severity: str  # error: not a key of the release in use; warning: a later release drops it
    message: str


def _walk(data, fmt, parent=()):
    """(path, owners) for every key of a mapping that some owning key history knows, depth first."""
    if not isinstance(data, dict):
        return
    owners, known = _owners(fmt, parent)
    # Set lookups in a comprehension: a generated file's 300,000 keys that no release ever had
    # cost no Python call each.
    judged = {key for key in data if key in known} if owners else ()
    for key, value in data.items():
        if key in judged and isinstance(key, str):
            yield parent + (key,), owners
        if isinstance(value, dict) and isinstance(key, str):
            yield from _walk(value, fmt, parent + (key,))


def _in_use(h, fmt, framework_versions):
    """(version, sampled release standing for it): the pinned or given version, else the release
    the format's schema was generated from, else the newest release read."""
    return _in_use_at(h, fmt, framework_versions.get(h.framework))


@functools.lru_cache(maxsize=256)
def _in_use_at(h, fmt, v):
    # Asked once per key of a document: a 300,000-key file must not re-read the schema each time.
    from .formats import FORMATS

    if v is None:
        fmt_ = FORMATS.get(fmt)
        v = schema_version(schemas.load_schema(fmt_.schema), h.framework) if fmt_ and fmt_.schema else None
    v = parse(v) if v is not None else h.newest
    return v, h.sample_for(v)


@functools.lru_cache(maxsize=4096)
def _judged(name, key, owners, fmt, versions_items):
    # The verdict depends on nothing else: a folder of configs asks the same few keys again and again.
    return _judge(name, key, owners, fmt, dict(versions_items))


def _judge(name, key, owners, fmt, framework_versions):
    """None when the key is fine at the versions in use (or cannot be judged), else (severity, message)."""
    valid, invalid = [], []
    for h, sections in owners:
        if key not in h.by_key:
            continue
        spans = h.spans(key, sections)
        if not spans:
            continue
        v, at = _in_use(h, fmt, framework_versions)
        if at is None or not h.judged(sections, at):
            return None  # older than every release read, or the section was not found in it
        inside = _had(spans, at)
        if any(_had(spans, r) != inside for r in _standing_for(h, v, at)):
            # a pre-release (LLaMA-Factory 0.9.2.dev0, which LIMO vendors) between two samples
            # that disagree on the key may have either
            return None
        (valid if inside else invalid).append((h, spans, v, at, max(b for _, b in spans)))
    if valid:
        # Fine now; a warning only when no owner has it in its newest release (the key may
        # have moved between sections: the spans of all of them count).
        if any(last == h.newest for h, _, _, _, last in valid):
            return None
        h, _, v, _, last = valid[0]
        if h.framework not in framework_versions:
            return None  # the schema's own release: nothing the user chose
        return ("warning", f"{name}: valid in {h.framework} {v}, not in {h.framework} {h.after(last)} or later")
    if not invalid:
        return None
    h, spans, v, at, _ = invalid[0]
    first = min(a for a, _ in spans)
    if at < first:
        return ("error", f"{name}: added in {h.framework} {first}; the {h.framework} in use ({v}) is older")
    last = max(b for _, b in spans if b < at)
    back = [a for a, _ in spans if a > at]
    # Releases are sampled (newest patch of each minor): name the samples on both sides of the change.
    gone = f"not in {h.framework} {h.after(last)}" + (f" to {at} (back in {min(back)})" if back else " or later")
    return ("error", f"{name}: valid in {h.framework} {last}, {gone}; the {h.framework} in use is {v}")


_SKEW_SEEN = {}  # (id(data), fmt, versions) -> (data, result): the schema check and the rule ask alike


def skew(data, fmt, framework_versions, schema=None):
    """Version skew of a document's keys against the key histories, at the versions in use
    (given, pinned, else the schema's release). Errors on keys the format schema already marks
    as removed, with its pointer to the successor, are left to the schema."""
    from .formats import FORMATS

    if schema is None and getattr(FORMATS.get(fmt), "schema", None):
        schema = schemas.load_schema(FORMATS[fmt].schema)
    key = (id(data), fmt, tuple(sorted((framework_versions or {}).items())), id(schema))
    seen = _SKEW_SEEN.get(key)
    if seen is not None and seen[0] is data:  # the same document object, not a new one at that id
        return list(seen[1])
    if len(_SKEW_SEEN) > 10_000:  # lint asks twice per file, for every file before any rule runs
        _SKEW_SEEN.clear()
    out = _skew(data, fmt, framework_versions, schema)
    _SKEW_SEEN[key] = (data, out)
    return list(out)


def _skew(data, fmt, framework_versions, schema):
    from .formats import FORMATS

    out = []
    dashes = "--" if getattr(FORMATS.get(fmt), "syntax", "") == "shell" else ""  # launch-script flags
    for path, owners in _walk(data, fmt):
        verdict = _judged(dashes + ".".join(path), path[-1], owners, fmt, tuple(sorted((framework_versions or {}).items())))
        if verdict and not (verdict[0] == "error" and schema_removes(schema or {}, path)):
            out.append(Skew(path, *verdict))
    return out


def valid_by_history(data, fmt, framework_versions):
    """Paths of keys that some history says exist at the version in use."""
    found = set()
    for path, owners in _walk(data, fmt):
        for h, sections in owners:
            if path[-1] not in h.by_key:
                continue
            v, at = _in_use(h, fmt, framework_versions or {})
            if at is not None and any(_had(h.spans(path[-1], sections), r) for r in _standing_for(h, v, at)):
                found.add(path)
    return found


def _had(spans, release):
    return any(a <= release <= b for a, b in spans)


def _standing_for(h, v, at):
    """The sampled releases a version may behave like: its sample, and for a pre-release of the
    sample (0.9.2.dev0 of 0.9.2) the sample before it too, since a development snapshot lies
    between the two."""
    if v < at and v.release == at.release:
        before = max((r for r in h.releases if r < v), default=None)
        if before is not None:
            return (at, before)
    return (at,)
