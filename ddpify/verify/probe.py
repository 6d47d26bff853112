"""In-rank instrumentation: ``python -m ddpify.verify.probe SCRIPT [ARGS...]``.

``verify()`` starts this module under ``torchrun`` in place of the script. It
installs a few hooks, runs the script unchanged with
``runpy.run_path(script, run_name="__main__")`` (``sys.argv`` and
``sys.path[0]`` as ``python SCRIPT ARGS...`` would set them) and writes what it
saw to ``$DDPIFY_PROBE_DIR/rank-<RANK>.json`` (see ``protocol``). Nothing is
ever written into the script. ``fingerprints`` (digests of batches and
parameters) and ``ownership`` (which parameters DDP averages) serve it; like
this module they import torch, and nothing of ddpify but ``protocol``.

What is hooked, and how:

* optimizer steps: ``torch.optim.optimizer.register_optimizer_step_post_hook``
  counts the steps of every optimizer and keeps the optimizer, so that its
  ``param_groups`` can be checksummed when the run stops. With
  ``$DDPIFY_MAX_STEPS=K`` the hook raises ``MaxStepsReached`` (a
  ``SystemExit``) right after any optimizer's K-th step: the script unwinds
  through its own ``finally`` blocks (which destroy the process group) and
  the rank exits 0.
* parameters: per optimizer, when the run stops, the digest of
  ``fingerprints.parameter_checksum`` (a sha256 of the exact bytes and three
  float64 statistics).
* data: ``DataLoader.__init__`` (numbering every loader in creation order and
  noting where in the script it was created), ``DataLoader.__iter__``
  (counting epochs) and ``_BaseDataLoaderIter.__next__`` (there is no public
  hook for drawn batches). Every loader is recorded; the first
  ``RECORDED_BATCHES`` batches are hashed sample by sample
  (``fingerprints.hash_batch``). A loader "feeds training" when it was the
  last one drawn from before an optimizer step; the parent judges sharding
  on those only, so evaluation loaders (typically the same on every rank) do
  not count.
* files: ``torch.save`` (and ``torch.serialization.save``) note the target of
  every call: the path as given and as an absolute path. ``open`` (the
  builtin, which is also ``io.open`` and what ``pathlib`` calls) notes every
  file inside the working folder opened with a mode that writes (``w``,
  ``a``, ``x`` or ``+``), once per path; the probe's own files are left out.
* inputs: ``DistributedDataParallel.forward`` hashes what each wrapper is
  given in its first training forwards (grad enabled, training mode), which
  judges sharding where no DataLoader feeds the steps.
* wrapping: ``DistributedDataParallel.__init__`` keeps a weak record of
  every DDP instance and the parameters it registered for gradient
  reduction; at the first step of each optimizer, and again when the run
  stops, ``ownership`` finds (and names) the parameters that no live DDP
  instance averages.
* process group: ``init_process_group`` and ``destroy_process_group`` (on
  ``torch.distributed`` and ``torch.distributed.distributed_c10d``) are
  wrapped; ``is_initialized()`` is also sampled at every step and at exit,
  which covers other ways of creating the default group.
* failures: an uncaught exception is recorded with its type (and the names
  of its bases), message, the last line of the script in its traceback,
  whether its innermost frame is in torch, and the time it reached the
  probe, so that the parent can tell the rank where a failure began from
  ranks whose collectives failed because of it.
* hangs: a daemon thread rewrites the record a moment after anything
  changed, so that a rank blocked in a collective (which releases the GIL)
  still shows its latest steps and saves; ``faulthandler`` dumps all Python
  stacks to ``rank-<RANK>.stack`` on ``STACK_SIGNAL``, which the parent sends
  to ranks still running at its timeout.

The probe never touches a random number generator, and a failure inside a
hook is recorded in ``probe_errors`` instead of breaking the script.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import faulthandler
import functools
import io
import json
import os
import runpy
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import BatchSampler, DataLoader, IterableDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ddpify.verify import protocol
from ddpify.verify.fingerprints import hash_batch, parameter_checksum
from ddpify.verify.ownership import (
    TORCH_DIR,
    WrapperRecord,
    owners,
    ownership,
    parameter_names,
    script_roots,
    unregistered,
)

_LOADER_ATTR = "_ddpify_probe_loader"
_ITERATOR_ATTR = "_ddpify_probe_iteration"
_FLUSH_INTERVAL_S = 0.25
# The finished script's globals (or the stop that holds its frames), kept to the end of the
# process as under plain ``python``: dropping them when the script returns destroys a DDP
# model's reducer and with it the Gloo process group, whose destructor joins a worker thread
# that may be waiting for the GIL the joining thread holds (a hang in about one short run in
# twenty).
_kept_to_the_end: list[object] = []


class MaxStepsReached(SystemExit):
    """Raised after the ``max_steps``-th optimizer step: a clean stop, exit code 0."""

    def __init__(self, steps: int) -> None:
        super().__init__(0)
        self.steps = steps


def _replace(owner: Any, name: str, replacement: Any) -> None:
    """Install a hook in place of a torch function or method (which typing cannot express)."""
    setattr(owner, name, replacement)


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _safe_len(obj: Any) -> int | None:
    try:
        return len(obj)
    except Exception:  # no __len__, or an IterableDataset that refuses
        return None


class _LoaderRecord:
    def __init__(self, index: int, site: str | None) -> None:
        self.index = index
        self.site = site
        self.described = False
        self.dataset: str | None = None
        self.sampler: str | None = None
        self.dataset_len: int | None = None
        self.samples_per_epoch: int | None = None
        # draws may repeat: a sampler with replacement, or one (or the one a rank takes its share of)
        # that draws more than the data set holds, as a budget of iterations does
        self.repeats = False
        self.iterations = 0
        self.batches = 0
        self.steps = 0
        self.recorded: list[dict[str, Any]] = []

    def describe(self, loader: DataLoader[Any]) -> None:
        self.described = True
        self.dataset = type(loader.dataset).__qualname__
        self.sampler = type(loader.sampler).__qualname__
        self.repeats = getattr(loader.sampler, "replacement", False) is True
        if isinstance(loader.dataset, IterableDataset):
            return
        self.dataset_len = _safe_len(loader.dataset)
        drawn = _safe_len(getattr(loader.sampler, "sampler", loader.sampler))
        if drawn is not None and self.dataset_len is not None and drawn > self.dataset_len:
            self.repeats = True
        if loader.batch_sampler is None or type(loader.batch_sampler) is BatchSampler:
            self.samples_per_epoch = _safe_len(loader.sampler)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "site": self.site,
            "dataset": self.dataset,
            "sampler": self.sampler,
            "dataset_len": self.dataset_len,
            "samples_per_epoch": self.samples_per_epoch,
            "repeats": self.repeats,
            "iterations": self.iterations,
            "batches": self.batches,
            "steps": self.steps,
            "recorded": self.recorded,
        }


class _OptimizerRecord:
    def __init__(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        self.index = index
        self.optimizer = optimizer
        self.steps = 0
        self.ownership: dict[str, Any] | None = None  # found at the first step
        self.names: dict[int, str] = {}  # parameter names known at the first step

    def parameters(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "type": type(self.optimizer).__qualname__,
            "steps": self.steps,
            "ownership": self.ownership,
            # tensors the program optimises, none a module's parameter (an adversarial perturbation): each
            # rank's own, neither wrapped nor the same on every rank
            "inputs": all(not isinstance(p, torch.nn.Parameter) for p in self.parameters()),
        }

    def checksum(self, wrappers: Iterable[WrapperRecord]) -> dict[str, Any]:
        params = self.parameters()
        return {
            **self.summary(),
            # Requiring grad now but not registered when DDP was built: never reduced.
            "at_end": unregistered(params, owners(wrappers, live=False), self.names),
            **parameter_checksum(params),
        }


class Recorder:
    """Everything one rank records, and the hooks that feed it."""

    def __init__(self, script: str, out_dir: str, max_steps: int | None) -> None:
        self.script = script
        self.out_dir = out_dir
        self.max_steps = max_steps
        # Under `srun` without torchrun only SLURM numbers the processes.
        self.rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
        self.local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
        self.world_size_env = int(os.environ.get("WORLD_SIZE", "1"))
        self.pid = os.getpid()
        self.phase = protocol.Phase.RUNNING
        self.exit: dict[str, Any] | None = None
        self.optimizers: dict[int, _OptimizerRecord] = {}
        self.wrappers: list[WrapperRecord] = []
        # per wrapper, in the order they were built: the hashes of the first inputs of its training forwards
        self.inputs: dict[int, list[str]] = {}
        self._wrapper_index: dict[int, int] = {}
        self.loaders: list[_LoaderRecord] = []
        self.last_loader: _LoaderRecord | None = None
        self.saves: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []  # files opened for writing, the first time each
        self._written: set[str] = set()
        self._workdir = os.path.join(os.path.abspath(os.getcwd()), "")
        self._own_dir = os.path.join(os.path.abspath(out_dir), "")
        self.process_group: dict[str, Any] = {
            "initialized": False,
            "world_size": None,
            "rank": None,
            "backend": None,
            "destroyed": False,
        }
        self.checksums: list[dict[str, Any]] | None = None
        self.probe_errors: list[str] = []
        self._dirty = False
        self._write_lock = threading.Lock()
        self._stack_file: Any = None

    # -- installation --------------------------------------------------------

    def install(self) -> None:
        if protocol.STACK_SIGNAL is not None:
            path = os.path.join(self.out_dir, protocol.stack_name(self.rank))
            self._stack_file = open(path, "w")  # noqa: SIM115 (kept open for faulthandler)
            faulthandler.register(protocol.STACK_SIGNAL, file=self._stack_file, all_threads=True)
        register_optimizer_step_post_hook(self._after_step)
        self._patch_process_group()
        self._patch_ddp()
        self._patch_save()
        self._patch_open()
        self._patch_data_loader()
        atexit.register(self._at_exit)
        self.write()
        threading.Thread(target=self._flush_while_running, name="ddpify-probe", daemon=True).start()

    def _flush_while_running(self) -> None:
        while self.phase == protocol.Phase.RUNNING:
            time.sleep(_FLUSH_INTERVAL_S)
            if self._dirty and self.phase == protocol.Phase.RUNNING:
                self.write()

    def _guarded(self, what: str, action: Any, *args: Any) -> None:
        try:
            action(*args)
        except Exception as exc:  # the probe must never break the script
            if len(self.probe_errors) < 10:
                self.probe_errors.append(f"{what}: {type(exc).__name__}: {exc}")

    def _patch_process_group(self) -> None:
        if not dist.is_available():
            return
        c10d = dist.distributed_c10d
        original_init = dist.init_process_group
        original_destroy = dist.destroy_process_group

        @functools.wraps(original_init)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = original_init(*args, **kwargs)
            self._guarded("init_process_group", self._note_process_group)
            return result

        @functools.wraps(original_destroy)
        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            group = args[0] if args else kwargs.get("group")
            default = group is None or group is c10d.GroupMember.WORLD
            result = original_destroy(*args, **kwargs)
            if default:
                self.process_group["destroyed"] = True
                self._dirty = True
            return result

        for module in (dist, c10d):
            _replace(module, "init_process_group", init_process_group)
            _replace(module, "destroy_process_group", destroy_process_group)

    def _patch_ddp(self) -> None:
        try:
            from torch.nn.parallel import DistributedDataParallel
        except ImportError:  # a torch built without distributed support
            return
        original_init = DistributedDataParallel.__init__
        original_forward = DistributedDataParallel.forward

        @functools.wraps(original_init)
        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original_init(ddp, *args, **kwargs)
            self._guarded("DistributedDataParallel", self._note_wrapper, ddp)

        @functools.wraps(original_forward)
        def forward(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            self._guarded("DistributedDataParallel.forward", self._note_input, ddp, args, kwargs)
            return original_forward(ddp, *args, **kwargs)  # type: ignore[no-untyped-call]

        _replace(DistributedDataParallel, "__init__", __init__)
        _replace(DistributedDataParallel, "forward", forward)

    def _patch_save(self) -> None:
        original_save = torch.save

        @functools.wraps(original_save)
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_save(obj, f, *args, **kwargs)
            self._guarded("torch.save", self._note_save, f, obj)
            return result

        _replace(torch, "save", save)
        _replace(torch.serialization, "save", save)

    def _patch_open(self) -> None:
        original_open = builtins.open  # io.open is the same function

        @functools.wraps(original_open)
        def open_(file: Any, mode: Any = "r", *args: Any, **kwargs: Any) -> Any:
            stream = original_open(file, mode, *args, **kwargs)
            if isinstance(mode, str) and not set(mode).isdisjoint("wax+"):
                self._guarded("open", self._note_write, file)
            return stream

        _replace(builtins, "open", open_)
        _replace(io, "open", open_)

    def _patch_data_loader(self) -> None:
        original_init = DataLoader.__init__
        original_iter = DataLoader.__iter__
        original_next = _BaseDataLoaderIter.__next__
        recorder = self

        @functools.wraps(original_init)
        def __init__(loader: DataLoader[Any], *args: Any, **kwargs: Any) -> None:
            original_init(loader, *args, **kwargs)
            if getattr(loader, _LOADER_ATTR, None) is None:
                record = _LoaderRecord(len(recorder.loaders), recorder._script_site())
                recorder.loaders.append(record)
                # object.__setattr__: DataLoader.__setattr__ guards some attributes.
                object.__setattr__(loader, _LOADER_ATTR, record)

        @functools.wraps(original_iter)
        def __iter__(loader: DataLoader[Any]) -> Any:
            iterator = original_iter(loader)
            record = getattr(loader, _LOADER_ATTR, None)
            if record is not None:
                record.iterations += 1
                if not record.described:
                    recorder._guarded("DataLoader", record.describe, loader)
                with contextlib.suppress(AttributeError, TypeError):
                    object.__setattr__(iterator, _ITERATOR_ATTR, (record, record.iterations))
            return iterator

        @functools.wraps(original_next)
        def __next__(iterator: Any) -> Any:
            batch = original_next(iterator)
            tag = getattr(iterator, _ITERATOR_ATTR, None)
            if tag is not None:
                recorder._guarded("DataLoader batch", recorder._note_batch, *tag, batch)
            return batch

        _replace(DataLoader, "__init__", __init__)
        _replace(DataLoader, "__iter__", __iter__)
        _replace(_BaseDataLoaderIter, "__next__", __next__)

    # -- what the hooks record -------------------------------------------------

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        record = self.optimizers.get(id(optimizer))
        if record is None or record.optimizer is not optimizer:
            record = _OptimizerRecord(len(self.optimizers), optimizer)
            self.optimizers[id(optimizer)] = record
        record.steps += 1
        if record.steps == 1:
            self._guarded("ownership", self._check_ownership, record, sys._getframe(1))
        if self.last_loader is not None:
            self.last_loader.steps += 1
        self._guarded("optimizer step", self._note_process_group)
        if self.max_steps is not None and record.steps >= self.max_steps:
            self.phase = protocol.Phase.STOPPING
            self._guarded("checksum", self._take_checksums)
            self.write()
            raise MaxStepsReached(record.steps)
        self._dirty = True

    def _note_wrapper(self, ddp: Any) -> None:
        self._wrapper_index[id(ddp)] = len(self.wrappers)
        self.wrappers.append(WrapperRecord(ddp))

    def _note_input(self, ddp: Any, args: Any, kwargs: Any) -> None:
        """The hash of what a training forward of the wrapper is given (its first few): data kept in tensors
        and batched by hand shows whether each rank trains on its own, as a DataLoader's batches do."""
        index = self._wrapper_index.get(id(ddp))
        if index is None or not (torch.is_grad_enabled() and ddp.training):
            return
        recorded = self.inputs.setdefault(index, [])
        if len(recorded) < protocol.RECORDED_BATCHES:
            recorded.append(hash_batch((args, kwargs))[0])
            self._dirty = True

    def _check_ownership(self, record: _OptimizerRecord, frame: FrameType) -> None:
        roots = script_roots(frame)
        params = record.parameters()
        names = parameter_names(roots)
        record.ownership = ownership(params, self.wrappers, roots, names)
        record.names = {id(p): names[id(p)] for p in params if id(p) in names}
        self._dirty = True

    def _note_process_group(self) -> None:
        if dist.is_available() and dist.is_initialized() and not self.process_group["initialized"]:
            self.process_group.update(
                initialized=True,
                world_size=dist.get_world_size(),
                rank=dist.get_rank(),
                backend=str(dist.get_backend()),
            )
            self._dirty = True

    def _note_save(self, target: Any, obj: Any) -> None:
        wrapper = _wrapper_state(obj)
        if isinstance(target, (str, bytes, os.PathLike)):
            given = os.fsdecode(target)
            kind = "path"
        elif isinstance(getattr(target, "name", None), str):
            given = target.name
            kind = "file"
        else:
            self.saves.append({"kind": "buffer", "given": None, "path": None, "step": self.steps, "wrapper": wrapper})
            return
        path = os.path.abspath(given)
        self.saves.append({"kind": kind, "given": given, "path": path, "step": self.steps, "wrapper": wrapper})
        self._dirty = True

    def _note_write(self, target: Any) -> None:
        if not isinstance(target, (str, bytes, os.PathLike)):
            return  # a file descriptor
        given = os.fsdecode(target)
        path = os.path.abspath(given)
        if path in self._written or not path.startswith(self._workdir) or path.startswith(self._own_dir):
            return
        self._written.add(path)
        self.writes.append({"given": given, "path": path, "step": self.steps})
        self._dirty = True

    def _note_batch(self, record: _LoaderRecord, iteration: int, batch: Any) -> None:
        record.batches += 1
        self.last_loader = record
        self._dirty = True
        if len(record.recorded) < protocol.RECORDED_BATCHES:
            whole, samples = hash_batch(batch)
            record.recorded.append({"iteration": iteration, "batch": whole, "samples": samples})

    def _take_checksums(self) -> None:
        ordered = sorted(self.optimizers.values(), key=lambda r: r.index)
        self.checksums = [record.checksum(self.wrappers) for record in ordered]

    def _script_site(self) -> str | None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if os.path.abspath(frame.f_code.co_filename) == self.script:
                return f"{os.path.basename(self.script)}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def script_location(self, tb: TracebackType | None) -> str | None:
        where = None
        for entry in traceback.extract_tb(tb):
            if os.path.abspath(entry.filename) == self.script:
                where = f"{os.path.basename(self.script)}:{entry.lineno}"
        return where

    def describe_exception(self, exc: BaseException) -> dict[str, Any]:
        """What the parent needs to tell where a failure began (see ``checks``)."""
        frames = traceback.extract_tb(exc.__traceback__)
        innermost = os.path.abspath(frames[-1].filename) if frames else ""
        return {
            "error": f"{type(exc).__name__}: {exc}",
            "where": self.script_location(exc.__traceback__),
            "type": _qualified_name(type(exc)),
            "bases": [_qualified_name(base) for base in type(exc).__mro__[1:] if base is not object],
            "message": str(exc),
            "in_torch": innermost.startswith(TORCH_DIR + os.sep),
        }

    @property
    def steps(self) -> int:
        return sum(record.steps for record in self.optimizers.values())

    # -- output ----------------------------------------------------------------

    def finish(self, kind: str, *, code: Any = 0, exception: BaseException | None = None) -> None:
        self.exit = {"kind": kind, "code": code, "time": time.time(), "error": None, "where": None}
        if exception is not None:
            self.exit.update(self.describe_exception(exception))
        self.phase = protocol.Phase.EXITED
        if self.checksums is None:
            self._guarded("checksum", self._take_checksums)
        self._guarded("exit", self._note_process_group)
        self.write()

    def _at_exit(self) -> None:
        # Runs after the script's own atexit handlers (LIFO), which may destroy
        # the process group; never in a forked DataLoader worker.
        if os.getpid() != self.pid:
            return
        if self.checksums is None:
            self._guarded("checksum", self._take_checksums)
        self.write()

    def document(self) -> dict[str, Any]:
        return {
            "schema": protocol.SCHEMA,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size_env": self.world_size_env,
            "pid": self.pid,
            "script": self.script,
            "phase": self.phase,
            "exit": self.exit,
            "max_steps": self.max_steps,
            "steps": self.steps,
            "optimizers": self.checksums
            if self.checksums is not None
            else [r.summary() for r in sorted(self.optimizers.values(), key=lambda r: r.index)],
            "checksummed": self.checksums is not None,
            "loaders": [record.to_json() for record in self.loaders],
            "inputs": [{"wrapper": index, "recorded": hashes} for index, hashes in sorted(self.inputs.items())],
            "saves": self.saves,
            "writes": self.writes,
            "process_group": self.process_group,
            "probe_errors": self.probe_errors,
        }

    def write(self) -> None:
        path = os.path.join(self.out_dir, protocol.record_name(self.rank))
        temporary = f"{path}.{self.pid}.tmp"
        with self._write_lock:
            self._dirty = False
            try:
                # The flushing thread may read while the script appends to a
                # list: serialise first, retry on the next change if that fails.
                text = json.dumps(self.document())
            except (RuntimeError, ValueError):
                self._dirty = True
                return
            try:
                with open(temporary, "w", encoding="utf-8") as stream:
                    stream.write(text)
                os.replace(temporary, path)
            except OSError as exc:  # a full disk must not turn into a training failure
                print(f"ddpify probe: cannot write {path}: {exc}", file=sys.stderr)


