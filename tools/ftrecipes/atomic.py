"""Write files so that a crash, a kill or an error never leaves half of anything behind.

A set of files (`render -o`, `regen`) is staged complete in a sibling folder of the target,
then swapped in with one system call: rename() with RENAME_NOREPLACE when the target does not
exist, rename() with RENAME_EXCHANGE when it does (the old tree lands at the sibling name and
is deleted afterwards). A SIGKILL at any instant therefore leaves the target holding its old
content or the complete new set; what it can leave is a sibling `.NAME.ftrecipes-PID-*` folder
beside the target, which the next write into the same parent deletes once PID is gone.

Where the kernel or file system lacks RENAME_EXCHANGE (Linux before 3.15, some network and
FUSE file systems, other systems), the swap is two renames: target -> `...-old`, staged ->
target. A kill between them leaves no target, with the old tree whole at the `-old` name; the
next write into the same parent renames it back before doing anything else. So the guarantee
there is "old or new, after the next run's recovery" rather than at every instant.

Writers hold an exclusive flock on the parent folder while they check the target and swap,
so two renders into one folder without --force cannot both succeed: the second sees the
first's files and refuses. The lock is on the folder itself, so no lock file is left behind.
"""

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import re
import shutil
import signal
import stat
import sys
import threading
from pathlib import Path

from .errors import UserError, refuse_dash

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# renameat2 syscall numbers, for a libc that has no wrapper (glibc < 2.28).
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "i686": 353, "i386": 353}
_STAGE = re.compile(r"^\.(?P<name>.+)\.ftrecipes-(?P<pid>\d+)-(?P<kind>new|old)$")


def _renameat2(dirfd, src, dst, flags):
    """renameat2(2) through ctypes; raises OSError, or NotImplementedError where unavailable."""
    if sys.platform != "linux":
        raise NotImplementedError
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_int(dirfd), os.fsencode(src), ctypes.c_int(dirfd), os.fsencode(dst), ctypes.c_uint(flags))
    # The swap is a file system event no Python audit hook sees; name it so tests can kill at it.
    sys.audit("ftrecipes.renameat2", src, dst, flags)
    if hasattr(libc, "renameat2"):
        rc = libc.renameat2(*args)
    elif platform.machine() in _SYS_RENAMEAT2:
        rc = libc.syscall(ctypes.c_long(_SYS_RENAMEAT2[platform.machine()]), *args)
    else:
        raise NotImplementedError
    if rc != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise NotImplementedError
        raise OSError(err, os.strerror(err), dst)
    return None


@contextlib.contextmanager
def _locked(parent):
    """Exclusive flock on the parent folder: held while checking and swapping."""
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UserError(f"cannot open folder: {exc.strerror}", path=parent) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing drops the lock


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _clean_stale(parent_fd, parent):
    """Delete staging folders of dead writers; put back a target a two-rename swap left out.

    Called under the parent's lock, so no live writer of ours is between its checks and swap.
    A name whose PID still runs (or was reused) is left alone: wrongly keeping one is harmless.
    """
    for entry in os.listdir(parent_fd):
        m = _STAGE.match(entry)
        if not m or int(m["pid"]) == os.getpid() or _pid_alive(int(m["pid"])):
            continue
        if m["kind"] == "old" and not _lexists(parent_fd, m["name"]):
            # Gone already (another cleaner got there first) is as good as put back.
            with contextlib.suppress(FileNotFoundError):
                os.rename(entry, m["name"], src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            continue
        _remove_tree(parent / entry)


def _lexists(dir_fd, name):
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove_tree(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def _write_errors(path):
    """OSError while writing -> one-line UserError naming the path; the caller cleans up."""
    previous = _ignore_sigxfsz()
    try:
        yield
    except OSError as exc:
        why = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file size limit reached",
               errno.EDQUOT: "disk quota exceeded"}.get(exc.errno, exc.strerror or str(exc))
        raise UserError(f"cannot write: {why}", path=path) from None
    except UnicodeEncodeError as exc:
        raise UserError(f"cannot write: text holds a character UTF-8 cannot encode at {exc.start}", path=path) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGXFSZ, previous)


