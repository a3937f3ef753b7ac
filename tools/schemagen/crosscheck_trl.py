"""Parse the trl schema examples with the real TrlParser of the command named in their first line
(`# trl: <command>`, default sft), the way `trl <command> --config file.yaml` does
(plus `--use_cpu true`, since this machine has no GPU).

    /tmp/scratch-schemas/trl/bin/python tools/schemagen/crosscheck_trl.py
"""
import importlib
import pathlib

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/schema_examples/trl"
for kind in ("valid", "invalid"):
    for p in sorted((HERE / kind).glob("*.yaml")):
        first = p.read_text().splitlines()[0]
        cmd = first.split(":", 1)[1].strip() if first.startswith("# trl:") else "sft"
        parser = importlib.import_module(f"trl.scripts.{cmd}").make_parser()
        try:
            *_, cfg_rest, cli_rest = parser.parse_args_and_config(
                ["--config", str(p), "--use_cpu", "true"], return_remaining_strings=True, separate_remaining_strings=True)
            verdict = "accepted" + (f"; passed on to accelerate launch: {cfg_rest[::2]}" if cfg_rest else "")
        except BaseException as e:  # noqa: BLE001  (argparse exits)
            verdict = f"rejected: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        print(f"{kind:7} {cmd:6} {p.name:40} {verdict}")
