"""The ``ddpify`` command: its options, parsed by typer into a :class:`~ddpify.cli.request.Request`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Annotated, Any

import typer
import typer.core

import ddpify
from ddpify.cli.exits import ExitCode, Failure, Interrupted
from ddpify.cli.files import DEFAULT_MAX_SIZE
from ddpify.cli.report import describe, error, internal_error_message
from ddpify.cli.request import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_NODES,
    DEFAULT_NPROC,
    DEFAULT_SUFFIX,
    DEFAULT_TIMEOUT_S,
    STDIN_NAME,
    ReportFormat,
    Request,
)

SCRIPT_ARGS = "ddpify.script_args"


def _print_version(value: bool) -> None:
    if value:
        print(f"ddpify {ddpify.__version__}")
        raise typer.Exit()


class Command(typer.core.TyperCommand):
    """Takes the words after the first ``--`` as the script's own arguments.

    Both SRC... and the script's arguments are lists of positional words, which
    click cannot tell apart, so they are split here, before it parses the rest.
    A ``--`` that is an option's value (``-o --``) does not split.
    """

    # typer passes its own Context, a subclass of the one the base class names.
    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
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
                ctx.meta[SCRIPT_ARGS] = tuple(args[index + 1 :])
                args = args[:index]
                break
            if word in valued:
                next(words, None)
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return [*super().collect_usage_pieces(ctx), "[-- SCRIPT_ARGS]..."]


Sources = Annotated[
    list[str],
    typer.Argument(
        metavar="SRC",
        show_default=False,
        help=(
            "The training scripts to convert: files, notebooks (*.ipynb), and folders searched for *.py and "
            "*.ipynb ('-' reads one script from stdin). Arguments after '--' go to the script "
            "(--verify, --sbatch, --k8s)."
        ),
    ),
]
Output = Annotated[
    str | None,
    typer.Option(
        "-o",
        "--output",
        metavar="OUT",
        help=(
            "Write the converted script to OUT (default, and '-': stdout); OUT ending with '/' is a folder, "
            "created if need be; with several inputs, OUT is a folder that receives them under their relative paths."
        ),
    ),
]
InPlace = Annotated[bool, typer.Option("--in-place", help="Rewrite each SRC itself.")]
Suffix = Annotated[
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
]
Diff = Annotated[
    bool, typer.Option("--diff", help="Print a unified diff of each SRC and its converted script; write nothing.")
]
Check = Annotated[
    bool, typer.Option("--check", help="Write nothing; exit 1 if an output is missing or not what would be generated.")
]
KeepGlobalBatch = Annotated[
    bool | None,
    typer.Option(
        "--keep-global-batch/--no-keep-global-batch",
        show_default=False,
        help="Divide each training DataLoader's batch_size by the world size to keep the global batch.",
    ),
]
FindUnusedParameters = Annotated[
    bool | None,
    typer.Option(
        "--find-unused-parameters/--no-find-unused-parameters",
        show_default=False,
        help="Wrap every model with find_unused_parameters=True (costs a graph traversal per step; for forwards "
        "that skip parameters in ways ddpify cannot see).",
    ),
]
SyncBatchNorm = Annotated[
    bool | None,
    typer.Option(
        "--sync-bn/--no-sync-bn",
        show_default=False,
        help="Convert BatchNorm layers to SyncBatchNorm before the wrap (statistics over the global batch, "
        "at the cost of a collective in every BatchNorm forward).",
    ),
]
ShardEval = Annotated[
    bool | None,
    typer.Option(
        "--shard-eval/--no-shard-eval",
        show_default=False,
        help="Give evaluation DataLoaders a DistributedSampler(shuffle=False) and add up the sums and counts "
        "their loops accumulate over all processes (faster evaluation; a set that does not divide by the world "
        "size has up to world size - 1 samples counted twice; loops whose metrics are not sums are refused).",
    ),
]
Strict = Annotated[
    bool | None,
    typer.Option(
        "--strict/--no-strict",
        show_default=False,
        help="Refuse (DDP201) a script whose training data ddpify cannot split between the ranks, instead of "
        "converting it with the data whole on every rank (DDP211: correct, but no faster than one process); and "
        "refuse a program where one setting's path cannot be converted, instead of stopping that path (DDP015).",
    ),
]
Spawn = Annotated[
    bool | None,
    typer.Option(
        "--spawn/--no-spawn",
        show_default=False,
        help="Let `python OUT` start one process per GPU itself (for machines without torchrun).",
    ),
]
Jobs = Annotated[
    int | None,
    typer.Option(
        "-j",
        "--jobs",
        metavar="N",
        min=1,
        show_default=False,
        help="Convert up to N files at once (default: the number of CPUs).",
    ),
]
NoColor = Annotated[bool, typer.Option("--no-color", help="Never colour the diff (NO_COLOR is respected too).")]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="Print errors only.")]
Sbatch = Annotated[
    str | None,
    typer.Option(
        "--sbatch",
        metavar="FILE",
        show_default=False,
        help="Also write FILE, a SLURM batch script that runs OUT with srun torchrun (needs -o OUT).",
    ),
]
K8s = Annotated[
    str | None,
    typer.Option(
        "--k8s",
        metavar="FILE",
        show_default=False,
        help="Also write FILE, a Kubeflow PyTorchJob manifest that runs OUT with torchrun in each pod "
        "(needs -o OUT; fill in its IMAGE and NAMESPACE).",
    ),
]
Nodes = Annotated[
    int | None,
    typer.Option(
        "--nodes",
        metavar="N",
        min=1,
        show_default=False,
        help=f"--sbatch, --k8s: nodes to run on (default {DEFAULT_NODES}).",
    ),
]
GpusPerNode = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node",
        metavar="G",
        min=1,
        show_default=False,
        help=f"--sbatch, --k8s: GPUs of each node, one process each (default {DEFAULT_GPUS_PER_NODE}).",
    ),
]
Verify = Annotated[
    bool,
    typer.Option(
        "--verify",
        help=(
            "Then run OUT under torchrun in the current folder and check that it trains in data-parallel; "
            "exit 4 if a check fails. Needs torch (pip install 'ddpify[run]')."
        ),
    ),
]


def _verify_help(prefix: str, text: str) -> str:
    """Help for a --verify setting: after the prefix as it is, or capitalised on its own."""
    return f"{prefix}{text}" if prefix else text[:1].upper() + text[1:]


def _nproc_option(help_prefix: str) -> Any:
    return typer.Option(
        "--nproc",
        metavar="N",
        min=2,
        show_default=False,
        help=_verify_help(help_prefix, f"processes to run (default {DEFAULT_NPROC})."),
    )


def _timeout_option(help_prefix: str) -> Any:
    return typer.Option(
        "--timeout",
        metavar="S",
        min=1,
        show_default=False,
        help=_verify_help(help_prefix, f"seconds before the run counts as hung (default {DEFAULT_TIMEOUT_S:g})."),
    )


def _max_steps_option(help_prefix: str) -> Any:
    return typer.Option(
        "--max-steps",
        metavar="K",
        min=1,
        show_default=False,
        help=_verify_help(help_prefix, "stop every rank after K optimizer steps (default: train to the end)."),
    )


def _format_option(help_prefix: str) -> Any:
    return typer.Option(
        "--format",
        show_default=False,
        help=_verify_help(help_prefix, "print the report as a table (text, the default) or JSON."),
    )


# The --verify settings of a conversion; `ddpify verify` takes the same options without the prefix.
Nproc = Annotated[int | None, _nproc_option("--verify: ")]
Timeout = Annotated[float | None, _timeout_option("--verify: ")]
MaxSteps = Annotated[int | None, _max_steps_option("--verify: ")]
Format = Annotated[ReportFormat | None, _format_option("--verify: ")]
MaxSize = Annotated[
    int,
    typer.Option(
        "--max-size",
        metavar="BYTES",
        min=1,
        help="Refuse inputs larger than BYTES (training scripts are small).",
    ),
]
ConfigFile = Annotated[
    str | None,
    typer.Option(
        "--config",
        metavar="FILE",
        show_default=False,
        help="Read [tool.ddpify] from FILE (default: the nearest pyproject.toml above the inputs that has one).",
    ),
]
NoConfig = Annotated[bool, typer.Option("--no-config", help="Read no [tool.ddpify]: the command line alone.")]
Version = Annotated[
    bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
]

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command(cls=Command)
def ddpify_command(
    ctx: typer.Context,
    src: Sources,
    output: Output = None,
    in_place: InPlace = False,
    suffix: Suffix = None,
    diff: Diff = False,
    check: Check = False,
    keep_global_batch: KeepGlobalBatch = None,
    find_unused_parameters: FindUnusedParameters = None,
    sync_bn: SyncBatchNorm = None,
    shard_eval: ShardEval = None,
    strict: Strict = None,
    spawn: Spawn = None,
    jobs: Jobs = None,
    no_color: NoColor = False,
    quiet: Quiet = False,
    sbatch: Sbatch = None,
    k8s: K8s = None,
    nodes: Nodes = None,
    gpus_per_node: GpusPerNode = None,
    verify_run: Verify = False,
    nproc: Nproc = None,
    timeout: Timeout = None,
    max_steps: MaxSteps = None,
    report_format: Format = None,
    max_size: MaxSize = DEFAULT_MAX_SIZE,
    config_file: ConfigFile = None,
    no_config: NoConfig = False,
    version: Version = False,
) -> int:
    """Convert single-GPU PyTorch training scripts into torchrun / DistributedDataParallel scripts.

    Exit codes: 0 converted or nothing to do (and verified with --verify), 1
    --check found an output missing or stale, 2 bad usage or unreadable input, 3
    conversion refused, 4 --verify found that OUT does not train in data-parallel,
    123 internal error, 130 or 143 interrupted (SIGINT, SIGTERM). With several
    files, the highest under 123 > 3 > 2 > 1 > 0.

    To check any script (converted or written by hand) without converting it:
    ddpify verify SCRIPT [-- SCRIPT_ARGS] (see ddpify verify --help).

    Defaults for these options can be kept in pyproject.toml, [tool.ddpify]
    (see --config); the command line wins.
    """

    def request() -> Request:
        from ddpify.cli.config import Settings, load

        settings = load(src, config=config_file, no_config=no_config)
        # Where the outputs go, as the command line says; the file's choice only when it says nothing.
        placed = output is not None or in_place or suffix is not None or src == ["-"]
        if not placed and settings.output_refused is not None:
            raise Failure(settings.output_refused)
        # The file's verify settings serve only a verification the command line asks for.
        verifying = settings if verify_run else Settings()
        return Request(
            sources=tuple(src),
            output=None if output == "-" else output if placed else settings.output,
            stdout=output == "-",
            max_size=max_size,
            in_place=in_place,
            diff=diff,
            check=check,
            keep_global_batch=_chosen(keep_global_batch, settings.keep_global_batch),
            find_unused_parameters=_chosen(find_unused_parameters, settings.find_unused_parameters),
            sync_batchnorm=_chosen(sync_bn, settings.sync_bn),
            shard_eval=_chosen(shard_eval, settings.shard_eval),
            strict=_chosen(strict, settings.strict),
            color=not no_color,
            quiet=quiet,
            spawn=_chosen(spawn, settings.spawn),
            suffix=suffix if placed else settings.suffix,
            jobs=jobs if jobs is not None else settings.jobs,
            sbatch=sbatch,
            k8s=k8s,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            verify=verify_run,
            nproc=nproc if nproc is not None else verifying.nproc,
            timeout=timeout if timeout is not None else verifying.timeout,
            max_steps=max_steps if max_steps is not None else verifying.max_steps,
            report_format=report_format,
            script_args=ctx.meta.get(SCRIPT_ARGS, ()),
            config=settings.path,
            exclude=settings.exclude,
            extend_exclude=settings.extend_exclude,
            exclude_root=settings.exclude_root,
        )

    return execute(request, name=", ".join(STDIN_NAME if path == "-" else path for path in src))


def _chosen(flag: bool | None, configured: bool | None) -> bool:
    """A switch as the command line sets it, else as the configuration does, else off."""
    return flag if flag is not None else bool(configured)


def execute(request: Callable[[], Request], *, name: str) -> int:
    """Carry out the request ``request()`` builds; every failure becomes a message on stderr and an exit code."""
    from ddpify.cli.run import run

    return guarded(lambda: run(request()), name=name)


def guarded(action: Callable[[], ExitCode], *, name: str) -> int:
    """``action()``'s exit code; a failure, an interruption or a bug becomes a message on stderr and its code."""
    from ddpify.cli.signals import stop_on_signals

    try:
        with stop_on_signals():
            return int(action())
    except Interrupted as stop:
        error(stop.message)
        return stop.code
    except Failure as failure:
        error(f"error: {failure.message}")
        return int(failure.code)
    except BrokenPipeError:
        # The reader went away (`ddpify train.py --diff | head`); not a bug.
        # Point stdout at /dev/null so that the final flush stays quiet.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        return int(ExitCode.BROKEN_PIPE)
    except Exception as exc:
        error(f"error: {internal_error_message(name, describe(exc))}")
        return int(ExitCode.INTERNAL_ERROR)


