"""Test-only exit hygiene for 2-process smoke runs on CPU (gloo).

What goes wrong without it: after training has finished and the model is saved, one rank
sometimes dies with SIGABRT ("terminate called without an active exception", exit -6), which
fails the run. A core dump of the abort (2-process gloo run, 4 runs overlapping on 2 cores)
shows where: Python has begun finalising (Py_FinalizeEx, last GC) while a gloo worker thread
drops the last reference to a finished collective - c10d::ProcessGroupGloo::runLoop ->
~AsyncWork -> ~at::ThreadLocalState -> SafePyObject decref -> pybind11 gil_scoped_acquire ->
take_gil. On CPython < 3.14 a thread that asks for the GIL once finalisation has begun is ended
with pthread_exit; its forced unwind passes torch's noexcept destructor and libstdc++ calls
std::terminate. The worker only asks for the GIL because the collective captured Python state
(modes, saved-tensor hooks) when it was issued, and it only loses the race when the machine is
loaded and the thread is not scheduled before the main thread reaches finalisation.

So, at exit, after the program's own atexit handlers: destroy the process groups, drop
unreachable Python references, then release the GIL until no other thread of the process is
runnable, so that any worker waiting for the GIL gets it while the interpreter is still alive.
This changes no exit status and cannot hide a failure: it runs after the program's code, and a
program that failed has already set its status.
"""

import gc
import os
import sys
import threading
import time


def leave_process_group(limit_s: float = 2.0) -> None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception:  # a failed teardown must not change what the run reports
        pass
    gc.collect()
    settle(limit_s)


def settle(limit_s: float, poll_s: float = 0.02, quiet_polls: int = 3) -> None:
    """Sleep (the GIL released) until no other thread of this process has been runnable for
    `quiet_polls` polls in a row, or `limit_s` has passed."""
    me = threading.get_native_id()
    deadline = time.monotonic() + limit_s
    quiet = 0
    while quiet < quiet_polls and time.monotonic() < deadline:
        time.sleep(poll_s)
        busy = _others_runnable(me)
        if busy is None:  # no /proc: one fixed pause is all we can do
            time.sleep(min(0.5, limit_s))
            return
        quiet = 0 if busy else quiet + 1


def _others_runnable(me: int):
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # the thread has ended
        # the state letter follows the command name, which is in parentheses and may hold spaces
        if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R":
            return True
    return False
