"""Run many cases two at a time (the machine has 2 cores) and collect the results."""

import tempfile
from concurrent.futures import ThreadPoolExecutor

from .harness import Tool, run_case


def run_all(cases, tool, workers=2, scratch=None):
    # Threads are enough: each case's work happens in its own subprocess.
    with tempfile.TemporaryDirectory(prefix="hostile-", dir=scratch) as tmp:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda c: run_case(c, tool, tmp), cases))


def make_tool(base, mode="checkout"):
    return Tool(base, mode)
