"""What the parent (``verify``) and the in-rank probe agree on: environment and files.

The parent tells each rank where to write through environment variables; each
rank writes one JSON document, ``rank-<RANK>.json``, into that folder, first
when it starts (so that a hang can name the ranks that got that far and their
process ids), again while it trains, and a last time when it stops. Its
``phase`` says how far it got:

* ``running``: the probe started the script and has not seen it end;
* ``stopping``: the ``max_steps``-th optimizer step ran and the script is
  unwinding (parameter checksums are already in the document);
* ``exited``: the script ended (normally, by ``sys.exit``, by an exception or
  by the ``max_steps`` stop); ``exit`` says how (``kind``, ``code``, ``time``)
  and, for an exception, what it was (``error``, ``type``, ``bases``,
  ``message``, ``where``, ``in_torch``).

Each optimizer's entry carries ``ownership``, found at its first step: how
many of its parameters belong to no live ``DistributedDataParallel`` module,
their names and the modules that hold them, and the wrapped parameters that
require grad but were not registered for reduction.

``rank-<RANK>.stack`` receives the Python stacks of a rank when the parent
sends it ``STACK_SIGNAL`` (only done on a timeout, to say where a rank hangs).
"""

from __future__ import annotations

import signal

SCHEMA = 1

PROBE_MODULE = "ddpify.verify.probe"
PROBE_DIR_ENV = "DDPIFY_PROBE_DIR"
MAX_STEPS_ENV = "DDPIFY_MAX_STEPS"

# Not on Windows, where the stacks of a hung rank are simply not collected.
STACK_SIGNAL = getattr(signal, "SIGUSR1", None)

# Batches hashed per DataLoader: enough to tell a partition from a copy,
# few enough to cost nothing.
RECORDED_BATCHES = 4


class Phase:
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"


class ExitKind:
    OK = "ok"  # the script returned
    MAX_STEPS = "max-steps"  # stopped by the probe after max_steps optimizer steps
    EXIT = "exit"  # sys.exit(code)
    EXCEPTION = "exception"  # an uncaught exception


def record_name(rank: int) -> str:
    return f"rank-{rank}.json"


def stack_name(rank: int) -> str:
    return f"rank-{rank}.stack"
