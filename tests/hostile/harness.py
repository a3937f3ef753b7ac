"""Run one hostile case against the real CLI in a subprocess and say what went wrong.

A case names the verb, its arguments, the files it needs (bytes, fifos, symlinks, sparse
files, char devices), the exit statuses that are right for it, the words its one-line
message must hold, and the paths it may write. The runner snapshots the case folder, the
tool's own recipes and /dev/null before and after, so a write anywhere else is seen.
"""

import contextlib
import hashlib
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 10.0
SLOW_SECONDS = 2.0
# A safety net for this shared machine, not a pass condition: an alias bomb that would take
# tens of GiB dies with MemoryError (a traceback, so still counted) instead of the host.
MEMORY_CAP = 3 * 1024 ** 3
ROWS = (
    "tracebacks",
    "wrong exit status without a traceback",
    "hangs over 10 s",
    "messages that do not name file/line/key",
    "cases that created or changed files they should not have",
    "terminal controls printed raw",
)
# What a terminal obeys or a reader cannot see: C0 controls but the newline, DEL, C1 (\x9b is
# a one-byte CSI), bidirectional overrides and isolates, and U+FFFD, which is what reading the
# output back makes of a raw undecodable byte (a name's, written as it was).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffd]")


# --- what a case folder holds besides plain bytes -----------------------------------------
@dataclass(frozen=True)
class Fifo:
    pass


@dataclass(frozen=True)
class Link:
    target: str  # may hold {d}


@dataclass(frozen=True)
class Sparse:
    size: int
    head: bytes = b""


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755


@dataclass(frozen=True)
class CharDev:
    """A private copy of /dev/null (same major/minor): what `--svg /dev/null` would hit,
    without touching the machine's own /dev/null."""

    major: int = 1
    minor: int = 3


@dataclass(frozen=True)
class RecipeCopy:
    """A copy of an installed recipe folder, with some of its files replaced."""

    name: str
    replace: tuple = ()  # ((relpath, bytes or None to delete), ...)


@dataclass
class Case:
    id: str
    verb: str
    args: tuple  # after the verb; "{d}" is the case folder, "{recipes}" the tool's recipes
    why: str  # the right outcome and why
    files: dict = field(default_factory=dict)
    expect: tuple = (2,)
    names: tuple = ()  # words the message must hold when the exit is 2 ("{d}" expanded)
    writes: tuple = ()  # paths under {d} this case may create or change
    env: dict = field(default_factory=dict)
    fsize: int | None = None  # RLIMIT_FSIZE for the child
    program: str = "ftrecipes"  # or "render"
    stdout_ok: bool = False  # exit-2 cases: stdout may hold output (e.g. lint's report)
    marker: str | None = None  # a path that must not exist afterwards (template sandbox)
    leaks: tuple = ()  # text that must not reach stdout (Python objects, files outside the recipe)
    stdout_to: str | None = None  # "closed", "full" (/dev/full) or "broken-pipe" (no reader): not captured
    terminal: bool = False  # stdout and stderr are text for a terminal: no raw control characters
    forbid: tuple = ()  # words the exit-2 message must not hold (a flag this verb does not have)
    cwd_gone: bool = False  # run from a folder deleted after the shell entered it

    def argv(self, d, recipes):
        sub = lambda s: s.replace("{d}", str(d)).replace("{recipes}", str(recipes))
        head = [] if self.program == "render" else [self.verb]
        return head + [sub(a) for a in self.args]


# --- the tool under test -------------------------------------------------------------------
class Tool:
    """A private copy of the tool: a checkout copy (default) or an installed wheel."""

    def __init__(self, base, mode="checkout"):
        self.base = Path(base)
        self.mode = mode
        if mode == "checkout":
            for name in ("tools", "recipes", "schemas"):
                shutil.copytree(ROOT / name, self.base / name, ignore=shutil.ignore_patterns("__pycache__"))
            for name in ("pyproject.toml", "README.md"):
                shutil.copy2(ROOT / name, self.base / name)
            self.pythonpath = self.base / "tools"
            self.recipes = self.base / "recipes"
        else:
            self.pythonpath = _install_wheel(self.base)
            self.recipes = self.pythonpath / "ftrecipes" / "_data" / "recipes"
        self._check_imported_from_copy()

    def _check_imported_from_copy(self):
        # The test venv may hold an editable install of the checkout: make sure the copy wins.
        probe = "import ftrecipes.paths as p; print(p.__file__); print(p.recipes_dir())"
        out = subprocess.run([sys.executable, "-c", probe], cwd=self.base, env=self.env_plain(self.base),
                             capture_output=True, text=True, check=True).stdout.split("\n")
        assert out[0].startswith(str(self.pythonpath)) and Path(out[1]) == self.recipes, out

    def command(self, case, d):
        module = "ftrecipes.cli" if case.program == "ftrecipes" else None
        if module:
            cmd = [sys.executable, "-m", "ftrecipes", *case.argv(d, self.recipes)]
        else:
            cmd = [sys.executable, "-c", "import sys; from ftrecipes.cli import render_main; sys.exit(render_main())",
                   *case.argv(d, self.recipes)]
        if case.cwd_gone:
            # made, entered and removed by the shell itself, so the case folder ends as it began
            return ["sh", "-c", 'mkdir "$0" && cd "$0" && rmdir "$0" && exec "$@"', str(d / "gone"), *cmd]
        return cmd

    def env_plain(self, home):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FTRECIPES"))}
        env.update(PYTHONPATH=str(self.pythonpath), PYTHONDONTWRITEBYTECODE="1", HOME=str(home),
                   LC_ALL="C.UTF-8", PYTHONHASHSEED="0")
        return env

    def env(self, case, home):
        env = self.env_plain(home)
        env.update({k: v.replace("{d}", str(home.parent / "d")) for k, v in case.env.items()})
        return env


