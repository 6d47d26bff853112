"""Reading inputs and writing outputs, so that a crash never leaves a half-written file.

Every write goes to a temporary file in the target's folder and is moved into
place with ``os.replace``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile

from ddpify.cli.exits import ExitCode, Failure


def read_input(src: str) -> bytes:
    """The bytes of a script (``-``: stdin)."""
    if src == "-":
        return sys.stdin.buffer.read()
    try:
        with open(src, "rb") as file:
            return file.read()
    except OSError as exc:
        raise Failure(f"{src}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def read_existing(path: str) -> bytes | None:
    """The bytes of an output file, or None when it does not exist."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def write_if_changed(path: str, data: bytes, *, current: bytes | None, make_folders: bool = False) -> None:
    """Write ``data`` to ``path`` unless the file already holds exactly these bytes."""
    if current is None:
        current = read_existing(path)
    if current == data:
        return
    try:
        if make_folders:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomically(path, data)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def write_atomically(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one step; on failure nothing is left behind.

    The temporary file lives in the target's folder so that ``os.replace`` is a
    rename on one file system.  A symlink is followed (its target is rewritten),
    and the file gets ``mode``, or else keeps an existing file's permission bits.
    """
    target = os.path.realpath(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
