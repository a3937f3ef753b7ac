"""Test-only: let accelerate 1.11 run FSDP on CPU processes, so an FSDP2 recipe trains in CI.

accelerate's AcceleratorState (accelerate/state.py, __init__) turns on FSDP only when the
distributed type is one of the accelerator-backed ones (MULTI_GPU, MULTI_XPU, MULTI_NPU, ...).
A CPU-only launch is MULTI_CPU, so `distributed_type: FSDP` in an accelerate config silently
becomes plain DDP there: the model is never sharded (found while writing the FSDP2 smoke test).
PyTorch's FSDP2 itself runs on CPU tensors over gloo. With FTRECIPES_CPU_FSDP=bypass, after the
state is built on a MULTI_CPU launch that asked for FSDP (ACCELERATE_USE_FSDP=true, set by
`accelerate launch` from the config) and got a plugin, the shim makes the assignments accelerate
makes for GPUs: distributed type FSDP, the plugin's mixed precision from the state's, the plugin
itself (its FSDP branch), and the distributed type copied to PartialState's shared state (the
last line of __init__; without it the next AcceleratorState() reverts to MULTI_CPU, which made
the Trainer save un-gathered DTensor shards). It records one `cpu-fsdp` probe record. Nothing else
is changed; never active outside smoke runs (sitecustomize installs it only when the variable
is set).
"""

import os

TARGET = "accelerate.state"


def _patch(mod, out):
    mode = os.environ.get("FTRECIPES_CPU_FSDP")
    if mode != "bypass":
        raise ValueError(f"FTRECIPES_CPU_FSDP={mode!r}: expected 'bypass'")
    cls = mod.AcceleratorState
    init = cls.__init__

    def __init__(self, *args, fsdp_plugin=None, **kwargs):
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
        if asked and fsdp_plugin is not None and self.distributed_type == mod.DistributedType.MULTI_CPU:
            self.distributed_type = mod.DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
            # accelerate's own last line of __init__: later AcceleratorState() calls copy the
            # distributed type back from PartialState, so it must say FSDP there too.
            mod.PartialState._shared_state["distributed_type"] = self.distributed_type
            out({"event": "cpu-fsdp", "was": "MULTI_CPU", "now": "FSDP", "fsdp_version": int(fsdp_plugin.fsdp_version)})

    cls.__init__ = __init__


def install(on_import, out):
    on_import(TARGET, lambda mod: _patch(mod, out))
