"""Inlined twins: each script with a ``main()`` against the same code run in its main block.

Tutorials train at module level; larger scripts in a ``main()`` that the main
block calls. Python runs both alike when nothing else reads main's names, and
so must ddpify convert both alike: the same outcome, the same diagnostic codes
and the same changes (line numbers aside).

The twin replaces ``def main():`` by ``if __name__ == "__main__":`` (the body
keeps its lines and indentation) and drops the main block that called it. It is
made only where ``main`` takes no parameter, holds no ``return``, ``global``
or ``nonlocal`` (outside nested definitions), is called once, by that main
block, and binds no name that another function reads.

    .venv/bin/python benchmarks/inlined_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import libcst as cst
import libcst.matchers as m

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare, converted, options_for, sweep

from ddpify import convert
from ddpify.result import Conversion

_MAIN_BLOCK = m.If(
    test=m.Comparison(left=m.Name("__name__"), comparisons=[m.ComparisonTarget(m.Equal(), m.SimpleString())])
)


def _walk(node: cst.CSTNode, inside_definitions: bool = True):  # type: ignore[no-untyped-def]
    yield node
    for child in node.children:
        if not inside_definitions and isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        yield from _walk(child, inside_definitions)


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in _walk(node) if isinstance(n, cst.Name)}


def twin(source: str) -> str | None:
    """The script with ``main()``'s body run in its main block; None where it cannot be made."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    body = list(module.body)
    mains = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "main"]
    guards = [s for s in body if m.matches(s, _MAIN_BLOCK)]
    if len(mains) != 1 or len(guards) != 1 or not isinstance(mains[0].body, cst.IndentedBlock):
        return None
    main, guard = mains[0], guards[0]
    assert isinstance(guard, cst.If)
    calls_main = m.matches(
        guard.body,
        m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Expr(m.Call(func=m.Name("main"), args=[]))])]),
    )
    if not calls_main or guard.orelse is not None or body.index(guard) < body.index(main):
        return None
    params = main.params
    starred = isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.star_kwarg is not None
    if params.params or params.posonly_params or params.kwonly_params or starred or main.decorators:
        return None
    own = list(_walk(main.body, inside_definitions=False))
    if any(isinstance(n, (cst.Return, cst.Global, cst.Nonlocal, cst.Yield, cst.Await)) for n in own):
        return None
    elsewhere = [s for s in body if s is not main and s is not guard]
    if "main" in set().union(*(_names(s) for s in elsewhere)) or "main" in _names(main.body):
        return None  # something else reads ``main``
    bound = {
        t.value for n in own if isinstance(n, cst.AssignTarget) for t in _walk(n.target) if isinstance(t, cst.Name)
    }
    read_elsewhere = set().union(*(_names(s) for s in elsewhere if isinstance(s, (cst.FunctionDef, cst.ClassDef))))
    if bound & read_elsewhere:
        return None  # a function that reads a global of that name would now see main's value
    block = cst.If(
        test=guard.test,
        body=main.body,
        leading_lines=main.leading_lines,
        whitespace_before_test=guard.whitespace_before_test,
        whitespace_after_test=main.whitespace_before_colon,
    )
    new_body = [block if s is main else s for s in body if s is not guard]
    code = module.with_changes(body=new_body).code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_NUMBERS = re.compile(r"\b(line )?\d+\b")


def _said(conversion: Conversion) -> Said:
    """Outcome, diagnostic codes and change summaries (numbers aside)."""
    changes = sorted(_NUMBERS.sub("N", c.summary) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its twin differ (empty: they do not); None where the twin
    cannot be made."""
    source = path.read_text()
    made = twin(source)
    if made is None:
        return None
    options = options_for(path)
    plain = _said(converted(source, options))
    other = _said(convert(made, path="train.py", options=options))
    return compare(plain, other, "inlined")


def main(argv: list[str]) -> int:
    return sweep("inlined twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
