"""Judge a run: from what the ranks recorded to a ``VerifyReport``. No I/O.

Checks, in order, each with its own failure messages:

``launched``
    torchrun exited 0 (a stop at ``max_steps`` counts as clean). Fails with:
    "stopped after T s: rank R was waiting at script.py:L `code` ...", "rank
    R raised E at script.py:L `code` ...", "rank R called sys.exit(C)",
    "rank R was killed by SIGNAL ...", "rank R never started the script
    ...", "torchrun exited with code C ...". When several ranks failed, the
    one named is where the failure began: a real exception (or exit, or
    death by a signal) before a failure of torch's collectives that only
    reacts to a peer gone (a ``DistError``, or "Connection closed by peer"
    and the like raised inside torch), the earliest first. The exception
    comes from the rank's record, else from its ``[rankR]:`` traceback in
    torchrun's output (``failures`` reads how each rank ended).
``process-group``
    every rank joined a default process group of size N. Fails with: "rank R
    never initialized a process group ..." or "rank R is in a process group
    of size W, expected N".
``wrapped``
    at the first step of every optimizer, each parameter it steps belongs to
    the module of a live ``DistributedDataParallel`` instance, so its
    gradient is averaged across ranks from the first step. Fails with: "M
    (Type) is not wrapped in DistributedDataParallel, yet optimizer #I (T)
    steps its parameters (m.weight, ...)", "optimizer #I (T) steps K
    parameters outside any DistributedDataParallel module ...", "no
    optimizer stepped ...". Other wrappers (FSDP) are not recognised.
``in-sync``
    after the last step (at the ``max_steps`` stop, otherwise at exit) every
    rank holds the same parameters, optimizer by optimizer: the same sha256,
    or float64 statistics equal within ``SYNC_RTOL`` (rounding, not
    bitwise). Fails with: "parameters of optimizer #I (T) differ between
    ranks ..." and the likely cause (an unwrapped module, parameters that
    DDP did not register because they were frozen when it was built, or an
    update outside the gradient all-reduce), "ranks stepped different numbers of optimizers ...", "no
    optimizer stepped ...", "no parameter checksum from rank R ...". An
    unconverted script with a fixed seed stays in sync by accident: that is
    why ``sharded-data`` exists.
``sharded-data``
    for every DataLoader that fed an optimizer step (the last one drawn from
    before it), the ranks drew different samples: no two ranks drew the same
    batches, no rank iterates more than its share of the dataset per epoch,
    and the samples hashed in the first batches of an epoch overlap by at
    most N-1 (``DistributedSampler`` pads with up to N-1 repeats). Fails
    with: "ranks R and S drew the same batches from DataLoader #I ...",
    "DataLoader #I gives each rank K of the M samples per epoch ...",
    "ranks R and S drew K identical samples ...". With no DataLoader before
    the steps (tensors batched by hand), the ranks gave each
    DistributedDataParallel different inputs in its first training forwards;
    fails with "ranks R and S gave DistributedDataParallel #I the same
    inputs ..." or "no DataLoader batch preceded an optimizer step ..." (no
    wrapped forward to judge by). Limits: a script that shards by building
    a different dataset on every rank is reported as not sharded, and a
    dataset with many identical samples may be reported as overlapping.
``steps``
    every rank took the same number of optimizer steps, more than zero.
    Fails with: "ranks took different numbers of optimizer steps ..." or "no
    optimizer step on any rank ...".
``single-writer``
    every file written with ``torch.save`` was written by global rank 0
    only, and no file in the working folder was opened for writing (``open``
    with ``w``, ``a``, ``x`` or ``+``) by more than one rank. Fails with: "P
    was written by ranks 0, 1 ...", "P was written by rank R, not by rank
    0" or "P was opened for writing by ranks 0, 1 ...". In-memory saves
    (``io.BytesIO``) are not judged.
``clean-exit``
    no hang and ``destroy_process_group()`` on every rank that created one.
    Fails with: "hang: after T s, rank R was still running at
    script.py:L `code`", "rank R exited without destroy_process_group()".

Checks that compare ranks fail with "rank R did not report ..." when a rank
left no record: what was not observed is not proven.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ddpify.verify import protocol
from ddpify.verify.failures import (
    RankFailure,
    exit_of,
    finished,
    hang_location,
    hang_parts,
    rank_failures,
    stderr_exception,
)
from ddpify.verify.launcher import RunOutcome
from ddpify.verify.report import Check, RankReport, VerifyReport

LAUNCHED = "launched"
PROCESS_GROUP = "process-group"
WRAPPED = "wrapped"
IN_SYNC = "in-sync"
SHARDED_DATA = "sharded-data"
STEPS = "steps"
SINGLE_WRITER = "single-writer"
CLEAN_EXIT = "clean-exit"

CHECK_NAMES = (LAUNCHED, PROCESS_GROUP, WRAPPED, IN_SYNC, SHARDED_DATA, STEPS, SINGLE_WRITER, CLEAN_EXIT)

# Parameters that differ only by rounding (e.g. a reduction summed in another
# order on one rank) agree to about 1e-7 of their norm in float32; replicas
# trained on different data drift apart by far more after a single step.
SYNC_RTOL = 1e-6
_SHORT = 8

Records = Mapping[int, dict[str, Any]]


def evaluate(run: RunOutcome) -> VerifyReport:
    judges: tuple[Callable[[RunOutcome], Check], ...] = (
        _launched,
        _process_group,
        _wrapped,
        _in_sync,
        _sharded_data,
        _steps,
        _single_writer,
        _clean_exit,
    )
    return VerifyReport(
        script=run.script,
        nproc=run.nproc,
        command=run.command,
        max_steps=run.max_steps,
        returncode=run.returncode,
        timed_out=run.timed_out,
        duration_s=run.duration_s,
        ranks=tuple(_rank_report(run, rank) for rank in range(run.nproc)),
        checks=tuple(judge(run) for judge in judges),
        output=run.output,
    )


# -- helpers -----------------------------------------------------------------


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _missing(run: RunOutcome) -> list[int]:
    return [rank for rank in range(run.nproc) if rank not in run.records]


def _not_reported(run: RunOutcome, what: str) -> str | None:
    missing = _missing(run)
    return f"{_ranks(missing)} did not report {what} (see launched)" if missing else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _params_digest(record: dict[str, Any]) -> str | None:
    if not record.get("checksummed"):
        return None
    shas: list[str] = [o["sha256"] for o in record.get("optimizers", []) if not o.get("inputs")]
    if not shas:
        return None
    if len(shas) == 1:
        return shas[0][:_SHORT]
    return hashlib.sha256("".join(shas).encode()).hexdigest()[:_SHORT]


def _training_loaders(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [loader for loader in record.get("loaders", []) if loader.get("steps", 0) > 0]


def _loader_name(loader: dict[str, Any]) -> str:
    site = loader.get("site")
    return f"DataLoader #{loader['index']}" + (f" ({site})" if site else "")


def _status(run: RunOutcome, rank: int) -> str:
    record = run.records.get(rank)
    if record is None:
        return "missing"
    if not finished(record):
        return "stuck" if run.timed_out else "killed"
    exit_ = exit_of(record)
    kind = exit_.get("kind")
    if kind == protocol.ExitKind.EXCEPTION:
        return "error"
    if kind == protocol.ExitKind.EXIT:
        return f"exit {exit_.get('code')}"
    return str(kind)


def _rank_report(run: RunOutcome, rank: int) -> RankReport:
    record = run.records.get(rank)
    if record is None:
        return RankReport(rank, "missing", None, None, None, (), None, None)
    training = _training_loaders(record) or record.get("loaders", [])
    recorded = training[0].get("recorded", []) if training else []
    script = record.get("script", run.script)
    where = exit_of(record).get("where")
    if run.timed_out and not finished(record) and rank in run.stacks:
        where = hang_location(run.stacks[rank], script)
    elif not finished(record):
        error = stderr_exception(run.output, rank, script)
        where = error["where"] if error else None
    process_group = record.get("process_group", {})
    return RankReport(
        rank=rank,
        status=_status(run, rank),
        steps=record.get("steps"),
        params=_params_digest(record),
        first_batch=recorded[0]["batch"][:_SHORT] if recorded else None,
        saves=tuple(save["given"] for save in record.get("saves", []) if save.get("given")),
        destroyed=bool(process_group.get("destroyed")) if process_group.get("initialized") else None,
        where=where,
        probe_errors=tuple(record.get("probe_errors", ())),
    )


# -- the checks ----------------------------------------------------------------


def _launched(run: RunOutcome) -> Check:
    def fail(message: str) -> Check:
        return Check(LAUNCHED, False, message)

    failures = sorted(rank_failures(run), key=RankFailure.order)
    if run.timed_out:
        # A rank that failed on its own before the timeout is named after the waiting ones.
        before = [f"rank {f.rank} {f.what}" for f in failures if not f.reaction]
        earlier = f"; before that, {before[0]}" if before else ""
        return fail(
            f"stopped after {run.timeout:g} s: {'; '.join(hang_parts(run, 'was waiting'))}{earlier}; "
            f"torchrun and its ranks were then killed"
        )
    origin = next((f for f in failures if f.known), None)
    if origin is not None:
        others = [
            f"rank {f.rank} " + ("failed the same way" if f.what == origin.what else f.consequence)
            for f in failures
            if f is not origin
        ][:3]
        then = f" ({'; '.join(others)})" if others else ""
        return fail(f"rank {origin.rank} {origin.what}{then}; torchrun exited with code {run.returncode}")
    killed = [f.rank for f in failures]
    if killed:
        return fail(
            f"{_ranks(killed)} ended before the script did (killed by a signal, or stopped by torchrun "
            f"when another rank failed); torchrun exited with code {run.returncode}"
        )
    missing = _missing(run)
    if missing:
        return fail(
            f"{_ranks(missing)} never started the script (no probe record); torchrun exited with code "
            f"{run.returncode}: {_last_line(run.output)}"
        )
    if run.returncode != 0:
        return fail(f"torchrun exited with code {run.returncode}: {_last_line(run.output)}")
    kinds = {exit_of(record).get("kind") for record in run.records.values()}
    if kinds == {protocol.ExitKind.MAX_STEPS}:
        return Check(LAUNCHED, True, f"every rank stopped cleanly after max_steps={run.max_steps}; torchrun exited 0")
    return Check(LAUNCHED, True, "every rank ran the script to its end; torchrun exited 0")


def _process_group(run: RunOutcome) -> Check:
    missing = _not_reported(run, "its process group")
    if missing:
        return Check(PROCESS_GROUP, False, missing)
    backends = set()
    for rank, record in sorted(run.records.items()):
        group = record.get("process_group", {})
        if not group.get("initialized"):
            return Check(
                PROCESS_GROUP,
                False,
                f"rank {rank} never initialized a process group (no init_process_group): "
                f"each of the {run.nproc} processes trained alone",
            )
        if group.get("world_size") != run.nproc:
            return Check(
                PROCESS_GROUP,
                False,
                f"rank {rank} is in a process group of size {group.get('world_size')}, expected {run.nproc}",
            )
        backends.add(group.get("backend"))
    backend = "/".join(sorted(map(str, backends)))
    return Check(PROCESS_GROUP, True, f"{backend} process group of size {run.nproc} on every rank")


def _optimizer_name(optimizer: dict[str, Any]) -> str:
    return f"optimizer #{optimizer.get('index')} ({optimizer.get('type')})"


def _listed(names: list[str], total: int) -> str:
    more = f", and {total - len(names)} more" if total > len(names) else ""
    return ", ".join(names) + more


def _wrapped(run: RunOutcome) -> Check:
    def fail(message: str) -> Check:
        return Check(WRAPPED, False, message)

    missing = _not_reported(run, "its optimizers")
    if missing:
        return fail(missing)
    checked: dict[int, str] = {}
    for rank, record in sorted(run.records.items()):
        for optimizer in record.get("optimizers", []):
            if not optimizer.get("steps") or optimizer.get("inputs"):
                continue
            found = optimizer.get("ownership")
            name = _optimizer_name(optimizer)
            if found is None:
                return fail(f"{name} on rank {rank} stepped but its parameters were not checked (see probe errors)")
            if found.get("unwrapped"):
                on_rank = (
                    "" if all(_unwraps(r, optimizer.get("index")) for r in run.records.values()) else f" on rank {rank}"
                )
                return fail(_unwrapped_message(found, name + on_rank))
            checked[optimizer["index"]] = name
    if not checked:
        return fail("no optimizer stepped on any rank: there are no trained parameters to check")
    listed = ", ".join(name for _, name in sorted(checked.items()))
    return Check(
        WRAPPED,
        True,
        f"every parameter of {listed} belongs to a DistributedDataParallel module (checked at its first step)",
    )


def _unwraps(record: dict[str, Any], index: Any) -> bool:
    return any(
        o.get("index") == index and (o.get("ownership") or {}).get("unwrapped") for o in record.get("optimizers", [])
    )


def _unwrapped_message(found: dict[str, Any], optimizer: str) -> str:
    names = _listed(found.get("unwrapped_names", []), found["unwrapped"])
    modules = found.get("unwrapped_modules", [])
    consequence = "their gradients are never averaged across ranks (found at its first step)"
    if not modules:
        return (
            f"{optimizer} steps {found['unwrapped']} of its {found.get('parameters')} parameters outside any "
            f"DistributedDataParallel module ({names}): {consequence}"
        )
    described = ", ".join(f"{module['name']} ({module['type']})" for module in modules)
    verb = "is" if len(modules) == 1 else "are"
    return (
        f"{described} {verb} not wrapped in DistributedDataParallel, yet {optimizer} steps "
        f"{'its' if len(modules) == 1 else 'their'} parameters ({names}): {consequence}"
    )


def _divergence_cause(run: RunOutcome, index: int) -> str:
    """Why the parameters of optimizer ``index`` differ, as far as the records tell."""
    optimizers = [o for record in run.records.values() for o in record.get("optimizers", []) if o["index"] == index]
    ownership = [o.get("ownership") for o in optimizers]
    if any(found and found.get("unwrapped") for found in ownership):
        return "they belong to a module that is not wrapped in DistributedDataParallel (see wrapped)"
    # Found at the first step (parameters added after wrapping) or at the end (unfrozen after wrapping).
    found = [o.get(key) or {} for o in optimizers for key in ("at_end", "ownership")]
    unregistered = max(found, key=lambda f: f.get("unregistered", 0), default={})
    if unregistered.get("unregistered"):
        shown = _listed(unregistered.get("unregistered_names", []), unregistered["unregistered"])
        return (
            f"{shown} require grad but were not registered for reduction when DistributedDataParallel was built "
            f"(frozen when the model was wrapped and unfrozen later?): their gradients are never averaged; wrap "
            f"the model after changing requires_grad, or wrap it again"
        )
    if ownership and all(found is not None for found in ownership):
        return (
            "every parameter belongs to a DistributedDataParallel module, so something changes them differently on "
            "each rank outside the gradient all-reduce (an update after backward, a step skipped on some ranks)"
        )
    return "gradients are not averaged across ranks; is the model wrapped in DistributedDataParallel?"


def _stats_close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    stats_a: list[float] = a["stats"]
    stats_b: list[float] = b["stats"]
    (sum_a, squares_a, weighted_a), (sum_b, squares_b, weighted_b) = stats_a, stats_b
    squares = max(squares_a, squares_b)
    # |sum(x)| and |sum(w x)| are at most sqrt(numel * sum(x^2)) (|w| <= 1).
    bound = math.sqrt(max(a.get("numel", 0), 1) * squares)
    return (
        abs(squares_a - squares_b) <= SYNC_RTOL * squares
        and abs(sum_a - sum_b) <= SYNC_RTOL * bound
        and abs(weighted_a - weighted_b) <= SYNC_RTOL * bound
    )


def _in_sync(run: RunOutcome) -> Check:
    def fail(message: str) -> Check:
        return Check(IN_SYNC, False, message)

    missing = _not_reported(run, "its parameters")
    if missing:
        return fail(missing)
    unfinished = [rank for rank, record in sorted(run.records.items()) if not record.get("checksummed")]
    if unfinished:
        return fail(f"no parameter checksum from {_ranks(unfinished)}: the run did not finish")
    optimizers = {rank: record.get("optimizers", []) for rank, record in sorted(run.records.items())}
    counts = {rank: len(found) for rank, found in optimizers.items()}
    if not any(counts.values()):
        return fail("no optimizer stepped on any rank: there are no trained parameters to compare")
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"rank {rank}: {count}" for rank, count in counts.items())
        return fail(f"ranks stepped different numbers of optimizers ({listed})")
    bitwise = True
    for index in range(counts[0]):
        by_rank = {rank: found[index] for rank, found in optimizers.items()}
        reference = by_rank[0]
        if any(o.get("inputs") for o in by_rank.values()):
            continue  # the program's own inputs, each rank's (see _wrapped)
        if all(o["sha256"] == reference["sha256"] for o in by_rank.values()):
            continue
        if all(_stats_close(reference, o) for o in by_rank.values()):
            bitwise = False
            continue
        digests = ", ".join(f"rank {rank} {o['sha256'][:_SHORT]}" for rank, o in by_rank.items())
        return fail(
            f"parameters of optimizer #{index} ({reference['type']}) differ between ranks after the last step "
            f"({digests}): {_divergence_cause(run, index)}"
        )
    digest = _params_digest(run.records[0])
    if bitwise:
        return Check(IN_SYNC, True, f"parameters identical on every rank after the last step (sha256 {digest})")
    return Check(
        IN_SYNC,
        True,
        f"parameters equal on every rank after the last step within rounding (relative {SYNC_RTOL:g}), not bitwise",
    )


def _sharded_data(run: RunOutcome) -> Check:
    def fail(message: str) -> Check:
        return Check(SHARDED_DATA, False, message)

    missing = _not_reported(run, "the data it drew")
    if missing:
        return fail(missing)
    indices = sorted({loader["index"] for record in run.records.values() for loader in _training_loaders(record)})
    if not indices:
        return _sharded_inputs(run)
    passed = []
    for index in indices:
        loaders: dict[int, dict[str, Any]] = {}
        for rank, record in sorted(run.records.items()):
            found = [loader for loader in record.get("loaders", []) if loader["index"] == index]
            if not found:
                return fail(f"DataLoader #{index} was created on some ranks but not on rank {rank}")
            loaders[rank] = found[0]
        name = _loader_name(loaders[0])
        for (r, a), (s, b) in itertools.combinations(loaders.items(), 2):
            batches_a = [entry["batch"] for entry in a.get("recorded", [])]
            batches_b = [entry["batch"] for entry in b.get("recorded", [])]
            if batches_a and batches_a == batches_b:
                return fail(
                    f"ranks {r} and {s} drew the same batches from {name}: every rank reads the same data "
                    f"(no DistributedSampler?)"
                )
        if all(loader.get("repeats") and loader.get("recorded") for loader in loaders.values()):
            # drawn with replacement, or more draws than the data set holds: how many each rank draws is the
            # program's choice, and draws repeat; that the ranks drew different batches (above) is what shows
            # each draws its own
            passed.append(f"{name}: draws that repeat, different batches on every rank")
            continue
        per_rank, size = loaders[0].get("samples_per_epoch"), loaders[0].get("dataset_len")
        if per_rank and size and per_rank * run.nproc > size + run.nproc - 1:
            return fail(
                f"{name} gives each rank {per_rank} of the {size} samples per epoch; with {run.nproc} ranks "
                f"each should get about {math.ceil(size / run.nproc)} (no DistributedSampler?)"
            )
        for (r, a), (s, b) in itertools.combinations(loaders.items(), 2):
            shared, seen = _shared_samples(a, b)
            if shared > run.nproc - 1:
                return fail(
                    f"ranks {r} and {s} drew {shared} identical samples among the first {seen} each drew from "
                    f"{name}: the data is not partitioned across ranks"
                )
        share = f": {per_rank} of {size} samples per rank per epoch" if per_rank and size else ""
        passed.append(f"{name}{share}")
    return Check(SHARDED_DATA, True, "ranks drew different samples from " + "; ".join(passed))


def _sharded_inputs(run: RunOutcome) -> Check:
    """With no DataLoader before the steps (data kept in tensors, batched by hand): whether the ranks gave
    the wrapped model different inputs in its first training forwards."""
    fed: dict[int, dict[int, list[str]]] = {}  # wrapper -> rank -> hashes
    for rank, record in sorted(run.records.items()):
        for entry in record.get("inputs", []):
            if entry.get("recorded"):
                fed.setdefault(entry["wrapper"], {})[rank] = entry["recorded"]
    judged = {w: by_rank for w, by_rank in sorted(fed.items()) if len(by_rank) == len(run.records) > 1}
    if not judged:
        return Check(
            SHARDED_DATA,
            False,
            "no DataLoader batch preceded an optimizer step: nothing shows that the ranks train on different data",
        )
    for wrapper, by_rank in judged.items():
        for (r, a), (s, b) in itertools.combinations(by_rank.items(), 2):
            if a == b:
                return Check(
                    SHARDED_DATA,
                    False,
                    f"ranks {r} and {s} gave DistributedDataParallel #{wrapper} the same inputs in its first "
                    f"{len(a)} training steps: every rank trains on the same data (no DataLoader; the tensors are "
                    "not split between the ranks)",
                )
    return Check(
        SHARDED_DATA,
        True,
        "no DataLoader; the ranks gave the wrapped model different inputs in its first training steps",
    )


def _shared_samples(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int]:
    """Samples two ranks drew in the same epoch of one loader, and how many ``a`` drew."""

    def by_epoch(loader: dict[str, Any]) -> dict[int, set[str]]:
        epochs: dict[int, set[str]] = {}
        for entry in loader.get("recorded", []):
            epochs.setdefault(entry["iteration"], set()).update(entry.get("samples") or ())
        return epochs

    epochs_a, epochs_b = by_epoch(a), by_epoch(b)
    shared = sum(len(samples & epochs_b.get(epoch, set())) for epoch, samples in epochs_a.items())
    return shared, sum(map(len, epochs_a.values()))


def _steps(run: RunOutcome) -> Check:
    missing = _not_reported(run, "its optimizer steps")
    if missing:
        return Check(STEPS, False, missing)
    steps = {rank: record.get("steps", 0) for rank, record in sorted(run.records.items())}
    if not any(steps.values()):
        return Check(STEPS, False, "no optimizer step on any rank: the training loop was never reached")
    if len(set(steps.values())) > 1:
        listed = ", ".join(f"rank {rank}: {count}" for rank, count in steps.items())
        return Check(
            STEPS,
            False,
            f"ranks took different numbers of optimizer steps ({listed}): their gradient all-reduces no longer pair up",
        )
    count = steps[0]
    stopped = all(exit_of(record).get("kind") == protocol.ExitKind.MAX_STEPS for record in run.records.values())
    return Check(STEPS, True, f"{count} optimizer steps on every rank" + (" (the max_steps stop)" if stopped else ""))


def _single_writer(run: RunOutcome) -> Check:
    missing = _not_reported(run, "its saves")
    if missing:
        return Check(SINGLE_WRITER, False, missing)
    writers: dict[str, dict[int, int]] = {}
    given: dict[str, str] = {}
    for rank, record in sorted(run.records.items()):
        for save in record.get("saves", []):
            if save.get("path") is None:
                continue
            counts = writers.setdefault(save["path"], {})
            counts[rank] = counts.get(rank, 0) + 1
            given.setdefault(save["path"], save["given"])
    problems = [
        f"{save['given'] or 'a buffer'} holds the state_dict of the DDP wrapper (every key starts with `module.`): "
        "it loads only into a wrapped model; save `model.module.state_dict()`"
        for save in run.records.get(0, {}).get("saves", [])
        if save.get("wrapper")
    ][:1]
    for path, counts in writers.items():
        if len(counts) > 1:
            problems.append(
                f"{given[path]} was written by {_ranks(sorted(counts))}: torch.save runs on every rank; "
                f"save on rank 0 only"
            )
        elif 0 not in counts:
            problems.append(f"{given[path]} was written by {_ranks(sorted(counts))}, not by rank 0")
    openers: dict[str, set[int]] = {}
    for rank, record in sorted(run.records.items()):
        for write in record.get("writes", []):
            openers.setdefault(write["path"], set()).add(rank)
            given.setdefault(write["path"], write["given"])
    for path, ranks in openers.items():
        if len(ranks) > 1 and path not in writers:
            problems.append(
                f"{given[path]} was opened for writing by {_ranks(sorted(ranks))}: every rank writes the file; "
                f"write it on rank 0 only"
            )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check(SINGLE_WRITER, False, problems[0] + more)
    if not writers:
        return Check(SINGLE_WRITER, True, "no torch.save to a file")
    saves = sum(counts[0] for counts in writers.values())
    return Check(SINGLE_WRITER, True, f"{saves} torch.save call(s), all on rank 0: {', '.join(given.values())}")


def _clean_exit(run: RunOutcome) -> Check:
    if run.timed_out:
        parts = hang_parts(run, "was still running")
        return Check(CLEAN_EXIT, False, f"hang: after {run.timeout:g} s, " + "; ".join(parts))
    not_destroyed = [
        rank
        for rank, record in sorted(run.records.items())
        if record.get("process_group", {}).get("initialized") and not record["process_group"].get("destroyed")
    ]
    if not_destroyed:
        killed = [rank for rank in not_destroyed if not finished(run.records[rank])]
        note = f" ({_ranks(killed)} killed before the script ended)" if killed else ""
        return Check(CLEAN_EXIT, False, f"{_ranks(not_destroyed)} exited without destroy_process_group(){note}")
    if not any(record.get("process_group", {}).get("initialized") for record in run.records.values()):
        return Check(CLEAN_EXIT, True, f"no hang (finished in {run.duration_s:.1f} s); no process group to destroy")
    return Check(CLEAN_EXIT, True, f"destroy_process_group() on every rank; finished in {run.duration_s:.1f} s")
