"""Several files: converted in worker processes (``-j``), reported in input order, then one summary line.

``convert()`` is pure and takes and returns plain data, so only bytes and
results cross between processes.  Each file is reported exactly as a single
file would be.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
from collections import Counter
from typing import TYPE_CHECKING

from ddpify import Severity
from ddpify.cli import backend
from ddpify.cli.exits import ExitCode, Failure, Outcome
from ddpify.cli.files import read_input
from ddpify.cli.report import Progress, describe, internal_error_message, isatty, summary_line
from ddpify.cli.results import finish

if TYPE_CHECKING:
    from collections.abc import Generator

    from ddpify import Conversion, Options
    from ddpify.cli.report import Reporter
    from ddpify.cli.request import Job, Request

Result = tuple[bytes, "Conversion"] | Exception


def run_many(request: Request, jobs: list[Job], reporter: Reporter) -> ExitCode:
    progress = Progress(len(jobs), enabled=not request.quiet and isatty(sys.stderr))
    outcomes: Counter[Outcome] = Counter()
    warnings = 0
    progress.show(0)
    # closing(): an interruption stops the pool at once, not when the generator is collected.
    with contextlib.closing(conversions(request, jobs)) as results:
        try:
            for done, (job, result) in enumerate(zip(jobs, results, strict=True), start=1):
                progress.clear()
                if not isinstance(result, Exception):
                    warnings += sum(1 for d in result[1].diagnostics if d.severity is Severity.WARNING)
                outcomes[_finish_one_of_many(request, job, result, reporter)] += 1
                progress.show(done)
        finally:
            progress.clear()
    reporter.say(summary_line(outcomes, warnings=warnings))
    return max(outcome.code for outcome in outcomes)


def _finish_one_of_many(request: Request, job: Job, result: Result, reporter: Reporter) -> Outcome:
    """``finish`` for one of several files: a failure is reported and counted, not raised."""
    try:
        if isinstance(result, Exception):
            raise result
        source, conversion = result
        return finish(request, job, source, conversion, reporter)
    except Failure as failure:
        reporter.error(f"error: {failure.message}")
        return Outcome.INTERNAL_ERROR if failure.code is ExitCode.INTERNAL_ERROR else Outcome.FAILED
    except BrokenPipeError:
        raise
    except Exception as exc:
        reporter.error(f"error: {internal_error_message(job.name, describe(exc))}")
        return Outcome.INTERNAL_ERROR


def conversions(request: Request, jobs: list[Job]) -> Generator[Result, None, None]:
    """Each job's source and conversion, in the order of ``jobs``, or what went wrong reading or converting it."""
    workers = min(request.jobs or cpu_count(), len(jobs))
    if workers <= 1:
        for job in jobs:
            yield _read_and_convert(job, request.options)
        return
    sources: list[bytes | Failure] = []
    for job in jobs:
        try:
            sources.append(read_input(job.src))
        except Failure as failure:
            sources.append(failure)
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers)
    try:
        futures = {
            index: pool.submit(_convert_in_worker, source, job.name, request.options)
            for index, (job, source) in enumerate(zip(jobs, sources, strict=True))
            if not isinstance(source, Failure)
        }
        for index, source in enumerate(sources):
            if isinstance(source, Failure):
                yield source
                continue
            item: Result
            try:
                item = (source, futures[index].result())
            except Exception as exc:
                item = exc
            yield item
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _read_and_convert(job: Job, options: Options) -> Result:
    try:
        source = read_input(job.src)
    except Failure as failure:
        return failure
    try:
        return source, backend.convert(source, path=job.name, options=options)
    except Exception as exc:
        return exc


def _convert_in_worker(source: bytes, path: str, options: Options) -> Conversion:
    return backend.convert(source, path=path, options=options)


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
