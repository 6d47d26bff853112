"""ddpify: turn a single-GPU PyTorch training script into a torchrun-ready DDP script."""

from ddpify.core import convert
from ddpify.diagnostics import Change, Diagnostic, Severity
from ddpify.result import Conversion, Options, Status

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
