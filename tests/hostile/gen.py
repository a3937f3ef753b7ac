"""Property-based hostile inputs (hypothesis): values files, --set, DeepSpeed JSON, HF configs.

Hypothesis draws the inputs, deterministically (derandomize, no example database), and they are
collected into Cases that the harness runs two at a time; shrinking is given up for that.
The oracle is deliberately small: an input holding a value that is nonsense by any reading
(NaN or infinity, a size that is zero, negative, fractional, boolean or a string, a key no
recipe has) must be refused with exit 2 naming the file and key; any other input may be
accepted or refused, but never with a traceback, a hang, a multi-line message, or a write.
"""

import hashlib
import json
import math

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import material as m
from .cases import key_or_line
from .harness import Case

SIZE_KEYS = ("nodes", "gpus_per_node", "micro_batch_size", "grad_accum", "seq_len", "lora_rank")
DS_SIZE_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
HF_SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
nasty_text = st.text(alphabet=st.sampled_from(list(LINE_BREAKS + "\t\x00\x7f\ufeff\"'\\$`;|&<>{}[]%#:!*- aZ9é") + ["\U0001f600"]),
                     max_size=40)
nasty_float = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 1e-320, -1.5, 0.5, 4096.0, 2.0])
nasty_int = st.one_of(st.integers(-10, 10), st.sampled_from([-(2 ** 63), 2 ** 63, 2 ** 64 + 1, 10 ** 30, 4096, 1 << 20]))
scalar = st.one_of(nasty_int, nasty_float, st.booleans(), st.none(), nasty_text)
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(nasty_text, inner, max_size=3)), max_leaves=6)


FLOAT_KEYS = ("learning_rate", "warmup_ratio", "weight_decay", "gradient_clipping", "beta", "lora_dropout", "epochs")


def nonsense_size(v, integral_floats=False, unset_ok=False):
    """True when v cannot be a count of anything. A recipe value is typed as an integer, so any
    float is wrong there; DeepSpeed and transformers take 2.0 where 2 is meant (integral_floats).
    DeepSpeed reads null as "not set" and HF's Trainer fills "auto" (unset_ok)."""
    if unset_ok and (v is None or isinstance(v, str)):
        return False
    if isinstance(v, bool) or v is None or isinstance(v, (str, list, dict)):
        return True
    if isinstance(v, float):
        return not (integral_floats and math.isfinite(v) and v == int(v) and v > 0)
    return v <= 0


def set_text_bad(key, text):
    """--set KEY=TEXT that no reading makes valid (sizes and float knobs only)."""
    t = text.strip().lower()
    if key in FLOAT_KEYS:
        return t in ("nan", "inf", "-inf", "+inf", "1e400", "-1e400", ".nan", ".inf")
    if key not in SIZE_KEYS:
        return False
    try:
        return int(t, 10) <= 0
    except ValueError:
        pass
    try:
        f = float(t)
    except ValueError:
        return t in ("true", "false", "[1]", "{a: 1}", "null", "~", "")
    return not math.isfinite(f) or f <= 0 or f != int(f)


def has_non_finite(v):
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, list):
        return any(has_non_finite(x) for x in v)
    if isinstance(v, dict):
        return any(has_non_finite(x) for x in v.values())
    return False


def dump(doc, syntax, crlf, bom):
    if syntax == "json":
        text = json.dumps(doc, allow_nan=True, ensure_ascii=False)
    else:
        text = yaml.safe_dump(doc, allow_unicode=True, default_flow_style=False)
    if crlf:
        text = text.replace("\n", "\r\n")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", "surrogatepass")


def _collect(strategy, n):
    out = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(x):
        out.append(x)

    draw()
    return out


# --- values files and --set ---------------------------------------------------------------------
values_doc = st.tuples(
    st.dictionaries(st.sampled_from(sorted(m.recipe_values()) + ["micro_batch_sizes", "", "a.b", "__class__"]),
                    value, min_size=1, max_size=3),
    st.sampled_from(["yaml", "json"]), st.booleans(), st.booleans())


def values_cases(n):
    known = set(m.recipe_values())
    cases = []
    for doc, syntax, crlf, bom in _collect(values_doc, n):
        data = dump(doc, syntax, crlf, bom)
        bad = [k for k, v in doc.items() if k not in known or has_non_finite(v) or (k in SIZE_KEYS and nonsense_size(v))]
        name = f"values.{syntax}"
        cases.append(Case(
            id=f"gen-values/{_digest(data)}", verb="render", args=(m.DPO, "--values", "{d}/" + name), files={name: data},
            expect=(2,) if bad else (0, 2), names=(name, (*map(str, doc), f"{name}:")),
            why=f"generated values file; {'must refuse ' + repr(bad[0]) if bad else 'accept or refuse cleanly'}"))
    return cases


