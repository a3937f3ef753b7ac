"""Load the accelerate schema examples with the real ClusterConfig.from_yaml_file.

    /tmp/scratch-schemas/trl/bin/python tools/schemagen/crosscheck_accelerate.py
"""
import pathlib

from accelerate.commands.config.config_args import ClusterConfig

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/schema_examples/accelerate"
for kind in ("valid", "invalid"):
    for p in sorted((HERE / kind).glob("*.yaml")):
        try:
            ClusterConfig.from_yaml_file(str(p))
            verdict = "accepted by ClusterConfig"
        except Exception as e:  # noqa: BLE001
            verdict = f"rejected: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
        print(f"{kind:7} {p.name:40} {verdict}")
