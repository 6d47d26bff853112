"""One run of the command: validate, then convert a single script or hand several to the workers.

For a single script this also writes the ``--sbatch`` batch script and the
``--k8s`` manifest (made before anything is written, written once the output
is) and runs ``--verify`` once the output is written (or, with ``--check``,
once it is known to be current).  The verification runs in the current folder, as ``torchrun
train_ddp.py`` typed in the same shell would.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddpify import launchers
from ddpify.cli import backend, journal
from ddpify.cli.discovery import plan
from ddpify.cli.exits import ExitCode, Failure, Outcome
from ddpify.cli.files import check_target, read_input, write_atomically, write_stdout
from ddpify.cli.notebooks import located, read_script
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
    same_path,
    single_job,
    validate,
)
from ddpify.cli.results import finish
from ddpify.cli.signals import finishing
from ddpify.cli.workers import run_many
from ddpify.notebook import is_notebook, script_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ddpify.cli.request import Job, Request


def run(request: Request) -> ExitCode:
    several = request.several
    validate(request, several=several)
    reporter = Reporter(quiet=request.quiet)
    if request.config is not None:
        reporter.say(f"config: [tool.ddpify] of {request.config}")
    # A write stopped here before (killed, power loss) is finished or undone before anything is read.
    places = [*(src for src in request.sources if src != "-"), *(path for _, path in request.launch_files)]
    journal.recover_around([*places, *([request.output] if request.output is not None else [])])
    if several:
        return run_many(request, plan(request, reporter), reporter)
    return _run_one(request, single_job(request), reporter)


def _run_one(request: Request, job: Job, reporter: Reporter) -> ExitCode:
    _check_targets(request, job)
    source = read_input(job.src, max_size=request.max_size)
    script = read_script(job.src, source) if is_notebook(job.src) else None
    if script is not None:
        source = script.source  # the notebook's code cells, as the script that is converted
    program = local_modules(job.src, source, max_size=request.max_size) if job.src != "-" else None
    if program is not None and script is not None:
        program = located(script, program)
    if program is not None and job.make_folders and request.output is not None:
        # `-o DIR/`: the program keeps its layout under DIR, and goes there whole.
        entry = script_name(program.relative(str(program.entry)))
        job = replace(job, target=os.path.join(request.output, entry), whole_program=True)
    modules = program.modules if program is not None else ()
    search = _search_path(request, job, program)
    launch_files = [_launch_file(request, option, path, job.target, search) for option, path in request.launch_files]
    conversion = backend.convert(source, path=job.name, options=request.options_for(job), modules=modules)
    if script is not None:
        conversion = script.report(conversion)
    with finishing():
        outcome = finish(request, job, source, conversion, reporter, program)
    if program is not None and outcome is Outcome.CONVERTED and job.target is not None and not job.make_folders:
        _say_where_modules_are(program, job.target, reporter)
    if outcome.code is not ExitCode.OK:
        return outcome.code
    for launch_file in launch_files:
        launch_file.write(reporter)
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
            search=search,
        )
    if outcome is Outcome.CONVERTED and job.target is not None and not job.in_place:
        _say_launch_commands(request, job.target, reporter, search=search)
    return ExitCode.OK


def _search_path(request: Request, job: Job, program: ProgramFiles | None) -> str | None:
    """The output folder, when the program written there has modules outside the entry's folder
    (the project's root): Python finds them only with that folder on ``PYTHONPATH``, which also
    puts the converted modules before an installed copy of the project."""
    if program is None or not job.whole_program or request.output is None:
        return None
    if program.base == program.entry.parent:
        return None
    return request.output.rstrip("/" + os.sep) or os.sep


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
    if job.target is not None and not job.in_place and same_path(job.src, job.target):
        raise Failure(f"{job.target} is the input file; pass --in-place to rewrite it")
    if job.target is not None and (request.check or not request.diff):
        check_target(job.target, hint="give a file or -o -", make_folders=job.make_folders)
    for _, path in request.launch_files:
        check_target(path, hint="give a file")


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
    search: str | None = None,
) -> ExitCode:
    """Run ``target`` under torchrun and report whether it trains in data-parallel; ``search`` is a
    folder the program's modules need on ``PYTHONPATH``."""
    from ddpify.verify.checks import LAUNCHED

    nproc = nproc or DEFAULT_NPROC
    as_json = report_format is ReportFormat.JSON
    env = None
    on_path = ""
    if search is not None:
        env = {"PYTHONPATH": os.pathsep.join(filter(None, (os.path.abspath(search), os.environ.get("PYTHONPATH"))))}
        on_path = f", {search} on PYTHONPATH"
    reporter.say(f"verifying {target} under torchrun with {nproc} processes{on_path}")
    report = backend.verify(
        Path(target),
        nproc=nproc,
        script_args=script_args,
        timeout=timeout or DEFAULT_TIMEOUT_S,
        max_steps=max_steps,
        workdir=Path.cwd(),
        env=env,
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
        reporter.block(report.output.rstrip())
    error(
        f"error: {target} does not train in data-parallel ({plural(len(failed), 'check')} failed: {', '.join(failed)})"
    )
    return ExitCode.NOT_DATA_PARALLEL


def _say_launch_commands(request: Request, target: str, reporter: Reporter, *, search: str | None = None) -> None:
    commands = launchers.torchrun_commands(target, [])
    prefix = f"PYTHONPATH={shlex.quote(search)} " if search is not None else ""
    reporter.say(f"run it: {prefix}{commands['single_node']}")
    reporter.say(f"on several nodes: {prefix}{commands['multi_node']}")
    if request.spawn:
        reporter.say(f"or without torchrun: {prefix}python {shlex.quote(target)}")


@dataclass(frozen=True)
class LaunchFile:
    """A file that starts the output on a cluster (--sbatch, --k8s), made and ready to be written."""

    path: str
    text: str
    mode: int | None  # None: an existing file's permission bits, or the umask's
    message: str

    def write(self, reporter: Reporter) -> None:
        try:
            write_atomically(self.path, self.text.encode(), mode=self.mode)
        except OSError as exc:
            raise Failure(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        reporter.say(self.message)


def _launch_file(request: Request, option: str, path: str, target: str | None, search: str | None) -> LaunchFile:
    """The ``--sbatch`` batch script or the ``--k8s`` manifest that runs ``target``; ``Failure`` if it cannot be made."""
    assert target is not None  # validate(): --sbatch and --k8s need -o
    nodes = request.nodes or DEFAULT_NODES
    gpus = request.gpus_per_node or DEFAULT_GPUS_PER_NODE
    size = f"{plural(nodes, 'node')} x {plural(gpus, 'GPU')}"
    try:
        if option == "--sbatch":
            text = launchers.sbatch_script(
                target, request.script_args, nodes=nodes, gpus_per_node=gpus, python_path=search
            )
            return LaunchFile(
                path, text, 0o755, f"wrote {path} ({size}); submit it from this folder: sbatch {shlex.quote(path)}"
            )
        text = launchers.pytorchjob_manifest(
            target, request.script_args, nodes=nodes, gpus_per_node=gpus, python_path=search
        )
    except ValueError as exc:
        raise Failure(f"cannot write {path}: {exc}") from exc
    message = (
        f"wrote {path} ({size}), a Kubeflow PyTorchJob: fill in {launchers.IMAGE} and {launchers.NAMESPACE}, "
        f"then: kubectl apply -f {shlex.quote(path)}"
    )
    return LaunchFile(path, text, None, message)
