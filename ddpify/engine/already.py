"""The answer "already distributed", from CPython's trees before libcst reads the program.

A program that sets up distributed training itself is left alone
(:func:`ddpify.concerns.process_group.distributed_use`). The question needs no
libcst tree, and a program that imports a model library reaches hundreds of
modules: so it is first asked of the ``ast`` trees that :mod:`ddpify.engine.reach`
has read, with the same rules, and the full analysis only starts when the
answer is no.

The rules are those of the libcst index, no looser: only the code that runs
(what :func:`~ddpify.engine.reach.reach` skips is skipped here), the calls of
module-level code, of class bodies and of the entry's main block, then of every
function they call (:func:`ddpify.engine.called.called_functions`: a call names
a function, or hands it on; ``fire.Fire()`` calls every function of its module;
Python calls ``forward``, ``__call__``... where their class is). A name is
followed through the imports of its module. What this pass does not follow (a
star import, a call through an alias of a program function) it leaves to the
full analysis, which then answers.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddpify import torch_api
from ddpify.engine.called import CALLED_BY_PYTHON
from ddpify.engine.reach import COMPOUND, Reach, blocks, compounds_below, definition_header, dotted, imported

_NEWLINE = re.compile(r"\r\n?|\n")
_FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class TreeModule:
    """One module of the program, in the order of the index: the entry first."""

    name: str
    package: str
    tree: ast.Module


@dataclass(frozen=True)
class Use:
    """The call that makes the program distributed: in ``modules[module]``, with its qualified name."""

    module: int
    call: ast.Call
    name: str


@dataclass(eq=False)
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    module: int
    in_class: bool
    calls: list[ast.Call] = field(default_factory=list)


def distributed_use(modules: Sequence[TreeModule], runs: Reach) -> Use | None:
    """The first call of the code that runs which sets up or launches distributed training, or None
    where none is found (the full analysis then asks again)."""
    readers = [_Reader(i, m, runs) for i, m in enumerate(modules)]
    by_name: dict[str, list[_Function]] = {}
    for reader in readers:
        for (_, name), defined in reader.functions.items():
            by_name.setdefault(name, []).append(defined)
    called: set[_Function] | None = None
    for reader in readers:
        for call, function in sorted(reader.calls, key=lambda item: _position(item[0])):
            for name in sorted(reader.qualified_names(call.func)):
                if not name.startswith(torch_api.DISTRIBUTED_CALLS):
                    continue
                if called is None:
                    called = _called(readers, by_name)
                if function is None or function in called:
                    return Use(reader.number, call, name)
    return None


def column(source: str | bytes, line: int, offset: int) -> int:
    """The 1-based column, in characters as libcst counts them, of the UTF-8 byte ``offset`` of ``line``."""
    if isinstance(source, bytes):
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
            decoded = source.decode(encoding, errors="replace")
        except (SyntaxError, LookupError):
            decoded = source.decode("utf-8", errors="replace")
    else:
        decoded = source
    lines = _NEWLINE.split(decoded)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text.encode("utf-8")[:offset].decode("utf-8", errors="replace")) + 1


def _position(call: ast.Call) -> tuple[int, int, int, int]:
    """Source order, the outer of two calls that start together first (as libcst's tree orders them)."""
    return (call.lineno, call.col_offset, -(call.end_lineno or 0), -(call.end_col_offset or 0))


def _called(readers: list[_Reader], by_name: dict[str, list[_Function]]) -> set[_Function]:
    called: set[_Function] = set()
    todo: list[tuple[_Reader, ast.Call]] = []
    for reader in readers:
        todo += [(reader, call) for call, function in reader.calls if function is None]
        for function in reader.functions.values():
            if function.in_class and function.node.name in CALLED_BY_PYTHON:
                called.add(function)
                todo += [(reader, call) for call in function.calls]
    while todo:
        reader, call = todo.pop()
        for function in _callees(reader, call, by_name):
            if function not in called:
                called.add(function)
                todo += [(readers[function.module], inner) for inner in function.calls]
    return called


def _callees(reader: _Reader, call: ast.Call, by_name: dict[str, list[_Function]]) -> list[_Function]:
    found: list[_Function] = []
    if not call.args and not call.keywords and "fire.Fire" in reader.qualified_names(call.func):
        found += [f for (owner, _), f in reader.functions.items() if owner is None]
    func = call.func
    named = func.attr if isinstance(func, ast.Attribute) else dotted(func)
    if named:
        found += by_name.get(named.rsplit(".", 1)[-1], [])
    for value in [*call.args, *(k.value for k in call.keywords)]:  # a function handed on is called by its receiver
        if isinstance(value, ast.Starred):
            value = value.value
        passed = dotted(value)
        if passed:
            found += by_name.get(passed.rsplit(".", 1)[-1], [])
    return found


class _Reader:
    """One module's imports, functions and calls, in the code that runs."""

    def __init__(self, number: int, module: TreeModule, runs: Reach) -> None:
        self.number = number
        self.package = module.package
        self.imports: dict[str, set[str]] = {}
        # (the class that owns it, or None; its name) -> the last such definition, as the index keeps it
        self.functions: dict[tuple[ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None, str], _Function] = {}
        self.calls: list[tuple[ast.Call, _Function | None]] = []
        self._skipped = {s.first for s in runs.skipped.get(module.name, ())}
        self._compound = 0
        self._statements(module.tree.body, None, None)

    def qualified_names(self, node: ast.expr) -> set[str]:
        text = dotted(node)
        root, _, rest = text.partition(".")
        return {f"{full}.{rest}" if rest else full for full in self.imports.get(root, ())} if text else set()

    def _statements(
        self,
        statements: Sequence[ast.stmt],
        owner: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None,
        function: _Function | None,
    ) -> None:
        for stmt in statements:
            if isinstance(stmt, COMPOUND):
                number = self._compound
                self._compound += 1
                if number in self._skipped:
                    self._compound += sum(1 for _ in compounds_below(stmt))
                    continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for local, full in imported(stmt, self.package):
                    self.imports.setdefault(local, set()).add(full)
            if isinstance(stmt, _FUNCTION):
                inner = _Function(stmt, self.number, isinstance(owner, ast.ClassDef))
                self.functions[(owner, stmt.name)] = inner
                self._expressions(definition_header(stmt), inner)  # libcst's tree holds them inside the ``def``
                self._statements(stmt.body, stmt, inner)
            elif isinstance(stmt, ast.ClassDef):
                self._expressions(definition_header(stmt), function)
                self._statements(stmt.body, stmt, function)
            elif isinstance(stmt, COMPOUND):
                self._expressions(_headers(stmt), function)
                for block in blocks(stmt):
                    self._statements(block, owner, function)
            else:
                self._expressions([stmt], function)

    def _expressions(self, roots: Sequence[ast.AST], function: _Function | None) -> None:
        stack = list(roots)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call):
                self.calls.append((node, function))
                if function is not None:
                    function.calls.append(node)
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, ast.AST):
                    stack.append(value)
                elif isinstance(value, list):
                    stack.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, ast.stmt))


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions of a compound statement outside its blocks: a test, an iterable, a context manager."""
    parts: list[ast.AST] = []
    for _, value in ast.iter_fields(stmt):
        if isinstance(value, ast.AST):
            parts.append(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, ast.ExceptHandler):
                    parts += [item.type] if item.type is not None else []
                elif isinstance(item, ast.match_case):
                    parts += [item.pattern, *([item.guard] if item.guard is not None else [])]
                elif isinstance(item, ast.AST) and not isinstance(item, ast.stmt):
                    parts.append(item)
    return parts
