"""Alias twins: each script against itself calling its objects through a second name.

``net = model`` and then ``net(x)`` runs the same module as ``model(x)``; a
script that calls its model, its criterion or a helper through another name
must convert as one that does not: the same outcome, the same diagnostic codes
and the same changes (line numbers aside, the second name read as the first).

The twin adds ``name_q9 = name`` right after each statement that binds a plain
name, in a function or at module level, where the name is bound once and later
called; each later call ``name(...)`` becomes ``name_q9(...)``.

    .venv/bin/python benchmarks/alias_twins.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare, converted, kind, options_for, sweep, walk

from ddpify import convert
from ddpify.result import Conversion

SUFFIX = "_q9"


class _Alias(cst.CSTTransformer):
    """In each block, a second name for each plain name bound once by a statement of the block and called later."""

    def __init__(self) -> None:
        self.made = 0

    def _names_bound_once(self, body: list[cst.BaseStatement], scope: cst.CSTNode) -> dict[str, cst.BaseStatement]:
        counts: Counter[str] = Counter()
        where: dict[str, cst.BaseStatement] = {}
        for node in walk(scope):
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)):
                for n in walk(node.target):
                    if isinstance(n, cst.Name):
                        counts[n.value] += 1
            elif isinstance(node, (cst.Global, cst.Nonlocal)):
                for item in node.names:
                    counts[item.name.value] += 2
            elif isinstance(node, cst.Param):
                counts[node.name.value] += 2
        for stmt in body:
            if (
                isinstance(stmt, cst.SimpleStatementLine)
                and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)
            ):
                assign = stmt.body[0]
                name = assign.targets[0].target if len(assign.targets) == 1 else None
                if isinstance(name, cst.Name) and counts[name.value] == 1:
                    where[name.value] = stmt
        return where

    def _block(self, body: list[cst.BaseStatement], scope: cst.CSTNode) -> list[cst.BaseStatement] | None:
        bound = self._names_bound_once(body, scope)
        every = {n.value for n in walk(scope) if isinstance(n, cst.Name)}
        chosen: dict[str, cst.BaseStatement] = {}
        for name, stmt in bound.items():
            if name + SUFFIX in every:
                continue
            later = body[body.index(stmt) + 1 :]
            called = any(
                isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == name
                for s in later
                for n in walk(s)
            )
            if called:
                chosen[name] = stmt
        if not chosen:
            return None
        new: list[cst.BaseStatement] = []
        seen: set[str] = set()
        for stmt in body:
            if seen:
                stmt = stmt.visit(_CallsThrough(seen))
            new.append(stmt)
            for name, where in chosen.items():
                if where is stmt:
                    new.append(cst.parse_statement(f"{name}{SUFFIX} = {name}\n"))
                    seen.add(name)
                    self.made += 1
        return new

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = self._block(list(updated.body.body), updated)
        return updated.with_changes(body=updated.body.with_changes(body=body)) if body is not None else updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        top = [s for s in updated.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        body = self._block(list(updated.body), cst.Module(body=top))
        return updated.with_changes(body=body) if body is not None else updated


class _CallsThrough(cst.CSTTransformer):
    def __init__(self, names: set[str]) -> None:
        self.names = set(names)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # another scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if isinstance(updated.func, cst.Name) and updated.func.value in self.names:
            return updated.with_changes(func=cst.Name(updated.func.value + SUFFIX))
        return updated


def twin(source: str) -> str | None:
    """The source calling through second names; None where no name is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    alias = _Alias()
    code = module.visit(alias).code
    if not alias.made:
        return None
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


_ALIASED = re.compile(re.escape(SUFFIX) + r"(?![0-9A-Za-z])")
_NUMBERS = re.compile(r"\b\d+\b")
_TAKEN_AGAIN = "taken before the wrap, names the wrapper"  # the twin's own second name, taken again


def _said(conversion: Conversion) -> Said:
    changes = sorted({kind(_ALIASED.sub("", c.summary)) for c in conversion.changes if _TAKEN_AGAIN not in c.summary})
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
    return compare(plain, other, "aliased")


def main(argv: list[str]) -> int:
    return sweep("alias twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