def _ignore_sigxfsz():
    # Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default action kills the process
    # mid-write; ignored, the write fails with EFBIG instead and we can clean up.
    if not hasattr(signal, "SIGXFSZ") or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _write_file(path, text, executable):
    """Create path (which must not exist) with text, flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fchmod(fh.fileno(), 0o755 if executable else 0o644)
        os.fsync(fh.fileno())


def _fsync_dir(path):
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _kind(mode):
    # "a regular file" first: -o onto a file said it "exists and is not a regular file"
    for test, word in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a fifo"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "not a regular file"


def _parent_of(path):
    parent = path.parent
    try:
        st = os.stat(parent)
    except FileNotFoundError:
        raise UserError("directory does not exist", path=parent) from None
    except NotADirectoryError:
        raise UserError("a path component is a file, not a directory", path=parent) from None
    except OSError as exc:
        raise UserError(f"cannot use folder: {exc.strerror}", path=parent) from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError("is a file, not a directory", path=parent)
    return parent


def write_one(path, text, executable=False):
    """Create or replace one regular file atomically: readers see the old or the new bytes.

    Only a regular file is replaced. A directory, device, fifo or socket at path is refused, and
    so is a symbolic link: replacing the link would silently detach whatever it points to, and
    writing through it would write outside the folder the user named.
    """
    path = _file_path(path)
    parent = _parent_of(path)
    _refuse_non_regular(path)
    tmp = parent / f".{path.name}.ftrecipes-{os.getpid()}-new"
    try:
        with _write_errors(path):
            _clean_leftover(tmp)
            _write_file(tmp, text, executable)
            with _locked(parent) as parent_fd:
                _clean_stale(parent_fd, parent)
                _refuse_non_regular(path)  # again: something may have appeared while we wrote
                os.replace(tmp, path)
            _fsync_dir(parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _file_path(given):
    """given as an absolute path to a file. Not os.path.abspath: it drops a trailing "/" and folds
    "x/.." away as text, so "x.svg/" became a file x.svg and "missing/../c.svg" or "link/../c.svg"
    was written where the kernel would not put it (no folder missing/, beside the link rather than
    beside its target)."""
    text = os.fspath(given)
    if not text:
        raise UserError("an empty file name")
    refuse_dash(text, "standard output")
    if text.endswith(os.sep) or os.path.basename(text) in (".", ".."):
        raise UserError("names a folder, not a file; give the file's name", path=text)
    # an absolute path needs no working folder (it may have been deleted under a shell)
    return Path(text) if os.path.isabs(text) else Path(os.getcwd(), text)


def _clean_leftover(tmp):
    # Our own PID's name from an earlier call that was interrupted in this same process.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def _refuse_non_regular(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", path=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"is {_kind(st.st_mode)}; refusing to replace it with a file", path=path)


def write_all(directory, files, force=False, exact=False, tree=False):
    """Write {name: (text, executable)} into directory as one all-or-nothing swap.

    With tree, a name may be a relative path of plain parts ("rendered/ds.json"): a whole
    folder tree (a recipe) then appears at once or not at all.

    Without force, a name that already exists in directory is refused before anything is
    written. With force, those files are replaced; other entries of an existing directory are
    carried over (hard links, or copies where linking fails) unless exact, in which case the
    directory ends up holding exactly the files given. Returns the paths written.
    """
    refuse_dash(os.fspath(directory), "standard output", "folder")
    directory = _resolve_target(Path(os.path.abspath(directory)))
    if not directory.name:
        raise UserError("cannot replace the root folder; name a folder inside it", path=directory)
    for name in files:
        # Names come from recipe.yaml, which arrives in pull requests: one plain name each.
        parts = name.split("/") if tree else [name]
        if any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
            raise UserError(f"file name {name!r} is not a plain file name", path=directory)
    created = _make_parents(directory.parent)
    staged = directory.parent / f".{directory.name}.ftrecipes-{os.getpid()}-new"
    try:
        parent = _parent_of(directory)
        _remove_tree(staged)
        with _write_errors(directory):
            os.mkdir(staged)
        for name, (text, executable) in files.items():
            with _write_errors(directory / name):
                os.makedirs((staged / name).parent, exist_ok=True)
                _write_file(staged / name, text, executable)
        _fsync_dir(staged)
        with _write_errors(directory), _locked(parent) as parent_fd:
            _clean_stale(parent_fd, parent)
            _swap(parent_fd, directory, staged, files, force, exact)
    except BaseException:
        _remove_tree(staged)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    _fsync_dir(parent)
    # After an exchange the staging name holds the old tree; after two renames, the -old name.
    _remove_tree(staged)
    _remove_tree(directory.parent / f".{directory.name}.ftrecipes-{os.getpid()}-old")
    return [directory / name for name in files]


def _make_parents(folder):
    """Create missing folders above the target; the list created, so a failure can undo it."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        try:
            os.mkdir(each)
        except FileExistsError:
            continue
        except OSError as exc:
            for done in reversed(missing[missing.index(each) + 1:]):
                with contextlib.suppress(OSError):
                    os.rmdir(done)
            raise UserError(f"cannot create folder: {exc.strerror}", path=each) from None
    return list(reversed(missing))


