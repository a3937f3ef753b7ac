"""Test-only CPU patch for OpenRLHF's CUDA-only calls. Inert unless FTRECIPES_CPU_SHIM=1.

WHY: OpenRLHF 0.11.2 (DeepspeedStrategy and helpers) calls CUDA APIs directly on paths that
DeepSpeed's CPU accelerator would otherwise handle: torch.cuda.set_device,
init_device_mesh("cuda", ...), torch.cuda.current_device(), torch.cuda.synchronize(),
torch.cuda.empty_cache(). This machine has no GPU, so to run `openrlhf.cli.train_sft` /
`train_dpo` 2-process on CPU (gloo, DS_ACCELERATOR=cpu) in the smoke tests, those calls are
redirected to CPU equivalents. Only on the tests' PYTHONPATH (ftrecipes.devenv.run_env("openrlhf")),
never shipped.

NOT COVERED: anything device-specific on GPU (device placement, NCCL, CUDA memory behaviour,
flash-attention and its Triton cross-entropy kernel, which is hidden so OpenRLHF's torch
log-prob path runs); the smoke test proves the flags, the DeepSpeed config OpenRLHF builds from them
and the training loop, not GPU execution.

The patch is applied lazily, when `openrlhf` is first imported, so other processes using this
PYTHONPATH (pip, torchrun's launcher) pay nothing.
"""
import os
import sys


def _patch_torch():
    import torch
    import torch.distributed.device_mesh as dm

    cpu = torch.device("cpu")
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.current_device = lambda: cpu
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda: None
    real_init_device_mesh = dm.init_device_mesh

    def init_device_mesh(device_type, *args, **kwargs):
        if device_type == "cuda":
            device_type = "cpu"
        return real_init_device_mesh(device_type, *args, **kwargs)

    dm.init_device_mesh = init_device_mesh
    import torch.distributed as dist
    if hasattr(dist, "init_device_mesh"):
        dist.init_device_mesh = init_device_mesh
    # openrlhf.models.utils.log_probs_from_logits uses flash-attn's Triton cross-entropy kernel
    # (CUDA only: `with torch.cuda.device(...)`) whenever it imports, and falls back to torch on
    # ImportError. Triton is absent where torch is the CPU wheel, but a machine whose pip fetches
    # the default (CUDA) torch from PyPI gets triton with it, and the smoke tests then died with
    # "invalid argument to exchangeDevice" (seen on a run with no local wheel source). A None entry
    # in sys.modules makes that import raise ImportError, so OpenRLHF takes its own torch path.
    sys.modules["flash_attn.ops.triton.cross_entropy"] = None


class _PatchOnOpenRLHFImport:
    """meta_path hook: patch torch just before the first `import openrlhf`, then step aside."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "openrlhf" or fullname.startswith("openrlhf."):
            sys.meta_path.remove(self)
            _patch_torch()
        return None


if os.environ.get("FTRECIPES_CPU_SHIM") == "1":
    sys.meta_path.insert(0, _PatchOnOpenRLHFImport())
