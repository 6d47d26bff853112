"""Factory twins: each script against itself building its objects through helper functions.

``loader = DataLoader(ds, batch_size=64, shuffle=True)`` and ``loader =
make_loader(ds)`` with ``def make_loader(ds): return DataLoader(ds,
batch_size=64, shuffle=True)`` build the same loader; real programs build
their loaders, models and optimizers in such factories. ddpify must convert
both alike: the same outcome, the same diagnostic codes and the same changes
(line numbers aside, compared by kind).

The twin moves the value of each assignment ``name = <call>`` (one plain
target) of a function, not a method, whose call builds an object of a class
(spelled with a capital: ``DataLoader(...)``, ``Net().to(device)``,
``optim.SGD(...)``) into a new module-level function ``build<N>_q9`` whose
parameters are the names of that function the value reads; the assignment
calls it. Values holding a lambda, a comprehension, ``:=``, ``yield``,
``await`` or ``super()`` stay.

    .venv/bin/python benchmarks/factory_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare_twin, kind, sweep, walk

from ddpify.result import Conversion

_KEPT = (
    cst.Lambda,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
    cst.NamedExpr,
    cst.Yield,
    cst.Await,
)


def _locals(function: cst.FunctionDef) -> set[str]:
    """The names a function binds: its parameters and every plain name it assigns (nested scopes aside)."""
    found = {
        p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    }
    for star in (function.params.star_arg, function.params.star_kwarg):
        if isinstance(star, cst.Param):
            found.add(star.name.value)
    for node in walk(function.body):
        targets: list[cst.CSTNode] = []
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
        for target in targets:
            found |= {n.value for n in walk(target) if isinstance(n, cst.Name)}
    return found


def _read(expr: cst.BaseExpression) -> list[str]:
    """The plain names ``expr`` reads, in order, once each (attribute names and keywords aside)."""
    names: list[str] = []
    skip: set[int] = set()
    for node in walk(expr):
        if isinstance(node, cst.Attribute):
            skip.add(id(node.attr))
        elif isinstance(node, cst.Arg) and node.keyword is not None:
            skip.add(id(node.keyword))
        elif isinstance(node, cst.Name) and id(node) not in skip and node.value not in names:
            names.append(node.value)
    return names


def _built(call: cst.Call) -> str:
    """The class a call builds, as spelled last (``DataLoader``, ``SGD``, ``Net``), through ``.to(...)``,
    ``.cuda()`` and the like."""
    func = call.func
    while isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and func.attr.value[:1].islower():
        func = func.value.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


class _Factories(cst.CSTTransformer):
    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.made: list[cst.FunctionDef] = []
        self.scopes: list[set[str] | None] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params.params
        method = bool(params) and params[0].name.value in ("self", "cls")
        self.scopes.append(None if method else _locals(node))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.scopes.pop()
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(None)  # a class body: its names are not the function's

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.scopes.pop()
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        local = self.scopes[-1] if self.scopes else None
        value = updated.value
        if local is None or len(updated.targets) != 1 or not isinstance(updated.targets[0].target, cst.Name):
            return updated
        if not isinstance(value, cst.Call) or any(isinstance(n, _KEPT) for n in walk(value)):
            return updated
        built = _built(value)
        if not built[:1].isupper():
            return updated
        if any(
            isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "super" for n in walk(value)
        ):
            return updated
        params = [n for n in _read(value) if n in local]
        name = f"build{len(self.made) + 1}_q9"
        while name in self.taken:
            name += "x"
        args = ", ".join(params)
        function = cst.parse_statement(f"def {name}({args}):\n    return None\n")
        assert isinstance(function, cst.FunctionDef)
        ret = cst.SimpleStatementLine([cst.Return(value.with_changes(lpar=[], rpar=[]))])
        self.made.append(function.with_changes(body=cst.IndentedBlock([ret])))
        return updated.with_changes(value=cst.parse_expression(f"{name}({args})"))


def twin(source: str) -> str | None:
    """The source building its values through factories; None where none is made."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    factories = _Factories({n.value for n in walk(module) if isinstance(n, cst.Name)})
    new = module.visit(factories)
    if not factories.made:
        return None
    body = list(new.body)
    first = next((i for i, s in enumerate(body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))), len(body))
    spaced = [f.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for f in factories.made]
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
    """How the conversions of ``path`` and of its factory twin differ (empty: they do not); None where the
    twin cannot be made."""
    return compare_twin(path, twin(path.read_text()), _said, "factory")


def main(argv: list[str]) -> int:
    return sweep("factory twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
