"""ddpify: turn a single-GPU PyTorch training script into a torchrun-ready DDP script."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpify.diagnostics import Change, Diagnostic, Severity
from ddpify.result import Conversion, Options, Status

if TYPE_CHECKING:
    from ddpify.core import convert

__version__ = "0.1.0"

__all__ = [
    "Change",
    "Conversion",
    "Diagnostic",
    "Options",
    "Severity",
    "Status",
    "__version__",
    "convert",
]


def __getattr__(name: str) -> Any:
    # convert() pulls in libcst; importing it on first use keeps `ddpify --help`,
    # `ddpify --version` and `import ddpify.cli` fast.
    if name == "convert":
        from ddpify.core import convert

        globals()["convert"] = convert
        return convert
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"convert"})
