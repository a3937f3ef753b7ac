"""Lint rules beyond the schemas: each has an id, a severity, a doc and a check.

A rule sees a whole *setup* - the configs that are used together (a file nobody
else names with the files it names: accelerate's deepspeed_config_file, LLaMA-Factory's
`deepspeed:`, configs named in a launch script; a folder with one config of each kind)
- so cross-file rules can compare, say, the DeepSpeed batch with the trainer's.

Adding a rule: a function in a module of this package, decorated with
``@rule(id, severity, summary)``; its docstring is the ``--explain`` text. Tests
give each rule a config it flags and a near-identical one it passes.
"""

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field

from ..findings import ERROR, WARNING, Finding

__all__ = ["ERROR", "WARNING", "Rule", "Setup", "Options", "rule", "all_rules", "get", "run"]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    summary: str
    doc: str
    check: object = None  # fn(setup) -> iterable of (config, path tuple, message[, severity]); None for schema rules


@dataclass
class Options:
    gpu: str | None = None  # GPU type, e.g. V100-32GB: enables hardware rules
    gpus: int | None = None  # GPUs in the job (world size when launch files don't say)
    host_ram_gib: float | None = None
    framework_versions: dict = field(default_factory=dict)  # {"openrlhf": "0.8.5"}
    config_extras: dict = field(default_factory=dict)  # {kind: {key: class}}: keys a custom script adds


@dataclass
class Setup:
    """Configs used together, and what the user told us about the hardware."""

    configs: list
    options: Options

    def of(self, kind):
        return [c for c in self.configs if c.kind == kind]

    def one(self, kind):
        found = self.of(kind)
        return found[0] if len(found) == 1 else None


_RULES = {}


def rule(rule_id, severity, summary):
    def register(fn):
        _RULES[rule_id] = Rule(rule_id, severity, summary, _doc(fn.__doc__), fn)
        return fn

    return register


def document(rule_id, severity, summary, doc):
    """A rule whose findings come from elsewhere (the schemas, the parsers): doc only."""
    _RULES[rule_id] = Rule(rule_id, severity, summary, _doc(doc), None)


def _doc(text):
    import textwrap

    return textwrap.dedent(text or "").strip()


@functools.lru_cache(maxsize=None)
def _load_all():
    # Once per process: lint runs the rules on every setup of a folder of thousands of files.
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


def all_rules():
    _load_all()
    return dict(sorted(_RULES.items()))


def get(rule_id):
    return all_rules().get(rule_id)


def run(setup):
    """Findings of every rule on one setup."""
    out = []
    for r in all_rules().values():
        if r.check is None:
            continue
        for item in r.check(setup) or ():
            cfg, path, message = item[:3]
            severity = item[3] if len(item) > 3 else r.severity
            line, col = cfg.doc.where(path)
            out.append(Finding(str(cfg.path), line, col, r.id, severity, message))
    return out
