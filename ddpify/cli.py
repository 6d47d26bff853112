"""The command line: finds the scripts, calls ``convert()``, writes, reports, exits.

This is the only module that touches files, terminals and exit codes; the
conversion itself is :func:`ddpify.core.convert`, which never raises.  Code,
diffs and verification reports go to stdout, every message goes to stderr, and
the exit code follows DESIGN.md:

====  ==========================================================================
0     converted (warnings may have been printed), or nothing to do; with
      ``--verify``, also every check of the verification run passed
1     ``--check``: the output is missing or differs from what would be generated
2     bad usage or unreadable input (or ``--verify`` without torch); nothing
      written
3     conversion refused (an error diagnostic); nothing written
4     ``--verify``: the generated script does not train in data-parallel (a
      check failed or it hung); the report says which
123   internal error (a bug); nothing written
====  ==========================================================================

Several inputs (``ddpify SRC...`` with more than one SRC, or a folder): a
folder is searched recursively for ``*.py`` files, skipping the folders in
:data:`EXCLUDED_FOLDERS`, what ``.gitignore`` excludes (asked of ``git
check-ignore`` when the folder is in a git work tree) and earlier outputs
(``*_ddp.py``).  Each output goes next to its input with ``--suffix`` added to
its name, into the folder ``-o`` names under its path relative to the common
base of the inputs, or over the input with ``--in-place``; only a single file
can go to stdout.  The files are converted in a process pool (``-j``) and
reported in input order, each one exactly as a single file would be, then one
summary line.  The exit code is the highest of the files' codes under the
precedence 123 > 3 > 2 > 1 > 0: a bug outranks a refusal, a refusal an
unreadable file, and that a stale ``--check`` output.

Every write goes to a temporary file in the target's folder and is moved into
place with ``os.replace``, so a crash never leaves a half-written file.

``--verify`` runs OUT once it is written (or, with ``--check``, once it is
known to be current) under ``torchrun`` through :func:`ddpify.verify.verify`;
the arguments after ``--`` go to the script.  It runs in the current folder,
as ``torchrun train_ddp.py`` typed in the same shell would.  ``--sbatch FILE``
writes a SLURM batch script that starts OUT with the same arguments.

libcst is imported only when a script is converted (through :func:`convert`),
and ``ddpify.verify`` only when a script is verified (through :func:`verify`),
so ``--help`` and ``--version`` start quickly.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import difflib
import enum
import errno
import importlib.util
import io
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import typer.core

import ddpify
from ddpify import launchers
from ddpify.diagnostics import Severity
from ddpify.result import Options, Status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ddpify.result import Conversion
    from ddpify.verify import VerifyReport

try:  # recent typer ships its own copy of click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - typer releases that depend on click
    from click.exceptions import ClickException

ISSUE_TRACKER = "the ddpify issue tracker"
STDIN_NAME = "<stdin>"
STDOUT_NAME = "<stdout>"
DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_SUFFIX = "_ddp"
DEFAULT_NODES = 1
DEFAULT_GPUS_PER_NODE = 8

# Folders never searched for scripts: version control, environments, build
# output and caches (black's defaults, plus the places installed packages live).
EXCLUDED_FOLDERS = frozenset(
    {
        ".direnv",
        ".eggs",
        ".git",
        ".hg",
        ".ipynb_checkpoints",
        ".mypy_cache",
        ".nox",
        ".pytest_cache",
        ".ruff_cache",
        ".svn",
        ".tox",
        ".venv",
        "__pycache__",
        "build",
        "dist",
        "node_modules",
        "site-packages",
        "venv",
    }
)


class ExitCode(enum.IntEnum):
    OK = 0
    STALE = 1
    USAGE = 2
    REFUSED = 3
    NOT_DATA_PARALLEL = 4  # --verify: a check failed or the run hung
    INTERNAL_ERROR = 123
    BROKEN_PIPE = 141  # what a shell reports for a tool killed by SIGPIPE


class ReportFormat(str, enum.Enum):
    """How ``--verify`` prints its report on stdout."""

    TEXT = "text"
    JSON = "json"


class Outcome(enum.Enum):
    """What became of one file, as the summary line of several files counts it."""

    CONVERTED = ("converted", ExitCode.OK)
    WOULD_CONVERT = ("would be converted", ExitCode.OK)  # --diff
    UNCHANGED = ("unchanged", ExitCode.OK)
    CURRENT = ("up to date", ExitCode.OK)  # --check
    STALE = ("would be rewritten", ExitCode.STALE)  # --check
    REFUSED = ("refused", ExitCode.REFUSED)
    INVALID = ("invalid", ExitCode.USAGE)  # not valid Python
    FAILED = ("failed", ExitCode.USAGE)  # unreadable input or unwritable output
    INTERNAL_ERROR = ("internal error", ExitCode.INTERNAL_ERROR)

    def __init__(self, label: str, code: ExitCode) -> None:
        self.label = label
        self.code = code


class Failure(Exception):
    """A one-line message for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def convert(source: bytes, *, path: str, options: Options) -> Conversion:
    """The core, imported on first use.  Tests replace this function to drive the shell."""
    from ddpify.core import convert as convert_source

    return convert_source(source, path=path, options=options)


