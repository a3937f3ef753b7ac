"""The memory model against a measured step, in CI: one held-out case of bench/memory_vs_trace.py.

The full matrix (24 cases, minutes) is the benchmark; this runs the one case whose
shape (Qwen2.5-0.5B: tied embeddings, 14 heads / 2 KV heads) was not used to derive
the formulas, with fake tensors in the trl stack's torch + transformers.
"""

import subprocess
import sys

import pytest

from conftest import ROOT
from ftrecipes import devenv

pytestmark = pytest.mark.framework


def test_estimate_matches_a_traced_step_within_5_percent(tmp_path):
    python = devenv.ensure_env("trl")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory_vs_trace.py"), "--python", str(python),
         "--model", "Qwen2.5-0.5B", "--only", "1", "--cache", str(tmp_path / "traces.json")],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "worst error over 1 cases" in proc.stdout