def _install_wheel(base):
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                    "-w", str(wheels), str(ROOT)], check=True, capture_output=True, text=True)
    [wheel] = list(wheels.glob("ftrecipes-*.whl"))
    site = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(site), str(wheel)], check=True, capture_output=True, text=True)
    return site


# --- building a case folder ----------------------------------------------------------------
def materialize(case, d, tool):
    d.mkdir(parents=True, exist_ok=True)
    for rel, spec in case.files.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, bytes):
            path.write_bytes(spec)
        elif isinstance(spec, str):
            path.write_text(spec.replace("{d}", str(d)), encoding="utf-8")
        elif isinstance(spec, Fifo):
            os.mkfifo(path)
        elif isinstance(spec, Link):
            os.symlink(spec.target.replace("{d}", str(d)), path)
        elif isinstance(spec, Sparse):
            with open(path, "wb") as fh:
                fh.write(spec.head)
                fh.truncate(spec.size)
        elif isinstance(spec, Dir):
            path.mkdir(exist_ok=True)
            os.chmod(path, spec.mode)
        elif isinstance(spec, CharDev):
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(spec.major, spec.minor))
        elif isinstance(spec, RecipeCopy):
            shutil.copytree(tool.recipes / spec.name, path, ignore=shutil.ignore_patterns("rendered", "*.svg", "README.md", "CHANGELOG.md"))
            for sub, content in spec.replace:
                target = path / sub
                if content is None:
                    target.unlink()
                else:
                    target.write_bytes(content.replace(b"{d}", str(d).encode()))
        else:
            raise TypeError(f"{case.id}: unknown file spec {spec!r}")


def snapshot(*roots):
    """{path: (kind, mode, size, digest)} of every entry under roots, links not followed."""
    out = {}
    for root in roots:
        root = Path(root)
        if not os.path.lexists(root):
            continue
        stack = [root]
        while stack:
            p = stack.pop()
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            digest = ""
            if stat.S_ISREG(kind):
                digest = _digest(p, st)
            elif stat.S_ISLNK(kind):
                digest = os.readlink(p)
            out[str(p)] = (kind, stat.S_IMODE(st.st_mode), st.st_size if stat.S_ISREG(kind) else 0, digest)
            if stat.S_ISDIR(kind):
                try:
                    stack.extend(p / n for n in os.listdir(p))
                except PermissionError:
                    pass
    return out


