"""Stop signals: SIGINT (Ctrl-C) and SIGTERM end a run cleanly, never halfway through a file.

While ddpify runs, both raise :class:`~ddpify.cli.exits.Interrupted` in the
main process (:func:`stop_on_signals`), and any later one is ignored while it
stops. Inside :func:`finishing` (a file being written and reported) the first
signal waits until the block ends, unless a second one comes. Inside
:func:`blocked` (the writes of one program) signals are not delivered at all:
the writer asks :func:`pending` between its steps and undoes what it did
before it stops, so that a program is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import TYPE_CHECKING, Any

from ddpify.cli.exits import Interrupted

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` inside the block; the former handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    former = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    try:
        yield
    except Interrupted:
        # The signals stay ignored: a second Ctrl-C must not interrupt the
        # clean-up or the last message on the way out.
        raise
    except BaseException:
        _restore(former)
        raise
    else:
        _restore(former)


def _restore(handlers: dict[signal.Signals, Any]) -> None:
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


class _Deferral:
    """Whether a file is being finished, and the signal that arrived meanwhile."""

    active = False
    pending: int | None = None


class _Held:
    """Whether the writes of a program hold stop signals back, and the first that came to the handler."""

    active = False
    pending: int | None = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _Held.active:
        # The mask of ``blocked`` holds back only what is sent to this thread; a signal sent to the
        # process may reach another thread (a worker pool's), and its handler then runs here.
        if _Held.pending is None:
            _Held.pending = signum
        return
    if _Deferral.active and _Deferral.pending is None:
        _Deferral.pending = signum  # stop once the file is finished; a second signal stops at once
        return
    # a second signal stops at once, with the exit status of the first: the run was stopped by that one
    stop(_Deferral.pending if _Deferral.active and _Deferral.pending is not None else signum)


def stop(signum: int, message: str = "interrupted") -> None:
    """Stop the run: later signals are ignored on the way out."""
    for other in STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise Interrupted(signum, message)


@contextlib.contextmanager
def finishing() -> Iterator[None]:
    """A signal inside the block takes effect at its end: a file is written and reported whole, then the run stops."""
    _Deferral.active, _Deferral.pending = True, None
    try:
        yield
    finally:
        _Deferral.active = False
        pending, _Deferral.pending = _Deferral.pending, None
        if pending is not None:
            stop(pending)


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """Stop signals are held back inside the block (they stay pending; see :func:`pending`)."""
    _Held.active, _Held.pending = True, None
    masked = hasattr(signal, "pthread_sigmask")
    former = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if masked else set()
    try:
        yield
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_SETMASK, former)  # a signal still held is delivered now
        _Held.active = False
    left, _Held.pending = _Held.pending, None
    if left is not None:  # came after the block last asked: it stops the run now, as a masked one would
        stop_or_defer(left)


def stop_or_defer(signum: int) -> None:
    """Stop the run, or, inside :func:`finishing`, once the file being finished is reported."""
    if _Deferral.active:
        if _Deferral.pending is None:
            _Deferral.pending = signum
        return
    stop(signum)


def pending() -> int | None:
    """A stop signal held back by :func:`blocked`, taken off the queue; None if none came."""
    if _Held.pending is not None:
        held, _Held.pending = _Held.pending, None
        return held
    if not hasattr(signal, "sigpending"):
        return None
    waiting = signal.sigpending() & set(STOP_SIGNALS)
    if not waiting:
        return None
    taken: int | None = None
    for signum in sorted(waiting):
        with contextlib.suppress(OSError):
            info = signal.sigtimedwait([signum], 0)
            if info is not None and taken is None:
                taken = info.si_signo
    return taken if taken is not None else int(min(waiting))
