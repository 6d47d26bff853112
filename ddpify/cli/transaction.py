"""The files of one program written as one transaction: every file, or none.

A program converted with ``--in-place`` or ``-o DIR/`` changes several files;
with some of them new and the others old it would not run (a module calls
``dist.get_rank()`` that the entry script never set up). So
:func:`write_all`:

1. leaves out the files that already hold their new text;
2. checks, before anything is written, that every target can be written:
   a regular file or nothing, in a folder that exists (or can be made) and
   that the user may write to;
3. writes every new text to a temporary file next to its target (folders made
   as needed), each one flushed to disk;
4. moves them into place one by one, each old file kept under a temporary name
   (a hard link, or a copy where links are not possible) until the end; a file
   with several hard links is written through instead (``--in-place``), its old
   text kept in memory;
5. removes the kept old files.

If any step fails, or SIGINT or SIGTERM arrives (the signals are held back
while it runs, and looked at between steps), everything done is undone: the
old files are put back, new ones and temporary files removed, folders it made
removed again. Then the failure (exit 2) or the interruption says that nothing
was written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpify.cli import signals
from ddpify.cli.exits import Failure, Interrupted
from ddpify.cli.files import check_target, hard_links, read_existing, write_through

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence


@dataclass(frozen=True)
class Write:
    """One file of a transaction: its path as the user sees it and its new bytes.

    ``current`` is the file's text when the caller knows it (the input itself, with
    ``--in-place``); ``in_place`` writes through a file with several hard links, so that
    every link sees the new text.
    """

    path: str
    data: bytes
    current: bytes | None = None
    in_place: bool = False
    make_folders: bool = False


@dataclass
class _Step:
    """What was done for one file, so that it can be undone."""

    write: Write
    real: str
    temporary: str | None = None
    kept: str | None = None  # the old file, under a temporary name
    old: bytes | None = None  # the old text of a file written through
    existed: bool = False
    done: bool = False


@dataclass
class _Transaction:
    steps: list[_Step]
    folders: list[str] = field(default_factory=list)  # made here, deepest last


class Aborted(Exception):
    """A stop signal arrived during the writes (its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def write_all(writes: Sequence[Write]) -> list[str]:
    """Write every file of ``writes`` or none; the paths written (those whose text changed).

    Raises ``Failure`` (exit 2) when a file cannot be written, ``Interrupted`` when a stop
    signal arrives; either way nothing is left changed.
    """
    changed = [w for w in writes if _current(w) != w.data]
    if not changed:
        return []
    for write in changed:
        _check_writable(write)
    transaction = _Transaction([_Step(w, os.path.realpath(w.path)) for w in changed])
    with signals.blocked():
        try:
            _prepare(transaction)
            _commit(transaction)
            _stop_if_signalled()
        except BaseException as exc:
            problems = _undo(transaction)
            signum = exc.signum if isinstance(exc, Aborted) else signals.pending()
            _raise(exc, signum, problems, several=len(changed) > 1)
        _forget_kept(transaction)
    return [step.write.path for step in transaction.steps]


def _current(write: Write) -> bytes | None:
    if write.current is not None:
        return write.current
    return read_existing(write.path, limit=len(write.data) + 1)


def _check_writable(write: Write) -> None:
    """Raise ``Failure`` unless ``write`` can be carried out: checked before anything is written."""
    path = write.path
    check_target(path, hint="give a file or -o -", make_folders=write.make_folders)
    real = os.path.realpath(path)
    if os.path.lexists(real) and write.in_place and hard_links(real) > 1:
        if not os.access(real, os.W_OK):
            raise Failure(f"cannot write {path}: {os.strerror(errno.EACCES)}")
        return
    folder = os.path.dirname(real) or "."
    while not os.path.lexists(folder):  # made when written: the nearest folder that exists decides
        folder = os.path.dirname(folder) or "."
    if not os.path.isdir(folder):
        raise Failure(f"cannot write {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Failure(f"cannot write {path}: {os.strerror(errno.EACCES)} ({folder})")


def _prepare(transaction: _Transaction) -> None:
    """Every new text in a temporary file next to its target, flushed to disk."""
    for step in transaction.steps:
        with _naming(step):
            _prepare_one(step, transaction.folders)
        _stop_if_signalled()


def _prepare_one(step: _Step, folders: list[str]) -> None:
    folder = os.path.dirname(step.real) or "."
    if step.write.make_folders:
        _make_folders(folder, folders)
    step.existed = os.path.lexists(step.real)
    if step.existed and step.write.in_place and hard_links(step.real) > 1:
        return  # written through in the commit
    existing = os.stat(step.real) if step.existed else None
    fd, step.temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(step.real)}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as file:
        file.write(step.write.data)
        file.flush()
        os.fsync(file.fileno())
    if existing is not None:
        with contextlib.suppress(PermissionError):
            os.chown(step.temporary, existing.st_uid, existing.st_gid)
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    os.chmod(step.temporary, mode)


def _commit(transaction: _Transaction) -> None:
    """Each temporary file moved into place, the old file kept until the end."""
    for step in transaction.steps:
        with _naming(step):
            if step.temporary is None:  # several hard links: written through
                with open(step.real, "rb") as file:
                    step.old = file.read()
                step.done = True
                write_through(step.real, step.write.data)
            else:
                if step.existed:
                    step.kept = _keep(step.real)
                os.replace(step.temporary, step.real)
                step.temporary = None
                step.done = True
        _stop_if_signalled()


@contextlib.contextmanager
def _naming(step: _Step) -> Iterator[None]:
    """An ``OSError`` while writing ``step`` becomes a ``Failure`` that names the file as the user does."""
    try:
        yield
    except OSError as exc:
        raise Failure(f"cannot write {step.write.path}: {exc.strerror or exc}") from exc


def _keep(path: str) -> str:
    """The file at ``path`` under a new name in its folder: a hard link, or a copy."""
    folder, name = os.path.split(path)
    for _ in range(100):
        kept = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.old")
        try:
            os.link(path, kept)
            return kept
        except FileExistsError:
            continue
        except OSError:  # no hard links here (or not ours to link): a copy
            fd, kept = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".old")
            with os.fdopen(fd, "wb") as copy, open(path, "rb") as original:
                copy.write(original.read())
                copy.flush()
                os.fsync(copy.fileno())
            os.chmod(kept, stat.S_IMODE(os.stat(path).st_mode))
            return kept
    raise FileExistsError(path)