def _digest(p, st):
    if st.st_size > 4 * 1024 * 1024:  # sparse fixtures: size and mtime say enough
        return f"big:{st.st_mtime_ns}"
    try:
        return hashlib.sha1(Path(p).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _limits(fsize, close_stdout=False):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if close_stdout:  # `ftrecipes ... >&-`: the child starts with no fd 1 at all
            os.close(1)
    return apply


@contextlib.contextmanager
def _stdout_for(case, captured):
    """The child's stdout: the capture file, /dev/full, or a pipe whose reader is gone before the
    child starts (so its first write fails with EPIPE, whatever the pipe buffer holds)."""
    if case.stdout_to == "full":
        with open("/dev/full", "wb") as full:
            yield full
    elif case.stdout_to == "broken-pipe":
        r, w = os.pipe()
        os.close(r)
        try:
            yield w
        finally:
            os.close(w)
    else:
        yield captured


# --- one run ---------------------------------------------------------------------------------
@dataclass
class Result:
    case: str
    verb: str
    code: int | None
    seconds: float
    problems: dict  # row -> detail
    output: str


def run_case(case, tool, scratch):
    base = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
    d, home = base / "d", base / "home"
    home.mkdir()
    materialize(case, d, tool)
    watched = (d, home, tool.recipes)
    before = snapshot(*watched)
    devnull_ok = stat.S_ISCHR(os.stat("/dev/null").st_mode)
    out_path, err_path = base / "stdout", base / "stderr"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err, _stdout_for(case, out) as stdout:
        proc = subprocess.Popen(tool.command(case, d), cwd=d, env=tool.env(case, home), stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=err, start_new_session=True,
                                preexec_fn=_limits(case.fsize, close_stdout=case.stdout_to == "closed"))
        try:
            code = proc.wait(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    seconds = time.monotonic() - started
    stdout = _tail(out_path)
    stderr = _tail(err_path)
    after = snapshot(*watched)
    problems = judge(case, d, code, stdout, stderr, before, after, devnull_ok)
    _cleanup(base)
    return Result(case.id, case.verb, code, seconds, problems, (stderr or stdout)[-300:])


def _tail(path, limit=64 * 1024):
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        return fh.read().decode("utf-8", "replace")


def judge(case, d, code, stdout, stderr, before, after, devnull_ok):
    problems = {}
    text = stdout + stderr
    if "Traceback (most recent call last)" in text:
        problems["tracebacks"] = _last_line(stderr)
    elif code is None:
        problems["hangs over 10 s"] = f"killed after {HANG_SECONDS:.0f} s"
    elif code not in case.expect:
        problems["wrong exit status without a traceback"] = f"exit {code}, want {'/'.join(map(str, case.expect))}: {_last_line(text)}"
    elif code == 2:
        problem = _message_problem(case, d, stdout, stderr)
        if problem:
            problems["messages that do not name file/line/key"] = problem
    changed = _changes(case, d, before, after, refused=code not in case.expect or code == 2)
    if not devnull_ok or not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        changed.append("/dev/null is no longer a char device")
    if case.marker and os.path.lexists(case.marker.replace("{d}", str(d))):
        changed.append(f"template code ran: {case.marker} exists")
        problems["template code executed"] = f"{case.marker} created"
    leaked = [w for w in case.leaks if w in stdout]
    if leaked:
        problems["template code executed"] = f"output holds {leaked[0]!r}"
    if changed:
        problems["cases that created or changed files they should not have"] = "; ".join(changed[:4])
    raw = RAW_CONTROL.search(text) if case.terminal else None
    if raw:
        problems["terminal controls printed raw"] = f"{raw.group()!r} in: {_last_line(text)!r}"
    return problems


def _message_problem(case, d, stdout, stderr):
    """The refusal must be one line (stderr, or stdout for lint's report) holding every name;
    a name given as a tuple is satisfied by any of its alternatives (a key, or its line)."""
    if case.stdout_ok:
        msg, lines = stdout + stderr, [1]
    else:
        msg = stderr if stderr.strip() else stdout
        lines = [l for l in msg.splitlines() if l.strip()]
        if stderr.strip() and stdout.strip():
            return f"output on both streams: {_last_line(stderr)}"
    missing = []
    for want in case.names:
        options = want if isinstance(want, tuple) else (want,)
        if not any(o.replace("{d}", str(d)) in msg for o in options):
            missing.append("|".join(options))
    if len(lines) != 1:
        return f"{len(lines)} lines: {_last_line(msg)}"
    if missing:
        return f"missing {missing}: {_last_line(msg)}"
    wrong = [w for w in case.forbid if w in msg]
    if wrong:
        return f"names {wrong[0]!r}, which this verb does not take: {_last_line(msg)}"
    return None


def _changes(case, d, before, after, refused):
    # A successful run may write where it was asked to; a refusal must leave no trace.
    allowed = [] if refused else [str(d / w) for w in case.writes]
    def ok(p):
        return any(p == a or p.startswith(a + os.sep) for a in allowed)
    out = []
    for p in sorted(set(before) | set(after)):
        if before.get(p) != after.get(p) and not ok(p):
            what = "created" if p not in before else "removed" if p not in after else "changed"
            out.append(f"{what} {p.replace(str(d), '{d}')}")
    return out


def _last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1][:240] if lines else "(no output)"


def _cleanup(base):
    for p, dirs, _files in os.walk(base):
        for name in dirs:
            full = os.path.join(p, name)
            if not os.path.islink(full):
                os.chmod(full, 0o755)
    shutil.rmtree(base, ignore_errors=True)


def tally(results):
    rows = {r: [] for r in ROWS}
    for res in results:
        for row, detail in res.problems.items():
            rows.setdefault(row, []).append((res.case, detail))
    return rows
