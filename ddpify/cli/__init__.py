"""The command line: finds the scripts, calls :func:`ddpify.convert`, writes, reports, exits.

This package is the only part of ddpify that touches files, terminals and exit
codes; the conversion itself never raises.  Code, diffs and verification
reports go to stdout, every message goes to stderr; the exit codes are listed
in :mod:`ddpify.cli.exits` and README.md.

====================  =====================================================
``command``           the typer command and its options
``request``           the parsed request and its validation
``config``            ``[tool.ddpify]`` in pyproject.toml: found, read, checked
``run``               one run: a single script, ``--sbatch``, ``--k8s``, ``--verify``
``results``           one conversion reported, written, compared or shown
``discovery``         the scripts in folders, excludes, ``.gitignore``
``workers``           several files in worker processes
``files``             reading input, atomic writes
``notebooks``         a ``.ipynb`` input read as the script of its code cells
``transaction``       a program's files written all or none
``journal``           a write killed halfway finished or undone; the folder lock
``diff``              unified diff and colour
``report``            messages, summary line, progress
``backend``           ``convert()`` and ``verify()``, imported on first use
====================  =====================================================

libcst is imported only when a script is converted and ``ddpify.verify`` only
when a script is verified, so ``--help`` and ``--version`` start quickly.
"""

from __future__ import annotations

import os
import sys

import typer

from ddpify import collector
from ddpify.cli.exits import ExitCode
from ddpify.cli.files import guard_standard_streams
from ddpify.cli.report import bug_report_address, describe, error

__all__ = ["main"]

VERIFY = "verify"


def main(argv: list[str] | None = None) -> int:
    """Run ddpify with ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    ``ddpify verify SCRIPT`` is the verification alone; a file named ``verify``
    in the current folder is a script to convert, as any other path.
    """
    guard_standard_streams()
    args = sys.argv[1:] if argv is None else list(argv)
    with collector.paused():  # (see ddpify.collector)
        if args[:1] == [VERIFY] and not os.path.isfile(VERIFY):
            from ddpify.cli.command import verify_app

            code = _run(verify_app, args[1:], prog_name=f"ddpify {VERIFY}")
        else:
            from ddpify.cli.command import app

            code = _run(app, args, prog_name="ddpify")
    if argv is None:  # the command itself, which exits now
        collector.left_to_exit()
    return code


def _run(app: typer.Typer, args: list[str], *, prog_name: str) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except typer.TyperException as exc:
        message = exc.format_message().rstrip(".")
        error(f"error: {message}; see '{prog_name} --help'")
        return int(ExitCode.USAGE)
    except Exception as exc:
        error(f"error: internal error: {describe(exc)}; please report a bug at {bug_report_address()}")
        return int(ExitCode.INTERNAL_ERROR)
    # --help and --version end with an exit code; the command returns one.
    return result if isinstance(result, int) else int(ExitCode.OK)
