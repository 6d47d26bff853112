"""Python's cyclic garbage collector, paused while ddpify reads a program.

Reading a program makes millions of small objects (CPython's and libcst's
trees, the index, the first pass's facts) that stay alive until the answer is
given and form no cycles: reference counting frees them (a conversion leaves
no cyclic garbage behind). Each pass of the cyclic collector walks every
object alive, so a program of hundreds of modules paid for it again and again,
and once more when the interpreter shut down: more than half the time of
`ddpify train.py` in a 300-module repository. So :func:`ddpify.convert` and
the first pass pause the collector, the command runs with it paused, and what
is alive when the command ends is left to the process's exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside, as it was after (nested uses keep it off)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def left_to_exit() -> None:
    """Leave every object alive now to the process's exit: the collector passes of interpreter
    shutdown would otherwise walk each of them (trees and indexes kept for the next program of a
    folder: seconds for a program of hundreds of modules, longer than reading it)."""
    gc.freeze()
