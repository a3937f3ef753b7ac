"""Test-only CPU shim: let DeepSpeed's communication layer see the real world size at ZeRO-3 init.

On GPUs, accelerate initialises deepspeed.comm for DEEPSPEED jobs before the model
is built. With `use_cpu` (needed on this CPU-only machine) accelerate takes its CPU
path and only torch.distributed is set up, so `zero.Init` - which HF runs while
loading the model under ZeRO-3 - builds its DeepSpeedConfig with world size 1 and
DeepSpeed's batch assertion fails (train_batch_size != micro x accum x 1). This
shim initialises deepspeed.comm (gloo, from the launcher's environment) right
before zero.Init when nobody has; it changes nothing else. What it means: the
smoke test does not cover accelerate's GPU-side DeepSpeed process-group set-up.
"""

import os


def _ensure_comm(module):
    init_cls = module.Init
    original = init_cls.__init__

    def __init__(self, *args, **kwargs):
        import deepspeed

        if not deepspeed.comm.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        original(self, *args, **kwargs)

    init_cls.__init__ = __init__


def install(on_import):
    on_import("deepspeed.runtime.zero.partition_parameters", _ensure_comm)
