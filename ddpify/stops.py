"""A path that cannot be converted, taken under one setting, stops at its start; the rest is converted.

A program that trains one of several ways by a flag (``--arch``, ``--gan_type``)
is refused whole when one way cannot be converted, though the others could.
Instead, when every error found lies on a setting's branch
(:func:`~ddpify.engine.gates.gates_of`) and each ``if`` on the setting keeps a
branch that trains and converts, that branch's first statement becomes
``raise SystemExit("<file> line <n>: <reason> ...")``: the path is never run
wrong, the user learns which line and why, and each error is reported as a
warning (DDP015). ``--strict`` refuses as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify.diagnostics import STOPPED_PATH, Diagnostic, Severity
from ddpify.engine import gates
from ddpify.engine.index import Index
from ddpify.engine.program import Program


@dataclass(frozen=True)
class Stop:
    """A block of the input's ``module`` that holds only ``raise SystemExit(reason)`` while the rest is
    converted: a setting's branch, whose stop stays (``kept``), or the body of a function that only such a
    branch runs, given back as it was afterwards."""

    module: cst.Module
    branch: cst.IndentedBlock
    reason: str
    kept: bool = True


def find_stops(program: Program) -> tuple[list[Stop], list[Diagnostic]] | None:
    """The branches to stop, and each error reported again as a warning (DDP015); None when some error lies
    on a path that no setting selects, or when a setting would keep no branch that trains."""
    index = program.index
    errors = [finding for finding in program.findings if finding[1].severity is Severity.ERROR]
    reached: list[list[gates.Gate]] = []
    for node, _, _ in errors:
        found = gates.gates_of(index, node)
        if found is None or not all(isinstance(g.branch, cst.IndentedBlock) and g.branch.body for g in found):
            return None
        reached.append(found)
    if not reached:
        return None
    stopped = {gate.branch for found in reached for gate in found}
    chains = {gate.chain: None for found in reached for gate in found}
    if not all(
        any(branch not in stopped and _trains(index, branch) for branch in gates.branches(chain))
        or gates.passed_over_trains(index, chain)
        for chain in chains
    ):
        return None
    stops: dict[cst.BaseSuite, Stop] = {}
    warnings: list[Diagnostic] = []
    for (node, code, message), found in zip(errors, reached, strict=True):
        line, column = index.position(node)
        path = index.path_of(node)
        for gate in found:
            reason = f"{path} line {line}: {_short(code.meaning)} ({code.code}); not converted to run distributed"
            stops.setdefault(
                gate.branch, Stop(index.module_of(gate.branch), cast(cst.IndentedBlock, gate.branch), reason)
            )
        function = index.scope_of(node)
        if (
            gates.gate_in_function(index, node) is None
            and isinstance(function, cst.FunctionDef)
            and isinstance(function.body, cst.IndentedBlock)
            and function.body not in stops
        ):
            # run only from stopped branches: hidden from the analysis, so that its errors decide nothing else
            hidden = f"hidden from the analysis: {len(stops)}"
            stops[function.body] = Stop(index.module_of(function), function.body, hidden, kept=False)
        where = "; ".join(
            f"{'the `else` of ' if g.orelse else ''}`{index.module_of(g.test).code_for_node(g.test)}` "
            f"(line {index.position(g.test)[0]})"
            for g in found
        )
        warnings.append(
            STOPPED_PATH.at(
                line,
                column,
                f"{code.code} {message} -- only the path under {where} reaches it: that path now stops at its start "
                "with this reason, and the rest of the program is converted (--strict refuses instead)",
                path,
            )
        )
    return sorted(stops.values(), key=lambda stop: index.order[stop.branch]), warnings


def pruned(module: cst.Module, stops: list[Stop]) -> cst.Module:
    """``module`` with each stopped branch holding only its stop, on as many lines as before (so that every
    line after it keeps its number)."""
    mine = {stop.branch: stop for stop in stops if stop.module is module}
    if not mine:
        return module

    class Prune(cst.CSTTransformer):
        def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            stop = mine.get(original)
            if stop is None:
                return updated
            first = cast(cst.SimpleStatementLine | cst.BaseCompoundStatement, original.body[0])
            one_line = cst.parse_statement(f"raise SystemExit({_quoted(stop.reason)})")
            lost = _lines(module, original) - _lines(
                module, original.with_changes(body=[one_line.with_changes(leading_lines=first.leading_lines)])
            )
            # the lines the branch held, kept inside the call's parentheses: the lines after it keep their numbers
            spread = cst.parse_statement("raise SystemExit(" + "\n" * max(lost, 0) + f"{_quoted(stop.reason)})\n")
            return original.with_changes(body=[spread.with_changes(leading_lines=first.leading_lines)])

    return module.visit(Prune())


def restored(code: str | bytes, stops: list[Stop]) -> str | bytes:
    """Converted ``code`` with each stopped branch's own statements back after its stop (never run, left as
    they were)."""
    by_reason = {stop.reason: stop for stop in stops}
    tree = cst.parse_module(code)

    class Restore(cst.CSTTransformer):
        def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            for stmt in updated.body:
                stop = by_reason.get(_stop_reason(stmt) or "")
                if stop is not None and not stop.kept:
                    return updated.with_changes(body=stop.branch.body, footer=stop.branch.footer)
                if stop is not None:
                    kept = list(stop.branch.body)
                    kept[0] = kept[0].with_changes(leading_lines=[])
                    head, tail = stop.reason.rsplit("; ", 1)
                    pretty = cst.parse_statement(
                        f"raise SystemExit(\n    {_quoted(head + '; ')}\n    {_quoted(tail)}\n)\n"
                    )
                    body = [
                        pretty.with_changes(leading_lines=cast(cst.SimpleStatementLine, stmt).leading_lines)
                        if s is stmt
                        else s
                        for s in updated.body
                    ]
                    return updated.with_changes(body=[*body, *kept], footer=stop.branch.footer)
            return updated

        def leave_SimpleStatementSuite(
            self, original: cst.SimpleStatementSuite, updated: cst.SimpleStatementSuite
        ) -> cst.BaseSuite:
            """``else: raise SystemExit(...)``, a one-line branch stopped: indented, to hold its statements."""
            if len(updated.body) != 1:
                return updated
            line = cst.SimpleStatementLine(body=[updated.body[0].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
            if by_reason.get(_stop_reason(line) or "") is None:
                return updated
            block = cst.IndentedBlock(body=[line], header=updated.trailing_whitespace)
            return self.leave_IndentedBlock(block, block)

    new = tree.visit(Restore())
    return new.bytes if isinstance(code, bytes) else new.code


def _stop_reason(stmt: cst.BaseStatement | cst.BaseSmallStatement) -> str | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if (
        isinstance(small, cst.Raise)
        and isinstance(small.exc, cst.Call)
        and isinstance(small.exc.func, cst.Name)
        and small.exc.func.value == "SystemExit"
        and len(small.exc.args) == 1
        and isinstance(small.exc.args[0].value, cst.SimpleString)
    ):
        value = small.exc.args[0].value.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _short(meaning: str) -> str:
    """The first clause of a code's meaning: what the construct is, without how to read it."""
    for mark in (" (", ": ", "; "):
        meaning = meaning.split(mark, 1)[0]
    return meaning


def _lines(module: cst.Module, node: cst.CSTNode) -> int:
    return module.code_for_node(node).count("\n")


def _trains(index: Index, branch: cst.BaseSuite) -> bool:
    """Whether running ``branch`` trains, itself or by building an object of the program's class that does."""
    if index.trains(branch):
        return True
    return any(
        isinstance(call, cst.Call)
        and (cls := index.local_class(call.func)) is not None
        and any(index.trains(c) for c in index.ancestry(cls))  # ``run()`` of a base class too
        for call in index.walk(branch)
    )


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
