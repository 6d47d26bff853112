"""What ``convert()`` returns: the new code and everything the user is told about it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ddpify.diagnostics import Change, Diagnostic, Severity


class Status(enum.Enum):
    CONVERTED = "converted"  # code changed; warnings may have been found
    UNCHANGED = "unchanged"  # nothing to do, or the script is already distributed
    REFUSED = "refused"  # an error diagnostic: the script cannot be converted safely
    INVALID = "invalid"  # the input is not valid Python 3 (or cannot round-trip)
    INTERNAL_ERROR = "internal-error"  # a bug in ddpify


@dataclass(frozen=True)
class Options:
    """Choices a user can make about the conversion."""

    # Divide each training DataLoader's batch_size by the world size so that the
    # global batch stays what the single-GPU script used.
    keep_global_batch: bool = False
    # Under plain `python` on a machine with several GPUs, the generated script
    # starts one process per GPU itself (PET_NPROC_PER_NODE overrides the count).
    spawn: bool = False
    # Wrap every model with DistributedDataParallel(..., find_unused_parameters=True):
    # for models whose forward skips parameters in a way ddpify cannot see.
    find_unused_parameters: bool = False
    # Convert BatchNorm layers to SyncBatchNorm right before the wrap, so that
    # batch statistics are computed over the global batch.
    sync_batchnorm: bool = False
    # Give evaluation DataLoaders a DistributedSampler(shuffle=False) and add up the sums
    # and counts their loops accumulate over all ranks: faster evaluation, but a set that
    # does not divide by the world size has a few samples counted twice.
    shard_eval: bool = False
    # Refuse rather than convert with the training data left whole on every rank (DDP211
    # becomes the error DDP201): for CI, where a conversion that trains no faster is a failure.
    strict: bool = False
    # Put terminal output (print, logging, progress bars) in the program's other modules on rank 0
    # too. Off where only the entry can be written (one output file): that output then stays on
    # every rank, and the conversion says so (DDP505).
    module_output: bool = True


@dataclass(frozen=True)
class LocalModule:
    """A module of the training program besides its entry script, imported as ``name`` from ``path``.

    Given to ``convert()`` with ``code`` unset; in a :class:`Conversion`, ``code`` is its new text
    (same type, encoding and line endings as ``source``). ``shared`` says that other programs
    import it too, so that its new code must also run where no process group exists.
    """

    path: str
    name: str
    source: str | bytes
    code: str | bytes | None = None
    shared: bool = False

    @property
    def package(self) -> str:
        """The package its relative imports start from."""
        if self.path.replace("\\", "/").rsplit("/", 1)[-1] == "__init__.py":
            return self.name
        return self.name.rpartition(".")[0]

    @property
    def changed(self) -> bool:
        return self.code is not None and self.code != self.source


@dataclass(frozen=True)
class Conversion:
    """The outcome of converting one script.

    ``code`` has the same type as the source given to ``convert()`` (``str`` or
    ``bytes``); for bytes, encoding, BOM and line endings are those of the input.
    When the status is not ``CONVERTED``, ``code`` is the source unchanged.
    """

    source: str | bytes
    code: str | bytes
    status: Status
    diagnostics: tuple[Diagnostic, ...] = ()
    changes: tuple[Change, ...] = field(default=())
    # the other modules of the program that changed (``code`` set), in the order they were given
    modules: tuple[LocalModule, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the entry script or any other module of the program changed."""
        return self.code != self.source or any(m.changed for m in self.modules)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)
