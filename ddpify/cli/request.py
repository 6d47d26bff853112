"""What the user asked for, once the command line is parsed, and whether it makes sense.

:func:`validate` refuses every combination of options that cannot be carried
out (exit 2) before anything is read or written.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import re
import shlex
import sys
from dataclasses import dataclass, replace

from ddpify import Options
from ddpify.cli.exits import Failure
from ddpify.cli.files import DEFAULT_MAX_SIZE
from ddpify.cli.notebooks import check_output
from ddpify.notebook import is_notebook, script_name

STDIN_NAME = "<stdin>"
STDOUT_NAME = "<stdout>"
DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_SUFFIX = "_ddp"
DEFAULT_NODES = 1
DEFAULT_GPUS_PER_NODE = 8
# A suffix is a part of a file name: letters, digits, "_", "-" and ".", not ending in ".py".
_SUFFIX = re.compile(r"[\w.-]+")


class ReportFormat(str, enum.Enum):
    """How the verification report is printed on stdout."""

    TEXT = "text"
    JSON = "json"


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
    find_unused_parameters: bool = False
    sync_batchnorm: bool = False
    shard_eval: bool = False
    strict: bool = False
    suffix: str | None = None  # None: not given
    jobs: int | None = None  # None: one per CPU
    sbatch: str | None = None
    k8s: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    verify: bool = False
    # The settings below belong to --verify; None means "not given".
    nproc: int | None = None
    timeout: float | None = None
    max_steps: int | None = None
    report_format: ReportFormat | None = None
    script_args: tuple[str, ...] = ()
    stdout: bool = False  # -o -
    max_size: int = DEFAULT_MAX_SIZE
    config: str | None = None  # the pyproject.toml whose [tool.ddpify] was read
    # Globs of what a folder search skips: None means the default folders; each is
    # matched against a file's or folder's name and its path relative to exclude_root.
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    exclude_root: str | None = None

    @property
    def name(self) -> str:
        """The inputs as they appear in messages."""
        return ", ".join(STDIN_NAME if src == "-" else src for src in self.sources)

    @property
    def several(self) -> bool:
        """Whether the inputs are several files (several SRC, or a folder) rather than one script."""
        return len(self.sources) > 1 or os.path.isdir(self.sources[0])

    @property
    def launch_files(self) -> list[tuple[str, str]]:
        """The files that start the output, with the options that asked for them: --sbatch, --k8s."""
        return [(option, path) for option, path in (("--sbatch", self.sbatch), ("--k8s", self.k8s)) if path is not None]

    @property
    def options(self) -> Options:
        return Options(
            keep_global_batch=self.keep_global_batch,
            spawn=self.spawn,
            find_unused_parameters=self.find_unused_parameters,
            sync_batchnorm=self.sync_batchnorm,
            shard_eval=self.shard_eval,
            strict=self.strict,
        )

    def options_for(self, job: Job) -> Options:
        """The options for one job: where only the entry's output file is written, terminal output in
        the program's other modules stays as it is (those modules cannot be written)."""
        return replace(self.options, module_output=not job.one_file)


@dataclass(frozen=True)
class Job:
    """One file to convert and where its result goes."""

    src: str  # a path, or '-' for stdin
    target: str | None  # the file to write or compare; None: stdout
    in_place: bool = False
    write_unchanged: bool = True  # also write a script that needs no change, as it is
    make_folders: bool = False  # create the target's folder (inside the -o folder)
    whole_program: bool = False  # -o DIR/ with one script: the program goes there whole, converted or not

    @property
    def one_file(self) -> bool:
        """Whether only the entry's output is written: ``-o FILE`` or a suffix, not ``--in-place`` or ``-o DIR/``."""
        return self.target is not None and not self.in_place and not self.make_folders

    @property
    def name(self) -> str:
        """The input as it appears in messages and diagnostics."""
        return STDIN_NAME if self.src == "-" else self.src


def validate(request: Request, *, several: bool) -> None:
    """Raise ``Failure`` for options that cannot go together or cannot be carried out."""
    if "-" in request.sources and len(request.sources) > 1:
        raise Failure("'-' reads one script from stdin; it cannot be combined with other inputs")
    if request.check and request.output is None and request.suffix is None and not several:
        raise Failure("--check needs -o OUT")
    _validate_stdout(request, several=several)
    _validate_suffix(request)
    _validate_script_args(request)
    _validate_verify(request, several=several)
    _validate_launch_files(request, several=several)
    if several:
        if request.in_place and request.output is not None:
            raise Failure("--in-place rewrites each SRC; it cannot be combined with -o OUT")
        return
    (src,) = request.sources
    if src == "-":
        if request.in_place:
            raise Failure("--in-place needs a file, not stdin")
        if request.output is not None and is_folder(request.output):
            raise Failure(f"-o {request.output} is a folder; stdin has no file name to give the output there")
        return
    if is_notebook(src):
        check_output(src, request.output, in_place=request.in_place)
    if request.output is None:
        return
    if request.in_place and not same_file(src, request.output):
        raise Failure("--in-place rewrites SRC; it cannot be combined with -o OUT")
    if same_path(src, request.output) and not request.in_place:
        raise Failure(f"{request.output} is the input file; pass --in-place to rewrite it")


