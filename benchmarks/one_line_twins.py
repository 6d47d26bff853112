"""One-line twins: each script against itself with its short bodies written on their header's line.

Python runs ``if os.path.exists(path): os.remove(path)`` as it runs the body
on a line of its own, so ddpify must convert both alike: the same outcome,
the same diagnostic codes and the same changes (line numbers aside). Real
scripts write one-line bodies for a save, a removal, a log line or the main
guard's ``main()``; this sweep finds where a concern reads only the indented
form.

The twin writes every block of one to three simple statements (no comment
above, after or below them) on its header's line, joined by ``;``.

    .venv/bin/python benchmarks/one_line_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twin, kind, sweep

from ddpify.result import Conversion


class _OneLine(cst.CSTTransformer):
    def __init__(self) -> None:
        self.made = 0

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock | cst.SimpleStatementSuite:
        lines = updated.body
        if (
            not 1 <= len(lines) <= 3
            or updated.footer
            or updated.header.comment is not None
            or not all(
                isinstance(line, cst.SimpleStatementLine)
                and not line.leading_lines
                and line.trailing_whitespace.comment is None
                for line in lines
            )
        ):
            return updated
        smalls = [small for line in lines for small in cast_line(line).body]
        joined = [s.with_changes(semicolon=cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" "))) for s in smalls]
        joined[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        self.made += 1
        return cst.SimpleStatementSuite(body=joined)


def cast_line(line: cst.BaseStatement) -> cst.SimpleStatementLine:
    assert isinstance(line, cst.SimpleStatementLine)
    return line


def twin(source: str) -> str | None:
    """The source with its short bodies on one line; None where none is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    rewrite = _OneLine()
    code = module.visit(rewrite).code
    if not rewrite.made:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


def _said(conversion: Conversion) -> Said:
    changes = sorted(kind(c.summary) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its one-line twin differ (empty: they do not); None where no
    twin can be made."""
    return compare_twin(path, twin(path.read_text()), _said, "one-line")


def main(argv: list[str]) -> int:
    return sweep("one-line twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
