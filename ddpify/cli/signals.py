"""Stop signals: SIGINT (Ctrl-C) and SIGTERM end a run cleanly, never halfway through a file.

While ddpify runs, both raise :class:`~ddpify.cli.exits.Interrupted` in the
main process (:func:`stop_on_signals`), and any later one is ignored while it
stops. Inside :func:`finishing` (a file being written and reported) the first
signal waits until the block ends, unless a second one comes.
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


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _Deferral.active and _Deferral.pending is None:
        _Deferral.pending = signum  # stop once the file is finished; a second signal stops at once
        return
    stop(signum)


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
