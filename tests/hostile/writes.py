"""All-or-nothing `render -o`: SIGKILL at every filesystem event, and concurrent renders.

The child installs an audit hook (sys.addaudithook) that counts the events that change the
filesystem — an open for writing, os.mkdir, os.rename (os.replace raises it too), os.remove,
os.rmdir, os.chmod, os.link, os.symlink, os.truncate, shutil.rmtree, shutil.move, a ctypes call
(renameat2 has no os wrapper), fcntl.flock — and sends
itself SIGKILL at the Nth. N runs from 1 to the number a full render makes, so every state
between two events is seen once. After each kill the target must hold its old content or the
whole new set, and nothing else.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CHILD = r"""
import os, signal, sys
N = int(sys.argv[1]); count_file = sys.argv[2]; seen = [0]
# ctypes.call_function: a writer may call renameat2 or another libc function through ctypes.
EVENTS = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.chmod", "os.link", "os.symlink",
          "os.truncate", "shutil.rmtree", "shutil.move", "os.makedirs", "ctypes.call_function", "fcntl.flock"}
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        writing = (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        if not (writing or (mode and any(ch in mode for ch in "wax+"))):
            return
    elif event not in EVENTS:
        return
    seen[0] += 1
    if seen[0] == N:
        os.kill(os.getpid(), signal.SIGKILL)
def report():
    with open(count_file + ".txt", "w") as fh:  # after main: counted only in the N=0 run
        fh.write(str(seen[0]))
sys.addaudithook(hook)
sys.argv = ["ftrecipes"] + sys.argv[3:]
from ftrecipes.cli import main
code = main()
if N == 0:
    report()
sys.exit(code)
"""

SCENARIOS = {
    # name: (existing content of the target or None, extra args)
    "new": (None, ()),
    "new-force": (None, ("--force",)),
    "existing-force": ("old", ("--force",)),
    "existing-unrelated": ("unrelated", ()),
}


@dataclass
class Trial:
    recipe: str
    scenario: str
    n: int
    killed: bool
    temp_left: list
    partial: bool
    beside: list
    state: str


def _prepare(d, recipe_files, scenario):
    target = d / "out"
    content, _ = SCENARIOS[scenario]
    if content == "old":
        target.mkdir()
        for name in recipe_files:
            (target / name).write_text(f"old {name}\n")
    elif content == "unrelated":
        target.mkdir()
        (target / "notes.txt").write_text("mine\n")
    return target


def _run_child(tool, d, n, recipe, scenario):
    args = [sys.executable, "-c", CHILD, str(n), str(d / "count"), "render", recipe, "-o", str(d / "out"), *SCENARIOS[scenario][1]]
    env = tool.env_plain(d)
    return subprocess.run(args, cwd=d, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)


def reference(tool, recipe, scratch):
    """The complete new set and the number of write events of an undisturbed render."""
    d = Path(tempfile.mkdtemp(prefix="ref-", dir=scratch))
    proc = _run_child(tool, d, 0, recipe, "new")
    assert proc.returncode == 0, proc.stderr.decode()
    files = {p.name: p.read_bytes() for p in (d / "out").iterdir()}
    counts = {}
    for scenario in SCENARIOS:
        e = Path(tempfile.mkdtemp(prefix="ref-", dir=scratch))
        _prepare(e, files, scenario)
        proc = _run_child(tool, e, 0, recipe, scenario)
        counts[scenario] = int((e / "count.txt").read_text()) if (e / "count.txt").exists() else 0
    return files, counts


def judge_target(d, new_files, scenario):
    """(temp files left in the target, partial set?, leftovers beside it, state)."""
    target = d / "out"
    content, _ = SCENARIOS[scenario]
    old = {}
    if content == "old":
        old = {name: f"old {name}\n".encode() for name in new_files}
    elif content == "unrelated":
        old = {"notes.txt": b"mine\n"}
    beside = sorted(n for n in os.listdir(d) if n not in ("out", "count", "count.txt"))
    if not target.is_dir():
        return [], False, beside, "absent" if content is None else "target gone"
    now = {p.name: (p.read_bytes() if p.is_file() else None) for p in target.iterdir()}
    expected_names = set(new_files) | set(old)
    temp = sorted(n for n in now if n not in expected_names)
    kept = {n: v for n, v in now.items() if n in expected_names}
    whole_new = all(kept.get(n) == b for n, b in new_files.items()) and all(kept.get(n) == b for n, b in old.items() if n not in new_files)
    whole_old = kept == old
    if whole_old:
        return temp, False, beside, "old" if old else "empty folder"
    return temp, not whole_new, beside, "new" if whole_new else "partial"


def sigkill_trials(tool, recipes, scratch, max_n=None, workers=2, scenarios=tuple(SCENARIOS)):
    jobs = []
    for recipe in recipes:
        new_files, counts = reference(tool, recipe, scratch)
        for scenario, total in counts.items():
            if scenario not in scenarios:
                continue
            top = total if max_n is None else min(total, max_n)
            jobs += [(recipe, scenario, n, new_files) for n in range(1, top + 1)]

    def one(job):
        recipe, scenario, n, new_files = job
        d = Path(tempfile.mkdtemp(prefix="kill-", dir=scratch))
        _prepare(d, new_files, scenario)
        proc = _run_child(tool, d, n, recipe, scenario)
        temp, partial, beside, state = judge_target(d, new_files, scenario)
        shutil.rmtree(d, ignore_errors=True)
        return Trial(recipe, scenario, n, proc.returncode == -9, temp, partial, beside, state)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, jobs))


@dataclass
class Round:
    codes: tuple
    state: str
    temp_left: list


def concurrent_rounds(tool, recipe, scratch, rounds=60):
    """Two renders without --force into one new folder: one wins whole, the other refuses."""
    new_files, _ = reference(tool, recipe, scratch)
    out = []
    for i in range(rounds):
        d = Path(tempfile.mkdtemp(prefix="race-", dir=scratch))
        cmd = [sys.executable, "-m", "ftrecipes", "render", recipe, "-o", str(d / "out")]
        env = tool.env_plain(d)
        procs = [subprocess.Popen(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for _ in range(2)]
        codes = []
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            codes.append(p.returncode)
        temp, partial, _beside, state = judge_target(d, new_files, "new")
        out.append(Round(tuple(sorted(codes)), state, temp))
        shutil.rmtree(d, ignore_errors=True)
    return out
