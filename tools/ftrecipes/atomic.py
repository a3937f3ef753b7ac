"""Write files so that a crash or an error never leaves half of one behind."""

import os
import tempfile
from pathlib import Path

from .errors import UserError


def write_all(directory, files, force=False):
    """Write {name: (text, executable)} into directory; all-or-nothing on refusals.

    Existing files are refused unless force, and that check happens before the
    first write, so a refusal leaves the directory exactly as it was.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserError("exists and is not a directory", path=directory)
    if not force:
        clashes = [name for name in files if (directory / name).exists()]
        if clashes:
            raise UserError(f"would overwrite {', '.join(clashes)}; use --force to replace", path=directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create directory: {exc.strerror}", path=directory) from None
    written = []
    for name, (text, executable) in files.items():
        write_one(directory / name, text, executable)
        written.append(directory / name)
    return written


def write_one(path, text, executable=False):
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", path=path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
