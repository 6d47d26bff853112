"""Pair twins: each script against itself building two objects in one helper that returns both.

``model = Net()`` then ``optimizer = SGD(model.parameters())``, and ``model,
optimizer = build(...)`` with both made in ``build``, are one program; real
programs return pairs from their builders (``model, optimizer =
create(cfg)``, ``train_loader, val_loader = get_loaders(...)``). ddpify must
convert both alike: the same outcome, the same diagnostic codes and the same
changes (line numbers aside, compared by kind).

The twin moves each two neighbouring statements ``a = <call>`` and ``b =
<call>`` of a function (not a method) whose calls build objects of classes
(see ``factory_twins.py``) into a new module-level function ``pair<N>_q9``
returning ``a, b``; its parameters are the other names of the function they read.

    .venv/bin/python benchmarks/pair_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twin, kind, sweep, walk
from factory_twins import _KEPT, _built, _locals, _read

from ddpify.result import Conversion


def _built_into(statement: cst.BaseStatement) -> tuple[str, cst.Call] | None:
    """``name = Class(...)`` alone on its line: the name and the call."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    assign = statement.body[0]
    if not (
        isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
    ):
        return None
    value = assign.value
    if not isinstance(value, cst.Call) or any(isinstance(n, _KEPT) for n in walk(value)):
        return None
    if not _built(value)[:1].isupper():
        return None
    return assign.targets[0].target.value, value


class _Pairs(cst.CSTTransformer):
    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.made: list[cst.FunctionDef] = []
        self.scopes: list[set[str] | None] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params.params
        method = bool(params) and params[0].name.value in ("self", "cls")
        self.scopes.append(None if method else _locals(node))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        local = self.scopes.pop()
        if local is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        new: list[cst.BaseStatement] = []
        i = 0
        while i < len(body):
            first = _built_into(body[i])
            second = _built_into(body[i + 1]) if i + 1 < len(body) else None
            if first is None or second is None or first[0] == second[0]:
                new.append(body[i])
                i += 1
                continue
            (a, _), (b, later) = first, second
            reads = [n for n in _read(first[1]) + [n for n in _read(later) if n != a] if n in local]
            params = list(dict.fromkeys(reads))
            name = f"pair{len(self.made) + 1}_q9"
            while name in self.taken:
                name += "x"
            args = ", ".join(params)
            stripped = [s.with_changes(leading_lines=[]) for s in body[i : i + 2]]
            function = cst.parse_statement(f"def {name}({args}):\n    return {a}, {b}\n")
            assert isinstance(function, cst.FunctionDef)
            ret = function.body.body[0]
            self.made.append(function.with_changes(body=cst.IndentedBlock([*stripped, ret])))
            call = cst.parse_statement(f"{a}, {b} = {name}({args})\n").with_changes(leading_lines=body[i].leading_lines)
            new.append(call)
            i += 2
        return updated.with_changes(body=updated.body.with_changes(body=new))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(None)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.scopes.pop()
        return updated


def twin(source: str) -> str | None:
    """The source building neighbouring pairs through helpers; None where no pair is."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    pairs = _Pairs({n.value for n in walk(module) if isinstance(n, cst.Name)})
    new = module.visit(pairs)
    if not pairs.made:
        return None
    body = list(new.body)
    first = next((i for i, s in enumerate(body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))), len(body))
    spaced = [f.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for f in pairs.made]
    code = new.with_changes(body=[*body[:first], *spaced, *body[first:]]).code
    try:
        compile(code, "<twin>", "exec")
    except SyntaxError:
        return None
    return code


def _said(conversion: Conversion) -> Said:
    changes = sorted({kind(c.summary) for c in conversion.changes})
    return conversion.status.name, sorted(set(codes(d.format() for d in conversion.diagnostics))), changes


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its pair twin differ (empty: they do not); None where the twin
    cannot be made."""
    return compare_twin(path, twin(path.read_text()), _said, "pair")


def main(argv: list[str]) -> int:
    return sweep("pair twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
