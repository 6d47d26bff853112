"""While twins: each script against itself counting its ``range`` loops by hand in a ``while`` loop.

``for epoch in range(start, epochs): ...`` and ``epoch = start`` then ``while
epoch < epochs: ...; epoch += 1`` run the same passes; resumable scripts write
the second. ddpify must convert both alike: the same outcome, the same
diagnostic codes and the same changes (line numbers aside).

The twin rewrites each ``for <name> in range(stop)`` or ``range(start, stop)``
loop without ``else`` whose own body has no ``continue``.

    .venv/bin/python benchmarks/while_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twin, kind, sweep

from ddpify.result import Conversion


def _own_continue(body: cst.CSTNode) -> bool:
    """Whether a ``continue`` in ``body`` belongs to the loop whose body it is (not to a loop inside)."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Continue(self, node: cst.Continue) -> None:
            nonlocal found
            found = True

        def visit_For(self, node: cst.For) -> bool:
            return False

        def visit_While(self, node: cst.While) -> bool:
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    body.visit(Finder())
    return found


class _Whiles(cst.CSTTransformer):
    def __init__(self) -> None:
        self.made = 0

    def _rewritten(self, loop: cst.For) -> list[cst.BaseStatement] | None:
        call = loop.iter
        if loop.orelse is not None or loop.asynchronous is not None or not isinstance(loop.target, cst.Name):
            return None
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "range"):
            return None
        if any(a.keyword or a.star for a in call.args) or len(call.args) not in (1, 2):
            return None
        if not isinstance(loop.body, cst.IndentedBlock) or _own_continue(loop.body):
            return None
        name = loop.target.value
        code = cst.Module([]).code_for_node
        start, stop = (
            ("0", code(call.args[0].value)) if len(call.args) == 1 else map(code, (a.value for a in call.args))
        )
        first = cst.parse_statement(f"{name} = {start}\n").with_changes(leading_lines=loop.leading_lines)
        step = cst.parse_statement(f"{name} += 1\n")
        test = cst.parse_expression(f"{name} < ({stop})")
        body = loop.body.with_changes(body=[*loop.body.body, step])
        self.made += 1
        return [first, cst.While(test=test, body=body)]

    def _block(self, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        new: list[cst.BaseStatement] = []
        for statement in body:
            made = self._rewritten(statement) if isinstance(statement, cst.For) else None
            new += made if made is not None else [statement]
        return new

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._block(list(updated.body)))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._block(list(updated.body)))


def twin(source: str) -> str | None:
    """The source with its range loops counted in ``while`` loops; None where none is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    whiles = _Whiles()
    code = module.visit(whiles).code
    if not whiles.made:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


def _said(conversion: Conversion) -> Said:
    # a loop over ``range`` numbered ``_`` gets a named epoch; the ``while`` twin's counter stays ``_``
    changes = sorted(kind(c.summary.replace("set_epoch(_)", "set_epoch(epoch)")) for c in conversion.changes)
    return conversion.status.name, codes(d.format() for d in conversion.diagnostics), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its while twin differ (empty: they do not); None where the
    twin cannot be made."""
    return compare_twin(path, twin(path.read_text()), _said, "while")


def main(argv: list[str]) -> int:
    return sweep("while twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
