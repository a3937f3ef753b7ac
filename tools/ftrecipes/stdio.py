"""Standard output that may not take what the CLI writes: closed (`>&-`), a full disk
(`>/dev/full`), or a reader that stopped (`| head -1`).

A reader that stops early chose to; the verdict (lint's 1, estimate's 3) must still be the exit
status, or `set -o pipefail` scripts see a clean run. So a broken pipe is swallowed and the rest
of the output discarded while the command finishes. Any other failed write is a UserError (one
line, exit 2): the report never reached anyone.
"""

import errno
import os
import sys

from .errors import UserError

STDOUT = "standard output"


class OutputError(UserError):
    pass


class _Guarded:
    """sys.stdout's stand-in: writes pass through until the reader goes away."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_gone = False

    def write(self, text):
        if self._stream is None:
            raise OutputError("cannot write: it is closed", path=STDOUT)
        if self.reader_gone:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._discard()
            return len(text)
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self):
        if self._stream is None or self.reader_gone:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._discard()
        except OSError as exc:
            raise self._failed(exc) from None

    def _failed(self, exc):
        self._discard()  # the text still buffered would fail again at exit (status 120)
        return OutputError(f"cannot write: {exc.strerror or exc}", path=STDOUT)

    def _discard(self):
        # Whatever is still buffered would fail again when the interpreter flushes at exit
        # (exit status 120 and an "Exception ignored" note): point fd 1 at /dev/null instead.
        self.reader_gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    @property
    def stream(self):
        return self._stream

    def __getattr__(self, name):  # encoding, isatty, fileno, ... of the real stream
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _reserve_std_fds():
    """With fd 0, 1 or 2 closed at start, the next file opened would get that number, and a
    child process (smoke, devenv) would write its output into it: hold each with /dev/null."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise
            held = os.open(os.devnull, os.O_RDWR)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)


def guard():
    """Install the guarded stdout; returns it (finish() needs it)."""
    _reserve_std_fds()
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # no one to tell, but no crash either
    guarded = sys.stdout if isinstance(sys.stdout, _Guarded) else _Guarded(sys.stdout)
    sys.stdout = guarded
    return guarded


def finish(guarded):
    """Flush inside the CLI's error handling, where a failure is still a one-line message."""
    guarded.flush()
