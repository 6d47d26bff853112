"""Judge a run: from what the ranks recorded to a ``VerifyReport``. No I/O.

Checks, in order, each with its own failure messages:

``launched``
    torchrun exited 0 (a stop at ``max_steps`` counts as clean). Fails with:
    "timed out after T s ...", "rank R raised E at script.py:L", "rank R
    called sys.exit(C)", "rank R was killed before the script ended ...",
    "rank R never started the script ...", "torchrun exited with code C ...".
``process-group``
    every rank joined a default process group of size N. Fails with: "rank R
    never initialized a process group ..." or "rank R is in a process group
    of size W, expected N".
``in-sync``
    after the last step (at the ``max_steps`` stop, otherwise at exit) every
    rank holds the same parameters, optimizer by optimizer: the same sha256,
    or float64 statistics equal within ``SYNC_RTOL`` (rounding, not
    bitwise). Fails with: "parameters of optimizer #I (T) differ between
    ranks ...", "ranks stepped different numbers of optimizers ...", "no
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
    "ranks R and S drew K identical samples ...", "no DataLoader batch
    preceded an optimizer step ...". Limits: a script that shards by building
    a different dataset on every rank is reported as not sharded, and a
    dataset with many identical samples may be reported as overlapping.
``steps``
    every rank took the same number of optimizer steps, more than zero.
    Fails with: "ranks took different numbers of optimizer steps ..." or "no
    optimizer step on any rank ...".
``single-writer``
    every file written with ``torch.save`` was written by global rank 0
    only. Fails with: "P was written by ranks 0, 1 ..." or "P was written by
    rank R, not by rank 0". In-memory saves (``io.BytesIO``) are not judged.
``clean-exit``
    no hang and ``destroy_process_group()`` on every rank that created one.
    Fails with: "hang: after T s, rank R was still running at
    script.py:L `code`", "rank R exited without destroy_process_group()".

Checks that compare ranks fail with "rank R did not report ..." when a rank
left no record: what was not observed is not proven.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import linecache
import math
import os
import re
import tokenize
from collections.abc import Callable, Mapping
from typing import Any

from ddpify.verify import protocol
from ddpify.verify.launcher import RunOutcome
from ddpify.verify.report import Check, RankReport, VerifyReport

LAUNCHED = "launched"
PROCESS_GROUP = "process-group"
IN_SYNC = "in-sync"
SHARDED_DATA = "sharded-data"
STEPS = "steps"
SINGLE_WRITER = "single-writer"
CLEAN_EXIT = "clean-exit"

CHECK_NAMES = (LAUNCHED, PROCESS_GROUP, IN_SYNC, SHARDED_DATA, STEPS, SINGLE_WRITER, CLEAN_EXIT)

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


def _exit(record: dict[str, Any]) -> dict[str, Any]:
    return record.get("exit") or {}


def _finished(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("phase") == protocol.Phase.EXITED


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
    shas = [optimizer["sha256"] for optimizer in record.get("optimizers", [])]
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
    if not _finished(record):
        return "stuck" if run.timed_out else "killed"
    exit_ = _exit(record)
    kind = exit_.get("kind")
    if kind == protocol.ExitKind.EXCEPTION:
        return "error"
    if kind == protocol.ExitKind.EXIT:
        return f"exit {exit_.get('code')}"
    return str(kind)


_FRAME = re.compile(r'File "(?P<file>.+)", line (?P<line>\d+) in ')


def hang_location(stack: str, script: str) -> str | None:
    """``script.py:L `code``` of the innermost frame of ``script`` in a faulthandler dump.

    The main thread (the one that runs the script through runpy) is preferred
    over threads the script started.
    """
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack)
    threads.sort(key=lambda thread: "runpy" not in thread)
    for thread in threads:
        for match in _FRAME.finditer(thread):
            if os.path.abspath(match["file"]) == os.path.abspath(script):
                line = int(match["line"])
                code = _without_comment(linecache.getline(script, line)).strip()
                where = f"{os.path.basename(script)}:{line}"
                return f"{where} `{code}`" if code else where
    return None


def _without_comment(line: str) -> str:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return line  # a line that does not stand alone, e.g. inside a bracket
    comments = [token for token in tokens if token.type == tokenize.COMMENT]
    return line[: comments[0].start[1]] if comments else line


def _rank_report(run: RunOutcome, rank: int) -> RankReport:
    record = run.records.get(rank)
    if record is None:
        return RankReport(rank, "missing", None, None, None, (), None, None)
    training = _training_loaders(record) or record.get("loaders", [])
    recorded = training[0].get("recorded", []) if training else []
    where = _exit(record).get("where")
    if run.timed_out and not _finished(record) and rank in run.stacks:
        where = hang_location(run.stacks[rank], record.get("script", run.script))
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

    if run.timed_out:
        return fail(f"timed out after {run.timeout:g} s: torchrun and its ranks were killed (see clean-exit)")
    records = run.records
    for rank, record in sorted(records.items()):
        exit_ = _exit(record)
        if exit_.get("kind") == protocol.ExitKind.EXCEPTION:
            where = f" at {exit_['where']}" if exit_.get("where") else ""
            return fail(f"rank {rank} raised {exit_.get('error')}{where}; torchrun exited with code {run.returncode}")
    for rank, record in sorted(records.items()):
        exit_ = _exit(record)
        if exit_.get("kind") == protocol.ExitKind.EXIT:
            return fail(f"rank {rank} called sys.exit({exit_.get('code')}); torchrun exited with code {run.returncode}")
    killed = [rank for rank, record in sorted(records.items()) if not _finished(record)]
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
    kinds = {_exit(record).get("kind") for record in records.values()}
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


def _stats_close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    (sum_a, squares_a, weighted_a), (sum_b, squares_b, weighted_b) = a["stats"], b["stats"]
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
        if all(o["sha256"] == reference["sha256"] for o in by_rank.values()):
            continue
        if all(_stats_close(reference, o) for o in by_rank.values()):
            bitwise = False
            continue
        digests = ", ".join(f"rank {rank} {o['sha256'][:_SHORT]}" for rank, o in by_rank.items())
        return fail(
            f"parameters of optimizer #{index} ({reference['type']}) differ between ranks after the last step "
            f"({digests}): gradients are not averaged across ranks; is the model wrapped in "
            f"DistributedDataParallel?"
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
        return fail(
            "no DataLoader batch preceded an optimizer step: nothing shows that the ranks train on different data"
        )
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
    stopped = all(_exit(record).get("kind") == protocol.ExitKind.MAX_STEPS for record in run.records.values())
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
    problems = []
    for path, counts in writers.items():
        if len(counts) > 1:
            problems.append(
                f"{given[path]} was written by {_ranks(sorted(counts))}: torch.save runs on every rank; "
                f"save on rank 0 only"
            )
        elif 0 not in counts:
            problems.append(f"{given[path]} was written by {_ranks(sorted(counts))}, not by rank 0")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check(SINGLE_WRITER, False, problems[0] + more)
    if not writers:
        return Check(SINGLE_WRITER, True, "no torch.save to a file")
    saves = sum(counts[0] for counts in writers.values())
    return Check(SINGLE_WRITER, True, f"{saves} torch.save call(s), all on rank 0: {', '.join(given.values())}")


def _clean_exit(run: RunOutcome) -> Check:
    if run.timed_out:
        parts = []
        for rank in range(run.nproc):
            record = run.records.get(rank)
            if record is None:
                parts.append(f"rank {rank} never started the script")
            elif not _finished(record):
                stack = run.stacks.get(rank)
                where = hang_location(stack, record.get("script", run.script)) if stack else None
                parts.append(f"rank {rank} was still running" + (f" at {where}" if where else ""))
        if not parts:
            parts.append("every rank finished but torchrun did not exit")
        return Check(CLEAN_EXIT, False, f"hang: after {run.timeout:g} s, " + "; ".join(parts))
    not_destroyed = [
        rank
        for rank, record in sorted(run.records.items())
        if record.get("process_group", {}).get("initialized") and not record["process_group"].get("destroyed")
    ]
    if not_destroyed:
        killed = [rank for rank in not_destroyed if not _finished(run.records[rank])]
        note = f" ({_ranks(killed)} killed before the script ended)" if killed else ""
        return Check(CLEAN_EXIT, False, f"{_ranks(not_destroyed)} exited without destroy_process_group(){note}")
    if not any(record.get("process_group", {}).get("initialized") for record in run.records.values()):
        return Check(CLEAN_EXIT, True, f"no hang (finished in {run.duration_s:.1f} s); no process group to destroy")
    return Check(CLEAN_EXIT, True, f"destroy_process_group() on every rank; finished in {run.duration_s:.1f} s")
