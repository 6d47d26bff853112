"""Several files: converted in worker processes (``-j``), reported in input order, then one summary line.

``convert()`` is pure and takes and returns plain data, so only bytes and
results cross between processes; every file is read and written by the main
process, each one reported exactly as a single file would be.

Before anything is converted, the first pass (:mod:`ddpify.cli.screening`)
reads every input once with ``ast``: which inputs are modules of another
input's program, and which programs may train. A program that cannot train is
"nothing to do" at once; only the others are read whole and converted, a few
at a time (at most two per worker waiting), so that memory follows the largest
program rather than the repository.

Signals (:mod:`ddpify.cli.signals`): SIGINT (Ctrl-C) and SIGTERM stop the run.
A file being written and reported is finished first (milliseconds), unless a
second signal comes; a program's files are written all or none. The workers
ignore SIGINT (a terminal sends it to the whole process group; the main process
decides) and are terminated at once. The run ends with ``interrupted: N of M
files written`` and exit code 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpify import Conversion, Severity, Status
from ddpify.cli import backend
from ddpify.cli.exits import ExitCode, Failure, Interrupted, NeedsFolder, Outcome
from ddpify.cli.files import read_input
from ddpify.cli.notebooks import located, read_script
from ddpify.cli.program import Linked, ProgramFiles, link
from ddpify.cli.report import Progress, describe, internal_error_message, isatty, plural, summary_line
from ddpify.cli.results import finish
from ddpify.cli.screening import screen
from ddpify.cli.signals import STOP_SIGNALS, blocked, finishing
from ddpify.diagnostics import nothing_to_do
from ddpify.notebook import is_notebook

if TYPE_CHECKING:
    from collections.abc import Generator

    from ddpify import Options
    from ddpify.cli.report import Reporter
    from ddpify.cli.request import Job, Request
    from ddpify.notebook import Script
    from ddpify.result import LocalModule


@dataclass(frozen=True)
class Converted:
    """One input's text (a notebook's: its script), its conversion, and the program it was converted with (if any)."""

    source: bytes
    conversion: Conversion
    program: ProgramFiles | None = None


Result = Converted | Exception

_POLL = 0.005  # seconds between looks at a conversion still running in a worker


def run_many(request: Request, jobs: list[Job], reporter: Reporter) -> ExitCode:
    linked = link(jobs, max_size=request.max_size)
    # The modules of other inputs' programs come last: by then those programs have placed them.
    jobs = [*linked.entries, *(job for job in jobs if job.src in linked.modules)]
    progress = Progress(len(jobs), enabled=not request.quiet and isatty(sys.stderr))
    outcomes: Counter[Outcome] = Counter()
    warnings = 0
    progress.show(0)
    # closing(): an interruption stops the workers at once, not when the generator is collected.
    with contextlib.closing(conversions(request, jobs, linked)) as results:
        try:
            for done, (job, result) in enumerate(zip(jobs, results, strict=True), start=1):
                with finishing():
                    progress.clear()
                    if not isinstance(result, Exception):
                        warnings += sum(1 for d in result.conversion.diagnostics if d.severity is Severity.WARNING)
                    if job.src in linked.modules:
                        outcome = _finish_module(request, job, result, reporter, linked)
                    else:
                        outcome = _finish_one_of_many(request, job, result, reporter)
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
    if not isinstance(result, Exception) and screen(result.source) is None:
        # Its findings came with its program's; it is no "nothing to do".
        reporter.error(f"error: {job.name}: not valid Python, so the program that imports it is not converted")
        return Outcome.INVALID
    if not isinstance(result, Exception):
        result = Converted(result.source, Conversion(result.source, result.source, Status.UNCHANGED))
    return _finish_one_of_many(request, job, result, reporter)


def _finish_one_of_many(request: Request, job: Job, result: Result, reporter: Reporter) -> Outcome:
    """``finish`` for one of several files: a failure is reported and counted, not raised."""
    try:
        if isinstance(result, Exception):
            raise result
        return finish(request, job, result.source, result.conversion, reporter, result.program)
    except NeedsFolder as needs:  # not a failure of the run: this program is converted as a whole elsewhere
        reporter.say(needs.status)
        return Outcome.NEEDS_FOLDER
    except Failure as failure:
        reporter.error(f"error: {failure.message}")
        return Outcome.INTERNAL_ERROR if failure.code is ExitCode.INTERNAL_ERROR else Outcome.FAILED
    except BrokenPipeError:
        raise
    except Exception as exc:
        reporter.error(f"error: {internal_error_message(job.name, describe(exc))}")
        return Outcome.INTERNAL_ERROR


@dataclass(frozen=True)
class _Task:
    """An input read and its program found, to be converted; a notebook's script, whose findings name cells."""

    source: bytes
    program: ProgramFiles | None
    script: Script | None = None

    def converted(self, conversion: Conversion) -> Converted:
        if self.script is not None:
            conversion = self.script.report(conversion)
        return Converted(self.source, conversion, self.program)


