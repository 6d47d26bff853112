"""Notebooks on the command line: a ``.ipynb`` input is read as the script of its code cells.

The script is made by :mod:`ddpify.notebook`; here a notebook that cannot be
read becomes a one-line :class:`~ddpify.cli.exits.Failure` (exit 2, nothing
written), and outputs get the name of a script (``train.ipynb`` -> ``train.py``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from ddpify import notebook
from ddpify.cli.exits import Failure

if TYPE_CHECKING:
    from ddpify.cli.program import ProgramFiles
    from ddpify.notebook import Script


def read_script(src: str, data: bytes) -> Script:
    """The script made of the notebook ``data`` read from ``src``; raises ``Failure`` when it cannot be read."""
    try:
        return notebook.read(data, src)
    except notebook.NotebookError as exc:
        raise Failure(str(exc)) from None


def located(script: Script, program: ProgramFiles) -> ProgramFiles:
    """``program`` with the imports ddpify cannot follow in the notebook itself named by cell and line."""
    entry = str(program.entry)
    unfollowed = []
    for found in program.unfollowed:
        if os.path.realpath(found.path) == entry:
            path, line = script.at(found.line)
            found = replace(found, path=path, line=line, reason=f"{found.reason} (script line {found.line})")
        unfollowed.append(found)
    return replace(program, unfollowed=tuple(unfollowed))


def check_output(src: str, output: str | None, *, in_place: bool) -> None:
    """Raise ``Failure`` unless a notebook's script can go where the user asked: a ``.py`` file, a folder or stdout."""
    shown = notebook.script_name(src)
    if in_place:
        raise Failure(
            f"--in-place cannot rewrite {src}: the output is a script, not a notebook; give -o "
            f"{_suffixed(shown)} (or no -o for stdout)"
        )
    if output is None or output == "-" or output.endswith(("/", "\\")) or output.endswith(".py"):
        return
    raise Failure(f"-o {output}: the output of a notebook is a script; give -o {_suffixed(shown)}")


def _suffixed(script: str) -> str:
    return script[: -len(".py")] + "_ddp.py"
