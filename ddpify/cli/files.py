"""Reading inputs and writing outputs safely.

* Standard streams: a stream closed when ddpify starts is held open on
  ``/dev/null`` (:func:`guard_standard_streams`), so that no file opened later
  takes its number and receives what was meant for it; reading a closed stdin
  or writing to a closed stdout is then an error of its own.
* Inputs are read up to a size limit (``--max-size``), checked before they are
  read whole: training scripts are small, and a huge file would only cost
  minutes and memory before being refused.
* Only regular files are written or read back: a device, FIFO or socket named
  as an output is refused before anything is read from or written to it.
* Every write goes to a temporary file in the target's folder and is moved into
  place with ``os.replace``, so a crash never leaves a half-written file.  The
  replaced file's permission bits, owner and group are kept (owner and group
  as far as the user may set them).  ``--in-place`` writes through a file with
  several hard links instead, as black and ruff do, so the links stay one file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import sys
import tempfile

from ddpify.cli.exits import Failure

DEFAULT_MAX_SIZE = 1024 * 1024
STDIN, STDOUT, STDERR = 0, 1, 2
_closed: set[int] = set()


def guard_standard_streams() -> None:
    """Hold each closed standard stream open on ``/dev/null`` and remember which were closed."""
    _closed.clear()
    for fd in (STDIN, STDOUT, STDERR):
        try:
            os.fstat(fd)
        except OSError:
            _closed.add(fd)
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    # Python leaves sys.stderr None when fd 2 was closed at start, and print()
    # to None prints on stdout: every message must stay off the output.
    if sys.stderr is None:
        sys.stderr = open(STDERR, "w", closefd=False)  # noqa: SIM115 - lives as long as the process
    if sys.stdout is None:
        sys.stdout = open(STDOUT, "w", closefd=False)  # noqa: SIM115


def too_large(name: str, max_size: int, size: int | None = None) -> Failure:
    amount = (
        f"{size} bytes, more than the limit of {max_size}"
        if size is not None
        else f"more than the limit of {max_size} bytes"
    )
    return Failure(f"{name}: {amount}; raise it with --max-size BYTES")


def read_input(src: str, *, max_size: int = DEFAULT_MAX_SIZE, regular_only: bool = False) -> bytes:
    """The bytes of a script (``-``: stdin), at most ``max_size`` of them; with ``regular_only``,
    anything but a regular file is refused without waiting on it (a FIFO that became a module)."""
    if src == "-":
        if STDIN in _closed or sys.stdin is None:
            raise Failure("<stdin>: stdin is closed")
        data = sys.stdin.buffer.read(max_size + 1)
        if len(data) > max_size:
            raise too_large("<stdin>", max_size)
        return data
    try:
        flags = os.O_RDONLY | (os.O_NONBLOCK if regular_only else 0)
        with os.fdopen(os.open(src, flags), "rb") as file:
            info = os.fstat(file.fileno())
            if regular_only and not stat.S_ISREG(info.st_mode):
                raise Failure(f"{src}: not a regular file ({describe_kind(info.st_mode)})")
            size = info.st_size
            if size > max_size:
                raise too_large(src, max_size, size)
            data = file.read(max_size + 1)
    except PermissionError as exc:
        raise Failure(f"{src}: {exc.strerror or exc}; nothing written") from exc
    except OSError as exc:
        raise Failure(f"{src}: {exc.strerror or exc}") from exc
    if len(data) > max_size:
        raise too_large(src, max_size)
    return data


def describe_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "a special file"


def check_target(path: str, *, hint: str, make_folders: bool = False) -> None:
    """Raise ``Failure`` unless ``path`` can become a regular file: missing in an existing folder, or a regular file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        folder = os.path.dirname(path) or "."
        if not make_folders and not os.path.isdir(folder):
            raise Failure(f"cannot write {path}: {os.strerror(errno.ENOENT)}") from None
        _check_folders(folder)
        return
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(info.st_mode):
        raise Failure(f"{path}: Is a directory; {path.rstrip('/')}/ (ending with a slash) writes into it")
    if not stat.S_ISREG(info.st_mode):
        raise Failure(f"{path}: not a regular file ({describe_kind(info.st_mode)}); {hint}")


def _check_folders(folder: str) -> None:
    """Raise ``Failure`` when a folder on the way to an output is a symlink that leads nowhere:
    making it would create whatever the link names, somewhere else."""
    current = folder
    while current and current not in (".", os.sep):
        if os.path.islink(current) and not os.path.exists(current):
            raise Failure(
                f"{current}/: a symbolic link to a missing folder ({os.readlink(current)}); create that folder "
                "or choose another -o folder"
            )
        current = os.path.dirname(current)


def read_existing(path: str, *, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of an output file, or None when it does not exist; only a regular file is read."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise Failure(f"{path}: not a regular file ({describe_kind(info.st_mode)}); give a file or -o -")
        # O_NONBLOCK: should the path become a FIFO meanwhile, opening it does not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Failure(f"{path}: not a regular file; give a file or -o -")
        return file.read(limit)


def write_if_changed(
    path: str, data: bytes, *, current: bytes | None, make_folders: bool = False, keep_links: bool = False
) -> None:
    """Write ``data`` to ``path`` unless the file already holds exactly these bytes."""
    if current is None:
        current = read_existing(path, limit=len(data) + 1)
    if current == data:
        return
    try:
        if make_folders:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if keep_links and hard_links(path) > 1:
            write_through(path, data)
        else:
            write_atomically(path, data)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc


def hard_links(path: str) -> int:
    try:
        return os.stat(path).st_nlink
    except OSError:
        return 1


def write_through(path: str, data: bytes) -> None:
    """Rewrite the file itself, so that every hard link to it sees the new content."""
    with open(path, "r+b") as file:
        file.write(data)
        file.truncate()
        file.flush()
        os.fsync(file.fileno())


def write_atomically(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one step; on failure nothing is left behind.

    The temporary file lives in the target's folder so that ``os.replace`` is a
    rename on one file system.  A symlink is followed (its target is rewritten),
    and the file gets ``mode``, or else keeps an existing file's permission bits;
    an existing file's owner and group are kept where the user may set them.
    """
    target = os.path.realpath(path)
    try:
        existing: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        existing = None
    if mode is None:
        mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if existing is not None:
            with contextlib.suppress(PermissionError):
                os.chown(temporary, existing.st_uid, existing.st_gid)
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
    """Write all of ``data`` on stdout, also when stdout is a non-blocking pipe; raises ``Failure`` when it cannot."""
    if STDOUT in _closed:
        raise Failure("cannot write to stdout: stdout is closed")
    try:
        sys.stdout.flush()
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # replaced by an in-memory stream
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        _write_all(fd, data)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise Failure(f"cannot write to stdout: {exc.strerror or exc}") from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]