def verify(
    script: Path, *, nproc: int, script_args: Sequence[str], timeout: float, max_steps: int | None, workdir: Path
) -> VerifyReport:
    """The verification run, imported on first use.  Tests replace this function to drive the shell."""
    from ddpify.verify import verify as verify_script

    return verify_script(
        script, nproc=nproc, script_args=script_args, timeout=timeout, max_steps=max_steps, workdir=workdir
    )


@dataclass(frozen=True)
class Request:
    """What the user asked for, once the command line is parsed."""

    sources: tuple[str, ...]
    output: str | None
    in_place: bool
    diff: bool
    check: bool
    keep_global_batch: bool
    color: bool
    quiet: bool
    spawn: bool = False
    suffix: str | None = None  # None: not given
    jobs: int | None = None  # None: one per CPU
    sbatch: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    verify: bool = False
    # The settings below belong to --verify; None means "not given".
    nproc: int | None = None
    timeout: float | None = None
    max_steps: int | None = None
    report_format: ReportFormat | None = None
    script_args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The inputs as they appear in messages."""
        return ", ".join(STDIN_NAME if src == "-" else src for src in self.sources)

    @property
    def several(self) -> bool:
        """Whether the inputs are several files (several SRC, or a folder) rather than one script."""
        return len(self.sources) > 1 or os.path.isdir(self.sources[0])

    @property
    def options(self) -> Options:
        return Options(keep_global_batch=self.keep_global_batch, spawn=self.spawn)


@dataclass(frozen=True)
class Job:
    """One file to convert and where its result goes."""

    src: str  # a path, or '-' for stdin
    target: str | None  # the file to write or compare; None: stdout
    in_place: bool = False
    write_unchanged: bool = True  # also write a script that needs no change, as it is
    make_folders: bool = False  # create the target's folder (inside the -o folder)

    @property
    def name(self) -> str:
        """The input as it appears in messages and diagnostics."""
        return STDIN_NAME if self.src == "-" else self.src


# ----------------------------------------------------------------------------
# The command


def _print_version(value: bool) -> None:
    if value:
        print(f"ddpify {ddpify.__version__}")
        raise typer.Exit()


_SCRIPT_ARGS = "ddpify.script_args"


class _Command(typer.core.TyperCommand):
    """Takes the words after the first ``--`` as the script's own arguments.

    Both SRC... and the script's arguments are lists of positional words, which
    click cannot tell apart, so they are split here, before it parses the rest.
    A ``--`` that is an option's value (``-o --``) does not split.
    """

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        valued = {
            name
            for param in self.get_params(ctx)
            if getattr(param, "param_type_name", "") == "option"
            and not getattr(param, "is_flag", False)
            and not getattr(param, "count", False)
            for name in param.opts
        }
        words = iter(enumerate(args))
        for index, word in words:
            if word == "--":
                ctx.meta[_SCRIPT_ARGS] = tuple(args[index + 1 :])
                args = args[:index]
                break
            if word in valued:
                next(words, None)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- SCRIPT_ARGS]..."]


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command(cls=_Command)
def ddpify_command(
    ctx: typer.Context,
    src: Annotated[
        list[str],
        typer.Argument(
            metavar="SRC",
            show_default=False,
            help=(
                "The training scripts to convert: files, and folders searched for *.py "
                "('-' reads one script from stdin). Arguments after '--' go to the script "
                "(--verify, --sbatch)."
            ),
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "-o",
            "--output",
            metavar="OUT",
            help=(
                "Write the converted script to OUT (default: stdout); with several inputs, "
                "OUT is an existing folder that receives them under their relative paths."
            ),
        ),
    ] = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Rewrite each SRC itself.")] = False,
    suffix: Annotated[
        str | None,
        typer.Option(
            "--suffix",
            metavar="SUFFIX",
            show_default=False,
            help=(
                f"Without -o, write each output next to its input, SUFFIX added to its name "
                f"(default {DEFAULT_SUFFIX}: train.py -> train{DEFAULT_SUFFIX}.py); "
                "a single file goes to stdout unless SUFFIX is given."
            ),
        ),
    ] = None,
    diff: Annotated[
        bool, typer.Option("--diff", help="Print a unified diff of each SRC and its converted script; write nothing.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 if an output is missing or not what would be generated."),
    ] = False,
    keep_global_batch: Annotated[
        bool,
        typer.Option(
            "--keep-global-batch",
            help="Divide each training DataLoader's batch_size by the world size to keep the global batch.",
        ),
    ] = False,
    spawn: Annotated[
        bool,
        typer.Option(
            "--spawn",
            help="Let `python OUT` start one process per GPU itself (for machines without torchrun).",
        ),
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "-j",
            "--jobs",
            metavar="N",
            min=1,
            show_default=False,
            help="Convert up to N files at once (default: the number of CPUs).",
        ),
    ] = None,
    no_color: Annotated[
        bool, typer.Option("--no-color", help="Never colour the diff (NO_COLOR is respected too).")
    ] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print errors only.")] = False,
    sbatch: Annotated[
        str | None,
        typer.Option(
            "--sbatch",
            metavar="FILE",
            show_default=False,
            help="Also write FILE, a SLURM batch script that runs OUT with srun torchrun (needs -o OUT).",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            metavar="N",
            min=1,
            show_default=False,
            help=f"--sbatch: nodes to run on (default {DEFAULT_NODES}).",
        ),
    ] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-node",
            metavar="G",
            min=1,
            show_default=False,
            help=f"--sbatch: GPUs of each node, one process each (default {DEFAULT_GPUS_PER_NODE}).",
        ),
    ] = None,
    verify_run: Annotated[
        bool,
        typer.Option(
            "--verify",
            help=(
                "Then run OUT under torchrun in the current folder and check that it trains in data-parallel; "
                "exit 4 if a check fails. Needs torch (pip install 'ddpify[run]')."
            ),
        ),
    ] = False,
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            metavar="N",
            min=2,
            show_default=False,
            help=f"--verify: processes to run (default {DEFAULT_NPROC}).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="S",
            min=1,
            show_default=False,
            help=f"--verify: seconds before the run counts as hung (default {DEFAULT_TIMEOUT_S:g}).",
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps",
            metavar="K",
            min=1,
            show_default=False,
            help="--verify: stop every rank after K optimizer steps (default: train to the end).",
        ),
    ] = None,
    report_format: Annotated[
        ReportFormat | None,
        typer.Option("--format", show_default=False, help="--verify: print the report as a table (text) or JSON."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> int:
    """Convert single-GPU PyTorch training scripts into torchrun / DistributedDataParallel scripts.

    Exit codes: 0 converted or nothing to do (and verified with --verify), 1
    --check found an output missing or stale, 2 bad usage or unreadable input, 3
    conversion refused, 4 --verify found that OUT does not train in data-parallel,
    123 internal error. With several files, the highest under 123 > 3 > 2 > 1 > 0.
    """
    request = Request(
        sources=tuple(src),
        output=output,
        in_place=in_place,
        diff=diff,
        check=check,
        keep_global_batch=keep_global_batch,
        color=not no_color,
        quiet=quiet,
        spawn=spawn,
        suffix=suffix,
        jobs=jobs,
        sbatch=sbatch,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        verify=verify_run,
        nproc=nproc,
        timeout=timeout,
        max_steps=max_steps,
        report_format=report_format,
        script_args=ctx.meta.get(_SCRIPT_ARGS, ()),
    )
    try:
        return int(run(request))
    except Failure as failure:
        _error(f"error: {failure.message}")
        return int(failure.code)
    except BrokenPipeError:
        # The reader went away (`ddpify train.py --diff | head`); not a bug.
        # Point stdout at /dev/null so that the final flush stays quiet.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.BROKEN_PIPE)
    except Exception as exc:
        _error(f"error: {_internal_error_message(request.name, _describe(exc))}")
        return int(ExitCode.INTERNAL_ERROR)


def main(argv: list[str] | None = None) -> int:
    """Run ddpify with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="ddpify", standalone_mode=False)
    except ClickException as exc:
        message = exc.format_message().rstrip(".")
        _error(f"error: {message}; see 'ddpify --help'")
        return int(ExitCode.USAGE)
    except Exception as exc:
        _error(f"error: internal error: {_describe(exc)}; please report a bug at {ISSUE_TRACKER}")
        return int(ExitCode.INTERNAL_ERROR)
    # --help and --version end with an exit code; the command returns one.
    return result if isinstance(result, int) else int(ExitCode.OK)


