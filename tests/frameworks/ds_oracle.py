"""DeepSpeed as an oracle: does DeepSpeedConfig accept a config, and which keys did it never read?

Runs inside the trl stack venv (real deepspeed 0.19.8), one process for many configs:

    python ds_oracle.py mutants.jsonl verdicts.jsonl

Each input line is {"id", "config", "world_size", "fill": {dotted path: value}}; each output line is
{"id", "accepted", "error", "ignored": [dotted paths], "stage_ignored": [dotted paths]} in the same
order.

- ``accepted``/``error``: ``DeepSpeedConfig(dict)`` with ``dist.get_rank``/``get_world_size``
  patched to the stated world size (as tests/frameworks/truth.py does), after replacing "auto" at
  the paths in ``fill`` only (what the HF Trainer's ``HfTrainerDeepSpeedConfig.fill_match`` fills
  before DeepSpeed sees the config); "auto" anywhere else reaches DeepSpeed unchanged.
- ``ignored``: keys present in the config that DeepSpeedConfig never looked at. The config is
  handed over as a dict subclass that records every ``get``/``[]``/``in`` per key path. A dict that
  is iterated (``keys()``/``items()``/``**`` unpacking: the pydantic sections) or handed to a
  ``DeepSpeedConfigModel`` (pydantic validates it with ``extra="forbid"``, so an accepted section has
  no unknown keys) counts as read in full, with everything below it.
- ``stage_ignored``: keys DeepSpeed parses but the configured ZeRO stage does not act on (the
  engine builds the parameter-offload and stage-3 machinery only at stage 3; optimizer offload
  needs stage >= 1). Taken from the parsed ``zero_config``, not from the input text.
"""

import json
import logging
import os
import sys
import traceback

os.environ.setdefault("DS_ACCELERATOR", "cpu")


# Dicts DeepSpeedConfig stores and hands on whole: optimizer/scheduler constructor kwargs, checked
# by the constructors at deepspeed.initialize, not by the config parser.
PASSED_ON = {("optimizer", "params"), ("scheduler", "params")}


class _Log:
    def __init__(self):
        self.read = set()  # key paths looked up
        self.whole = set()  # dict paths consumed as a whole
        self.dropped = set()  # unknown keys whose value "auto" DeepSpeedConfigModel drops unseen
        self.unpacked = None  # the Traced dict last unpacked with ** (keys() iterated)


