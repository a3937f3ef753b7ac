"""Test-only: DeepSpeed's CPU fp16 capability probe, so fp16 smoke runs work on any x86-64 CPU.

DeepSpeed 0.19.8's CPU accelerator (deepspeed/accelerator/cpu_accelerator.py) answers
`is_fp16_supported()` from `torch.ops.mkldnn._is_mkldnn_fp16_supported()`, i.e. whether oneDNN
has fp16 kernels for this CPU (AVX-512 FP16 or AMX-FP16). Where it is False, what the answer
gates in 0.19.8 is:
- `DeepSpeedEngine._do_sanity_check` raises "Type fp16 is not supported on your device";
- `supported_dtypes()` leaves out float16, so `split_half_float_double_sparse` (the allreduce
  bucketing of the non-ZeRO and ZeRO-1 paths) would refuse fp16 gradients;
- `zero.Init()` without a config defaults to bf16 instead of fp16, and Muon picks fp32.
None of these is about whether PyTorch can compute in fp16 on the CPU: its fp16 CPU kernels work
without oneDNN's fp16 support (slower reference kernels). So a CPU without AVX-512 FP16 can run
an fp16 smoke test once DeepSpeed is told it may.

Two variables, read once when DeepSpeed's CPU accelerator module is imported:
- FTRECIPES_CPU_FP16=bypass: where the native answer is False, `is_fp16_supported()` (and with
  it `supported_dtypes()`) answers True. Where it is True nothing is changed.
- FTRECIPES_CPU_FP16_SIMULATE=absent|present: stands in for DeepSpeed's own answer, to simulate
  a CPU without / with oneDNN fp16, so both paths are exercised on any machine. (The torch op
  itself is left alone: replacing `torch.ops.mkldnn._is_mkldnn_fp16_supported` breaks
  torch.export's walk over all ops, which transformers reaches while loading.)
Every process writes one `cpu-fp16` probe record (native answer, simulation, bypass) at the
first question, so a test can see which path ran. Never active outside smoke runs: sitecustomize
installs it only when FTRECIPES_CPU_FP16 is set.
"""

import os

TARGET = "deepspeed.accelerator.cpu_accelerator"


def _patch(mod, out):
    mode = os.environ.get("FTRECIPES_CPU_FP16")
    if mode != "bypass":
        raise ValueError(f"FTRECIPES_CPU_FP16={mode!r}: expected 'bypass'")
    simulated = os.environ.get("FTRECIPES_CPU_FP16_SIMULATE") or None
    if simulated not in (None, "absent", "present"):
        raise ValueError(f"FTRECIPES_CPU_FP16_SIMULATE={simulated!r}: expected 'absent' or 'present'")
    cls = mod.CPU_Accelerator
    native_probe = cls.is_fp16_supported
    state = {}

    def is_fp16_supported(self):
        if simulated:
            native = simulated == "present"
        else:
            native = bool(native_probe(self))  # DeepSpeed's own code: None (not False) when oneDNN says no
        if not state:
            state.update(native=native)
            out({"event": "cpu-fp16", "native": native, "simulated": simulated, "bypassed": not native})
        return True

    cls.is_fp16_supported = is_fp16_supported


def install(on_import, out):
    on_import(TARGET, lambda mod: _patch(mod, out))