# ----------------------------------------------------------------------------
# One run


def run(request: Request) -> ExitCode:
    several = request.several
    _validate(request, several=several)
    reporter = Reporter(request)
    if several:
        return _run_many(request, _plan(request, reporter), reporter)
    return _run_one(request, _single_job(request), reporter)


def _run_one(request: Request, job: Job, reporter: Reporter) -> ExitCode:
    source = _read_input(job.src)
    conversion = convert(source, path=job.name, options=request.options)
    outcome = _finish(request, job, source, conversion, reporter)
    if outcome.code is not ExitCode.OK:
        return outcome.code
    if request.sbatch is not None:
        assert job.target is not None  # _validate: --sbatch needs -o
        _write_sbatch(request, job.target, reporter)
    if request.verify:
        assert job.target is not None  # _validate: --verify needs -o
        return _verify(request, job.target, reporter)
    if outcome is Outcome.CONVERTED and job.target is not None and not job.in_place:
        _say_launch_commands(request, job.target, reporter)
    return ExitCode.OK


def _finish(request: Request, job: Job, source: bytes, conversion: Conversion, reporter: Reporter) -> Outcome:
    """Report one conversion and write, compare or show its code; raises ``Failure`` when that fails."""
    name = job.name
    if conversion.status is Status.INTERNAL_ERROR:
        detail = "; ".join(d.message for d in conversion.errors) or "the converter reported an internal error"
        raise Failure(_internal_error_message(name, detail), ExitCode.INTERNAL_ERROR)
    if conversion.status is Status.INVALID:
        reporter.diagnostics(conversion, fallback=f"error: {name}: not valid Python")
        return Outcome.INVALID
    if conversion.status is Status.REFUSED:
        reporter.diagnostics(conversion, fallback=f"error: {name}: conversion refused")
        reporter.say(f"{name}: not converted ({_counts(conversion, changes=False)}); nothing written")
        return Outcome.REFUSED

    code = conversion.code
    if not isinstance(code, bytes):
        raise TypeError(f"convert() returned {type(code).__name__} code for bytes input")
    unchanged = conversion.status is Status.UNCHANGED
    # Next to its input, a script that needs no change gets no copy.
    writes = job.write_unchanged or not unchanged
    reporter.diagnostics(conversion)
    if request.diff:
        _print_diff(request, job, source, code)
    if request.check:
        if not writes:
            reporter.say(f"{name}: nothing to do")
            return Outcome.UNCHANGED
        return _check(job, reporter, code)
    if not unchanged:
        reporter.changes(conversion, name)

    target = job.target
    if request.diff:
        summary = f"would convert {name}" + (f" -> {target}" if target else "")
    elif not writes:
        summary = ""
    elif target is None:
        _write_stdout(code)
        summary = f"converted {name} -> {STDOUT_NAME}"
    else:
        _write_if_changed(target, code, current=source if job.in_place else None, make_folders=job.make_folders)
        summary = f"converted {name} in place" if job.in_place else f"converted {name} -> {target}"

    if unchanged:
        reporter.say(f"{name}: nothing to do")
        return Outcome.UNCHANGED
    reporter.say(f"{summary} ({_counts(conversion)})")
    return Outcome.WOULD_CONVERT if request.diff else Outcome.CONVERTED