# ----------------------------------------------------------------------------
# ddpify verify SCRIPT

VerifyScript = Annotated[
    str,
    typer.Argument(
        metavar="SCRIPT",
        show_default=False,
        help="The DDP script to run under torchrun, as it is. Arguments after '--' go to the script.",
    ),
]
VerifyNproc = Annotated[int | None, _nproc_option("")]
VerifyTimeout = Annotated[float | None, _timeout_option("")]
VerifyMaxSteps = Annotated[int | None, _max_steps_option("")]
VerifyFormat = Annotated[ReportFormat | None, _format_option("")]

verify_app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@verify_app.command(cls=Command)
def verify_command(
    ctx: typer.Context,
    script: VerifyScript,
    nproc: VerifyNproc = None,
    timeout: VerifyTimeout = None,
    max_steps: VerifyMaxSteps = None,
    report_format: VerifyFormat = None,
    config_file: ConfigFile = None,
    no_config: NoConfig = False,
) -> int:
    """Run SCRIPT under torchrun in the current folder and check that it trains in data-parallel.

    Nothing is converted: the script is run as it is, so a converted script
    that was edited since, or one written by hand, can be checked in CI. Exit
    codes: 0 every check passed, 4 a check failed or the run hung, 2 bad usage
    or no torch. Needs torch (pip install 'ddpify[run]').
    """
    from ddpify.cli.report import Reporter
    from ddpify.cli.run import check_verifiable, verify_script

    def action() -> ExitCode:
        from ddpify.cli.config import load

        check_verifiable(script)
        settings = load([script], config=config_file, no_config=no_config)
        reporter = Reporter(quiet=False)
        if settings.path is not None:
            reporter.say(f"config: [tool.ddpify] of {settings.path}")
        return verify_script(
            script,
            nproc=nproc if nproc is not None else settings.nproc,
            timeout=timeout if timeout is not None else settings.timeout,
            max_steps=max_steps if max_steps is not None else settings.max_steps,
            report_format=report_format,
            script_args=ctx.meta.get(SCRIPT_ARGS, ()),
            reporter=reporter,
        )

    return guarded(action, name=script)
