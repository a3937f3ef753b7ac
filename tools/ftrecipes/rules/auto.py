"""Where "auto" may appear in a DeepSpeed config."""

from ..formats import FORMATS, IGNORES
from . import ERROR, rule
from .facts import ds_configs, hf_trainer_present, plain_deepspeed_launch


def _autos(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _autos(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _autos(v, path + (i,))
    elif node == "auto":
        yield path


@rule("auto-without-trainer", ERROR, '"auto" in a DeepSpeed config that no trainer fills')
def auto_without_trainer(setup):
    """
    "auto" is a placeholder the HF Trainer / accelerate integration replaces with its own
    values before DeepSpeed sees the config (accelerate#1644). Launched with the plain
    `deepspeed` launcher or by a program that passes the file to `deepspeed.initialize`
    itself, "auto" reaches DeepSpeed, which fails on batch sizes, gradient clipping and
    optimizer/scheduler parameters. Reported only when the setup shows such a launch.
    """
    if hf_trainer_present(setup):
        return
    launch = plain_deepspeed_launch(setup)
    if launch is None:
        return
    parsing = FORMATS["deepspeed"].parsing
    for ds in ds_configs(setup):
        for path in _autos(ds.data):
            # Where DeepSpeed drops "auto" (its pydantic sections) the default applies: no harm.
            effect = parsing.auto_value(path)
            if effect is not None and effect.kind != IGNORES:
                yield ds, path, (f'"auto" at {".".join(map(str, path))} but {launch[0].path} launches without an HF Trainer '
                                 f"to fill it ({effect.text})")
