"""All-or-nothing writes: `render -o`, `estimate --svg` and regen under kills, races and bad targets.

The kill tests fork a warm copy of this process, install an audit hook in the child that counts
every file-system event the writer can make (opens for writing, mkdir, rename, replace, remove,
rmdir, chmod, link, symlink, rmtree, copies, and atomic.py's own renameat2 event), and SIGKILL the
child just before its Nth event, for every N until a run completes. Killing before event N+1 is
the same instant as just after event N, so every point between two operations is covered.
"""

import contextlib
import os
import resource
import signal
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from ftrecipes import atomic, cli, recipe, render
from ftrecipes.errors import UserError

NAME = "qwen7b-lora-h100x8"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
EVENTS = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.chmod", "os.link", "os.symlink",
          "os.truncate", "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
          "ftrecipes.renameat2"}


def _is_write(event, args):
    if event == "open":
        mode, flags = args[1], args[2]
        return bool((isinstance(mode, str) and set(mode) & set("wax+")) or (isinstance(flags, int) and flags & WRITE_FLAGS))
    return event in EVENTS


def _in_child(fn, kill_at=None, quiet=True):
    """Run fn() in a forked child; SIGKILL it at its kill_at-th write event. Returns the wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            if quiet:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            # pytest's capture objects write to its own files, which an RLIMIT_FSIZE would hit.
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            if kill_at is not None:
                seen = [0]

                def hook(event, args):
                    if _is_write(event, args):
                        seen[0] += 1
                        if seen[0] == kill_at:
                            os.kill(os.getpid(), signal.SIGKILL)

                sys.addaudithook(hook)
            code = fn()
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 99
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 0)
    _, status = os.waitpid(pid, 0)
    return status


def _tree(path):
    """{relative name: bytes or '->link' or '/'} of everything under path; None when absent."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            p = Path(root) / d
            out[str(p.relative_to(path))] = "->" + os.readlink(p) if p.is_symlink() else "/"
        for f in files:
            p = Path(root) / f
            out[str(p.relative_to(path))] = "->" + os.readlink(p) if p.is_symlink() else p.read_bytes()
    return out


def _staging_left(parent):
    return [p.name for p in Path(parent).iterdir() if ".ftrecipes-" in p.name]


def _render_main(target, *extra):
    return lambda: cli.render_main([NAME, "-o", str(target), *extra])


def _expected_new():
    r = recipe.load(NAME)
    overrides = {"micro_batch_size": 2}
    return {f.name: text.encode() for f, text in render.render(r, overrides)}


def _seed_old(target):
    target.mkdir()
    (target / "ds.json").write_text("old ds\n")
    (target / "notes.txt").write_text("mine\n")
    (target / "sub").mkdir()
    (target / "sub" / "data.bin").write_bytes(b"\x00\x01")
    os.symlink("notes.txt", target / "link")


SCENARIOS = {
    # name: (prepare target, extra CLI args, expected new tree given old tree and the rendered set)
    "new-folder": (lambda t: None, [], lambda old, new: new),
    "existing-force": (_seed_old, ["--force"], lambda old, new: {**old, **new}),
    "existing-unrelated": (lambda t: (t.mkdir(), (t / "keep.txt").write_text("keep\n")), [], lambda old, new: {**old, **new}),
}


