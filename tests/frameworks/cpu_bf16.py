"""Test-only: LLaMA-Factory's GPU bf16 check for `pure_bf16`, so a pure-bf16 recipe runs on a CPU.

LLaMA-Factory 0.9.5 (llamafactory/hparams/parser.py, get_train_args) refuses `pure_bf16: true` with "This device does not support `pure_bf16`."
unless `is_torch_bf16_gpu_available()` (transformers.utils) or an NPU says yes. That function asks
CUDA/XPU/MUSA/MLU... and answers False on a machine without a GPU, although PyTorch trains in
bf16 on any x86-64 CPU. What the answer gates in the parser is only that refusal: with
FTRECIPES_CPU_BF16=bypass the parser's own name is rebound to a function that records the
native answer once (a `cpu-bf16` probe record) and answers True. Nothing else in LLaMA-Factory,
transformers or accelerate is changed. Never active outside smoke runs: sitecustomize installs
it only when FTRECIPES_CPU_BF16 is set.
"""

import os

TARGET = "llamafactory.hparams.parser"


def _patch(mod, out):
    mode = os.environ.get("FTRECIPES_CPU_BF16")
    if mode != "bypass":
        raise ValueError(f"FTRECIPES_CPU_BF16={mode!r}: expected 'bypass'")
    native_probe = mod.is_torch_bf16_gpu_available
    state = {}

    def is_torch_bf16_gpu_available():
        native = bool(native_probe())
        if not state:
            state.update(native=native)
            out({"event": "cpu-bf16", "native": native, "bypassed": not native})
        return True

    mod.is_torch_bf16_gpu_available = is_torch_bf16_gpu_available


def install(on_import, out):
    on_import(TARGET, lambda mod: _patch(mod, out))