def _wrapper_state(obj: Any, depth: int = 0) -> bool:
    """Whether ``obj`` is, or holds (in a checkpoint dict), the state_dict of a DDP or DataParallel wrapper
    rather than of the model: every key starts with ``module.``, so it loads only into a wrapper."""
    if not isinstance(obj, dict) or depth > 2 or not obj:
        return False
    if all(isinstance(key, str) for key in obj) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return all(key.startswith("module.") for key in obj)
    return any(_wrapper_state(value, depth + 1) for value in obj.values())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = os.environ.get(protocol.PROBE_DIR_ENV)
    if not argv or not out_dir:
        print(
            f"usage: {protocol.PROBE_DIR_ENV}=DIR python -m {protocol.PROBE_MODULE} SCRIPT [ARGS...]",
            file=sys.stderr,
        )
        return 2
    script = os.path.abspath(argv[0])
    max_steps = os.environ.get(protocol.MAX_STEPS_ENV)
    recorder = Recorder(script, out_dir, int(max_steps) if max_steps else None)
    recorder.install()

    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    try:
        _kept_to_the_end.append(runpy.run_path(script, run_name="__main__"))
    except MaxStepsReached as stop:
        _kept_to_the_end.append(stop)
        recorder.finish(protocol.ExitKind.MAX_STEPS)
        return 0
    except SystemExit as exc:
        code = exc.code if exc.code is None or isinstance(exc.code, int) else str(exc.code)
        kind = protocol.ExitKind.OK if code in (None, 0) else protocol.ExitKind.EXIT
        recorder.finish(kind, code=code or 0)
        raise
    except BaseException as exc:
        recorder.finish(protocol.ExitKind.EXCEPTION, code=1, exception=exc)
        raise
    recorder.finish(protocol.ExitKind.OK)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
