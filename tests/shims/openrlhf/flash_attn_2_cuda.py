"""Test-only stand-in for flash-attn's compiled CUDA extension `flash_attn_2_cuda`.

WHY: OpenRLHF 0.11.2 requires flash-attn 2.8.3, which ships as source only and needs CUDA to
build. The ftrecipes `openrlhf` test venv installs flash-attn's Python part only
(FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE), and `flash_attn.flash_attn_interface` does
`import flash_attn_2_cuda` at import time, which OpenRLHF imports unconditionally. This module lets
that import succeed; every kernel entry point raises.

NOT COVERED: flash-attention itself. Smoke tests must run OpenRLHF with
`--ds.attn_implementation sdpa` (or eager); any recipe using flash_attention_2 is only checked for
flag validity, never executed, on this CPU machine.
"""


def _unavailable(*_args, **_kwargs):
    raise RuntimeError(
        "flash_attn_2_cuda is a CPU test stand-in (tests/shims/openrlhf); flash-attention kernels "
        "are not available: use --ds.attn_implementation sdpa")


fwd = varlen_fwd = bwd = varlen_bwd = fwd_kvcache = _unavailable