class Traced(dict):
    """A dict that records which keys are looked up (paths are tuples of keys)."""

    def __init__(self, data, path, log):
        super().__init__()
        self._path = path
        self._log = log
        for k, v in data.items():
            dict.__setitem__(self, k, _wrap(v, path + (k,), log))

    def _touch(self, key):
        try:
            if dict.__contains__(self, key):
                self._log.read.add(self._path + (key,))
        except TypeError:  # unhashable probe
            pass

    def __getitem__(self, key):
        self._touch(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._touch(key)
        return dict.get(self, key, default)

    def __contains__(self, key):
        self._touch(key)
        return dict.__contains__(self, key)

    def pop(self, key, *default):
        self._touch(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key, default=None):
        self._touch(key)
        return dict.setdefault(self, key, default)

    def _all(self):
        self._log.whole.add(self._path)

    def __iter__(self):
        self._all()
        return dict.__iter__(self)

    def keys(self):
        return _Keys(self)

    def items(self):
        self._all()
        return dict.items(self)

    def values(self):
        self._all()
        return dict.values(self)

    def __copy__(self):
        # config.py copies the top-level dict before reading it; the copy keeps recording.
        new = Traced.__new__(Traced)
        dict.update(new, dict.items(self))
        new._path = self._path
        new._log = self._log
        return new


class _Keys:
    """keys() view: membership is a look-up of one key, iteration reads them all."""

    def __init__(self, d):
        self._d = d

    def __contains__(self, key):
        return self._d.__contains__(key)

    def __iter__(self):
        self._d._all()
        self._d._log.unpacked = self._d
        return dict.__iter__(self._d)

    def __len__(self):
        return dict.__len__(self._d)


def _wrap(value, path, log):
    if type(value) is dict:
        return Traced(value, path, log)
    if type(value) is list:
        return [_wrap(v, path + (i,), log) for i, v in enumerate(value)]
    return value


def _key_paths(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,)
            yield from _key_paths(v, path + (k,))


def _dotted(path):
    return ".".join(str(p) for p in path)


def _fill(cfg, fill):
    """Replace "auto" at the given dotted paths (HF Trainer's fill_match); nothing else."""
    for dotted, value in (fill or {}).items():
        node = cfg
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(parts[-1]) == "auto":
            node[parts[-1]] = value
    return cfg


def _stage_ignored(ds_cfg, raw):
    """Keys the configured stage parses but does not use."""
    out = []
    zraw = raw.get("zero_optimization")
    if not isinstance(zraw, dict):
        return out
    z = ds_cfg.zero_config
    stage = int(z.stage)
    dev = lambda o: str(getattr(getattr(o, "device", None), "value", getattr(o, "device", "none")))  # noqa: E731
    if stage < 3:
        if z.offload_param is not None and dev(z.offload_param) != "none" and "offload_param" in zraw:
            out.append("zero_optimization.offload_param")
        # The stage3_* knobs configure the stage-3 parameter partitioner, built only at stage 3
        # ("auto" values never reach the model: DeepSpeedConfigModel drops them).
        out += [f"zero_optimization.{k}" for k, v in zraw.items() if k.startswith("stage3_") and v != "auto"]
    if stage == 0:
        if z.offload_optimizer is not None and dev(z.offload_optimizer) != "none" and "offload_optimizer" in zraw:
            out.append("zero_optimization.offload_optimizer")
    return out


class Oracle:
    def __init__(self):
        logging.disable(logging.WARNING)  # DeepSpeed's per-config info/warnings would flood stderr
        import deepspeed.runtime.config as ds_config
        from deepspeed.runtime import config_utils

        self.ds_config = ds_config
        self.world = 1
        ds_config.dist.get_rank = lambda *a, **k: 0
        ds_config.dist.get_world_size = lambda *a, **k: self.world
        self.log = None
        original = config_utils.DeepSpeedConfigModel.__init__
        oracle = self

        def init(model_self, strict=False, **data):
            # pydantic validates what it is handed (extra="forbid"): that section is read in full.
            log = oracle.log
            if log is not None:
                for v in data.values():
                    if isinstance(v, Traced):
                        log.whole.add(v._path)
                # Non-strict DeepSpeedConfigModel drops every "auto" value before pydantic looks,
                # so an unknown key set to "auto" escapes extra="forbid": it is ignored.
                names = set()
                for name, f in type(model_self).model_fields.items():
                    names.update({name, f.alias} - {None})
                parent = log.unpacked
                if parent is not None and set(dict.keys(parent)) == set(data):
                    for k, v in data.items():
                        if isinstance(v, str) and v == "auto" and k != "replace_method" and k not in names:
                            log.dropped.add(parent._path + (k,))
            return original(model_self, strict=strict, **data)

        config_utils.DeepSpeedConfigModel.__init__ = init

    def verdict(self, config, world_size, fill=None):
        raw = _fill(json.loads(json.dumps(config)), fill)
        self.world = int(world_size)
        log = _Log()
        self.log = log
        traced = _wrap(raw, (), log) if isinstance(raw, dict) else raw
        try:
            cfg = self.ds_config.DeepSpeedConfig(traced)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - DeepSpeed raises anything (TypeError, AssertionError, ...)
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return {"accepted": False, "error": detail[-1000:], "ignored": [], "stage_ignored": []}
        finally:
            self.log = None
        ignored = []
        if isinstance(raw, dict):
            for path in _key_paths(raw):
                if path in log.dropped:
                    ignored.append(_dotted(path))
                    continue
                if path in log.read or any(path[:i] in log.whole or (path[:i] in PASSED_ON and path[:i] in log.read) for i in range(len(path))):
                    continue
                # A key is only "ignored" on its own: below an ignored key everything is ignored too.
                if any(_dotted(path[:i]) in ignored for i in range(1, len(path))):
                    continue
                ignored.append(_dotted(path))
        return {"accepted": True, "error": None, "ignored": ignored, "stage_ignored": _stage_ignored(cfg, raw)}


def main(argv):
    src, dst = argv[1], argv[2]
    oracle = Oracle()
    with open(src, encoding="utf-8") as fh, open(dst, "w", encoding="utf-8") as out:
        for line in fh:
            if not line.strip():
                continue
            job = json.loads(line)
            result = oracle.verdict(job["config"], job.get("world_size", 1), job.get("fill"))
            result["id"] = job["id"]
            out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
