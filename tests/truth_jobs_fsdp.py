"""Jobs for accelerate configs that shard with FSDP (pytest side; no framework imports).

Besides accelerate's config loader (the generic "accelerate" job), an FSDP config is run through
what `accelerate launch` does with it - its own argument parser and launch-config validation, the
FSDP_* environment it hands the training processes (utils/launch.py prepare_multi_gpu_env) - and
the FullyShardedDataParallelPlugin the Trainer's Accelerator builds from that environment; the
trainer file beside it is parsed by TRL's own parser under the same environment. Checked by
tests/frameworks/truth_fsdp.py.
"""

from truth_jobs import BUILDERS

_accelerate_before = BUILDERS["accelerate"]


def _accelerate(ctx, path, text):
    jobs = _accelerate_before(ctx, path, text)
    if "distributed_type: FSDP" not in text:
        return jobs
    r = ctx["_recipe"]
    trainer = [f.name for f in r.files if f.format == "trl"]
    script = r.meta["framework"]["script"].rsplit(".", 1)[-1]
    return jobs + [{"check": "accelerate-fsdp", "path": str(path), "script": script,
                    "trainer_config": str(path.parent / trainer[0]) if trainer else None}]


BUILDERS["accelerate"] = _accelerate