def _validate(request: Request, *, several: bool) -> None:
    if "-" in request.sources and len(request.sources) > 1:
        raise Failure("'-' reads one script from stdin; it cannot be combined with other inputs", ExitCode.USAGE)
    if request.check and request.output is None and request.suffix is None and not several:
        raise Failure("--check needs -o OUT", ExitCode.USAGE)
    _validate_suffix(request)
    _validate_script_args(request)
    _validate_verify(request, several=several)
    _validate_sbatch(request, several=several)
    if several:
        if request.in_place and request.output is not None:
            raise Failure("--in-place rewrites each SRC; it cannot be combined with -o OUT", ExitCode.USAGE)
        return
    (src,) = request.sources
    if src == "-":
        if request.in_place:
            raise Failure("--in-place needs a file, not stdin", ExitCode.USAGE)
        return
    if request.output is None:
        return
    same = _same_file(src, request.output)
    if request.in_place and not same:
        raise Failure("--in-place rewrites SRC; it cannot be combined with -o OUT", ExitCode.USAGE)
    if same and not request.in_place:
        raise Failure(f"{request.output} is the input file; pass --in-place to rewrite it", ExitCode.USAGE)


def _validate_suffix(request: Request) -> None:
    suffix = request.suffix
    if suffix is None:
        return
    if not suffix or "/" in suffix or os.sep in suffix or suffix in (".", ".."):
        raise Failure(f"--suffix {suffix!r}: give a part of a file name, such as {DEFAULT_SUFFIX}", ExitCode.USAGE)
    if request.output is not None or request.in_place:
        raise Failure(
            "--suffix names outputs next to their inputs; it cannot be combined with -o OUT or --in-place",
            ExitCode.USAGE,
        )
    if request.sources == ("-",):
        raise Failure("--suffix needs a file, not stdin", ExitCode.USAGE)