def _resolve_target(directory):
    # -o LINK where LINK points to a folder writes into that folder: the swap happens where the
    # files live, and the link keeps pointing at them.
    try:
        is_link = stat.S_ISLNK(os.lstat(directory).st_mode)
    except FileNotFoundError:
        return directory
    except OSError as exc:  # a name over 255 bytes (ENAMETOOLONG), a search-denied folder
        raise UserError(f"cannot write: {exc.strerror}", path=directory) from None
    if is_link:
        if not directory.is_dir():
            raise UserError("is a symbolic link to something that is not a directory", path=directory)
        return Path(os.path.realpath(directory))
    return directory


def _swap(parent_fd, directory, staged, files, force, exact):
    name = directory.name
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is None:
        _rename(parent_fd, staged.name, name, _RENAME_NOREPLACE)
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"exists and is {_kind(st.st_mode)}, not a directory", path=directory)
    _check_clashes(directory, files, force)
    if not exact:
        _carry_over(directory, staged, set(files))
    os.chmod(staged, stat.S_IMODE(st.st_mode))
    old = f".{name}.ftrecipes-{os.getpid()}-old"
    try:
        _rename(parent_fd, staged.name, name, _RENAME_EXCHANGE)
    except NotImplementedError:
        os.rename(name, old, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        try:
            os.rename(staged.name, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            os.rename(old, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            raise


def _rename(parent_fd, src, dst, flags):
    try:
        _renameat2(parent_fd, src, dst, flags)
    except NotImplementedError:
        if flags == _RENAME_EXCHANGE:
            raise
        # No RENAME_NOREPLACE: we checked under the lock that dst is absent; rename() would
        # still replace an empty folder created since by a writer that does not take our lock.
        os.rename(src, dst, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except FileExistsError:
        raise UserError("was created by another process while rendering; nothing written", path=dst) from None


def _check_clashes(directory, files, force):
    clashes = []
    for name in files:
        try:
            st = os.lstat(directory / name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UserError(f"cannot read: {exc.strerror}", path=directory / name) from None
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"is {_kind(st.st_mode)}; refusing to replace it with a file", path=directory / name)
        clashes.append(name)
    if clashes and not force:
        raise UserError(f"would overwrite {', '.join(clashes)}; use --force to replace", path=directory)


def _carry_over(src, dst, skip=()):
    """Recreate src's other entries in dst: folders, hard links to files, copied symlinks."""
    try:
        entries = list(os.scandir(src))
    except OSError as exc:
        raise UserError(f"cannot read folder: {exc.strerror}", path=src) from None
    for entry in entries:
        if entry.name in skip:
            continue
        target = Path(dst) / entry.name
        with _write_errors(Path(src) / entry.name):
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(entry.path), target)
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(target, stat.S_IMODE(st.st_mode) | 0o700)
                _carry_over(entry.path, target)
                os.chmod(target, stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                _link_or_copy(entry.path, target)
            else:
                raise UserError(f"is {_kind(st.st_mode)}; cannot carry it over into the new folder", path=entry.path)


def _link_or_copy(src, dst):
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EMLINK, errno.EXDEV, errno.EACCES):
            raise
        shutil.copy2(src, dst, follow_symlinks=False)
