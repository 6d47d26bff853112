"""Split twins: each script against the two-module program made of it.

Most training code that users bring spans several modules: the model and the
dataset in one, the loop in another, helpers imported from a third. A script
and the same code split over two modules are one program to Python, and must
be one to ddpify: the same outcome, the same diagnostics (by code) and the same
changes (by summary), wherever they are made.

The twin moves every top-level class and function that reads no module-level
name of the script (other than its imports and the other moved definitions)
into ``parts.py``, which gets a copy of the script's imports; the script
imports them back with ``from parts import ...`` after its own imports. A
function that declares ``global`` stays.

    .venv/bin/python benchmarks/split_twins.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _twins import Said, codes, compare, converted, kind, options_for, sweep, walk

from ddpify import convert
from ddpify.result import Conversion, LocalModule


def _targets(node: cst.BaseExpression) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def _module_bindings(statements: list[cst.BaseStatement]) -> set[str]:
    """The names top-level code binds (outside definitions), imports excluded."""
    found: set[str] = set()

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
            return
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            return
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For)):
            found.update(_targets(node.target))
        elif isinstance(node, cst.AsName):
            found.update(_targets(node.name))
        elif isinstance(node, cst.NamedExpr):
            found.update(_targets(node.target))
        for child in node.children:
            visit(child)

    for statement in statements:
        visit(statement)
    return found


def _free(definition: cst.FunctionDef | cst.ClassDef) -> set[str]:
    """The names a definition reads and does not bind itself (a parameter, an assignment inside it)."""
    named = {n.value for n in walk(definition) if isinstance(n, cst.Name)}
    own = {definition.name.value}
    for node in walk(definition):
        if isinstance(node, (cst.Param, cst.FunctionDef, cst.ClassDef)):
            own.add(node.name.value)
        elif isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
            own.update(_targets(node.target))
        elif isinstance(node, cst.AsName):
            own.update(_targets(node.name))
    return named - own


def _imports(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    return [
        s
        for s in statements
        if isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in s.body)
    ]


def twin(source: str) -> tuple[str, str] | None:
    """The script and ``parts.py`` of the split program; None where nothing can move."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    body = list(module.body)
    bindings = _module_bindings(body)
    definitions = {
        s.name.value: s
        for s in body
        if isinstance(s, (cst.FunctionDef, cst.ClassDef))
        and not any(isinstance(n, (cst.Global, cst.Nonlocal)) for n in walk(s))
    }
    reads = {name: _free(d) for name, d in definitions.items()}
    moved = set(definitions)
    changed = True
    while changed:
        changed = False
        for name in sorted(moved):
            if (reads[name] & bindings) - moved:
                moved.discard(name)
                changed = True
    if not moved:
        return None
    imports = _imports(body)
    if any(isinstance(b, cst.ImportFrom) and b.module is None for s in imports for b in s.body):
        return None  # relative imports: the split would change what they name
    last_import = max((body.index(s) for s in imports), default=-1)
    moving = [d for name, d in definitions.items() if name in moved]
    kept = [s for s in body if s not in moving]
    line = cst.parse_statement(f"from parts import {', '.join(sorted(moved))}\n")
    head = [s for s in kept if body.index(s) <= last_import]
    tail = [s for s in kept if body.index(s) > last_import]
    script = module.with_changes(body=[*head, line, *tail]).code
    parts = module.with_changes(
        header=[],
        body=[*[s for s in imports if not _future(s)], *moving],
    )
    parts = parts.with_changes(body=[*[s for s in imports if _future(s)], *parts.body])
    for code in (script, parts.code):
        try:
            compile(code, "<twin>", "exec")
        except SyntaxError:
            return None
    return script, parts.code


def _future(statement: cst.BaseStatement) -> bool:
    return any(
        isinstance(b, cst.ImportFrom) and isinstance(b.module, cst.Name) and b.module.value == "__future__"
        for b in cast_line(statement).body
    )


def cast_line(statement: cst.BaseStatement) -> cst.SimpleStatementLine:
    assert isinstance(statement, cst.SimpleStatementLine)
    return statement


def _said(conversion: Conversion) -> Said:
    """Outcome, diagnostic codes and the kinds of change, wherever they were made."""
    return (
        conversion.status.name,
        codes(d.format() for d in conversion.diagnostics),
        sorted({kind(c.summary) for c in conversion.changes}),
    )


def differences(path: Path) -> list[str] | None:
    """How the conversions of ``path`` and of its split twin differ (empty: they do not); None where the
    twin cannot be made."""
    source = path.read_text()
    made = twin(source)
    if made is None:
        return None
    script, parts = made
    options = options_for(path)
    plain = _said(converted(source, options))
    split = _said(convert(script, path="train.py", options=options, modules=[LocalModule("parts.py", "parts", parts)]))
    return compare(plain, split, "split")


def main(argv: list[str]) -> int:
    return sweep("split twins", differences, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
