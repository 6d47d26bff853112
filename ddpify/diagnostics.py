"""One record for every finding, printed one way: ``path:line:col: CODE message``.

Codes are grouped by concern so that a reader can tell from the number alone
what part of the script is meant:

* ``DDP0xx`` the input as a whole (already distributed, nothing to convert)
* ``DDP1xx`` process group, launch and devices
* ``DDP2xx`` data loading and sampling
* ``DDP3xx`` the model and its ``DistributedDataParallel`` wrap
* ``DDP4xx`` checkpoints
* ``DDP5xx`` side effects (printing, logging, files)
* ``DDP6xx`` training-loop control (decisions that must be the same on every rank)
* ``DDP9xx`` ddpify itself (internal errors)

An ``error`` means the script cannot be converted safely and nothing is
written; a ``warning`` means the script is written and a person should look;
``info`` is a fact about the conversion.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Diagnostic:
    """A finding at a place in the input (line and column are 1-based)."""

    line: int
    column: int
    code: str
    severity: Severity
    message: str
    path: str = "<string>"

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"


@dataclass(frozen=True)
class Change:
    """One rewrite, reported to the user as ``path:line: summary`` (line in the input)."""

    line: int
    summary: str
