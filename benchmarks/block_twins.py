"""Block twins: each script against itself with its code inside one more block.

Real scripts run their training inside blocks that change nothing here:
``with open(log_path, "w") as log:`` around the whole run, ``try: ... except
KeyboardInterrupt:`` around the epoch loop, ``with torch.autograd.detect_anomaly():``
around a step. ddpify must convert them as the script without the block: the
same outcome, the same diagnostic codes and the same changes (line numbers aside).

Four twins per script: the body of every function, or of every ``for`` loop,
wrapped in ``with contextlib.nullcontext():`` or in ``try: ... except
KeyboardInterrupt: raise``.

    .venv/bin/python benchmarks/block_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twins, kind, sweep

from ddpify.result import Conversion

KINDS = ("with-function", "try-function", "with-loop", "try-loop")
_WITH = cst.parse_statement("with contextlib.nullcontext():\n    pass\n")
_TRY = cst.parse_statement("try:\n    pass\nexcept KeyboardInterrupt:\n    raise\n")


class _Wrap(cst.CSTTransformer):
    def __init__(self, how: str) -> None:
        self.block, self.where = how.split("-")
        self.made = 0

    def _wrapped(self, body: cst.BaseSuite) -> cst.BaseSuite:
        if not isinstance(body, cst.IndentedBlock):
            return body
        statements = list(body.body)
        head = []
        while statements and _kept_first(statements[0]):
            head.append(statements.pop(0))
        if not statements:
            return body
        self.made += 1
        inner = cst.IndentedBlock(body=statements)
        template = _WITH if self.block == "with" else _TRY
        block = template.with_changes(body=inner)
        return body.with_changes(body=[*head, block])

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        return updated.with_changes(body=self._wrapped(updated.body)) if self.where == "function" else updated

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated.with_changes(body=self._wrapped(updated.body)) if self.where == "loop" else updated


def _kept_first(statement: cst.BaseStatement) -> bool:
    """A docstring, ``global`` or ``nonlocal`` statement stays where it is."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    return isinstance(small, (cst.Global, cst.Nonlocal)) or (
        isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
    )


def twin(source: str, how: str) -> str | None:
    """The source with those bodies wrapped; None where none is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    wrap = _Wrap(how)
    new = module.visit(wrap)
    if not wrap.made:
        return None
    if wrap.block == "with":
        body = list(new.body)
        first = next(
            (
                i
                for i, s in enumerate(body)
                if not (
                    isinstance(s, cst.SimpleStatementLine)
                    and (
                        _kept_first(s)
                        or (
                            isinstance(s.body[0], cst.ImportFrom)
                            and getattr(s.body[0].module, "value", "") == "__future__"
                        )
                    )
                )
            ),
            len(body),
        )
        new = new.with_changes(body=[*body[:first], cst.parse_statement("import contextlib\n"), *body[first:]])
    code = new.code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_NUMBERS = re.compile(r"\b\d+\b")


def _said(conversion: Conversion) -> Said:
    changes = sorted(kind(c.summary) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its block twins differ (empty: they do not); None where no
    twin can be made."""
    source = path.read_text()
    return compare_twins(path, {how: code for how in KINDS if (code := twin(source, how)) is not None}, _said)


def main(argv: list[str]) -> int:
    return sweep("block twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
