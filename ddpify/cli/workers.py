"""Several files: converted in worker processes (``-j``), reported in input order, then one summary line.

``convert()`` is pure and takes and returns plain data, so only bytes and
results cross between processes; every file is read and written by the main
process, each one reported exactly as a single file would be.

Signals (:mod:`ddpify.cli.signals`): SIGINT (Ctrl-C) and SIGTERM stop the
run. A file being written and reported is finished first (milliseconds),
unless a second signal comes.  The workers ignore SIGINT (a terminal sends it to
the whole process group; the main process decides) and are terminated at
once; a write in progress is abandoned with its temporary file removed, so no
half-written file is left.  The run ends with ``interrupted: N of M files
written`` and exit code 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
from collections import Counter
from typing import TYPE_CHECKING

from ddpify import Conversion, Severity, Status
from ddpify.cli import backend
from ddpify.cli.exits import ExitCode, Failure, Interrupted, Outcome
from ddpify.cli.files import read_input
from ddpify.cli.program import Linked, ProgramFiles, link
from ddpify.cli.report import Progress, describe, internal_error_message, isatty, plural, summary_line
from ddpify.cli.results import finish
from ddpify.cli.signals import STOP_SIGNALS, finishing

if TYPE_CHECKING:
    from collections.abc import Container, Generator, Iterator

    from ddpify import Options
    from ddpify.cli.report import Reporter
    from ddpify.cli.request import Job, Request
    from ddpify.result import LocalModule

Result = tuple[bytes, "Conversion"] | Exception


def run_many(request: Request, jobs: list[Job], reporter: Reporter) -> ExitCode:
    linked = link(jobs, max_size=request.max_size)
    # The modules of other inputs' programs come last: by then those programs have placed them.
    jobs = [*linked.entries, *(job for job in jobs if job.src in linked.modules)]
    programs = linked.programs
    progress = Progress(len(jobs), enabled=not request.quiet and isatty(sys.stderr))
    outcomes: Counter[Outcome] = Counter()
    warnings = 0
    progress.show(0)
    # closing(): an interruption stops the workers at once, not when the generator is collected.
    with contextlib.closing(conversions(request, jobs, programs, linked.modules)) as results:
        try:
            for done, (job, result) in enumerate(zip(jobs, results, strict=True), start=1):
                with finishing():
                    progress.clear()
                    if not isinstance(result, Exception):
                        warnings += sum(1 for d in result[1].diagnostics if d.severity is Severity.WARNING)
                    if job.src in linked.modules:
                        outcome = _finish_module(request, job, result, reporter, linked)
                    else:
                        outcome = _finish_one_of_many(request, job, result, reporter, programs.get(job.src))
                    outcomes[outcome] += 1
                    progress.show(done)
        except Interrupted as stop:
            written = outcomes[Outcome.CONVERTED]
            message = f"interrupted: {written} of {plural(len(jobs), 'file')} written"
            raise Interrupted(stop.signum, message) from None
        finally:
            progress.clear()
    reporter.say(summary_line(outcomes, warnings=warnings))
    return max(outcome.code for outcome in outcomes)


def _finish_module(request: Request, job: Job, result: Result, reporter: Reporter, linked: Linked) -> Outcome:
    """An input that is a module of another input's program: reported with the program that wrote it,
    or, when none did, passed on as it is."""
    entry = linked.claimed_by(job)
    if entry is not None:
        reporter.say(f"{job.name}: converted with {entry}, whose program imports it")
        return Outcome.CURRENT if request.check else Outcome.WOULD_CONVERT if request.diff else Outcome.CONVERTED
    if not isinstance(result, Exception):
        source = result[0]
        result = (source, Conversion(source, source, Status.UNCHANGED))
    return _finish_one_of_many(request, job, result, reporter, None)


def _finish_one_of_many(
    request: Request, job: Job, result: Result, reporter: Reporter, program: ProgramFiles | None
) -> Outcome:
    """``finish`` for one of several files: a failure is reported and counted, not raised."""
    try:
        if isinstance(result, Exception):
            raise result
        source, conversion = result
        return finish(request, job, source, conversion, reporter, program)
    except Failure as failure:
        reporter.error(f"error: {failure.message}")
        return Outcome.INTERNAL_ERROR if failure.code is ExitCode.INTERNAL_ERROR else Outcome.FAILED
    except BrokenPipeError:
        raise
    except Exception as exc:
        reporter.error(f"error: {internal_error_message(job.name, describe(exc))}")
        return Outcome.INTERNAL_ERROR


def conversions(
    request: Request, jobs: list[Job], programs: dict[str, ProgramFiles], modules: Container[str] = ()
) -> Generator[Result, None, None]:
    """Each job's source and conversion (with the modules of its program), in the order of ``jobs``,
    or what went wrong reading or converting it; a job in ``modules`` is read, not converted."""
    converting = [job for job in jobs if job.src not in modules]
    yield from _conversions(request, converting, programs)
    for job in jobs:
        if job.src in modules:
            try:
                source = _source(job, request, programs)
            except Failure as failure:
                yield failure
                continue
            yield source, Conversion(source, source, Status.UNCHANGED)


def _conversions(request: Request, jobs: list[Job], programs: dict[str, ProgramFiles]) -> Generator[Result, None, None]:
    workers = min(request.jobs or cpu_count(), len(jobs))
    if workers <= 1:
        for job in jobs:
            yield _read_and_convert(job, request, programs)
        return
    sources: list[bytes | Failure] = []
    for job in jobs:
        try:
            sources.append(_source(job, request, programs))
        except Failure as failure:
            sources.append(failure)
    tasks = [
        (source, job.name, request.options, _modules(programs, job))
        for job, source in zip(jobs, sources, strict=True)
        if not isinstance(source, Failure)
    ]
    pool = _start_pool(workers)
    try:
        converted = pool.imap(_convert_task, tasks, chunksize=1)
        for source in sources:
            yield source if isinstance(source, Failure) else _next_result(source, converted)
        pool.close()
    finally:
        pool.terminate()  # at once: nothing is left to wait for, or the run was interrupted
        pool.join()


def _start_pool(workers: int) -> multiprocessing.pool.Pool:
    # The stop signals are blocked while the workers start, so that none of
    # them runs the main process's handler before it installs its own.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _next_result(source: bytes, converted: Iterator[Conversion]) -> Result:
    try:
        return source, next(converted)
    except Exception as exc:  # raised by convert() in the worker, or the worker died
        return exc


def _modules(programs: dict[str, ProgramFiles], job: Job) -> tuple[LocalModule, ...]:
    program = programs.get(job.src)
    return program.modules if program is not None else ()


def _convert_task(task: tuple[bytes, str, Options, tuple[LocalModule, ...]]) -> Conversion:
    source, path, options, modules = task
    return backend.convert(source, path=path, options=options, modules=modules)


def _source(job: Job, request: Request, programs: dict[str, ProgramFiles]) -> bytes:
    """The input's text: as read to find its program (so the two agree), or read now."""
    program = programs.get(job.src)
    return program.source if program is not None else read_input(job.src, max_size=request.max_size)


def _read_and_convert(job: Job, request: Request, programs: dict[str, ProgramFiles]) -> Result:
    try:
        source = _source(job, request, programs)
    except Failure as failure:
        return failure
    try:
        modules = _modules(programs, job)
        return source, backend.convert(source, path=job.name, options=request.options, modules=modules)
    except Exception as exc:
        return exc


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
