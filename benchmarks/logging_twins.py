"""Logging twins: each script against itself reporting through ``logging`` instead of ``print``.

``print(f"epoch {epoch}: {loss:.3f}")`` and ``logger.info(f"epoch {epoch}:
{loss:.3f}")`` report the same thing; real programs log. ddpify must convert both
alike: the same outcome, the same diagnostic codes and the same changes (line
numbers aside; "print" and "log" read as one kind of output).

Two twins per script: each ``print(...)`` call with positional arguments only,
alone as a statement, becomes ``logging.info(...)`` (``import logging`` added)
or ``logger.info(...)`` with ``logger = logging.getLogger(__name__)`` at module
level; several arguments are formatted by logging (``"%s %s", a, b``).

    .venv/bin/python benchmarks/logging_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twins, kind, sweep, walk

from ddpify.result import Conversion

KINDS = ("logging", "logger")


class _Logged(cst.CSTTransformer):
    def __init__(self, receiver: str) -> None:
        self.receiver = receiver
        self.made = 0

    def leave_Expr(self, original: cst.Expr, updated: cst.Expr) -> cst.Expr:
        call = updated.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "print"):
            return updated
        if not call.args or any(a.keyword is not None or a.star for a in call.args):
            return updated
        args = [cst.Arg(a.value) for a in call.args]
        if len(args) > 1:  # ``logger.info("%s %s", a, b)``, as logging formats its arguments
            args = [cst.Arg(cst.SimpleString('"' + " ".join(["%s"] * len(args)) + '"')), *args]
        self.made += 1
        logged = cst.parse_expression(f"{self.receiver}.info()")
        assert isinstance(logged, cst.Call)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return updated.with_changes(
            value=logged.with_changes(args=[*(a.with_changes(comma=comma) for a in args[:-1]), args[-1]])
        )


def twin(source: str, how: str) -> str | None:
    """The source logging where it printed; None where it prints nothing so."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    names = {n.value for n in walk(module) if isinstance(n, cst.Name)}
    if "logging" in names or "logger" in names:
        return None
    logged = _Logged("logging" if how == "logging" else "logger")
    new = module.visit(logged)
    if not logged.made:
        return None
    added = [cst.parse_statement("import logging\n")]
    if how == "logger":
        added.append(cst.parse_statement("logger = logging.getLogger(__name__)\n"))
    body = list(new.body)
    first = next(
        (
            i
            for i, s in enumerate(body)
            if not (
                isinstance(s, cst.SimpleStatementLine)
                and (
                    isinstance(s.body[0], (cst.Import, cst.ImportFrom))
                    or (isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value, cst.SimpleString))
                )
            )
        ),
        len(body),
    )
    code = new.with_changes(body=[*body[:first], *added, *body[first:]]).code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_OUTPUT = re.compile(r"\b(print|log(ging)?( call)?|logger call)\b")


def _said(conversion: Conversion) -> Said:
    changes = sorted({kind(_OUTPUT.sub("output", c.summary)) for c in conversion.changes})
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its logging twins differ (empty: they do not); None where no
    twin can be made."""
    source = path.read_text()
    return compare_twins(path, {how: code for how in KINDS if (code := twin(source, how)) is not None}, _said)


def main(argv: list[str]) -> int:
    return sweep("logging twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