def _kill_every_event(tmp_path, prepare, args, want_new, fallback=False):
    new_set = _expected_new()
    trials = 0
    for n in range(1, 500):
        work = tmp_path / f"n{n}"
        work.mkdir()
        target = work / "run"
        prepare(target)
        old = _tree(target)
        want = want_new(old or {}, new_set)

        def run():
            if fallback:
                def no_exchange(dirfd, src, dst, flags):
                    if flags == atomic._RENAME_EXCHANGE:
                        raise NotImplementedError
                    return real(dirfd, src, dst, flags)

                real = atomic._renameat2
                atomic._renameat2 = no_exchange
            return _render_main(target, "--set", "micro_batch_size=2", *args)()

        status = _in_child(run, kill_at=n)
        trials += 1
        if not fallback:
            now = _tree(target)
            assert now in (old, want), f"event {n}: target is neither old nor new: {sorted(now or {})}"
        # The next write into the same folder removes what the killed one left beside the target
        # (and, after the two-rename fallback, puts a target that was moved aside back).
        atomic.write_one(work / "other.txt", "x\n")
        now = _tree(target)
        assert now in (old, want), f"event {n}: after recovery neither old nor new: {sorted(now or {})}"
        assert _staging_left(work) == [], f"event {n}: staging left: {_staging_left(work)}"
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0
            assert now == want
            return trials
        assert os.WTERMSIG(status) == signal.SIGKILL
    raise AssertionError("render never completed")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sigkill_at_every_event_leaves_old_or_new(tmp_path, scenario):
    prepare, args, want_new = SCENARIOS[scenario]
    render.render(recipe.load(NAME), {"micro_batch_size": 2})  # warm caches before forking
    trials = _kill_every_event(tmp_path, prepare, args, want_new)
    assert trials > 10  # every file write, the swap and the clean-up were each a kill point


def test_sigkill_without_rename_exchange_recovers_old_or_new(tmp_path):
    """Where RENAME_EXCHANGE is missing the swap is two renames; a kill between them leaves no
    target, and the next write puts the old tree back."""
    prepare, args, want_new = SCENARIOS["existing-force"]
    assert _kill_every_event(tmp_path, prepare, args, want_new, fallback=True) > 10


def test_regen_style_exact_set_under_kills(tmp_path):
    target = tmp_path / "rendered"
    files = {"a.json": ("{}\n", False), "b.sh": ("#!/bin/sh\n", True)}
    for n in range(1, 200):
        shutil_rm(target)
        target.mkdir()
        (target / "a.json").write_text("old\n")
        (target / "stale.yaml").write_text("gone\n")
        old = _tree(target)
        status = _in_child(lambda: atomic.write_all(target, files, force=True, exact=True) and 0, kill_at=n)
        assert _tree(target) in (old, {"a.json": b"{}\n", "b.sh": b"#!/bin/sh\n"})
        if os.WIFEXITED(status):
            assert os.stat(target / "b.sh").st_mode & stat.S_IXUSR
            return
    raise AssertionError("never completed")


def shutil_rm(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_concurrent_renders_one_wins_whole(tmp_path):
    r = recipe.load(NAME)
    sets = {2: {f.name: t.encode() for f, t in render.render(r, {"micro_batch_size": 2})},
            4: {f.name: t.encode() for f, t in render.render(r, {"micro_batch_size": 4})}}
    for i in range(40):
        target = tmp_path / f"r{i}" / "run"
        target.parent.mkdir()
        go_r, go_w = os.pipe()
        pids = {}
        for mb in (2, 4):
            pid = os.fork()
            if pid == 0:  # pragma: no cover
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1), os.dup2(devnull, 2)
                os.close(go_w)
                os.read(go_r, 1)  # both start together
                try:
                    code = cli.render_main([NAME, "-o", str(target), "--set", f"micro_batch_size={mb}"])
                except BaseException:
                    code = 99
                os._exit(code)
            pids[mb] = pid
        os.close(go_r)
        os.write(go_w, b"go")
        os.close(go_w)
        codes = {mb: os.WEXITSTATUS(os.waitpid(pid, 0)[1]) for mb, pid in pids.items()}
        assert sorted(codes.values()) == [0, 2], codes
        winner = next(mb for mb, c in codes.items() if c == 0)
        assert _tree(target) == sets[winner]
        assert _staging_left(target.parent) == []


# ------------------------------------------------------------------ write_one and bad targets


