"""Turn each openrlhf schema example (object of flags) back into argv and parse it with the real
argparse parsers of openrlhf.cli.{train_sft,train_dpo,train_rm,train_ppo_ray} (built as in
openrlhf_schema.py, without importing openrlhf). Reports which commands accept each example.

    /tmp/scratch-schemas/orl/bin/python tools/schemagen/crosscheck_openrlhf.py
"""
import contextlib
import io
import json
import pathlib
import sys

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from openrlhf_schema import COMMANDS, build_parser, source_dir  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/schema_examples/openrlhf"
parsers = {c: build_parser(source_dir() / "cli" / f"{c}.py") for c in COMMANDS}


def argv(obj):
    out = []
    for k, v in obj.items():
        if v is True:
            out.append(f"--{k}")
            continue
        out.append(f"--{k}")
        out.extend(str(x) for x in v) if isinstance(v, list) else out.append(str(v))
    return out


for kind in ("valid", "invalid"):
    for p in sorted((HERE / kind).glob("*")):
        obj = json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
        ok = []
        for cmd, parser in parsers.items():
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    parser.parse_args(argv(obj))
                ok.append(cmd)
            except SystemExit:
                pass
        print(f"{kind:7} {p.name:32} accepted by: {', '.join(ok) or 'none'}")