def _validate_script_args(request: Request) -> None:
    if request.script_args and not (request.verify or request.sbatch is not None):
        raise Failure(
            f"unexpected argument {request.script_args[0]!r}; arguments for the script go after -- "
            "and need --verify or --sbatch",
            ExitCode.USAGE,
        )


def _validate_verify(request: Request, *, several: bool) -> None:
    if not request.verify:
        given = {
            "--nproc": request.nproc,
            "--timeout": request.timeout,
            "--max-steps": request.max_steps,
            "--format": request.report_format,
        }
        for option, value in given.items():
            if value is not None:
                raise Failure(f"{option} needs --verify", ExitCode.USAGE)
        return
    if several:
        raise Failure("--verify runs one script; give a single SRC", ExitCode.USAGE)
    if request.output is None:
        raise Failure("--verify needs -o OUT: the script it runs", ExitCode.USAGE)
    if request.diff and not request.check:
        raise Failure("--diff writes nothing for --verify to run; drop --diff or add --check", ExitCode.USAGE)
    if importlib.util.find_spec("torch") is None:
        raise Failure(f"--verify needs torch in {sys.executable}: pip install 'ddpify[run]'", ExitCode.USAGE)


def _validate_sbatch(request: Request, *, several: bool) -> None:
    if request.sbatch is None:
        for option, value in (("--nodes", request.nodes), ("--gpus-per-node", request.gpus_per_node)):
            if value is not None:
                raise Failure(f"{option} needs --sbatch", ExitCode.USAGE)
        return
    if several:
        raise Failure("--sbatch starts one script; give a single SRC", ExitCode.USAGE)
    if request.output is None:
        raise Failure("--sbatch needs -o OUT: the script it starts", ExitCode.USAGE)
    if request.check or request.diff:
        raise Failure("--sbatch writes a file; it cannot be combined with --check or --diff", ExitCode.USAGE)
    scripts = [request.output, *(src for src in request.sources if src != "-")]
    if any(_same_file(request.sbatch, script) for script in scripts):
        raise Failure(
            f"--sbatch {request.sbatch} names a training script; give the batch script a name of its own",
            ExitCode.USAGE,
        )


