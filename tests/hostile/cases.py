"""The fixed list of known-nasty inputs, each with the outcome that is right for it.

Rules used throughout (the README's promise): unusable or nonsensical input → exit 2 with one
stderr line naming the file (and key where one applies), nothing written. A hostile-looking
input that is in fact valid (CRLF line ends, a UTF-8 BOM on YAML, a big but legal config) must
succeed. `lint` answers a parseable config with bad values with findings (exit 1) or refuses
it as unusable (2); exit 0 would mean the nonsense passed. `estimate` exits 0/3 on a verdict.
"""

import json
import re

from . import material as m
from .harness import Case, CharDev, Dir, Fifo, Link, RecipeCopy, Sparse

DPO, GRPO, SFT = m.DPO, m.GRPO, m.SFT
LINT_BAD = (1, 2)  # a finding or a refusal; never 0


def alias_bomb(levels=10, width=10):
    text = 'a0: &a0 ["lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text.encode()


def billion_laughs_flow():
    # The classic, in one flow mapping that a values file or recipe.yaml might hold.
    lines = ['lol0: &l0 "lol"']
    for i in range(1, 10):
        lines.append(f"lol{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    lines.append("micro_batch_size: *l9")
    return ("\n".join(lines) + "\n").encode()


def deep_json(n=100_000):
    return b'{"a":' * n + b"1" + b"}" * n


def deep_yaml_flow(n=100_000):
    return b"a: " + b"[" * n + b"]" * n + b"\n"


def many_keys_json(n=100_000):
    body = dict(m.ds_dict())
    body.update({f"k{i}": i for i in range(n)})
    return json.dumps(body).encode()


def nine_mb_yaml():
    # A legal TRL config with a 9 MB comment block: big, but nothing in it is wrong.
    filler = ("# " + "x" * 78 + "\n") * (9 * 1024 * 1024 // 81)
    return (m.trl_yaml() + filler).encode()


def many_nodes_yaml():
    # 9 MB of nodes under one unknown key: lint must answer (unknown key) without a stall.
    items = "".join(f"  - item{i:07d}\n" for i in range(600_000))
    return (m.trl_yaml() + "bogus_list:\n" + items).encode()


def ds_with(**changes):
    d = m.ds_dict()
    d.update(changes)
    return json.dumps(d, indent=2).encode()


def key_or_line(data, key, fname):
    """A message may name the key, or a line of the file that holds it (a key may stand at several
    levels, e.g. vocab_size at the top and in text_config: the tool names the one it stopped at)."""
    lines = [f"{fname}:{i}:" for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1)
             if f'"{key}"' in line or line.lstrip().startswith(f"{key}:")]
    return (key, *lines) if lines else key


def ds_text_replace(old, new):
    text = m.ds_json()
    assert old in text, old  # the committed ds.json changed: update the case, never skip it
    return text.replace(old, new, 1).encode()


# --- payloads for any file channel ------------------------------------------------------------
# name -> (bytes, kind of trouble): "parse" = cannot be read as a config at all.
def parse_payloads(ext):
    json_like = ext == "json"
    out = {
        "empty": b"",
        "blank": b"  \n\t\n",
        "nul-bytes": b'{"a":\x00 1}' if json_like else b"a: 1\x00\n",
        "non-utf8": b'{"x": "\xff\xfe"}' if json_like else b"model: caf\xe9\n",
        "utf16": '{"a": 1}'.encode("utf-16") if json_like else "a: 1\n".encode("utf-16"),
        "truncated": b'{\n  "train_batch_size": 8,\n  "fp16": {"enabled": tr' if json_like else b'a: "open\n',
        "deep-nesting": deep_json() if json_like else deep_yaml_flow(),
        "alias-bomb": alias_bomb(),
        "billion-laughs": billion_laughs_flow(),
        "python-object": b"a: !!python/object/apply:os.system ['touch pwned']\n",
        "python-name": b"a: !!python/name:os.system\n",
        "tag-int-abc": b"train_batch_size: !!int abc\n",
        "tag-timestamp": b"train_batch_size: !!timestamp x\n",
        "tag-float-junk": b"train_batch_size: !!float nope\n",
        "tag-binary": b"train_batch_size: !!binary '%%%'\n",
        "tag-custom": b"train_batch_size: !foo 1\n",
        "top-level-scalar": b"42\n",
        "top-level-null": b"null\n",
        "top-level-list": b"[1, 2]\n",
        "json-comments": b'// c\n{"train_batch_size": 8}\n',
        "deep-arrays": b"[" * 1_000_000 + b"]" * 1_000_000,  # 10^6 levels, JSON and YAML flow alike
    }
    if not json_like:
        out["yaml-two-docs"] = b"a: 1\n---\nb: 2\n"
        out["yaml-tab-indent"] = b"a:\n\t- b\n"
    return out


def _fixed_files():
    """Special files every file channel gets: fifo, /dev/zero, loops, dirs, 200 MB sparse."""
    return {
        "fifo": (Fifo(), ()),
        "dev-zero": (Link("/dev/zero"), ()),
        "symlink-loop": (Link("{d}/loop2"), (("loop2", Link("{d}/IN")),)),
        "dangling-link": (Link("{d}/nowhere"), ()),
        "directory": (Dir(), ()),
        "sparse-200mb": (Sparse(200 * 1024 * 1024, b'{"train_batch_size": 8,'), ()),
        "unreadable-dir-parent": None,  # see below: exists only where a folder can hold it
    }


def file_channels():
    """(channel id, verb, args with {IN}, file name, expect-on-parse-error, names)."""
    return [
        ("lint-json", "lint", ("{d}/ds.json",), "ds.json", (2,), ("ds.json",)),
        ("lint-yaml", "lint", ("{d}/cfg.yaml",), "cfg.yaml", (2,), ("cfg.yaml",)),
        ("lint-kind-ds", "lint", ("--kind", "deepspeed", "{d}/ds.json"), "ds.json", (2,), ("ds.json",)),
        ("estimate-config", "estimate", ("--config", "{d}/ds.json", "--model", "Qwen2.5-7B"), "ds.json", (2,), ("ds.json",)),
        ("estimate-model", "estimate", ("--model", "{d}/config.json"), "config.json", (2,), ("config.json",)),
        ("render-values", "render", (DPO, "--values", "{d}/values.yaml"), "values.yaml", (2,), ("values.yaml",)),
        ("render-values-o", "render", (DPO, "--values", "{d}/values.yaml", "-o", "{d}/out"), "values.yaml", (2,), ("values.yaml",)),
    ]


def payload_cases():
    cases = []
    for chan, verb, args, name, expect, names in file_channels():
        ext = "json" if name.endswith(".json") else "yaml"
        for pid, data in parse_payloads(ext).items():
            want = expect
            if verb == "lint" and pid.startswith("top-level"):
                want = LINT_BAD  # parseable: a wrong-type finding is as good as a refusal
            if chan.startswith("render-values") and pid in ("empty", "blank", "top-level-null"):
                want = (0, 2)  # an empty values file may mean "no overrides"
            cases.append(Case(
                id=f"{chan}/{pid}", verb=verb, args=args, files={name: data}, expect=want, names=names,
                writes=("out",), stdout_ok=verb == "lint" and want == LINT_BAD,
                marker="{d}/pwned", why=f"{pid} in {name} is unusable input: one line naming {name}, exit 2"))
        for pid, spec in _fixed_files().items():
            if spec is None:
                continue
            target, extra = spec
            files = {name: target if not isinstance(target, Link) else Link(target.target.replace("{d}/IN", f"{{d}}/{name}"))}
            for rel, s in extra:
                files[rel] = Link(s.target.replace("{d}/IN", f"{{d}}/{name}")) if isinstance(s, Link) else s
            # lint walks a folder, even one named ds.json; a walk that finds no config is a note and
            # exit 0 since 44041cc (as ruff and black answer a folder without Python files)
            want = (0,) if verb == "lint" and pid == "directory" else expect
            cases.append(Case(
                id=f"{chan}/{pid}", verb=verb, args=args, files=files, expect=want, names=names,
                why=f"{name} is a {pid}: not a regular file of sane size; refuse in < 2 s naming it"))
        cases.append(Case(id=f"{chan}/missing", verb=verb, args=args, expect=expect, names=names,
                          why=f"{name} does not exist: one line naming it, exit 2"))
    return cases


# --- parseable but nonsensical values ----------------------------------------------------------
BIG_INT = "9" * 5000  # over Python's 4,300-digit int/str conversion limit


def ds_semantic():
    """name -> (ds.json bytes, key the message must name)."""
    return {
        "micro-negative": (ds_with(train_micro_batch_size_per_gpu=-1), "train_micro_batch_size_per_gpu"),
        "micro-zero": (ds_with(train_micro_batch_size_per_gpu=0), "train_micro_batch_size_per_gpu"),
        "micro-float": (ds_with(train_micro_batch_size_per_gpu=1.5), "train_micro_batch_size_per_gpu"),
        "micro-string": (ds_with(train_micro_batch_size_per_gpu="1"), "train_micro_batch_size_per_gpu"),
        "micro-bool": (ds_with(train_micro_batch_size_per_gpu=True), "train_micro_batch_size_per_gpu"),
        "micro-null": (ds_with(train_micro_batch_size_per_gpu=None), "train_micro_batch_size_per_gpu"),
        "micro-1e400": (ds_text_replace('"train_micro_batch_size_per_gpu": 1', '"train_micro_batch_size_per_gpu": 1e400'), "train_micro_batch_size_per_gpu"),
        "micro-nan": (ds_text_replace('"train_micro_batch_size_per_gpu": 1', '"train_micro_batch_size_per_gpu": NaN'), "train_micro_batch_size_per_gpu"),
        "micro-infinity": (ds_text_replace('"train_micro_batch_size_per_gpu": 1', '"train_micro_batch_size_per_gpu": -Infinity'), "train_micro_batch_size_per_gpu"),
        "micro-bigint": (ds_text_replace('"train_micro_batch_size_per_gpu": 1', f'"train_micro_batch_size_per_gpu": {BIG_INT}'), "train_micro_batch_size_per_gpu"),
        "accum-zero": (ds_with(gradient_accumulation_steps=0), "gradient_accumulation_steps"),
        "batch-negative": (ds_with(train_batch_size=-32), "train_batch_size"),
        "stage-7": (ds_with(zero_optimization=dict(m.ds_dict()["zero_optimization"], stage=7)), "stage"),
        "stage-string": (ds_with(zero_optimization=dict(m.ds_dict()["zero_optimization"], stage="3")), "stage"),
        "zero-not-object": (ds_with(zero_optimization=3), "zero_optimization"),
        "fp16-five": (ds_with(fp16=5), "fp16"),
        "bf16-five": (ds_with(bf16=5), "bf16"),
        "enabled-string": (ds_with(fp16={"enabled": "yes"}), "enabled"),
        "clip-nan": (ds_text_replace('"gradient_clipping": 1.0', '"gradient_clipping": NaN'), "gradient_clipping"),
        "duplicate-key": (ds_text_replace('"train_batch_size": 32,', '"train_batch_size": 32,\n  "train_batch_size": 64,'), "train_batch_size"),
        "offload-device-int": (ds_with(zero_optimization=dict(m.ds_dict()["zero_optimization"], offload_optimizer={"device": 1})), "device"),
    }


def semantic_cases():
    cases = []
    for sid, (data, key) in ds_semantic().items():
        if sid == "micro-null":
            # a null batch key is one DeepSpeed derives, as when absent: estimate works it out (8e9ab05)
            cases.append(Case(id=f"estimate-config/{sid}", verb="estimate", args=("--config", "{d}/ds.json", "--model", "Qwen2.5-7B"),
                              files={"ds.json": data}, expect=(0, 3), stdout_ok=True,
                              why="a null micro batch is DeepSpeed's to derive: an estimate (0 fits, 3 oom), no error"))
            continue
        cases.append(Case(id=f"estimate-config/{sid}", verb="estimate", args=("--config", "{d}/ds.json", "--model", "Qwen2.5-7B"),
                          files={"ds.json": data}, names=("ds.json", key_or_line(data, key, "ds.json")),
                          why=f"{key} is nonsense for DeepSpeed: bad input, exit 2 naming ds.json and {key}"))
        # a null batch key is one DeepSpeed derives, as when absent (1ed778a): lint passes it
        cases.append(Case(id=f"lint-json/{sid}", verb="lint", args=("{d}/ds.json",), files={"ds.json": data},
                          expect=(0,) if sid == "micro-null" else LINT_BAD, names=("ds.json",), stdout_ok=True,
                          why=f"{key} is nonsense: lint must report it (1) or refuse (2), never pass"))
    for hid, (cfg, key) in hf_semantic().items():
        body = cfg if isinstance(cfg, bytes) else json.dumps(cfg).encode()
        cases.append(Case(id=f"estimate-model/{hid}", verb="estimate", args=("--model", "{d}/config.json"),
                          files={"config.json": body}, names=("config.json", key_or_line(body, key, "config.json")),
                          why=f"an HF config with bad {key}: exit 2 naming config.json and {key}"))
    cases += values_semantic()
    return cases


def hf_semantic():
    H = m.hf_config
    text = json.dumps(m.HF_CONFIG)
    return {
        "hidden-negative": (H(hidden_size=-896), "hidden_size"),
        "hidden-zero": (H(hidden_size=0), "hidden_size"),
        "hidden-string": (H(hidden_size="896"), "hidden_size"),
        "hidden-float": (H(hidden_size=896.5), "hidden_size"),
        "hidden-missing": (H(hidden_size=m.DROP), "hidden_size"),
        "vocab-missing": (H(vocab_size=m.DROP), "vocab_size"),
        "vocab-nan": (text.replace('"vocab_size": 151936', '"vocab_size": NaN').encode(), "vocab_size"),
        "heads-zero": (H(num_attention_heads=0), "num_attention_heads"),
        "heads-missing": (H(num_attention_heads=m.DROP), "num_attention_heads"),
        "kv-heads-negative": (H(num_key_value_heads=-2), "num_key_value_heads"),
        "layers-bigint": (text.replace('"num_hidden_layers": 24', f'"num_hidden_layers": {BIG_INT}').encode(), "num_hidden_layers"),
        "layers-1e400": (text.replace('"num_hidden_layers": 24', '"num_hidden_layers": 1e400').encode(), "num_hidden_layers"),
        "layers-null": (H(num_hidden_layers=None), "num_hidden_layers"),
        "text-config-int": (H(text_config=5), "text_config"),
        "text-config-list": (H(text_config=[1]), "text_config"),
        "model-type-int": (H(model_type=5), "model_type"),
        "tie-string": (H(tie_word_embeddings="no"), "tie_word_embeddings"),
        "intermediate-negative": (H(intermediate_size=-1), "intermediate_size"),
        "duplicate-key": (text.replace('"hidden_size": 896', '"hidden_size": 896, "hidden_size": 1').encode(), "hidden_size"),
    }


def values_semantic():
    """--values YAML and --set: each bad value must be refused naming the key (and the file)."""
    bad = {
        "seq-float": ("seq_len", "4096.0"),
        "seq-negative": ("seq_len", "-1"),
        "seq-zero": ("seq_len", "0"),
        "seq-nan": ("seq_len", ".nan"),
        "seq-inf": ("seq_len", ".inf"),
        "seq-string": ("seq_len", '"4096"'),
        "seq-bigint": ("seq_len", BIG_INT),
        "seq-tag-int": ("seq_len", "!!int abc"),
        "seq-tag-timestamp": ("seq_len", "!!timestamp x"),
        "lr-nan": ("learning_rate", ".nan"),
        "lr-inf": ("learning_rate", "-.inf"),
        "lr-1e400": ("learning_rate", "1e400"),
        "micro-bool": ("micro_batch_size", "true"),
        "micro-null": ("micro_batch_size", "null"),
        "precision-bogus": ("precision", "bf17"),
        "unknown-key": ("micro_batch_sizes", "2"),
        "model-python-object": ("model", "!!python/object/apply:os.system ['touch pwned']"),
        "nodes-huge": ("nodes", "1000000000000"),
    }
    cases = []
    for vid, (key, val) in bad.items():
        cases.append(Case(id=f"render-values/{vid}", verb="render", args=(DPO, "--values", "{d}/values.yaml"),
                          files={"values.yaml": f"{key}: {val}\n".encode()}, names=("values.yaml", (key, "values.yaml:1:")),
                          why=f"{key}: {val} is not a valid value: exit 2 naming values.yaml and {key}"))
        if not val.startswith("!!"):
            setval = val.replace(".nan", "nan").replace(".inf", "inf")
            for verb, extra in (("render", ()), ("estimate", ())):
                cases.append(Case(id=f"{verb}-set/{vid}", verb=verb, args=(DPO, "--set", f"{key}={setval}", *extra),
                                  names=(key,), why=f"--set {key}={setval} is not a valid value: exit 2 naming {key}"))
    cases.append(Case(id="render-values/duplicate-key", verb="render", args=(DPO, "--values", "{d}/values.yaml"),
                      files={"values.yaml": b"seq_len: 1024\nseq_len: 4096\n"}, names=("values.yaml", ("seq_len", "values.yaml:2:")),
                      why="a key given twice is ambiguous: exit 2 naming values.yaml and seq_len"))
    return cases


# --- trainer files the memory reader maps: a wrong type at a key it reads ---------------------
def yaml_with(text, key, value):
    """text with the line `key: ...` replaced (or added): bad values go in as YAML source, so
    `1e400` stays the string PyYAML reads and a flow list stays a list."""
    line = f"{key}: {value}"
    out, n = re.subn(rf"^{re.escape(key)}:.*$", lambda _m: line, text, count=1, flags=re.M)
    return (out if n else text + line + "\n").encode()


def _trainer_files():
    """kind -> (file name, its text, files beside it, extra estimate flags)."""
    return {
        "llamafactory": ("dpo.yaml", m.lf_yaml(), {"ds.json": m.ds_json()}, ()),
        "trl": ("grpo.yaml", m.trl_yaml(), {}, ()),
        "accelerate": ("accelerate.yaml", m.accelerate_yaml(), {"ds.json": m.rendered(GRPO, "ds.json")}, ("--model", "Qwen2.5-7B")),
        "axolotl": ("axolotl.yaml", m.axolotl_yaml(), {}, ("--gpu", "A100-80GB")),
    }


HUGE_INT = "9" * 400  # an integer float() cannot hold: OverflowError, not ValueError


def trainer_bad_values():
    """kind -> {case: (key, YAML value)}: each a value its trainer refuses or cannot mean."""
    return {
        "llamafactory": {"cutoff-1e400": ("cutoff_len", "1e400"), "lora-rank-huge-int": ("lora_rank", HUGE_INT),
                         "batch-1e400": ("per_device_train_batch_size", "1e400"), "stage-list": ("stage", "[dpo]"),
                         "stage-mapping": ("stage", "{dpo: 1}"), "lora-target-ints": ("lora_target", "[1, 2]"),
                         "additional-target-ints": ("additional_target", "[1]"),
                         "additional-target-unknown": ("additional_target", "abc"), "fsdp-ints": ("fsdp", "[1]"),
                         "model-int": ("model_name_or_path", "5"), "model-null": ("model_name_or_path", "null"),
                         "model-empty": ("model_name_or_path", "''")},
        "trl": {"completion-1e400": ("max_completion_length", "1e400"), "lora-targets-ints": ("lora_target_modules", "[1]"),
                "modules-to-save-unknown": ("lora_modules_to_save", "[abc]"), "vllm-util-list": ("vllm_gpu_memory_utilization", "[1]"),
                "vllm-util-text": ("vllm_gpu_memory_utilization", "abc"), "vllm-util-negative": ("vllm_gpu_memory_utilization", "-1"),
                "vllm-mode-bogus": ("vllm_mode", "abc"), "vllm-mode-list": ("vllm_mode", "[server]"),
                "model-list": ("model_name_or_path", "[a]"), "model-null": ("model_name_or_path", "~"),
                "model-blank": ("model_name_or_path", "' '")},
        "accelerate": {"processes-1e400": ("num_processes", "1e400"), "machines-huge-int": ("num_machines", HUGE_INT)},
        "axolotl": {"sequence-1e400": ("sequence_len", "1e400"), "lora-targets-ints": ("lora_target_modules", "[1]"),
                    "modules-to-save-map": ("lora_modules_to_save", "{a: 1}"), "micro-huge-int": ("micro_batch_size", HUGE_INT),
                    "model-null": ("base_model", "null")},
    }


def trainer_config_cases():
    out = []
    files = _trainer_files()
    for kind, bad in trainer_bad_values().items():
        name, text, beside, extra = files[kind]
        for cid, (key, value) in bad.items():
            data = yaml_with(text, key, value)
            out.append(Case(id=f"estimate-{kind}/{cid}", verb="estimate", args=("--config", "{d}/" + name, *extra),
                            files={name: data, **beside}, names=(name, key_or_line(data, key, name)),
                            why=f"{key}: {clip_value(value)} in a {kind} file: exit 2 naming {name} and {key}"))
    out += accelerate_inline_cases()
    sh = m.launch_sh()
    for cid, (flag, value) in {"max-len-1e400": ("--data.max_len", "1e400"),
                               "micro-huge-int": ("--train.micro_batch_size", HUGE_INT)}.items():
        data = re.sub(rf"{re.escape(flag)} \S+", lambda _m: f"{flag} {value}", sh, count=1).encode()
        out.append(Case(id=f"estimate-openrlhf/{cid}", verb="estimate", args=("--config", "{d}/launch.sh", "--gpu", "A100-80GB"),
                        files={"launch.sh": data}, names=("launch.sh", flag.lstrip("-")),
                        why=f"{flag} {clip_value(value)} in an OpenRLHF script: exit 2 naming launch.sh and the flag"))
    return out


def accelerate_inline_cases():
    """An accelerate config's own deepspeed_config (no deepspeed_config_file): each value that
    `accelerate launch` 1.15 refuses (int(str(v)) for the stage, str_to_bool for zero3_init_flag,
    DeepSpeed's device names for offload) is bad input at deepspeed_config's key."""
    inline = "deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: none\n  offload_param_device: none\n  zero3_init_flag: true\n"
    text = re.sub(r"^deepspeed_config:\n(  .*\n|  #.*\n)+", lambda _m: inline, m.accelerate_yaml(), count=1, flags=re.M)
    assert "deepspeed_config_file" not in text and "zero_stage: 3" in text
    bad = {"stage-list": ("zero_stage", "[3]"), "stage-1e400": ("zero_stage", "1e400"), "stage-negative": ("zero_stage", "-1"),
           "stage-4": ("zero_stage", "4"), "stage-float": ("zero_stage", "3.0"), "stage-bool": ("zero_stage", "true"),
           "stage-text": ("zero_stage", "three"), "offload-list": ("offload_optimizer_device", "[cpu]"),
           "offload-int": ("offload_optimizer_device", "5"), "offload-bogus": ("offload_param_device", "disk"),
           "offload-map": ("offload_param_device", "{a: 1}"), "init-text": ("zero3_init_flag", "maybe"),
           "init-list": ("zero3_init_flag", "[1]"), "init-negative": ("zero3_init_flag", "-1"),
           "section-list": (None, "[1]"), "section-text": (None, "zero3")}
    out = []
    for cid, (key, value) in bad.items():
        if key is None:
            data = re.sub(r"^deepspeed_config:\n(  .*\n)+", lambda _m: f"deepspeed_config: {value}\n", text, count=1, flags=re.M)
        else:
            data = re.sub(rf"^  {key}: .*$", lambda _m: f"  {key}: {value}", text, count=1, flags=re.M)
        assert data != text, cid
        want = "deepspeed_config" + (f".{key}" if key else "")
        out.append(Case(id=f"estimate-accelerate-inline/{cid}", verb="estimate",
                        args=("--config", "{d}/accelerate.yaml", "--model", "Qwen2.5-7B"), files={"accelerate.yaml": data},
                        names=("accelerate.yaml", want), why=f"{want}: {value} is refused by accelerate launch: exit 2 naming it"))
    return out


def clip_value(value):
    return value if len(value) < 20 else value[:12] + "..."


# --- standard output that cannot take the report ---------------------------------------------
def stream_cases():
    """stdout closed (`>&-`), a full disk (/dev/full) or a reader that is gone (`| head -0`).
    A write that fails is one line naming standard output, exit 2; a reader that stopped early
    is the reader's choice, so the exit status stays the verdict (lint 1, estimate 3), as
    `set -o pipefail` scripts rely on."""
    bad_ds = ds_with(train_micro_batch_size_per_gpu=-1)
    runs = {
        "list": ("list", (), {}, 0), "list-json": ("list", ("--json",), {}, 0), "show": ("show", (DPO,), {}, 0),
        "render": ("render", (DPO,), {}, 0), "lint-errors": ("lint", ("{d}/ds.json",), {"ds.json": bad_ds}, 1),
        "lint-github": ("lint", ("--format", "github", "{d}/ds.json"), {"ds.json": bad_ds}, 1),
        "lint-sarif": ("lint", ("--format", "sarif", "{d}/ds.json"), {"ds.json": bad_ds}, 1),
        "estimate-oom": ("estimate", ("--model", "Qwen2.5-72B", "--gpu", "T4"), {}, 3),
        "estimate-recipe": ("estimate", (DPO, "--json"), {}, 0),
    }
    out = []
    for rid, (verb, args, files, verdict) in runs.items():
        out.append(Case(id=f"stdout-broken-pipe/{rid}", verb=verb, args=args, files=files, expect=(verdict,),
                        stdout_to="broken-pipe", why=f"nobody reads stdout: still exit {verdict}, no traceback"))
        for to in ("closed", "full"):
            out.append(Case(id=f"stdout-{to}/{rid}", verb=verb, args=args, files=files, stdout_to=to,
                            names=("standard output",), why=f"stdout {to}: one line naming standard output, exit 2"))
    return out


# --- names and keys that would drive a terminal ------------------------------------------------
# A file name, recipe name or key holds what a terminal obeys (ESC sequences, BEL, the C1 CSI
# \x9b), a bidirectional override that reorders what is read, or a line break that forges a
# line of the report. Text output shows each as Python's repr writes it (\x1b, \u202e, \n).
TERMINAL_NAMES = {"ansi": "\x1b[2J\x1b[31m", "bel": "\x07", "csi-c1": "\x9b31m", "bidi": "\u202egnp.", "newline": "\nx.json:1:1: fake"}


def _shown(text):
    return repr(text)[1:-1]


def terminal_cases():
    bad_ds, out = ds_with(train_micro_batch_size_per_gpu=-1), []
    for tid, ch in TERMINAL_NAMES.items():
        evil, broken = f"evil{ch}.json", f"broken{ch}.json"
        T = lambda cid, verb, args, **kw: out.append(Case(id=f"terminal-{tid}/{cid}", verb=verb, args=args, terminal=True, **kw))
        for fmt in ("text", "json"):
            T(f"lint-{fmt}-finding", "lint", ("--format", fmt, "{d}/" + evil), files={evil: bad_ds}, expect=(1,),
              why=f"a finding in a file named with {tid}: printed escaped, one line per finding")
            shown = _shown(broken) if fmt == "text" else json.dumps(broken)[1:-1]
            T(f"lint-{fmt}-unusable", "lint", ("--format", fmt, "{d}/" + broken), files={broken: b"{"}, stdout_ok=True,
              names=(shown,), why=f"an unreadable file named with {tid}: one escaped line naming it, exit 2")
        T("lint-key", "lint", ("{d}/grpo.yaml",), files={"grpo.yaml": m.trl_yaml() + json.dumps(f"bad{ch}key") + ": 1\n"}, expect=(1,),
          why=f"an unknown key holding {tid}: the finding quotes it escaped")
        T("estimate-config", "estimate", ("--config", "{d}/" + broken, "--model", "Qwen2.5-7B"), files={broken: b"{"},
          names=(_shown(broken),), why=f"estimate --config of a broken file named with {tid}: one escaped line")
        T("render-values", "render", (DPO, "--values", "{d}/" + broken), files={broken: b"{"},
          names=(_shown(broken),), why=f"render --values of a broken file named with {tid}: one escaped line")
        for verb in ("show", "render", "estimate", "regen"):
            T(f"name-{verb}", verb, ("no" + ch,), why=f"{verb} of a recipe name holding {tid}: one escaped line, exit 2")
        T("render-o", "render", (DPO, "-o", "{d}/out" + ch), expect=(0,), writes=("out" + ch,),
          why=f"render -o into a folder named with {tid}: the written paths are listed escaped")
        T("svg-missing-parent", "estimate", ("--model", "Qwen2.5-7B", "--svg", "{d}/no" + ch + "/c.svg"),
          names=(_shown("no" + ch),), why=f"--svg below a missing folder named with {tid}: one escaped line")
    return out


# --- hostile-looking but valid ------------------------------------------------------------------
def valid_cases():
    v = b"seq_len: 4096\nmicro_batch_size: 1\n"
    crlf_ds = m.ds_json().replace("\n", "\r\n").encode()
    return [
        Case(id="valid/lint-ds-crlf", verb="lint", args=("{d}/ds.json",), files={"ds.json": crlf_ds}, expect=(0,),
             why="CRLF line ends are legal JSON: the committed ds.json lints clean"),
        Case(id="valid/lint-lf-bom", verb="lint", args=("{d}",), expect=(0,),
             files={"dpo.yaml": b"\xef\xbb\xbf" + m.lf_yaml().encode(), "ds.json": m.ds_json().encode()},
             why="YAML allows a UTF-8 BOM: the committed dpo.yaml + ds.json lint clean"),
        Case(id="valid/lint-lf-crlf", verb="lint", args=("{d}",), expect=(0,),
             files={"dpo.yaml": m.lf_yaml().replace("\n", "\r\n").encode(), "ds.json": crlf_ds},
             why="CRLF YAML and JSON are legal: lint clean"),
        Case(id="valid/render-values-crlf", verb="render", args=(DPO, "--values", "{d}/values.yaml"),
             files={"values.yaml": v.replace(b"\n", b"\r\n")}, expect=(0,), why="a CRLF values file is a fine values file"),
        Case(id="valid/render-values-bom", verb="render", args=(DPO, "--values", "{d}/values.yaml"),
             files={"values.yaml": b"\xef\xbb\xbf" + v}, expect=(0,), why="a BOM values file is a fine values file"),
        Case(id="valid/render-values-json", verb="render", args=(DPO, "--values", "{d}/values.json"),
             files={"values.json": b'{"seq_len": 4096}'}, expect=(0,), why="JSON is YAML: a JSON values file is fine"),
        Case(id="valid/estimate-config-crlf", verb="estimate", args=("--config", "{d}/ds.json", "--model", "Qwen2.5-7B"),
             files={"ds.json": crlf_ds}, expect=(0, 3), why="CRLF JSON is fine: a verdict, not an error"),
        Case(id="valid/estimate-model-config", verb="estimate", args=("--model", "{d}/config.json"),
             files={"config.json": json.dumps(m.HF_CONFIG, indent=2).replace("\n", "\r\n").encode()}, expect=(0, 3),
             why="a real Qwen2.5-0.5B-shaped config.json with CRLF: a verdict"),
        Case(id="valid/estimate-model-dir", verb="estimate", args=("--model", "{d}/hf"),
             files={"hf/config.json": json.dumps(m.HF_CONFIG).encode()}, expect=(0, 3),
             why="a model folder holding config.json: a verdict"),
        Case(id="valid/render-o-new", verb="render", args=(DPO, "-o", "{d}/out"), expect=(0,), writes=("out",),
             why="plain render into a new folder succeeds"),
        Case(id="valid/render-o-other-files", verb="render", args=(DPO, "-o", "{d}/out"), expect=(0,), writes=("out",),
             files={"out/notes.txt": b"mine\n"}, why="a folder holding unrelated files is a fine target without --force"),
        Case(id="valid/lint-9mb-comments", verb="lint", args=("{d}/grpo.yaml",), files={"grpo.yaml": nine_mb_yaml()},
             expect=(0,), why="a legal 9 MB TRL YAML (mostly comments): lint clean, well under 10 s"),
        Case(id="valid/lint-100k-keys", verb="lint", args=("--kind", "deepspeed", "{d}/ds.json"), files={"ds.json": many_keys_json()},
             expect=LINT_BAD, names=("ds.json",), stdout_ok=True,
             why="100k unknown keys are errors (1) or too big (2); it must answer, not stall"),
        Case(id="valid/lint-9mb-nodes", verb="lint", args=("{d}/grpo.yaml",), files={"grpo.yaml": many_nodes_yaml()},
             expect=LINT_BAD, names=("grpo.yaml",), stdout_ok=True,
             why="9 MB of nodes under an unknown key: an error (1) or too big (2), answered quickly"),
        Case(id="valid/set-line-separator", verb="render", args=(DPO, "--set", "model=a\u2028b"), expect=(0, 2),
             names=("model",), why="U+2028 in a string value: render it safely (YAML treats it as a line break) or refuse"),
        Case(id="valid/set-nel", verb="render", args=(DPO, "--file", "dpo.yaml", "--set", "output_dir=x\x85y"), expect=(0, 2),
             names=("output_dir",), why="NEL in a string value: render it quoted or refuse naming output_dir"),
        Case(id="valid/values-line-separator", verb="render", args=(DPO, "--file", "dpo.yaml", "--values", "{d}/v.yaml"),
             files={"v.yaml": '{"dataset": "a\\u2028b"}'.encode()}, expect=(0, 2), names=("dataset",),
             why="an escaped U+2028 in a values file: rendered safely or refused naming dataset"),
        Case(id="valid/list-home-file", verb="list", args=("--json",), env={"HOME": "{d}/homefile"},
             files={"homefile": b"not a folder"}, expect=(0,), why="list needs no HOME"),
        Case(id="valid/render-tmpdir-missing", verb="render", args=(DPO, "-o", "{d}/out"), env={"TMPDIR": "{d}/none"},
             expect=(0,), writes=("out",), why="a missing TMPDIR must not matter: temp files go beside the target"),
        Case(id="valid/show-ascii-stdout", verb="show", args=(DPO,), env={"PYTHONIOENCODING": "ascii"}, expect=(0,),
             why="an ASCII-only stdout: show escapes what it cannot encode"),
    ]


# --- write targets: -o and --svg ---------------------------------------------------------------
def output_cases():
    full = {f"out/{n}": b"old\n" for n in ("ds.json", "dpo.yaml", "launch.sh")}
    R = lambda *a: (DPO, "-o", *a)
    c = [
        Case(id="o/target-is-file", verb="render", args=R("{d}/out"), files={"out": b"x"}, names=("out", "is a regular file"),
             why="-o onto a regular file: refuse naming it, leave it alone"),
        Case(id="o/target-under-file", verb="render", args=R("{d}/f/out"), files={"f": b"x"}, names=("f",),
             why="-o below a regular file: refuse"),
        Case(id="o/target-symlink-loop", verb="render", args=R("{d}/out"), files={"out": Link("{d}/out2"), "out2": Link("{d}/out")},
             names=("out",), why="-o onto a symlink loop: refuse, no hang"),
        Case(id="o/target-chardev", verb="render", args=R("{d}/out"), files={"out": CharDev()}, names=("out",),
             why="-o onto a char device: refuse, device untouched"),
        Case(id="o/target-fifo", verb="render", args=R("{d}/out"), files={"out": Fifo()}, names=("out",),
             why="-o onto a fifo: refuse, no hang"),
        Case(id="o/target-proc", verb="render", args=R("/proc/ftrecipes-hostile-out"), names=("/proc/ftrecipes-hostile-out",),
             why="an unwritable folder (procfs refuses mkdir even for root): one line, exit 2"),
        Case(id="o/target-empty", verb="render", args=R(""), why="-o '' names no folder: exit 2"),
        Case(id="o/clash-no-force", verb="render", args=R("{d}/out"), files=full, names=("out",),
             why="existing files without --force: refuse, old files intact"),
        Case(id="o/dir-where-file-goes", verb="render", args=(*R("{d}/out"), "--force"),
             files={**full, "out/ds.json": Dir()}, names=("ds.json",),
             why="a folder where ds.json goes: refuse before writing anything (no half-new set)"),
        Case(id="o/fsize-new", verb="render", args=R("{d}/out"), fsize=1024, names=("out",),
             why="disk full (RLIMIT_FSIZE 1 KiB): exit 2, no folder and no temp files left"),
        Case(id="o/fsize-force", verb="render", args=(*R("{d}/out"), "--force"), files=full, fsize=1024, names=("out",),
             why="disk full with --force: exit 2, the old set stays whole"),
        Case(id="o/force-ok", verb="render", args=(*R("{d}/out"), "--force"), files=full, expect=(0,), writes=("out",),
             why="--force over an old set replaces it"),
        Case(id="o/ascii-name-escape", verb="render", args=(DPO, "-o", "{d}/out\udcff"), expect=(0,), writes=("out\udcff",),
             why="a non-UTF-8 folder name is a legal folder name on Linux"),
    ]
    return c + svg_cases()


def svg_cases():
    modes = {"recipe": (DPO,), "config": ("--model", "Qwen2.5-7B", "--gpu", "A100-80GB")}
    targets = {
        "chardev": ({"null": CharDev()}, "{d}/null", (0, 2, 3), (), "a copy of /dev/null: write into it or refuse; it must stay a char device"),
        "directory": ({"dir": Dir()}, "{d}/dir", (2,), ("dir",), "a folder: refuse"),
        "fifo": ({"f.svg": Fifo()}, "{d}/f.svg", (2,), ("f.svg",), "a fifo: refuse without blocking or replacing it"),
        "loop": ({"a.svg": Link("{d}/b.svg"), "b.svg": Link("{d}/a.svg")}, "{d}/a.svg", (2,), ("a.svg",), "a symlink loop: refuse"),
        "under-file": ({"f": b"x"}, "{d}/f/c.svg", (2,), ("f",), "below a regular file: refuse"),
        "missing-parent": ({}, "{d}/nodir/c.svg", (2,), ("nodir",), "in a missing folder: refuse"),
        "proc": ({}, "/proc/ftrecipes-hostile.svg", (2,), ("ftrecipes-hostile.svg",), "on procfs: refuse"),
        "fsize": ({}, "{d}/c.svg", (2,), ("c.svg",), "disk full (RLIMIT_FSIZE 512 B): refuse, no partial chart or temp file"),
    }
    out = []
    for mode, head in modes.items():
        for tid, (files, target, expect, names, why) in targets.items():
            out.append(Case(id=f"svg-{mode}/{tid}", verb="estimate", args=(*head, "--svg", target), files=files,
                            expect=expect, names=names, fsize=512 if tid == "fsize" else None,
                            why=f"--svg onto {why}"))
        out.append(Case(id=f"svg-{mode}/ok", verb="estimate", args=(*head, "--svg", "{d}/c.svg"), expect=(0, 3),
                        writes=("c.svg",), why="--svg into a plain new file works"))
        out += svg_path_cases(mode, head)
    return out


def svg_path_cases(mode, head):
    """--svg paths read as text: '' was taken as "no chart", and os.path.abspath turned
    "c.svg/" into a file c.svg and folded "nodir/.." or "link/.." away before the kernel saw them."""
    odd = {"empty": ("", {}, ("svg",)), "trailing-slash": ("{d}/c.svg/", {}, ("c.svg/",)),
           "trailing-dot": ("{d}/c.svg/.", {}, ("c.svg/.",)), "missing-dotdot": ("{d}/nodir/../c.svg", {}, ("nodir",))}
    out = [Case(id=f"svg-{mode}/{tid}", verb="estimate", args=(*head, "--svg", target), files=files, names=names,
                why=f"--svg {target!r}: no file that name can be; exit 2 naming it, nothing written")
           for tid, (target, files, names) in odd.items()]
    out.append(Case(id=f"svg-{mode}/link-dotdot", verb="estimate", args=(*head, "--svg", "{d}/lnk/../c.svg"), expect=(0, 3),
                    files={"real/inner": Dir(), "lnk": Link("{d}/real/inner")}, writes=("real/c.svg",),
                    why="lnk/../c.svg is real/c.svg to the kernel (lnk's target's parent), not c.svg beside lnk"))
    return out


# --- recipe folders given by path: untrusted ---------------------------------------------------
# What a template that reached Python objects or outside files would print.
LEAKS = ("<class '", "<module '", "<built-in function", "<function ", "root:x:0:0", "H3-SECRET-MARKER")
SANDBOX = {
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler-globals": "{{ cycler.__init__.__globals__.os.system('touch {d}/pwned') }}",
    "lipsum-popen": "{{ lipsum.__globals__['os'].popen('touch {d}/pwned').read() }}",
    "joiner-builtins": "{{ joiner.__init__.__globals__['__builtins__']['__import__']('os').system('touch {d}/pwned') }}",
    "namespace-globals": "{{ namespace.__init__.__globals__.os.system('touch {d}/pwned') }}",
    "self-context": "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch {d}/pwned') }}",
    "version-in-globals": "{{ version_in.__globals__['__builtins__']['__import__']('os').system('touch {d}/pwned') }}",
    "catch-warnings": ("{% for c in [].__class__.__base__.__subclasses__() %}{% if c.__name__ == 'catch_warnings' %}"
                       "{{ c()._module.__builtins__['__import__']('os').system('touch {d}/pwned') }}{% endif %}{% endfor %}"),
    "format-attr": "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
    "range-bomb": "{% for i in range(10**10) %}x{% endfor %}",
    "string-bomb": "{{ 'x' * 10**10 }}",
    "include-passwd": "{% include '../../../../../../etc/passwd' %}",
    "include-absolute": "{% include '/etc/passwd' %}",
    "import-os": "{% import 'os' as os %}",
}


def recipe_cases():
    tpl = "templates/launch.sh.j2"
    out = []
    for sid, payload in SANDBOX.items():
        data = (payload + "\n").encode()
        out.append(Case(id=f"sandbox/{sid}", verb="render", args=("{d}/r/" + DPO, "--file", "launch.sh"),
                        files={f"r/{DPO}": RecipeCopy(DPO, ((tpl, data),))}, marker="{d}/pwned", leaks=LEAKS,
                        names=("launch.sh.j2",), why="template code reaching Python objects or files: refused (exit 2), nothing runs"))
    out.append(Case(id="sandbox/symlinked-template", verb="render", args=("{d}/r/" + DPO, "--file", "launch.sh"),
                    files={"secret.txt": b"H3-SECRET-MARKER\n", f"r/{DPO}": RecipeCopy(DPO, ((tpl, None),)),
                           f"r/{DPO}/{tpl}": Link("{d}/secret.txt")}, leaks=LEAKS,
                    names=("launch.sh.j2",), why="a template that is a symlink out of the recipe: refuse"))
    out += recipe_file_cases()
    return out


def _recipe_yaml(**edits):
    """recipe.yaml with each regex (one whole line, multiline mode) replaced once; the
    patterns name keys, not values, so a recipe's next version still matches."""
    text = (m.ROOT / "recipes" / DPO / "recipe.yaml").read_text(encoding="utf-8")
    for pattern, new in edits.items():
        text, n = re.subn(pattern, lambda _m: new, text, count=1, flags=re.M)
        assert n == 1, pattern
    return text.encode()


def recipe_file_cases():
    ry, vs = "recipe.yaml", "values.schema.json"
    schema = json.loads((m.ROOT / "recipes" / DPO / vs).read_text())
    remote = dict(schema, properties=dict(schema["properties"], seq_len={"$ref": "http://10.255.255.1/evil.json"}))
    deep = b'{"type": "object", "properties": {"a": ' + b'{"properties": {"a": ' * 50_000 + b"{}" + b"}}" * 50_000 + b"}}"
    edits = {
        f"{ry}/alias-bomb": (ry, alias_bomb()),
        f"{ry}/python-object": (ry, b"name: !!python/object/apply:os.system ['touch pwned']\n"),
        f"{ry}/non-utf8": (ry, b"name: caf\xe9\n"),
        f"{ry}/empty": (ry, b""),
        f"{ry}/duplicate-key": (ry, _recipe_yaml(**{r"^version: .*$": "version: 1.0.0\nversion: 9.9.9"})),
        f"{ry}/template-escape": (ry, _recipe_yaml(**{r"^    template: launch\.sh\.j2$": "    template: ../../../../../../etc/passwd"})),
        f"{ry}/template-absolute": (ry, _recipe_yaml(**{r"^    template: launch\.sh\.j2$": "    template: /etc/passwd"})),
        f"{ry}/output-escape": (ry, _recipe_yaml(**{r"^  - name: launch\.sh$": "  - name: ../escape.sh"})),
        f"{ry}/output-absolute": (ry, _recipe_yaml(**{r"^  - name: launch\.sh$": "  - name: {d}/abs.sh"})),
        f"{ry}/version-bigint": (ry, _recipe_yaml(**{r"^version: .*$": f"version: 1.1.{BIG_INT}"})),
        f"{ry}/tag-timestamp": (ry, _recipe_yaml(**{r"^  seq_len: .*$": "  seq_len: !!timestamp x"})),
        f"{ry}/default-nan": (ry, _recipe_yaml(**{r"^  seq_len: .*$": "  seq_len: .nan"})),
        f"{vs}/invalid-json": (vs, b'{"type": '),
        f"{vs}/remote-ref": (vs, json.dumps(remote).encode()),
        f"{vs}/deep": (vs, deep),
        f"{vs}/bogus-type": (vs, b'{"type": "bogus"}'),
        f"{vs}/list": (vs, b"[]"),
        f"{vs}/empty": (vs, b""),
        f"{vs}/nan": (vs, b'{"type": "object", "maxProperties": NaN}'),
        "template/syntax-error": ("templates/launch.sh.j2", b"{% if %}\n"),
        "template/undefined": ("templates/launch.sh.j2", b"{{ no_such_value }}\n"),
        "template/missing": ("templates/launch.sh.j2", None),
        "template/non-utf8": ("templates/launch.sh.j2", b"echo caf\xe9\n"),
        "template/nul": ("templates/launch.sh.j2", b"echo a\x00b\n"),
    }
    out = []
    for eid, (rel, data) in edits.items():
        target = rel.rsplit("/", 1)[-1]
        for verb, args in (("render", ("-o", "{d}/out")), ("show", ()), ("estimate", ())):
            if verb != "render" and rel.startswith("templates/"):
                continue
            expect = (2,)
            if eid.endswith("version-bigint") or (verb == "show" and (rel == vs or eid.endswith("default-nan"))):
                # semver bounds no number; show prints metadata and may leave the schema unread
                expect = (0, 2)
            out.append(Case(id=f"recipe-{verb}/{eid}", verb=verb, args=("{d}/r/" + DPO, *args), expect=expect, writes=("out",),
                            files={f"r/{DPO}": RecipeCopy(DPO, ((rel, data),))}, names=(target,), marker="{d}/pwned",
                            why=f"a recipe folder with a broken {rel}: exit 2 naming {target}; nothing written outside"))
    for sid, spec in {"fifo": Fifo(), "devzero": Link("/dev/zero"), "loop": Link("{d}/r/x/recipe.yaml"),
                      "sparse": Sparse(200 * 1024 * 1024, b"name: x\n")}.items():
        out.append(Case(id=f"recipe-render/recipe-yaml-{sid}", verb="render", args=("{d}/r/x",),
                        files={"r/x/recipe.yaml": spec}, names=(("recipe.yaml", "r/x"),),
                        why=f"recipe.yaml is a {sid}: refuse in < 2 s naming it"))
    return out


# --- positional names, flags, env, regen, list ------------------------------------------------
def name_cases():
    names = {"unknown": "nope", "empty": "", "dotdot": "../../../etc", "root": "/", "dash": "-",
             "newline": "qwen7b\nlora", "line-separator": "qwen7b\u2028lora", "non-utf8": "qwen\udcff",
             "long": "x" * 100_000, "glob": "*", "percent": "%s%n", "fifo-path": "{d}/fifo",
             "dir-without-recipe": "{d}/emptydir", "loop-path": "{d}/loop"}
    files = {"fifo": Fifo(), "emptydir": Dir(), "loop": Link("{d}/loop")}
    out = []
    for verb in ("show", "render", "estimate", "regen"):
        for nid, name in names.items():
            out.append(Case(id=f"name-{verb}/{nid}", verb=verb, args=(name,), files=files,
                            why=f"{verb} of a name that is no recipe: one line, exit 2"))
    out.append(Case(id="name-render/file-unknown", verb="render", args=(DPO, "--file", "nope.json"), names=("nope.json",),
                    why="--file naming no file of the recipe: exit 2 naming it"))
    out.append(Case(id="name-render/prog-render", verb="render", args=("nope",), program="render",
                    why="the `render` entry point answers like `ftrecipes render`"))
    return out


def flag_cases():
    est = {
        "seq-negative": ("--seq-len", "-1"), "seq-zero": ("--seq-len", "0"), "micro-zero": ("--micro-batch", "0"),
        "micro-negative": ("--micro-batch", "-3"), "gpus-zero": ("--gpus", "0"), "gpus-negative": ("--gpus", "-1"),
        "gpn-zero": ("--gpus-per-node", "0"), "lora-negative": ("--lora-rank", "-1"), "vllm-gpus-negative": ("--vllm-gpus", "-1"),
        "util-2": ("--vllm-gpu-memory-utilization", "2"), "util-nan": ("--vllm-gpu-memory-utilization", "nan"),
        "host-nan": ("--host-ram-gb", "nan"), "host-negative": ("--host-ram-gb", "-1"), "host-inf": ("--host-ram-gb", "inf"),
        "gpu-bogus": ("--gpu", "H9000"), "seq-bigint": ("--seq-len", BIG_INT),
    }
    out = []
    for fid, (flag, val) in est.items():
        out.append(Case(id=f"estimate-flag/{fid}", verb="estimate", args=("--model", "Qwen2.5-7B", flag, val),
                        names=((flag.lstrip("-"), val if len(val) < 50 else flag),),
                        why=f"{flag} {val!r} is not a usable setting: exit 2 naming {flag}"))
    out.append(Case(id="estimate-flag/lora-target-bogus", verb="estimate", names=(("lora-target", "\\u2028"),),
                    args=("--model", "Qwen2.5-7B", "--lora-rank", "16", "--lora-target", "\u2028"),
                    why="LoRA on a module no model has: nothing to count, exit 2 naming --lora-target"))
    for pid, val in {"params-nan": "nan", "params-negative": "-1", "params-1e400": "1e400", "params-zero": "0"}.items():
        out.append(Case(id=f"estimate-flag/{pid}", verb="estimate", args=("--params", val, "--model-states-only"), names=("params",),
                        why=f"--params {val}: not a parameter count, exit 2"))
    out.append(Case(id="estimate-flag/model-unknown", verb="estimate", args=("--model", "NoSuchModel-7B"), names=("NoSuchModel-7B",),
                    why="an unknown model name: exit 2 naming it"))
    out.append(Case(id="estimate-flag/nothing", verb="estimate", args=(), why="estimate with no model or recipe: exit 2"))
    lint = {"gpu-bogus": ("--gpu", "H9000"), "gpus-zero": ("--gpus", "0"), "gpus-negative": ("--gpus", "-4"),
            "host-ram-nan": ("--host-ram", "nan"), "host-ram-negative": ("--host-ram", "-1"),
            "fwv-junk": ("--framework-version", "junk"), "fwv-bad-version": ("--framework-version", "openrlhf=x.y.z"),
            "fwv-unknown": ("--framework-version", "nosuch=1.0"), "explain-unknown": ("--explain", "no-such-rule")}
    for fid, (flag, val) in lint.items():
        out.append(Case(id=f"lint-flag/{fid}", verb="lint", args=(flag, val, "{d}/ds.json"), files={"ds.json": m.ds_json().encode()},
                        names=((flag.lstrip("-"), val),),
                        why=f"lint {flag} {val!r}: not usable, exit 2 naming it"))
    out.append(Case(id="lint-flag/kind-mismatch", verb="lint", args=("--kind", "accelerate", "{d}/ds.json"),
                    files={"ds.json": m.ds_json().encode()}, expect=LINT_BAD, names=("ds.json",), stdout_ok=True,
                    why="a DeepSpeed JSON linted as accelerate: findings or refusal, never clean"))
    out.append(Case(id="lint-flag/no-paths-ignore-all", verb="lint", args=("--ignore", "*", "{d}"), files={"ds.json": b"{"},
                    expect=(0, 2), why="everything ignored: nothing to lint (0) or a refusal (2)"))
    return out


def plan_flag_cases():
    """plan's numeric flags: the same bounds as estimate's (a count up to 2**31 - 1, a finite
    amount of host RAM above 0), so nonsense is bad input, not a search that finds nothing."""
    base = {"--model": "Qwen2.5-7B", "--method": "lora", "--gpus": "8xA100-80GB", "--seq-len": "2048", "--global-batch": "64"}
    bad = {"host-ram-nan": ("--host-ram", "nan"), "host-ram-inf": ("--host-ram", "inf"), "host-ram-1e400": ("--host-ram", "1e400"),
           "host-ram-huge": ("--host-ram", "9" * 20), "host-ram-negative": ("--host-ram", "-1"), "host-ram-zero": ("--host-ram", "0"),
           "seq-huge": ("--seq-len", "9" * 20), "lora-rank-huge": ("--lora-rank", "9" * 20),
           "image-slices-huge": ("--image-slices", "9" * 20), "top-huge": ("--top", "9" * 20)}
    out = []
    for fid, (flag, val) in bad.items():
        args = {**base, flag: val}
        out.append(Case(id=f"plan-flag/{fid}", verb="plan", args=tuple(x for kv in args.items() for x in kv),
                        names=(flag.lstrip("-"),), why=f"plan {flag} {val[:20]}: not a usable setting, exit 2 naming {flag}"))
    return out


def plan_name_cases():
    """plan -o DIR --name NAME writes DIR/NAME: a name that is a path (../x, a/b) wrote outside
    or below DIR, as the last part alone was checked; a name the file system cannot hold (over
    255 bytes) was a traceback, in plan's staging and in render -o's target check alike."""
    base = ("--model", "Qwen2.5-7B", "--method", "lora", "--gpus", "8xA100-80GB", "--seq-len", "2048", "--global-batch", "64")
    long = "n" * 300
    out = [Case(id=f"plan-name/{nid}", verb="plan", args=(*base, "-o", "{d}/out", "--name", name), names=("--name",),
                why=f"--name {name[:20]!r} is no recipe name: exit 2 naming --name, nothing written")
           for nid, name in {"dotdot": "../evil", "slash": "a/b", "empty": "", "dot": ".", "long": long}.items()]
    out.append(Case(id="plan-name/o-long", verb="plan", args=(*base, "-o", "{d}/" + long), names=("-o",),
                    why="-o DIR whose name is over 255 bytes: exit 2, no traceback"))
    out.append(Case(id="plan-name/valid", verb="plan", args=(*base, "-o", "{d}/out", "--name", "ok"), expect=(0, 2),
                    writes=("out",), names=("-o",), why="a valid plan -o: written (0), or from a copy without the "
                    "checkout's test pins a one-line refusal (2), never a traceback"))
    out.append(Case(id="o/target-name-too-long", verb="render", args=(DPO, "-o", "{d}/" + long), names=("nnnnnnnn",),
                    why="-o into a folder whose name is over 255 bytes: exit 2 naming it, no traceback"))
    return out


def ref_cases():
    """Paths that configs name: lint follows them, so they are input too."""
    acc = m.accelerate_yaml()
    lf = m.lf_yaml()
    targets = {"dev-zero": Link("/dev/zero"), "fifo": Fifo(), "loop": Link("{d}/ds.json"), "dir": Dir(),
               "sparse-200mb": Sparse(200 * 1024 * 1024, b"{"), "alias-bomb": alias_bomb(), "deep": deep_json(),
               "nan": ds_text_replace('"train_micro_batch_size_per_gpu": 1', '"train_micro_batch_size_per_gpu": NaN'),
               "non-utf8": b'{"x": "\xff"}', "missing": None}
    # lint follows only references that are regular files (a missing one may be generated
    # later): a special or missing target may be skipped (0) but never read or waited on.
    special = ("dev-zero", "fifo", "loop", "dir", "missing")
    out = []
    for tid, spec in targets.items():
        files = {} if spec is None else {"ds.json": spec}
        expect = (0, 1, 2) if tid in special else LINT_BAD
        out.append(Case(id=f"lint-ref-accelerate/{tid}", verb="lint", args=("{d}/accelerate.yaml",),
                        files={"accelerate.yaml": acc.replace("deepspeed_config_file: ds.json", "deepspeed_config_file: {d}/ds.json"), **files},
                        expect=expect, names=("ds.json",), stdout_ok=True,
                        why=f"accelerate.yaml names a ds.json that is {tid}: judged or skipped in < 2 s, never read whole"))
        out.append(Case(id=f"lint-ref-llamafactory/{tid}", verb="lint", args=("{d}/dpo.yaml",),
                        files={"dpo.yaml": lf.replace("deepspeed: ds.json", "deepspeed: {d}/ds.json"), **files},
                        expect=expect, names=("ds.json",), stdout_ok=True,
                        why=f"dpo.yaml names a ds.json that is {tid}: judged or skipped in < 2 s"))
    for tid in ("dev-zero", "fifo"):
        out.append(Case(id=f"lint-model-path/{tid}", verb="lint", args=("{d}",), expect=(0,),
                        files={"dpo.yaml": lf.replace("model_name_or_path: Qwen/Qwen2.5-7B-Instruct", "model_name_or_path: {d}/model"),
                               "ds.json": m.ds_json(), "model": targets[tid]},
                        why="model_name_or_path is a model to load at training time: lint must not open it"))
    out.append(Case(id="lint-folder/fifo-inside", verb="lint", args=("{d}",), expect=(0, 1, 2), stdout_ok=True,
                    files={"ds.json": m.ds_json(), "x.json": Fifo(), "y.yaml": Link("/dev/zero")},
                    why="a folder holding a fifo and a /dev/zero link: skip or report them, never block"))
    out.append(Case(id="lint-folder/loop-dirs", verb="lint", args=("{d}",), expect=(0, 1, 2), stdout_ok=True,
                    files={"ds.json": m.ds_json(), "sub/up": Link("{d}"), "sub/self": Link("{d}/sub")},
                    why="symlinked folders that loop: each file once, no hang"))
    return out


def misc_cases():
    return [
        Case(id="regen/check-one", verb="regen", args=("--check", DPO), expect=(0, 2),
             why="committed files are fresh: 0 (or 2 where no checkout is present, as from a wheel)"),
        Case(id="regen/fsize-1", verb="regen", args=(DPO,), fsize=1, expect=(0, 2),
             why="nothing is stale, so nothing is written even when no byte may be written"),
        Case(id="list/plain", verb="list", args=(), expect=(0,), why="list works"),
        Case(id="list/json-fsize", verb="list", args=("--json",), fsize=1 << 20, expect=(0,), why="list writes nothing but stdout"),
        Case(id="show/ok", verb="show", args=(DPO,), expect=(0,), why="show works"),
    ] + regen_cases() + lora_rank_zero_cases()


def lora_rank_zero_cases():
    """--set lora_rank=0 on a LoRA recipe: PEFT refuses r <= 0 (LoraLayer.update_layer), so the
    value is bad input at --set, not a rendered file the trainer refuses or an estimate of a run
    that cannot start (found by fuzzing every recipe's schema keys with --set)."""
    out = []
    for recipe in ("mistral7b-qlora-4090x1", GRPO):
        for verb in ("render", "estimate"):
            out.append(Case(id=f"{verb}-set/lora-rank-zero-{recipe}", verb=verb, args=(recipe, "--set", "lora_rank=0"),
                            names=("lora_rank",), why="LoRA rank 0: PEFT refuses it; exit 2 naming --set lora_rank"))
    return out


def regen_cases():
    """regen of a recipe folder whose rendered/ holds what a regular file should be: refused naming
    it (a fifo must not block even --check); a stale set is replaced whole."""
    rendered = f"r/{DPO}/rendered"
    specials = {"fifo": ({f"{rendered}/ds.json": Fifo()}, ("ds.json",)),
                "symlink-out": ({"secret": b"mine\n", f"{rendered}/ds.json": Link("{d}/secret")}, ("ds.json",)),
                "dir": ({f"{rendered}/ds.json": Dir()}, ("ds.json",)),
                "loop": ({f"{rendered}/ds.json": Link("{d}/" + rendered + "/ds.json")}, ("ds.json",)),
                "rendered-is-file": ({rendered: b"x\n"}, ("rendered", "is a regular file"))}
    out = []
    for sid, (files, names) in specials.items():
        files = {f"r/{DPO}": RecipeCopy(DPO), **files}
        out.append(Case(id=f"regen-rendered/{sid}", verb="regen", args=("{d}/r/" + DPO,), files=files, names=names,
                        why=f"rendered/ holds a {sid} where a generated file goes: exit 2 naming it, nothing replaced"))
        out.append(Case(id=f"regen-rendered/check-{sid}", verb="regen", args=("--check", "{d}/r/" + DPO), files=files,
                        expect=(1, 2), names=names, why=f"--check beside a {sid}: stale (1) or refused (2), never blocked"))
    out.append(Case(id="regen-rendered/stale", verb="regen", args=("{d}/r/" + DPO,), expect=(0,), writes=(rendered,),
                    files={f"r/{DPO}": RecipeCopy(DPO), f"{rendered}/ds.json": b"stale\n", f"{rendered}/notes.txt": b"x\n"},
                    why="a stale rendered/ is replaced by the whole new set"))
    return out


# --- a new round (2026-11-28): "-", hints naming absent flags, a deleted working folder --------
PLAN_BASE = ("--model", "Qwen2.5-7B", "--method", "lora", "--gpus", "8xA100-80GB", "--seq-len", "2048", "--global-batch", "64")


def dash_cases():
    """'-' as a path: no verb reads standard input or writes standard output through a path
    argument, so '-' was silently a file or folder of that name (`estimate --svg -` wrote a file
    '-'; `render -o -` a folder). Every path argument now refuses it the same way; ./- still
    names such a file."""
    out_args = {"svg-recipe": ("estimate", (DPO, "--svg", "-")),
                "svg-config": ("estimate", ("--model", "Qwen2.5-7B", "--gpu", "A100-80GB", "--svg", "-")),
                "render-o": ("render", (DPO, "-o", "-")), "plan-o": ("plan", (*PLAN_BASE, "-o", "-"))}
    in_args = {"values": ("render", (DPO, "--values", "-")), "config": ("estimate", ("--config", "-", "--model", "Qwen2.5-7B")),
               "lint": ("lint", ("-",)), "config-extras": ("lint", ("--config-extras", "-", "{d}/ds.json"))}
    out = [Case(id=f"dash/{cid}", verb=verb, args=args, names=("standard output",), files={"ds.json": m.ds_json()},
                why="'-' names no stream here: one line saying so, nothing written (no file or folder '-')")
           for cid, (verb, args) in out_args.items()]
    out += [Case(id=f"dash/{cid}", verb=verb, args=args, names=("standard input",), stdout_ok=verb == "lint",
                 files={"ds.json": m.ds_json()}, why="'-' names no stream here: one line saying standard input is not read")
            for cid, (verb, args) in in_args.items()]
    out.append(Case(id="dash/model", verb="estimate", args=("--model", "-"), names=("'-'",), forbid=("--params",),
                    why="--model - is no catalog model: one line, no flag estimate lacks"))
    out.append(Case(id="dash/svg-dot-slash", verb="estimate", args=(DPO, "--svg", "./-"), expect=(0, 3), writes=("-",),
                    why="./- is a file literally named '-': written"))
    out.append(Case(id="dash/render-o-dot-slash", verb="render", args=(DPO, "-o", "./-"), expect=(0,), writes=("-",),
                    why="./- is a folder literally named '-': written"))
    out.append(Case(id="dash/plan-o-empty", verb="plan", args=(*PLAN_BASE, "-o", ""), names=("-o",),
                    why="plan -o '' names no folder (it was taken as no -o and exited 0)"))
    return out


def hint_cases():
    """A message's advice names only flags its verb has: estimate --config said 'pass --kind'
    (lint's flag), plan and a recipe's unknown model said 'or --params' (estimate's, and not with
    a recipe); a recipe's unknown model or GPU now names recipe.yaml and its key."""
    odd = {"x.yaml": b"foo: 1\n", "x.json": b'{"foo": 1}\n', "swift.yaml": b"tuner_type: lora\nmodel: x\n"}
    out = [Case(id=f"hint/estimate-unknown-kind-{name}", verb="estimate", args=("--config", "{d}/" + name), files={name: data},
                names=(name,), forbid=("--kind",), why=f"{name} is of no kind estimate reads: one line, no --kind (lint's flag)")
           for name, data in odd.items()]
    out.append(Case(id="hint/lint-unknown-kind", verb="lint", args=("{d}/x.yaml",), files={"x.yaml": odd["x.yaml"]},
                    names=("--kind",), stdout_ok=True, why="lint has --kind: its advice keeps it"))
    out.append(Case(id="hint/plan-unknown-model", verb="plan", args=("--model", "NoSuch-7B", *PLAN_BASE[2:]),
                    names=("NoSuch-7B",), forbid=("--params",), why="plan has no --params: its unknown-model line must not offer it"))
    for cid, (pattern, line, key) in {"model": (r"^  name: .*$", "  name: NoSuch-7B", "model.name"),
                                      "gpu": (r"^  gpu: .*$", "  gpu: V999-32GB", "hardware.gpu")}.items():
        data = _recipe_yaml(**{pattern: line})
        out.append(Case(id=f"hint/estimate-recipe-unknown-{cid}", verb="estimate", args=("{d}/r/" + DPO,),
                        files={f"r/{DPO}": RecipeCopy(DPO, (("recipe.yaml", data),))}, names=("recipe.yaml", key),
                        forbid=("--params",), why=f"recipe.yaml's {key} unknown to the catalog: its file and key, no --params"))
    return out


def bound_cases():
    """Counts past what any flag takes: a memory --set integer (image_slices) reached the estimate
    and overflowed float() (traceback), and plan --gpus with 5,000 digits hit int()'s limit."""
    out = [Case(id=f"estimate-set/image-slices-{vid}", verb="estimate", args=(recipe, "--set", f"image_slices={val}"),
                names=("image_slices",), why=f"image_slices={val[:12]}: not a count, exit 2 naming it")
           for vid, val, recipe in (("huge", "1" * 30, "minicpmv-full-a100-40gx2"), ("2pow31", str(2**31), "minicpmv-full-a100-40gx2"),
                                    ("bigint", BIG_INT, DPO), ("negative", "-1", DPO))]
    for vid, count in (("bigint", BIG_INT), ("over-max", str(2**31))):
        args = dict(zip(PLAN_BASE[::2], PLAN_BASE[1::2]), **{"--gpus": count + "xH100-80GB"})
        out.append(Case(id=f"plan-flag/gpus-{vid}", verb="plan", args=tuple(x for kv in args.items() for x in kv),
                        names=("--gpus",), why="more GPUs per node than any count flag takes: exit 2 naming --gpus"))
    return out


def cwd_gone_cases():
    """Run from a folder deleted under the shell: relative paths, and os.getcwd on the way to
    absolute ones, raised FileNotFoundError tracebacks (render -o, --svg even with an absolute
    path, --config, regen). One line now; what needs no working folder still works."""
    R = lambda cid, verb, args, **kw: Case(id=f"cwd-gone/{cid}", verb=verb, args=args, cwd_gone=True, **kw)
    return [
        R("render-o", "render", (DPO, "-o", "out"), names=("current folder",), why="-o relative to a deleted folder: one line"),
        R("svg-relative", "estimate", (DPO, "--svg", "c.svg"), names=("current folder",), why="--svg relative: one line"),
        R("config-relative", "estimate", ("--config", "ds.json", "--model", "Qwen2.5-7B"), names=("current folder",),
          why="--config relative to a deleted folder: one line"),
        R("regen-check", "regen", ("--check", DPO), expect=(0, 2), why="regen --check: a verdict or one line, no traceback"),
        R("svg-absolute", "estimate", ("--model", "Qwen2.5-7B", "--gpu", "A100-80GB", "--svg", "{d}/c.svg"), expect=(0, 3),
          writes=("c.svg",), why="an absolute --svg needs no working folder: written"),
        R("render-o-absolute", "render", (DPO, "-o", "{d}/out"), expect=(0,), writes=("out",), why="an absolute -o: written"),
        R("list", "list", (), expect=(0,), why="list reads no path"),
    ]


def stray_flag_cases():
    """Flags whose odd values were taken as something else: render --file '' printed the primary
    file; lint --root naming no folder was ignored (references resolved from elsewhere)."""
    ds = {"ds.json": m.ds_json(), "fifo": Fifo()}
    out = [Case(id="name-render/file-empty", verb="render", args=(DPO, "--file", ""), names=("--file",),
                why="--file '' names no file of the recipe: exit 2")]
    for cid, root in {"missing": "{d}/nope", "file": "{d}/ds.json", "fifo": "{d}/fifo", "empty": ""}.items():
        out.append(Case(id=f"lint-flag/root-{cid}", verb="lint", args=("--root", root, "{d}/ds.json"), files=ds,
                        names=("--root",), why=f"--root naming a {cid} path is no working folder: exit 2 naming --root"))
    out.append(Case(id="lint-flag/root-dir", verb="lint", args=("--root", "{d}", "{d}/ds.json"), files={"ds.json": m.ds_json()},
                    expect=(0,), why="--root naming a folder: the clean ds.json lints clean"))
    out.append(Case(id="trace/unknown-model", verb="trace", args=("--model", "NoSuch-7B"), names=("NoSuch-7B",),
                    why="trace of a model the catalog lacks: one line before any torch import (was a KeyError traceback)"))
    out.append(Case(id="estimate-config/dev-stdin", verb="estimate", args=("--config", "/dev/stdin", "--model", "Qwen2.5-7B"),
                    names=("/dev/stdin",), why="/dev/stdin (here /dev/null) is no regular file: refused naming it"))
    return out


def all_cases():
    out = (payload_cases() + semantic_cases() + valid_cases() + output_cases() + recipe_cases()
           + name_cases() + flag_cases() + ref_cases() + misc_cases() + trainer_config_cases() + stream_cases()
           + plan_flag_cases() + terminal_cases() + plan_name_cases() + dash_cases() + hint_cases() + bound_cases()
           + cwd_gone_cases() + stray_flag_cases())
    ids = [c.id for c in out]
    dupes = {i for i in ids if ids.count(i) > 1}
    assert not dupes, dupes
    return out
