"""One run of the command: validate, then convert a single script or hand several to the workers.

For a single script this also writes the ``--sbatch`` batch script and runs
``--verify`` once the output is written (or, with ``--check``, once it is known
to be current).  The verification runs in the current folder, as ``torchrun
train_ddp.py`` typed in the same shell would.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpify import launchers
from ddpify.cli import backend
from ddpify.cli.discovery import plan
from ddpify.cli.exits import ExitCode, Failure, Outcome
from ddpify.cli.files import check_target, read_input, write_atomically, write_stdout
from ddpify.cli.program import ProgramFiles, local_modules
from ddpify.cli.report import Reporter, error, plural
from ddpify.cli.request import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_NODES,
    DEFAULT_NPROC,
    DEFAULT_TIMEOUT_S,
    ReportFormat,
    refuse_notebook,
    require_torch,
    same_file,
    single_job,
    validate,
)
from ddpify.cli.results import finish
from ddpify.cli.workers import finishing, run_many

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ddpify.cli.request import Job, Request


def run(request: Request) -> ExitCode:
    several = request.several
    validate(request, several=several)
    reporter = Reporter(quiet=request.quiet)
    if request.config is not None:
        reporter.say(f"config: [tool.ddpify] of {request.config}")
    if several:
        return run_many(request, plan(request, reporter), reporter)
    return _run_one(request, single_job(request), reporter)


def _run_one(request: Request, job: Job, reporter: Reporter) -> ExitCode:
    _check_targets(request, job)
    source = read_input(job.src, max_size=request.max_size)
    program = local_modules(job.src, source, max_size=request.max_size) if job.src != "-" else None
    if program is not None and job.make_folders and request.output is not None:
        # `-o DIR/`: the program keeps its layout under DIR.
        job = replace(job, target=os.path.join(request.output, program.relative(job.src)))
    modules = program.modules if program is not None else ()
    conversion = backend.convert(source, path=job.name, options=request.options, modules=modules)
    with finishing():
        outcome = finish(request, job, source, conversion, reporter, program)
    if program is not None and outcome is Outcome.CONVERTED and job.target is not None and not job.make_folders:
        _say_where_modules_are(program, job.target, reporter)
    if outcome.code is not ExitCode.OK:
        return outcome.code
    if request.sbatch is not None:
        assert job.target is not None  # validate(): --sbatch needs -o
        _write_sbatch(request, job.target, reporter)
    if request.verify:
        assert job.target is not None  # validate(): --verify needs -o
        return verify_script(
            job.target,
            nproc=request.nproc,
            timeout=request.timeout,
            max_steps=request.max_steps,
            report_format=request.report_format,
            script_args=request.script_args,
            reporter=reporter,
        )
    if outcome is Outcome.CONVERTED and job.target is not None and not job.in_place:
        _say_launch_commands(request, job.target, reporter)
    return ExitCode.OK


def _say_where_modules_are(program: ProgramFiles, target: str, reporter: Reporter) -> None:
    """A script written away from the local modules it imports cannot find them: say so."""
    folder = program.entry.parent
    if not program.modules or Path(target).resolve().parent == folder:
        return
    names = ", ".join(module.path for module in program.modules[:3]) + (", ..." if len(program.modules) > 3 else "")
    reporter.say(
        f"note: {target} imports {names} from {_shown(folder)}: run it with PYTHONPATH={_shown(folder)}, "
        f"or write the whole program into a folder with -o DIR/"
    )


def _shown(folder: Path) -> str:
    relative = os.path.relpath(folder)
    return shlex.quote(str(folder) if relative.startswith("..") else relative)


def _check_targets(request: Request, job: Job) -> None:
    """Refuse, before anything is read or written, any output that could not be written."""
    if job.target is not None and not job.in_place and same_file(job.src, job.target):
        raise Failure(f"{job.target} is the input file; pass --in-place to rewrite it")
    if job.target is not None and (request.check or not request.diff):
        check_target(job.target, hint="give a file or -o -", make_folders=job.make_folders)
    if request.sbatch is not None:
        check_target(request.sbatch, hint="give a file")


def check_verifiable(script: str) -> None:
    """Raise ``Failure`` unless ``ddpify verify`` can run ``script``."""
    refuse_notebook(script)
    if not os.path.exists(script):
        raise Failure(f"{script}: {os.strerror(errno.ENOENT)}")
    if not os.path.isfile(script):
        raise Failure(f"{script}: not a file; ddpify verify runs one script")
    require_torch("ddpify verify")


def verify_script(
    target: str,
    *,
    nproc: int | None,
    timeout: float | None,
    max_steps: int | None,
    report_format: ReportFormat | None,
    script_args: Sequence[str],
    reporter: Reporter,
) -> ExitCode:
    """Run ``target`` under torchrun and report whether it trains in data-parallel."""
    from ddpify.verify.checks import LAUNCHED

    nproc = nproc or DEFAULT_NPROC
    as_json = report_format is ReportFormat.JSON
    reporter.say(f"verifying {target} under torchrun with {nproc} processes")
    report = backend.verify(
        Path(target),
        nproc=nproc,
        script_args=script_args,
        timeout=timeout or DEFAULT_TIMEOUT_S,
        max_steps=max_steps,
        workdir=Path.cwd(),
    )
    text = json.dumps(report.to_json(), indent=2) if as_json else report.format_table()
    write_stdout(f"{text}\n".encode())
    if report.ok:
        reporter.say(f"{target} trains in data-parallel: {plural(len(report.checks), 'check')} passed")
        return ExitCode.OK
    failed = [check.name for check in report.failed]
    # A script that did not run to the end says why in its own output (a
    # traceback, an argparse error); the JSON report carries that output itself.
    if LAUNCHED in failed and not as_json and report.output.strip():
        reporter.say("--- torchrun output ---")
        reporter.say(report.output.rstrip())
    error(
        f"error: {target} does not train in data-parallel ({plural(len(failed), 'check')} failed: {', '.join(failed)})"
    )
    return ExitCode.NOT_DATA_PARALLEL


def _say_launch_commands(request: Request, target: str, reporter: Reporter) -> None:
    commands = launchers.torchrun_commands(target, [])
    reporter.say(f"run it: {commands['single_node']}")
    reporter.say(f"on several nodes: {commands['multi_node']}")
    if request.spawn:
        reporter.say(f"or without torchrun: python {shlex.quote(target)}")


def _write_sbatch(request: Request, target: str, reporter: Reporter) -> None:
    path = request.sbatch
    assert path is not None
    nodes = request.nodes or DEFAULT_NODES
    gpus = request.gpus_per_node or DEFAULT_GPUS_PER_NODE
    try:
        text = launchers.sbatch_script(target, request.script_args, nodes=nodes, gpus_per_node=gpus)
    except ValueError as exc:
        raise Failure(f"cannot write {path}: {exc}") from exc
    try:
        write_atomically(path, text.encode(), mode=0o755)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc
    reporter.say(
        f"wrote {path} ({plural(nodes, 'node')} x {plural(gpus, 'GPU')}); "
        f"submit it from this folder: sbatch {shlex.quote(path)}"
    )
