"""The command line: reads the script, calls ``convert()``, writes, reports, exits.

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

Every write goes to a temporary file in the target's folder and is moved into
place with ``os.replace``, so a crash never leaves a half-written file.

``--verify`` runs OUT once it is written (or, with ``--check``, once it is
known to be current) under ``torchrun`` through :func:`ddpify.verify.verify`;
the arguments after ``--`` go to the script.  It runs in the current folder,
as ``torchrun train_ddp.py`` typed in the same shell would.

libcst is imported only when a script is converted (through :func:`convert`),
and ``ddpify.verify`` only when a script is verified (through :func:`verify`),
so ``--help`` and ``--version`` start quickly.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import importlib.util
import io
import json
import os
import stat
import sys
import tempfile
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import ddpify
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

    src: str
    output: str | None
    in_place: bool
    diff: bool
    check: bool
    keep_global_batch: bool
    color: bool
    quiet: bool
    verify: bool = False
    # The settings below belong to --verify; None means "not given".
    nproc: int | None = None
    timeout: float | None = None
    max_steps: int | None = None
    report_format: ReportFormat | None = None
    script_args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The input as it appears in messages and diagnostics."""
        return STDIN_NAME if self.src == "-" else self.src

    @property
    def target(self) -> str | None:
        """The file to write (or to compare with ``--check``); None means stdout."""
        if self.output is not None:
            return self.output
        return self.src if self.in_place else None


# ----------------------------------------------------------------------------
# The command