def _single_job(request: Request) -> Job:
    (src,) = request.sources
    if request.output is not None:
        return Job(src, request.output, in_place=request.in_place)
    if request.in_place:
        return Job(src, src, in_place=True)
    if request.suffix is not None:
        return Job(src, _with_suffix(src, request.suffix), write_unchanged=False)
    return Job(src, None)


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _read_input(src: str) -> bytes:
    if src == "-":
        return sys.stdin.buffer.read()
    try:
        with open(src, "rb") as file:
            return file.read()
    except OSError as exc:
        raise Failure(f"{src}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def _read_existing(path: str) -> bytes | None:
    """The bytes of an output file, or None when it does not exist."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def _check(job: Job, reporter: Reporter, code: bytes) -> Outcome:
    target = job.target
    assert target is not None  # _validate: --check needs an output
    if _read_existing(target) != code:
        reporter.error(f"would rewrite {target}")
        return Outcome.STALE
    reporter.say(f"{target} is up to date")
    return Outcome.CURRENT


def _verify(request: Request, target: str, reporter: Reporter) -> ExitCode:
    from ddpify.verify.checks import LAUNCHED

    nproc = request.nproc or DEFAULT_NPROC
    as_json = request.report_format is ReportFormat.JSON
    reporter.say(f"verifying {target} under torchrun with {nproc} processes")
    report = verify(
        Path(target),
        nproc=nproc,
        script_args=request.script_args,
        timeout=request.timeout or DEFAULT_TIMEOUT_S,
        max_steps=request.max_steps,
        workdir=Path.cwd(),
    )
    print(json.dumps(report.to_json(), indent=2) if as_json else report.format_table(), flush=True)
    if report.ok:
        reporter.say(f"{target} trains in data-parallel: {_plural(len(report.checks), 'check')} passed")
        return ExitCode.OK
    failed = [check.name for check in report.failed]
    # A script that did not run to the end says why in its own output (a
    # traceback, an argparse error); the JSON report carries that output itself.
    if LAUNCHED in failed and not as_json and report.output.strip():
        reporter.say("--- torchrun output ---")
        reporter.say(report.output.rstrip())
    reporter.error(
        f"error: {target} does not train in data-parallel ({_plural(len(failed), 'check')} failed: {', '.join(failed)})"
    )
    return ExitCode.NOT_DATA_PARALLEL


# ----------------------------------------------------------------------------
# Launching the output


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
        raise Failure(f"cannot write {path}: {exc}", ExitCode.USAGE) from exc
    try:
        write_atomically(path, text.encode(), mode=0o755)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", ExitCode.USAGE) from exc
    reporter.say(
        f"wrote {path} ({_plural(nodes, 'node')} x {_plural(gpus, 'GPU')}); "
        f"submit it from this folder: sbatch {shlex.quote(path)}"
    )


# ----------------------------------------------------------------------------
# Several files


def _plan(request: Request, reporter: Reporter) -> list[Job]:
    """The files the inputs name, in order, and where each one's output goes."""
    suffix = request.suffix or DEFAULT_SUFFIX
    folder = request.output
    paths = find_scripts(request.sources, suffix=suffix, skip=folder, reporter=reporter)
    if folder is None:
        if request.in_place:
            return [Job(path, path, in_place=True, write_unchanged=False) for path in paths]
        jobs = [Job(path, _with_suffix(path, suffix), write_unchanged=False) for path in paths]
    else:
        if not os.path.isdir(folder):
            problem = "not a folder" if os.path.exists(folder) else "no such folder"
            raise Failure(
                f"{folder}: {problem}; with several inputs, -o names an existing folder for the outputs",
                ExitCode.USAGE,
            )
        base = _common_base(request.sources)
        jobs = [
            Job(path, os.path.join(folder, os.path.relpath(os.path.abspath(path), base)), make_folders=True)
            for path in paths
        ]
    for job in jobs:
        assert job.target is not None
        if _same_file(job.src, job.target):
            raise Failure(f"{job.target} is the input file; pass --in-place to rewrite the inputs", ExitCode.USAGE)
    return jobs


def find_scripts(sources: Sequence[str], *, suffix: str, skip: str | None, reporter: Reporter) -> list[str]:
    """The scripts that ``sources`` name, each once, in order; raises ``Failure`` for a missing or empty input.

    A file is taken as given unless its name marks it as an output (``*_ddp.py``);
    a folder gives its ``*.py`` files (see :func:`scripts_in`); ``skip`` is a
    folder not to search (the output folder).
    """
    found: list[str] = []
    seen: set[str] = set()
    for src in sources:
        if os.path.isdir(src):
            paths = scripts_in(src, suffix=suffix, skip=skip)
            if not paths:
                raise Failure(f"{src}: no Python files", ExitCode.USAGE)
        elif os.path.exists(src):
            if _is_output(src, suffix):
                reporter.say(f"{src}: skipped, the name of an output (*{suffix}.py)")
                continue
            paths = [src]
        else:
            raise Failure(f"{src}: {os.strerror(errno.ENOENT)}", ExitCode.USAGE)
        for path in paths:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                found.append(path)
    if not found:
        raise Failure("no Python files to convert", ExitCode.USAGE)
    return found


def scripts_in(folder: str, *, suffix: str, skip: str | None = None) -> list[str]:
    """The ``*.py`` files under ``folder``, sorted, without excluded folders, ignored files and outputs."""
    skipped = os.path.realpath(skip) if skip is not None else None
    candidates: list[str] = []
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(
            name
            for name in folders
            if name not in EXCLUDED_FOLDERS and os.path.realpath(os.path.join(root, name)) != skipped
        )
        candidates.extend(
            os.path.join(root, name) for name in sorted(names) if name.endswith(".py") and not _is_output(name, suffix)
        )
    ignored = git_ignored(folder, [os.path.relpath(path, folder) for path in candidates])
    return [path for path in candidates if os.path.relpath(path, folder) not in ignored]


def git_ignored(folder: str, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` (relative to ``folder``) git ignores; none outside a git work tree or without git."""
    if not paths:
        return set()
    try:
        inside = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--is-inside-work-tree"], capture_output=True, check=False
        )
        if inside.returncode != 0 or inside.stdout.strip() != b"true":
            return set()
        answer = subprocess.run(
            ["git", "-C", folder, "check-ignore", "--stdin", "-z"],
            input=b"".join(os.fsencode(path) + b"\0" for path in paths),
            capture_output=True,
            check=False,
        )
    except OSError:  # no git
        return set()
    if answer.returncode not in (0, 1):  # 1: nothing ignored; otherwise git failed
        return set()
    return {os.fsdecode(path) for path in answer.stdout.split(b"\0") if path}


def _is_output(path: str, suffix: str) -> bool:
    return os.path.splitext(os.path.basename(path))[0].endswith(suffix)


def _with_suffix(path: str, suffix: str) -> str:
    root, extension = os.path.splitext(path)
    return f"{root}{suffix}{extension}"


def _common_base(sources: Sequence[str]) -> str:
    folders = [os.path.abspath(src if os.path.isdir(src) else os.path.dirname(src) or ".") for src in sources]
    return os.path.commonpath(folders)


def _run_many(request: Request, jobs: list[Job], reporter: Reporter) -> ExitCode:
    progress = _Progress(len(jobs), enabled=not request.quiet and _isatty(sys.stderr))
    outcomes: Counter[Outcome] = Counter()
    warnings = 0
    progress.show(0)
    # closing(): an interruption stops the pool at once, not when the generator is collected.
    with contextlib.closing(_conversions(request, jobs)) as results:
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


def _finish_one_of_many(
    request: Request, job: Job, result: tuple[bytes, Conversion] | Exception, reporter: Reporter
) -> Outcome:
    """``_finish`` for one of several files: a failure is reported and counted, not raised."""
    try:
        if isinstance(result, Exception):
            raise result
        source, conversion = result
        return _finish(request, job, source, conversion, reporter)
    except Failure as failure:
        reporter.error(f"error: {failure.message}")
        return Outcome.INTERNAL_ERROR if failure.code is ExitCode.INTERNAL_ERROR else Outcome.FAILED
    except BrokenPipeError:
        raise
    except Exception as exc:
        reporter.error(f"error: {_internal_error_message(job.name, _describe(exc))}")
        return Outcome.INTERNAL_ERROR


def _conversions(request: Request, jobs: list[Job]) -> Iterator[tuple[bytes, Conversion] | Exception]:
    """Each job's source and conversion, in the order of ``jobs``, or what went wrong reading or converting it.

    With more than one worker the conversions run in a process pool: ``convert()``
    is pure and takes and returns plain data, so only bytes and results cross.
    """
    workers = min(request.jobs or _cpu_count(), len(jobs))
    if workers <= 1:
        for job in jobs:
            yield _read_and_convert(job, request.options)
        return
    sources: list[bytes | Failure] = []
    for job in jobs:
        try:
            sources.append(_read_input(job.src))
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
            item: tuple[bytes, Conversion] | Exception
            try:
                item = (source, futures[index].result())
            except Exception as exc:
                item = exc
            yield item
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _read_and_convert(job: Job, options: Options) -> tuple[bytes, Conversion] | Exception:
    try:
        source = _read_input(job.src)
    except Failure as failure:
        return failure
    try:
        return source, convert(source, path=job.name, options=options)
    except Exception as exc:
        return exc


def _convert_in_worker(source: bytes, path: str, options: Options) -> Conversion:
    return convert(source, path=path, options=options)


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def summary_line(outcomes: Counter[Outcome], *, warnings: int) -> str:
    """``12 files: 9 converted, 2 unchanged, 1 refused (1 warning)``."""
    parts = [
        # The other labels say what became of the files; this one is a noun.
        _plural(count, outcome.label) if outcome is Outcome.INTERNAL_ERROR else f"{count} {outcome.label}"
        for outcome in Outcome
        if (count := outcomes[outcome])
    ]
    line = f"{_plural(sum(outcomes.values()), 'file')}: {', '.join(parts)}"
    return f"{line} ({_plural(warnings, 'warning')})" if warnings else line


class _Progress:
    """``[n/total]`` on stderr, redrawn in place; cleared before anything else is printed."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.width = 0

    def show(self, done: int) -> None:
        if self.enabled:
            text = f"\r[{done}/{self.total}]"
            sys.stderr.write(text)
            sys.stderr.flush()
            self.width = len(text) - 1

    def clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


# ----------------------------------------------------------------------------
# Files and streams


def _write_if_changed(path: str, data: bytes, *, current: bytes | None, make_folders: bool = False) -> None:
    """Write ``data`` to ``path`` unless the file already holds exactly these bytes."""
    if current is None:
        current = _read_existing(path)
    if current == data:
        return
    try:
        if make_folders:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomically(path, data)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def write_atomically(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one step; on failure nothing is left behind.

    The temporary file lives in the target's folder so that ``os.replace`` is a
    rename on one file system.  A symlink is followed (its target is rewritten),
    and the file gets ``mode``, or else keeps an existing file's permission bits.
    """
    target = os.path.realpath(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


# ----------------------------------------------------------------------------
# Diff

_BOLD, _RED, _GREEN, _CYAN, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[0m"


def _print_diff(request: Request, job: Job, before: bytes, after: bytes) -> None:
    encoding = _source_encoding(before)
    lines = unified_diff(
        before.decode(encoding, errors="replace"),
        after.decode(encoding, errors="replace"),
        from_name=job.name,
        to_name=job.target or job.name,
    )
    if _color_enabled(request):
        lines = _paint(lines)
    # The diff is written in the script's own encoding (without a BOM), so that
    # `patch` can apply it to the file.
    out_encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    _write_stdout("".join(lines).encode(out_encoding, errors="backslashreplace"))


def unified_diff(before: str, after: str, *, from_name: str, to_name: str) -> Iterator[str]:
    """``diff -u`` of two texts; each line keeps its own line ending."""
    lines = difflib.unified_diff(_lines(before), _lines(after), fromfile=from_name, tofile=to_name, n=3)
    for line in lines:
        if line.endswith(("\n", "\r")):
            yield line
        else:
            yield line + "\n"
            yield "\\ No newline at end of file\n"


def _lines(text: str) -> list[str]:
    # Split on \n, \r\n and \r only, as Python does; str.splitlines() would also
    # split on form feeds and other characters that are not line ends in code.
    return io.StringIO(text, newline="").readlines()


def _paint(lines: Iterable[str]) -> Iterator[str]:
    for index, line in enumerate(lines):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        if index < 2:  # the ---/+++ header; later "---" lines are removed "--" lines
            style = _BOLD
        elif line.startswith("@@"):
            style = _CYAN
        elif line.startswith("+"):
            style = _GREEN
        elif line.startswith("-"):
            style = _RED
        else:
            yield line
            continue
        yield f"{style}{body}{_RESET}{ending}"


def _color_enabled(request: Request) -> bool:
    if not request.color or os.environ.get("NO_COLOR"):
        return False
    return _isatty(sys.stdout)


def _source_encoding(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return "utf-8"
    return encoding


# ----------------------------------------------------------------------------
# Messages (all on stderr)


class Reporter:
    """Prints findings and summaries on stderr; with ``--quiet`` only errors."""

    def __init__(self, request: Request) -> None:
        self.request = request

    def say(self, line: str) -> None:
        if not self.request.quiet:
            _error(line)

    def error(self, line: str) -> None:
        _error(line)

    def diagnostics(self, conversion: Conversion, *, fallback: str | None = None) -> None:
        """Every diagnostic (errors only when quiet); ``fallback`` when an error is expected but none came."""
        for diagnostic in conversion.diagnostics:
            if diagnostic.severity is Severity.ERROR:
                self.error(diagnostic.format())
            else:
                self.say(diagnostic.format())
        if fallback is not None and not conversion.errors:
            self.error(fallback)

    def changes(self, conversion: Conversion, name: str) -> None:
        for change in conversion.changes:
            self.say(f"{name}:{change.line}: {change.summary}")


def _error(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _counts(conversion: Conversion, *, changes: bool = True) -> str:
    parts = [_plural(len(conversion.changes), "change")] if changes else []
    for severity, noun in ((Severity.ERROR, "error"), (Severity.WARNING, "warning")):
        count = sum(1 for d in conversion.diagnostics if d.severity is severity)
        if count:
            parts.append(_plural(count, noun))
    return ", ".join(parts)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _internal_error_message(name: str, detail: str) -> str:
    return (
        f"internal error while converting {name}: {detail}; "
        f"please report a bug at {ISSUE_TRACKER} with the input attached"
    )