def _undo(transaction: _Transaction) -> list[str]:
    """Put back every old file, remove new files, temporary files and new folders; what could not be undone."""
    problems: list[str] = []
    for step in reversed(transaction.steps):
        try:
            if step.done and step.old is not None:
                write_through(step.real, step.old)
            elif step.done and step.kept is not None:
                os.replace(step.kept, step.real)
                step.kept = None
            elif step.done and not step.existed:
                os.unlink(step.real)
        except OSError as exc:
            problems.append(f"{step.write.path} ({exc.strerror or exc})")
        for leftover in (step.temporary, step.kept):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
    for folder in reversed(transaction.folders):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    return problems


def _forget_kept(transaction: _Transaction) -> None:
    for step in transaction.steps:
        if step.kept is not None:
            with contextlib.suppress(OSError):
                os.unlink(step.kept)


def _make_folders(folder: str, made: list[str]) -> None:
    missing: list[str] = []
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for path in reversed(missing):
        os.mkdir(path)
        made.append(path)


def _stop_if_signalled() -> None:
    signum = signals.pending()
    if signum is not None:
        raise Aborted(signum)


def _raise(exc: BaseException, signum: int | None, problems: list[str], *, several: bool) -> None:
    """Stop as the signal says, or raise the failure, saying what is left written: nothing, unless
    an old file could not be put back."""
    restored = "nothing written" if not problems else f"could not restore {', '.join(problems)}"
    if isinstance(exc, Interrupted):  # a second signal, delivered just before the writes held them back
        raise Interrupted(exc.signum, f"interrupted: {restored}") from None
    if signum is not None:
        signals.stop(signum, f"interrupted: {restored}")
    if isinstance(exc, Failure):
        # (one file: a failed write never leaves anything, as the exit code says)
        raise Failure(f"{exc.message}; {restored}" if several or problems else exc.message, exc.code) from None
    raise exc


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