def _print_version(value: bool) -> None:
    if value:
        print(f"ddpify {ddpify.__version__}")
        raise typer.Exit()


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command()
def ddpify_command(
    src: Annotated[
        str,
        typer.Argument(metavar="SRC", show_default=False, help="The training script to convert ('-' reads stdin)."),
    ],
    output: Annotated[
        str | None,
        typer.Option("-o", "--output", metavar="OUT", help="Write the converted script to OUT (default: stdout)."),
    ] = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Rewrite SRC itself.")] = False,
    diff: Annotated[
        bool, typer.Option("--diff", help="Print a unified diff of SRC and the converted script; write nothing.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 if OUT is missing or not what would be generated."),
    ] = False,
    keep_global_batch: Annotated[
        bool,
        typer.Option(
            "--keep-global-batch",
            help="Divide each training DataLoader's batch_size by the world size to keep the global batch.",
        ),
    ] = False,
    no_color: Annotated[
        bool, typer.Option("--no-color", help="Never colour the diff (NO_COLOR is respected too).")
    ] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print errors only.")] = False,
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
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- SCRIPT_ARGS",
            show_default=False,
            help="--verify: the command line of the script, after '--'.",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> int:
    """Convert a single-GPU PyTorch training script into a torchrun / DistributedDataParallel script.

    Exit codes: 0 converted or nothing to do (and verified with --verify), 1 --check
    found OUT missing or stale, 2 bad usage or unreadable input, 3 conversion
    refused, 4 --verify found that OUT does not train in data-parallel, 123
    internal error.
    """
    request = Request(
        src=src,
        output=output,
        in_place=in_place,
        diff=diff,
        check=check,
        keep_global_batch=keep_global_batch,
        color=not no_color,
        quiet=quiet,
        verify=verify_run,
        nproc=nproc,
        timeout=timeout,
        max_steps=max_steps,
        report_format=report_format,
        script_args=tuple(script_args or ()),
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
    except Exception as exc:  # noqa: BLE001 - any escape is a bug; say so and exit 123
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
    except Exception as exc:  # noqa: BLE001 - a bug outside the command itself
        _error(f"error: internal error: {_describe(exc)}; please report a bug at {ISSUE_TRACKER}")
        return int(ExitCode.INTERNAL_ERROR)
    # --help and --version end with an exit code; the command returns one.
    return result if isinstance(result, int) else int(ExitCode.OK)


# ----------------------------------------------------------------------------
# One run


def run(request: Request) -> ExitCode:
    _validate(request)
    source = _read_input(request)
    conversion = convert(source, path=request.name, options=Options(keep_global_batch=request.keep_global_batch))
    reporter = Reporter(request)

    if conversion.status is Status.INTERNAL_ERROR:
        detail = "; ".join(d.message for d in conversion.errors) or "the converter reported an internal error"
        raise Failure(_internal_error_message(request.name, detail), ExitCode.INTERNAL_ERROR)
    if conversion.status is Status.INVALID:
        reporter.diagnostics(conversion, fallback=f"error: {request.name}: not valid Python")
        return ExitCode.USAGE
    if conversion.status is Status.REFUSED:
        reporter.diagnostics(conversion, fallback=f"error: {request.name}: conversion refused")
        reporter.say(f"{request.name}: not converted ({_counts(conversion, changes=False)}); nothing written")
        return ExitCode.REFUSED

    code = conversion.code
    if not isinstance(code, bytes):
        raise TypeError(f"convert() returned {type(code).__name__} code for bytes input")
    reporter.diagnostics(conversion)
    if request.diff:
        _print_diff(request, source, code)
    if request.check:
        status = _check(request, reporter, code)
        return _verify(request, reporter) if request.verify and status is ExitCode.OK else status
    if conversion.status is Status.CONVERTED:
        reporter.changes(conversion)

    target = request.target
    if request.diff:
        summary = f"would convert {request.name}" + (f" -> {target}" if target else "")
    elif target is None:
        _write_stdout(code)
        summary = f"converted {request.name} -> {STDOUT_NAME}"
    else:
        _write_if_changed(target, code, current=source if request.in_place else None)
        summary = f"converted {request.name} in place" if request.in_place else f"converted {request.name} -> {target}"

    if conversion.status is Status.UNCHANGED:
        reporter.say(f"{request.name}: nothing to do")
    else:
        reporter.say(f"{summary} ({_counts(conversion)})")
    return _verify(request, reporter) if request.verify else ExitCode.OK


def _validate(request: Request) -> None:
    if request.check and request.output is None:
        raise Failure("--check needs -o OUT", ExitCode.USAGE)
    _validate_verify(request)
    if request.src == "-":
        if request.in_place:
            raise Failure("--in-place needs a file, not stdin", ExitCode.USAGE)
        return
    if request.output is None:
        return
    same = _same_file(request.src, request.output)
    if request.in_place and not same:
        raise Failure("--in-place rewrites SRC; it cannot be combined with -o OUT", ExitCode.USAGE)
    if same and not request.in_place:
        raise Failure(f"{request.output} is the input file; pass --in-place to rewrite it", ExitCode.USAGE)


def _validate_verify(request: Request) -> None:
    if not request.verify:
        if request.script_args:
            raise Failure(
                f"unexpected argument {request.script_args[0]!r}; arguments for the script go after -- "
                "and need --verify",
                ExitCode.USAGE,
            )
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
    if request.output is None:
        raise Failure("--verify needs -o OUT: the script it runs", ExitCode.USAGE)
    if request.diff and not request.check:
        raise Failure("--diff writes nothing for --verify to run; drop --diff or add --check", ExitCode.USAGE)
    if importlib.util.find_spec("torch") is None:
        raise Failure(f"--verify needs torch in {sys.executable}: pip install 'ddpify[run]'", ExitCode.USAGE)


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _read_input(request: Request) -> bytes:
    if request.src == "-":
        return sys.stdin.buffer.read()
    try:
        with open(request.src, "rb") as file:
            return file.read()
    except OSError as exc:
        raise Failure(f"{request.src}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def _read_existing(path: str) -> bytes | None:
    """The bytes of an output file, or None when it does not exist."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def _check(request: Request, reporter: Reporter, code: bytes) -> ExitCode:
    target = request.target
    assert target is not None  # _validate: --check needs -o
    if _read_existing(target) != code:
        reporter.error(f"would rewrite {target}")
        return ExitCode.STALE
    reporter.say(f"{target} is up to date")
    return ExitCode.OK


def _verify(request: Request, reporter: Reporter) -> ExitCode:
    from ddpify.verify.checks import LAUNCHED

    target = request.target
    assert target is not None  # _validate: --verify needs -o
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
        f"error: {target} does not train in data-parallel "
        f"({_plural(len(failed), 'check')} failed: {', '.join(failed)})"
    )
    return ExitCode.NOT_DATA_PARALLEL


# ----------------------------------------------------------------------------
# Files and streams


def _write_if_changed(path: str, data: bytes, *, current: bytes | None) -> None:
    """Write ``data`` to ``path`` unless the file already holds exactly these bytes."""
    if current is None:
        current = _read_existing(path)
    if current == data:
        return
    try:
        write_atomically(path, data)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", ExitCode.USAGE) from exc


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step; on failure nothing is left behind.

    The temporary file lives in the target's folder so that ``os.replace`` is a
    rename on one file system.  A symlink is followed (its target is rewritten),
    and an existing file's permission bits are kept.
    """
    target = os.path.realpath(path)
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


def _print_diff(request: Request, before: bytes, after: bytes) -> None:
    encoding = _source_encoding(before)
    lines = unified_diff(
        before.decode(encoding, errors="replace"),
        after.decode(encoding, errors="replace"),
        from_name=request.name,
        to_name=request.target or request.name,
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
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


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

    def changes(self, conversion: Conversion) -> None:
        for change in conversion.changes:
            self.say(f"{self.request.name}:{change.line}: {change.summary}")


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
