"""The journal of a write in progress, and the lock of the folder it is written from.

A program's files are replaced one by one (:mod:`ddpify.cli.transaction`);
a run killed halfway (SIGKILL, out of memory, power loss) can undo nothing
itself. So before it touches a file, a run writes a journal,
``.ddpify-journal`` in one folder (the input's folder with ``--in-place``, the
output folder with ``-o DIR/``), that lists each target, the temporary file
holding its new text, the name under which its old file is kept, and a digest
of the new text. The journal moves through three states, each written whole
(a temporary file, flushed, renamed over the last):

``prepare``   new texts are being written to temporary files: no target has
              changed yet;
``commit``    targets are being replaced: some may hold their new text;
``done``      every target holds its new text: only the kept old files and
              the journal remain to be removed.

The next run that reads or writes below that folder (:func:`recover_around`,
before it reads any input) finishes the write (``done``) or rolls it back
(``prepare``, ``commit``), and says so in one line. Rolling back puts a kept
old file back only over a target that still holds the new text the journal
names; a file the user changed since is left alone, and its old text kept.

A run holds an exclusive lock (``flock``) on the journal's folder while it
writes there or recovers a journal, so that two runs into one folder take
turns: the second waits, and says so, rather than interleaving its files with
the first one's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpify.cli.exits import Failure
from ddpify.cli.files import write_through
from ddpify.cli.report import error, plural

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

JOURNAL = ".ddpify-journal"
VERSION = 1
PREPARE, COMMIT, DONE = "prepare", "commit", "done"
# The names a transaction gives the files it makes beside a target: `.train.py.1a2b3c4d.tmp`.
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.(tmp|old)")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One file of a journal: where it goes, the files made beside it, and its new text's digest."""

    target: str  # real path
    temporary: str | None  # the new text, until it is moved into place; None: written through
    kept: str | None  # the old file under a temporary name; None: there was no old file
    new: str  # sha256 of the new text

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "temporary": self.temporary, "kept": self.kept, "new": self.new}


def leftover_name(target: str, token: str, kind: str) -> str:
    """The name of a file made beside ``target``: its temporary (``tmp``) or its kept old file (``old``)."""
    folder, name = os.path.split(target)
    return os.path.join(folder, f".{name}.{token}.{kind}")


def write(folder: str, state: str, entries: Iterable[Entry], folders: Iterable[str], about: str) -> None:
    """Write the journal of ``folder`` whole: to a temporary name, flushed, then renamed over the last."""
    record = {
        "ddpify": VERSION,
        "state": state,
        "about": about,
        "files": [entry.to_json() for entry in entries],
        "folders": list(folders),
    }
    path = os.path.join(folder, JOURNAL)
    partial = path + ".new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(record, file, indent=1)
        file.write("\n")
        file.flush()
        os.fsync(file.fileno())
    os.rename(partial, path)  # (POSIX: replaces the last state in one step)
    sync_folder(folder)


