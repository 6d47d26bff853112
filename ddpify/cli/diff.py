"""``--diff``: a unified diff of the input and its converted script, coloured on a terminal.

Lines keep their own endings, and the diff is written in the script's own
encoding (without a BOM) so that ``patch`` can apply it.  Colour follows
``--no-color``, ``NO_COLOR`` and whether stdout is a terminal.
"""

from __future__ import annotations

import difflib
import io
import os
import sys
import tokenize
from collections.abc import Iterable, Iterator

from ddpify.cli.files import write_stdout
from ddpify.cli.report import isatty

_BOLD, _RED, _GREEN, _CYAN, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[0m"


def print_diff(before: bytes, after: bytes, *, from_name: str, to_name: str, color: bool) -> None:
    encoding = source_encoding(before)
    lines = unified_diff(
        before.decode(encoding, errors="replace"),
        after.decode(encoding, errors="replace"),
        from_name=from_name,
        to_name=to_name,
    )
    if color and color_enabled():
        lines = paint(lines)
    out_encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    write_stdout("".join(lines).encode(out_encoding, errors="backslashreplace"))


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


def paint(lines: Iterable[str]) -> Iterator[str]:
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


def color_enabled() -> bool:
    return not os.environ.get("NO_COLOR") and isatty(sys.stdout)


def source_encoding(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return "utf-8"
    return encoding