def _estimate_svg(path):
    from ftrecipes import cli as c

    return c.main(["estimate", NAME, "--svg", str(path)])


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "symlink", "device"])
def test_svg_refuses_non_regular_targets(run_cli, tmp_path, kind):
    path = tmp_path / "chart.svg"
    keep = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        keep = socket.socket(socket.AF_UNIX)
        keep.bind(str(path))
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "real.svg").write_text("real\n")
        os.symlink("real.svg", path)
    elif os.getuid() == 0:
        # A node of our own with /dev/null's numbers: a writer that failed this test as root
        # would otherwise replace the machine's /dev/null.
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        path = Path("/dev/null")  # unprivileged: cannot replace it even if the check were wrong
    before = os.lstat(path)
    code, out, err = run_cli("estimate", NAME, "--svg", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(path) in err, err
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert _staging_left(path.parent) == []
    if kind == "symlink":
        assert (tmp_path / "real.svg").read_text() == "real\n"
    if keep:
        keep.close()


def test_svg_replaces_a_regular_file_whole(run_cli, tmp_path):
    path = tmp_path / "chart.svg"
    path.write_text("old\n")
    code, _, err = run_cli("estimate", NAME, "--svg", str(path))
    assert code in (0, 3), err
    assert path.read_text().startswith("<svg") and _staging_left(tmp_path) == []


def test_file_where_a_folder_should_be(run_cli, tmp_path):
    (tmp_path / "f").write_text("x\n")
    code, _, err = run_cli("estimate", NAME, "--svg", str(tmp_path / "f" / "chart.svg"))
    assert code == 2 and "f" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("render", NAME, "-o", str(tmp_path / "f" / "run"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("render", NAME, "-o", str(tmp_path / "f"))
    assert code == 2 and "not a directory" in err
    assert (tmp_path / "f").read_text() == "x\n"


def test_folder_where_a_file_goes_with_force(run_cli, tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "ds.json").mkdir()
    (target / "launch.sh").write_text("old\n")
    before = _tree(target)
    code, _, err = run_cli("render", NAME, "-o", str(target), "--force")
    assert code == 2 and "ds.json" in err and "directory" in err
    assert _tree(target) == before and _staging_left(tmp_path) == []


def _limited(fn, limit):
    def run():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        return fn()

    return run


def test_file_size_limit_is_a_clean_error_and_changes_nothing(tmp_path):
    """RLIMIT_FSIZE makes a write fail midway, as a full disk does (ENOSPC and EFBIG take the same
    path: an OSError from write). SIGXFSZ would kill the process; the writer ignores it."""
    target = tmp_path / "run"
    _seed_old(target)
    before = _tree(target)
    status = _in_child(_limited(_render_main(target, "--force"), 200))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 2
    assert _tree(target) == before and _staging_left(tmp_path) == []
    svg = tmp_path / "chart.svg"
    svg.write_text("old\n")
    status = _in_child(_limited(lambda: _estimate_svg(svg), 100))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 2
    assert svg.read_text() == "old\n" and _staging_left(tmp_path) == []
    status = _in_child(_limited(_render_main(tmp_path / "new"), 200))
    assert os.WEXITSTATUS(status) == 2 and not (tmp_path / "new").exists()


def test_file_size_limit_message(tmp_path):
    r, w = os.pipe()  # a pipe, because RLIMIT_FSIZE would also cut a captured stderr file

    def run():
        os.dup2(w, 2)
        sys.stderr = open(2, "w", closefd=False)
        return _limited(lambda: _estimate_svg(tmp_path / "c.svg"), 100)()

    status = _in_child(run)
    os.close(w)
    with os.fdopen(r) as fh:
        lines = fh.read().strip().splitlines()
    assert os.WEXITSTATUS(status) == 2
    assert len(lines) == 1 and f"{tmp_path / 'c.svg'}: cannot write: file size limit reached" in lines[0], lines
    assert not (tmp_path / "c.svg").exists() and _staging_left(tmp_path) == []


def test_unwritable_folder(tmp_path):
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        (base / "run").mkdir()
        os.chmod(base / "run", 0o755)
        (base / "run" / "ds.json").write_text("old\n")

        def as_nobody(fn):
            def run():
                if os.getuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                return fn()

            return run

        before = _tree(base)
        status = _in_child(as_nobody(_render_main(base / "run", "--force")))
        assert os.WEXITSTATUS(status) == 2 and _tree(base) == before
        status = _in_child(as_nobody(lambda: _estimate_svg(base / "run" / "c.svg")))
        assert os.WEXITSTATUS(status) == 2 and _tree(base) == before
    finally:
        shutil_rm(base)


def test_missing_parents_are_created_and_removed_on_failure(run_cli, tmp_path):
    code, _, err = run_cli("render", NAME, "-o", str(tmp_path / "a" / "b" / "run"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "a" / "b" / "run").iterdir())
    code, _, _ = run_cli("render", NAME, "-o", str(tmp_path / "x" / "y" / "run"), "--set", "num_generations=7")
    assert code == 2 and not (tmp_path / "x").exists()


def test_symlink_to_a_folder_writes_into_that_folder(run_cli, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep.txt").write_text("k\n")
    os.symlink("real", tmp_path / "link")
    code, _, err = run_cli("render", NAME, "-o", str(tmp_path / "link"))
    assert code == 0, err
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "ds.json").is_file()
    assert (tmp_path / "real" / "keep.txt").read_text() == "k\n"
    os.symlink("nowhere", tmp_path / "dangling")
    code, _, err = run_cli("render", NAME, "-o", str(tmp_path / "dangling"))
    assert code == 2 and os.path.islink(tmp_path / "dangling")


def test_stale_staging_of_a_live_process_is_kept(tmp_path):
    live = tmp_path / f".run.ftrecipes-{os.getppid()}-new"
    live.mkdir()
    dead_pid = _dead_pid()
    dead = tmp_path / f".run.ftrecipes-{dead_pid}-new"
    dead.mkdir()
    atomic.write_one(tmp_path / "x.txt", "x\n")
    assert live.exists() and not dead.exists()


def _dead_pid():
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_unencodable_text_is_a_clean_error(tmp_path):
    with pytest.raises(UserError, match="cannot write"):
        atomic.write_one(tmp_path / "a.txt", "bad \ud800\n")
    assert list(tmp_path.iterdir()) == []


def test_regen_killed_at_every_event_leaves_rendered_old_or_new(tmp_path):
    import shutil

    from ftrecipes import regen

    src = recipe.load(NAME).dir
    fresh = _tree(src / "rendered")
    dst = tmp_path / NAME
    shutil.copytree(src, dst)
    regen.main([str(dst)], check=True)  # warm caches (and the memory estimate) before forking
    for n in range(1, 300):
        shutil.rmtree(dst / "rendered")
        shutil.copytree(src / "rendered", dst / "rendered")
        (dst / "rendered" / "ds.json").write_text("{}\n")
        (dst / "rendered" / "left-over.yaml").write_text("x: 1\n")
        old = _tree(dst / "rendered")
        status = _in_child(lambda: regen.main([str(dst)]), kill_at=n)
        assert _tree(dst / "rendered") in (old, fresh), f"event {n}"
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and _tree(dst / "rendered") == fresh
            atomic.write_one(dst / "x.txt", "x\n")
            assert _staging_left(dst) == []
            return
    raise AssertionError("regen never completed")


@pytest.mark.parametrize("name", ["..", ".", "../escape.sh", "a/b", ""])
def test_file_names_must_be_plain(tmp_path, name):
    with pytest.raises(UserError, match="not a plain file name"):
        atomic.write_all(tmp_path / "out", {name: ("x\n", False)})
    assert list(tmp_path.iterdir()) == []