set_arg = st.tuples(st.sampled_from(sorted(m.recipe_values())), st.one_of(
    nasty_text, nasty_int.map(str), nasty_float.map(repr), st.sampled_from(["nan", "inf", "-inf", "1e400", "9" * 5000, "0x10", "1_0", "true", "[1]", "{a: 1}"])),
    st.sampled_from(["render", "estimate"]))


def set_cases(n):
    cases = []
    for key, text, verb in _collect(set_arg, n):
        text = text.replace("\x00", "")  # argv cannot hold NUL
        bad = set_text_bad(key, text)
        cases.append(Case(
            id=f"gen-set-{verb}/{_digest((key + '=' + text).encode('utf-8', 'surrogatepass'))}", verb=verb,
            args=(m.DPO, "--set", f"{key}={text}"), expect=(2,) if bad else (0, 2, 3) if verb == "estimate" else (0, 2),
            names=(key,), why="generated --set; sizes that are no count must be refused naming the key"))
    return cases


# --- DeepSpeed JSON for lint and estimate --config; HF config.json for estimate --model ----------
def _mutations(keys):
    return st.dictionaries(st.sampled_from(keys), value, min_size=1, max_size=3)


ds_keys = sorted(m.ds_dict()) + ["zero_optimization.stage", "zero_optimization.offload_optimizer", "fp16.enabled",
                                 "fp16.initial_scale_power", "bf16", "optimizer", "scheduler"]


def _apply(doc, muts):
    doc = json.loads(json.dumps(doc))
    for path, v in muts.items():
        node = doc
        *parents, last = path.split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[last] = v
    return doc


def ds_cases(n):
    cases = []
    for muts, crlf in _collect(st.tuples(_mutations(ds_keys), st.booleans()), n):
        doc = _apply(m.ds_dict(), muts)
        data = dump(doc, "json", crlf, False)
        bad = [k for k, v in muts.items() if has_non_finite(v) or (k in DS_SIZE_KEYS and nonsense_size(v, integral_floats=True, unset_ok=True))]
        tag = _digest(data)
        cases.append(Case(
            id=f"gen-ds-estimate/{tag}", verb="estimate", args=("--config", "{d}/ds.json", "--model", "Qwen2.5-7B"),
            files={"ds.json": data}, expect=(2,) if bad else (0, 2, 3), names=("ds.json", any_bad(data, [b.split(".")[-1] for b in bad], "ds.json")) if bad else ("ds.json",),
            why="generated DeepSpeed JSON; NaN/inf or a nonsense batch size must be refused naming it"))
        cases.append(Case(
            id=f"gen-ds-lint/{tag}", verb="lint", args=("--kind", "deepspeed", "{d}/ds.json"), files={"ds.json": data},
            expect=(1, 2) if bad else (0, 1, 2), names=("ds.json",), stdout_ok=True,
            why="generated DeepSpeed JSON; nonsense must be reported (1) or refused (2), never passed"))
    return cases


def any_bad(data, keys, fname):
    """With several nonsense values the tool may stop at any one of them (the first in the file,
    not the first mutated): the message names one of their keys or lines."""
    out = []
    for key in keys:
        found = key_or_line(data, key, fname)
        out += list(found) if isinstance(found, tuple) else [found]
    return tuple(out)


def hf_cases(n):
    cases = []
    keys = sorted(m.HF_CONFIG) + ["text_config", "attention_bias", "head_dim"]
    for muts in _collect(_mutations(keys), n):
        doc = _apply(m.HF_CONFIG, muts)
        data = dump(doc, "json", False, False)
        bad = [k for k, v in muts.items() if has_non_finite(v) or (k in HF_SIZE_KEYS and nonsense_size(v, integral_floats=True))]
        cases.append(Case(
            id=f"gen-hf/{_digest(data)}", verb="estimate", args=("--model", "{d}/config.json"), files={"config.json": data},
            expect=(2,) if bad else (0, 2, 3), names=("config.json", any_bad(data, bad, "config.json")) if bad else ("config.json",),
            why="generated HF config.json; a nonsense size must be refused naming it"))
    return cases


def raw_cases(n):
    """Arbitrary bytes as a config file: anything but a crash or a stall."""
    cases = []
    blob = st.tuples(st.binary(max_size=200), st.sampled_from(["ds.json", "cfg.yaml", "launch.sh"]))
    for data, name in _collect(blob, n):
        cases.append(Case(id=f"gen-raw/{name}/{_digest(data)}", verb="lint", args=("{d}/" + name,), files={name: data},
                          expect=(0, 1, 2), names=(name,), stdout_ok=True,
                          why="random bytes: lint answers 0/1/2 with one clean line on refusal"))
    return cases


def generated(per_kind):
    cases = (values_cases(per_kind) + set_cases(per_kind) + ds_cases(per_kind)
             + hf_cases(per_kind) + raw_cases(per_kind))
    seen, out = set(), []
    for c in cases:  # hypothesis may draw the same input twice: count it once
        if c.id not in seen:
            seen.add(c.id)
            out.append(c)
    return out


def _digest(data):
    return hashlib.sha1(data).hexdigest()[:10]
