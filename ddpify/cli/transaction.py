"""The files of one program written as one transaction: every file, or none.

A program converted with ``--in-place`` or ``-o DIR/`` changes several files;
with some of them new and the others old it would not run (a module calls
``dist.get_rank()`` that the entry script never set up). So
:func:`write_all`, holding the lock of the journal's folder
(:mod:`ddpify.cli.journal`; a run writing there already is waited for):

1. finishes or rolls back what a run stopped there left (its journal);
2. leaves out the files that already hold their new text;
3. checks, before anything is written, that every target can be written:
   a regular file or nothing, in a folder that exists (or can be made) and
   that the user may write to; and that every input it replaces still holds
   the text this run read (an editor may have saved it meanwhile);
4. writes the journal, then every new text to a temporary file next to its
   target (folders made as needed), each one flushed to disk;
5. moves them into place one by one, each old file kept under a temporary name
   (a hard link, or a copy where links are not possible) until the end, each
   input checked again just before it is replaced; a file with several hard
   links is written through instead (``--in-place``), its old text kept in a
   copy;
6. marks the journal done, removes the kept old files, then the journal.

If any step fails, or SIGINT or SIGTERM arrives (the signals are held back
while it runs, and looked at between steps), everything done is undone: the
old files are put back, new ones and temporary files removed, folders it made
removed again. Then the failure (exit 2) or the interruption says that nothing
was written. A run killed outright leaves the journal, which the next run
reads (step 1).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpify.cli import journal, signals
from ddpify.cli.exits import Failure, Interrupted
from ddpify.cli.files import check_target, hard_links, read_existing, write_through

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence


@dataclass(frozen=True)
class Write:
    """One file of a transaction: its path as the user sees it and its new bytes.

    ``current`` is the file's text when the caller knows it (the input itself, with
    ``--in-place``); ``in_place`` writes through a file with several hard links, so that
    every link sees the new text. ``read`` is the text this run read from the file and
    converted: the file must still hold it when it is replaced.
    """

    path: str
    data: bytes
    current: bytes | None = None
    in_place: bool = False
    make_folders: bool = False
    read: bytes | None = None


@dataclass
class _Step:
    """What was done for one file, so that it can be undone."""

    write: Write
    real: str
    temporary: str | None = None  # the new text, until it is moved into place
    kept: str | None = None  # the name the old file is kept under, until the end
    kept_made: bool = False
    through: bool = False  # written through (several hard links): the old text is kept in a copy
    old: bytes | None = None  # the old text of a file written through
    existed: bool = False
    done: bool = False


@dataclass
class _Transaction:
    steps: list[_Step]
    home: str  # the folder of the journal
    about: str  # what is written, for the journal's messages
    folders: list[str] = field(default_factory=list)  # to make, deepest last
    made: list[str] = field(default_factory=list)  # made so far

    def record(self, state: str) -> None:
        entries = [
            journal.Entry(step.real, step.temporary, step.kept, journal.digest(step.write.data)) for step in self.steps
        ]
        try:
            journal.write(self.home, state, entries, self.folders, self.about)
        except OSError as exc:
            path = os.path.relpath(os.path.join(self.home, journal.JOURNAL))
            raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc


class Aborted(Exception):
    """A stop signal arrived during the writes (its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Changed(Failure):
    """An input changed on disk after this run read it."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path} changed on disk while ddpify was converting it; nothing written, so that the change is kept; "
            "run ddpify again to convert the new text"
        )


def write_all(writes: Sequence[Write], *, home: str | None = None) -> list[str]:
    """Write every file of ``writes`` or none; the paths written (those whose text changed).

    ``home`` is the folder whose journal and lock the writes use (default: the first
    target's folder); :func:`ddpify.cli.journal.recover_around` looks for it there.
    Raises ``Failure`` (exit 2) when a file cannot be written or an input changed since it
    was read, ``Interrupted`` when a stop signal arrives; either way nothing is left changed.
    """
    if not writes:
        return []
    folder = _existing_folder(os.path.realpath(home if home is not None else os.path.dirname(writes[0].path) or "."))
    with journal.locked(folder):
        journal.recover(folder)
        changed = [w for w in writes if _current(w) != w.data]
        if not changed:
            return []
        for write in changed:
            _check_writable(write)
            _check_unchanged(write, write.path)
        about = changed[-1].path if len(changed) == 1 else f"{changed[-1].path} and {len(changed) - 1} more"
        transaction = _Transaction([_Step(w, os.path.realpath(w.path)) for w in changed], folder, about)
        with signals.blocked():
            try:
                _plan(transaction)
                transaction.record(journal.PREPARE)
                _prepare(transaction)
                transaction.record(journal.COMMIT)
                _commit(transaction)
            except BaseException as exc:
                problems = _undo(transaction)
                if not problems:
                    with contextlib.suppress(OSError):
                        journal.remove(folder)
                signum = exc.signum if isinstance(exc, Aborted) else signals.pending()
                _raise(exc, signum, problems)
            _finish(transaction)
            late = signals.pending()
            if late is not None:  # every file is written: the run stops once they are reported
                signals.stop_or_defer(late)
    return [step.write.path for step in transaction.steps]


def _existing_folder(path: str) -> str:
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _current(write: Write) -> bytes | None:
    """What the target holds: an input read this run is read again (another program of the run may
    have written it already)."""
    if write.current is not None and write.read is None:
        return write.current
    return read_existing(write.path, limit=len(write.data) + 1)


def _check_unchanged(write: Write, real: str) -> None:
    """Raise ``Changed`` when the input ``write`` replaces no longer holds the text this run read."""
    if write.read is not None and read_existing(real, limit=len(write.read) + 1) != write.read:
        raise Changed(write.path)


def _check_writable(write: Write) -> None:
    """Raise ``Failure`` unless ``write`` can be carried out: checked before anything is written."""
    path = write.path
    check_target(path, hint="give a file or -o -", make_folders=write.make_folders)
    real = os.path.realpath(path)
    if os.path.lexists(real) and write.in_place and hard_links(real) > 1:
        if not os.access(real, os.W_OK):
            raise Failure(f"cannot write {path}: {os.strerror(errno.EACCES)}; nothing written")
        return
    folder = os.path.dirname(real) or "."
    while not os.path.lexists(folder):  # made when written: the nearest folder that exists decides
        folder = os.path.dirname(folder) or "."
    if not os.path.isdir(folder):
        raise Failure(f"cannot write {path}: {folder} is not a folder; nothing written")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Failure(f"cannot write {path}: {os.strerror(errno.EACCES)} ({folder}); nothing written")


def _plan(transaction: _Transaction) -> None:
    """The names of every file the transaction makes, and the folders it makes, before any is made:
    the journal lists them."""
    for step in transaction.steps:
        folder = os.path.dirname(step.real) or "."
        if step.write.make_folders:
            missing: list[str] = []
            while folder and not os.path.lexists(folder) and folder not in transaction.folders:
                missing.append(folder)
                folder = os.path.dirname(folder)
            transaction.folders += reversed(missing)
        step.existed = os.path.lexists(step.real)
        step.through = step.existed and step.write.in_place and hard_links(step.real) > 1
        token = secrets.token_hex(4)
        step.temporary = None if step.through else journal.leftover_name(step.real, token, "tmp")
        step.kept = journal.leftover_name(step.real, token, "old") if step.existed else None


def _prepare(transaction: _Transaction) -> None:
    """Every new text in a temporary file next to its target, flushed to disk."""
    for folder in transaction.folders:
        try:
            os.mkdir(folder)
        except OSError as exc:
            raise Failure(f"cannot write {folder}: {exc.strerror or exc}") from exc
        transaction.made.append(folder)
    for step in transaction.steps:
        with _naming(step):
            _prepare_one(step)
        _stop_if_signalled()


def _prepare_one(step: _Step) -> None:
    if step.through:  # written through in the commit: its old text is kept in a copy now
        assert step.kept is not None
        with open(step.real, "rb") as file:
            step.old = file.read()
        _write_new(step.kept, step.old, stat.S_IMODE(os.stat(step.real).st_mode))
        step.kept_made = True
        return
    assert step.temporary is not None
    existing = os.stat(step.real) if step.existed else None
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    _write_new(step.temporary, step.write.data, mode)
    if existing is not None:
        with contextlib.suppress(PermissionError):
            os.chown(step.temporary, existing.st_uid, existing.st_gid)
        os.chmod(step.temporary, mode)


def _write_new(path: str, data: bytes, mode: int) -> None:
    """A new file at ``path`` (never an existing one) holding ``data``, flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.chmod(path, mode)


def _commit(transaction: _Transaction) -> None:
    """Each temporary file moved into place, the old file kept until the end. A stop signal is looked
    at between files: once the last one is in place, the write is complete, and the run stops after it."""
    for index, step in enumerate(transaction.steps):
        if index:
            _stop_if_signalled()
        with _naming(step):
            _check_unchanged(step.write, step.real)
            if step.through:
                step.done = True
                write_through(step.real, step.write.data)
            else:
                assert step.temporary is not None
                if step.existed:
                    assert step.kept is not None
                    _keep(step.real, step.kept)
                    step.kept_made = True
                os.replace(step.temporary, step.real)
                step.temporary = None
                step.done = True
    for folder in {os.path.dirname(step.real) for step in transaction.steps}:
        journal.sync_folder(folder)


def _finish(transaction: _Transaction) -> None:
    """Every file in place: the journal marked done, then the kept old files and the journal removed."""
    with contextlib.suppress(OSError):
        transaction.record(journal.DONE)
    for step in transaction.steps:
        if step.kept_made and step.kept is not None:
            with contextlib.suppress(OSError):
                os.unlink(step.kept)
    with contextlib.suppress(OSError):
        journal.remove(transaction.home)


@contextlib.contextmanager
def _naming(step: _Step) -> Iterator[None]:
    """An ``OSError`` while writing ``step`` becomes a ``Failure`` that names the file as the user does."""
    try:
        yield
    except OSError as exc:
        raise Failure(f"cannot write {step.write.path}: {exc.strerror or exc}") from exc


def _keep(path: str, kept: str) -> None:
    """The file at ``path`` also under the name ``kept`` in its folder: a hard link, or a copy."""
    try:
        os.link(path, kept)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (or not ours to link): a copy, complete before it has the name
        partial = f"{kept}.part"
        with open(path, "rb") as original:
            _write_new(partial, original.read(), stat.S_IMODE(os.stat(path).st_mode))
        os.replace(partial, kept)


def _undo(transaction: _Transaction) -> list[str]:
    """Put back every old file, remove new files, temporary files and new folders; what could not be undone."""
    problems: list[str] = []
    for step in reversed(transaction.steps):
        try:
            if step.done and step.old is not None:
                write_through(step.real, step.old)
            elif step.done and step.kept_made and step.kept is not None:
                os.replace(step.kept, step.real)
                step.kept_made = False
            elif step.done and not step.existed:
                os.unlink(step.real)
        except OSError as exc:
            problems.append(f"{step.write.path} ({exc.strerror or exc})")
        for leftover in (step.temporary, step.kept if step.kept_made else None):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
    for folder in reversed(transaction.made):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    return problems


def _stop_if_signalled() -> None:
    signum = signals.pending()
    if signum is not None:
        raise Aborted(signum)


def _raise(exc: BaseException, signum: int | None, problems: list[str]) -> None:
    """Stop as the signal says, or raise the failure, saying what is left written: nothing, unless
    an old file could not be put back."""
    restored = "nothing written" if not problems else f"could not restore {', '.join(problems)}"
    if isinstance(exc, Interrupted):  # a second signal, delivered just before the writes held them back
        raise Interrupted(exc.signum, f"interrupted: {restored}") from None
    if signum is not None:
        signals.stop(signum, f"interrupted: {restored}")
    if isinstance(exc, Changed) and not problems:
        raise exc from None
    if isinstance(exc, Failure):
        raise Failure(f"{exc.message}; {restored}", exc.code) from None
    raise exc


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