def remove(folder: str) -> None:
    """Remove the journal of ``folder`` (and one left half-written)."""
    path = os.path.join(folder, JOURNAL)
    for name in (path + ".new", path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
    sync_folder(folder)


def sync_folder(folder: str) -> None:
    """Flush a folder's entries to disk, so that a rename in it survives a power loss."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def locked(folder: str) -> Iterator[None]:
    """Hold the exclusive lock of ``folder``; when another run holds it, say so and wait."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Failure(f"cannot write in {_shown(folder)}: {exc.strerror or exc}; nothing written") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            error(f"waiting for another ddpify run that is writing in {_shown(folder)}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: go on unlocked, as before
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def recover_around(paths: Iterable[str]) -> None:
    """Finish or roll back the journal of any folder at or above ``paths`` (files or folders, existing or
    not), before anything there is read."""
    seen: set[str] = set()
    for path in paths:
        folder = _nearest_folder(os.path.realpath(path))
        while folder not in seen:
            seen.add(folder)
            if os.path.lexists(os.path.join(folder, JOURNAL)):
                with locked(folder):
                    recover(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent


def recover(folder: str) -> None:
    """Finish or roll back the journal in ``folder``, if there is one; the caller holds its lock."""
    path = os.path.join(folder, JOURNAL)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".new")  # a journal half-written: its run had changed nothing yet
    record = _read(path)
    if record is None:
        return
    state, about = record["state"], record["about"]
    entries = [Entry(f["target"], f["temporary"], f["kept"], f["new"]) for f in record["files"]]
    count = plural(len(entries), "file")
    shown = _shown(folder)
    where = "" if shown == os.curdir else f" in {shown}"
    if state == DONE:
        for entry in entries:
            _remove(entry.temporary)
            _remove(entry.kept)
        remove(folder)
        error(f"note: finished the write of {about} that a stopped ddpify run left unfinished{where} ({count})")
        return
    kept: list[str] = []
    for entry in entries:
        if state == COMMIT:
            kept += _roll_back(entry)
        else:
            _remove(entry.kept)
        _remove(entry.temporary)
    for made in reversed(record["folders"]):
        with contextlib.suppress(OSError):
            os.rmdir(made)
    remove(folder)
    line = f"note: undid the write of {about} that a stopped ddpify run left unfinished{where}: {count} as before"
    if kept:
        line += f"; changed since, so left as they are: {', '.join(kept)}"
    error(line)


def _roll_back(entry: Entry) -> list[str]:
    """Put ``entry``'s old file back where the target holds the new text; the targets changed since."""
    current = _digest_of(entry.target)
    if entry.temporary is None:  # written through: the target may hold part of the new text
        if entry.kept is not None and os.path.exists(entry.kept):
            with open(entry.kept, "rb") as file:
                old = file.read()
            if current != digest(old):
                write_through(entry.target, old)
            _remove(entry.kept)
        return []
    if current == entry.new:  # replaced by the stopped run
        if entry.kept is None:
            _remove(entry.target)  # a file the stopped run made
        elif os.path.exists(entry.kept):
            os.replace(entry.kept, entry.target)
        return []
    if entry.kept is None or not os.path.exists(entry.kept):
        return []
    if current is not None and current == _digest_of(entry.kept):
        _remove(entry.kept)  # not replaced yet: the old file is still in place
        return []
    # changed since: left as it is, its old text beside it under the kept name
    return [f"{_shown(entry.target)} (its text before: {os.path.basename(entry.kept)})"]


def _read(path: str) -> dict[str, Any] | None:
    """The journal at ``path``, if it is one this user's ddpify wrote; a file that is not is reported and left."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    problem = None
    record: Any = None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        problem = "not a regular file of yours"
    else:
        try:
            with open(path, encoding="utf-8") as file:
                record = json.load(file)
        except (OSError, ValueError) as exc:
            problem = f"unreadable ({exc})"
    if problem is None and not _well_formed(record):
        problem = "not a journal this ddpify wrote"
    if problem is not None:
        error(f"warning: {_shown(path)}: {problem}; left as it is")
        return None
    assert isinstance(record, dict)
    return record


def _well_formed(record: Any) -> bool:
    """Whether ``record`` is a journal of this version whose made files are all named as a transaction
    names them, beside their targets: nothing else is ever removed or moved."""
    if not isinstance(record, dict) or record.get("ddpify") != VERSION:
        return False
    if record.get("state") not in (PREPARE, COMMIT, DONE) or not isinstance(record.get("about"), str):
        return False
    files, folders = record.get("files"), record.get("folders")
    if not isinstance(files, list) or not isinstance(folders, list):
        return False
    if not all(isinstance(folder, str) and os.path.isabs(folder) for folder in folders):
        return False
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("new"), str):
            return False
        target = entry.get("target")
        if not isinstance(target, str) or not os.path.isabs(target):
            return False
        for kind, key in (("tmp", "temporary"), ("old", "kept")):
            made = entry.get(key)
            if made is None:
                continue
            if not isinstance(made, str) or os.path.dirname(made) != os.path.dirname(target):
                return False
            match = _LEFTOVER.fullmatch(os.path.basename(made))
            if match is None or match.group("name") != os.path.basename(target) or not made.endswith(kind):
                return False
    return True


def _digest_of(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return digest(file.read())
    except OSError:
        return None


def _remove(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _nearest_folder(path: str) -> str:
    """``path`` if it is a folder, else the nearest folder above it that exists."""
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _shown(path: str) -> str:
    """``path`` relative to the current folder when that is short (at most two levels up), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.path.join(os.pardir, os.pardir, os.pardir)) else relative