def conversions(request: Request, jobs: list[Job], linked: Linked) -> Generator[Result, None, None]:
    """Each job's result, in the order of ``jobs``: its text and conversion (with the modules of its
    program), or what went wrong reading or converting it. A job that is a module of another
    input's program is read, not converted; one whose program cannot train is not converted either."""
    workers = min(request.jobs or cpu_count(), len(jobs))
    if workers <= 1:
        for job in jobs:
            prepared = _prepare(job, request, linked)
            yield prepared if not isinstance(prepared, _Task) else _convert_here(job, request, prepared)
        return
    pool = _start_pool(workers)
    waiting: deque[tuple[Job, Result | _Task, multiprocessing.pool.AsyncResult[Conversion] | None]] = deque()
    ahead = 2 * workers
    try:
        for job in jobs:
            prepared = _prepare(job, request, linked)
            submitted = None
            if isinstance(prepared, _Task):
                modules = prepared.program.modules if prepared.program is not None else ()
                task = (prepared.source, job.name, request.options_for(job), modules)
                submitted = pool.apply_async(_convert_task, (task,))
            waiting.append((job, prepared, submitted))
            # What is ready goes out in order; at most `ahead` conversions (and a few more inputs read) wait.
            while waiting and (
                waiting[0][2] is None
                or len(waiting) > 4 * ahead
                or sum(1 for *_, pending in waiting if pending is not None) > ahead
            ):
                yield _collect(*waiting.popleft())
        while waiting:
            yield _collect(*waiting.popleft())
        pool.close()
    finally:
        with blocked():  # a stop signal now takes effect after the pool's threads let go of their locks
            pool.terminate()  # at once: nothing is left to wait for, or the run was interrupted
            pool.join()


def _prepare(job: Job, request: Request, linked: Linked) -> Result | _Task:
    """What a job needs: its text, and its program when it may train (the first pass decides)."""
    try:
        source = read_input(job.src, max_size=request.max_size)
        script = read_script(job.src, source) if is_notebook(job.src) else None
    except Failure as failure:
        return failure
    if script is not None:
        source = script.source
    if job.src in linked.modules:
        return Converted(source, Conversion(source, source, Status.UNCHANGED))
    sketch = linked.sketches.get(job.src)
    if sketch is not None and not sketch.may_train():
        unchanged = Conversion(source, source, Status.UNCHANGED, (nothing_to_do(job.name),))
        return Converted(source, script.report(unchanged) if script is not None else unchanged)
    try:
        program = linked.program(job, source, max_size=request.max_size)
        return _Task(source, located(script, program) if script is not None else program, script)
    except Failure as failure:
        return failure


def _collect(
    job: Job, prepared: Result | _Task, submitted: multiprocessing.pool.AsyncResult[Conversion] | None
) -> Result:
    if submitted is None:
        assert not isinstance(prepared, _Task)
        return prepared
    assert isinstance(prepared, _Task)
    # A stop signal raised while waiting inside the result's lock could leave that lock held, and the
    # pool's result thread (then terminate()) would wait forever: so the wait is a sleep, and the result
    # is taken, once there, with the signals held back.
    while not submitted.ready():
        time.sleep(_POLL)
    try:
        with blocked():
            conversion = submitted.get()
        return prepared.converted(conversion)
    except Exception as exc:  # raised by convert() in the worker, or the worker died
        return exc


def _convert_here(job: Job, request: Request, task: _Task) -> Result:
    try:
        modules = task.program.modules if task.program is not None else ()
        conversion = backend.convert(task.source, path=job.name, options=request.options_for(job), modules=modules)
    except Exception as exc:
        return exc
    return task.converted(conversion)


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


def _convert_task(task: tuple[bytes, str, Options, tuple[LocalModule, ...]]) -> Conversion:
    source, path, options, modules = task
    return backend.convert(source, path=path, options=options, modules=modules)


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