def _validate_stdout(request: Request, *, several: bool) -> None:
    if not request.stdout:
        return
    if several:
        raise Failure("-o - writes one script to stdout; with several inputs, -o names a folder")
    if request.in_place:
        raise Failure("--in-place rewrites SRC; it cannot be combined with -o -")


def refuse_notebook(path: str) -> None:
    """``ddpify verify`` runs scripts: a notebook is converted to one first."""
    if is_notebook(path):
        output = shlex.quote(with_suffix(script_name(path), DEFAULT_SUFFIX))
        raise Failure(f"{path}: a notebook; convert it to a script first: ddpify {shlex.quote(path)} -o {output}")


def valid_suffix(suffix: str) -> bool:
    """Whether ``suffix`` is a part of a file name that can mark an output (``_ddp``)."""
    return bool(_SUFFIX.fullmatch(suffix)) and not suffix.lower().endswith(".py") and suffix not in (".", "..")


def _validate_suffix(request: Request) -> None:
    suffix = request.suffix
    if suffix is None:
        return
    if not valid_suffix(suffix):
        raise Failure(f"--suffix {suffix!r}: give a part of a file name, such as {DEFAULT_SUFFIX}")
    if request.output is not None or request.in_place or request.stdout:
        raise Failure("--suffix names outputs next to their inputs; it cannot be combined with -o OUT or --in-place")
    if request.sources == ("-",):
        raise Failure("--suffix needs a file, not stdin")


def _validate_script_args(request: Request) -> None:
    if request.script_args and not (request.verify or request.launch_files):
        raise Failure(
            f"unexpected argument {request.script_args[0]!r}; arguments for the script go after -- "
            "and need --verify, --sbatch or --k8s"
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
                raise Failure(f"{option} needs --verify")
        return
    if several:
        raise Failure("--verify runs one script; give a single SRC")
    if request.output is None:
        raise Failure("--verify needs -o OUT: the script it runs")
    if request.diff and not request.check:
        raise Failure("--diff writes nothing for --verify to run; drop --diff or add --check")
    require_torch("--verify")


def require_torch(what: str) -> None:
    if importlib.util.find_spec("torch") is None:
        raise Failure(f"{what} needs torch in {sys.executable}: pip install 'ddpify[run]'")


def _validate_launch_files(request: Request, *, several: bool) -> None:
    """--sbatch and --k8s: each writes a file that starts the one output script."""
    if not request.launch_files:
        for option, value in (("--nodes", request.nodes), ("--gpus-per-node", request.gpus_per_node)):
            if value is not None:
                raise Failure(f"{option} needs --sbatch or --k8s")
        return
    scripts = [*(src for src in request.sources if src != "-"), *([request.output] if request.output else [])]
    for option, path in request.launch_files:
        if several:
            raise Failure(f"{option} starts one script; give a single SRC")
        if request.output is None:
            raise Failure(f"{option} needs -o OUT: the script it starts")
        if request.check or request.diff:
            raise Failure(f"{option} writes a file; it cannot be combined with --check or --diff")
        if any(same_file(path, script) for script in scripts):
            raise Failure(
                f"{option} {path} names a training script; give the {_LAUNCH_FILES[option]} a name of its own"
            )
    if request.sbatch is not None and request.k8s is not None and same_file(request.sbatch, request.k8s):
        raise Failure(f"--sbatch and --k8s both name {request.k8s}; give each file a name of its own")


_LAUNCH_FILES = {"--sbatch": "batch script", "--k8s": "manifest"}


def single_job(request: Request) -> Job:
    """Where the one input's result goes."""
    (src,) = request.sources
    if request.output is not None and is_folder(request.output):
        # `-o folder/`: the output goes into the folder under the input's name (a notebook's: a script's).
        return Job(src, os.path.join(request.output, os.path.basename(script_name(src))), make_folders=True)
    if request.output is not None:
        return Job(src, request.output, in_place=request.in_place)
    if request.in_place:
        return Job(src, src, in_place=True)
    if request.suffix is not None:
        return Job(src, with_suffix(script_name(src), request.suffix), write_unchanged=False)
    return Job(src, None)


def is_folder(output: str) -> bool:
    """Whether ``-o OUTPUT`` names a folder for a single output: a path that ends with a slash."""
    return output.endswith(("/", os.sep))


def same_path(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file by one path (symlinks followed). Two hard links to one
    file are two paths: an output written to one by a rename leaves the other as it was."""
    return os.path.realpath(a) == os.path.realpath(b)


def same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def with_suffix(path: str, suffix: str) -> str:
    root, extension = os.path.splitext(path)
    return f"{root}{suffix}{extension}"


def is_output(path: str, suffix: str) -> bool:
    """Whether the file's name marks it as an earlier output (``*_ddp.py``)."""
    return os.path.splitext(os.path.basename(path))[0].endswith(suffix)
