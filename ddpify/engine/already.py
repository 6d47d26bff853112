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
from typing import cast

from ddpify import torch_api
from ddpify.engine.called import CALLED_BY_PYTHON
from ddpify.engine.reach import (
    COMPOUND,
    DYNAMIC_NAMES,
    KeptByTree,
    Reach,
    blocks,
    compounds_below,
    definition_header,
    dotted,
    imported,
    loads_code,
    qualified_names,
)

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
    reader: _Reader  # its module's
    in_class: bool
    calls: list[ast.Call] = field(default_factory=list)
    mentions: set[str] = field(default_factory=set)  # every name and attribute its code reads
    inner: list[_Function] = field(default_factory=list)  # functions defined in its body


def distributed_use(modules: Sequence[TreeModule], runs: Reach) -> Use | None:
    """The first call of the code that runs which sets up or launches distributed training, or None
    where none is found (the full analysis then asks again)."""
    return Trees(modules, runs).distributed_use()


class Trees:
    """The code that runs of a program's modules (in the order of the index: the entry first), read
    once for both early answers."""

    def __init__(self, modules: Sequence[TreeModule], runs: Reach) -> None:
        self.readers = [_reader(m, runs) for m in modules]
        self.numbers = {id(reader): number for number, reader in enumerate(self.readers)}
        self.runs = runs
        self._closure: _Closure | None = None
        self.by_name: dict[str, list[_Function]] = {}
        for reader in self.readers:
            for (_, name), defined in reader.functions.items():
                self.by_name.setdefault(name, []).append(defined)

    def distributed_use(self) -> Use | None:
        """See :func:`distributed_use`."""
        called: set[_Function] | None = None
        for reader in self.readers:
            for call, function in sorted(reader.calls, key=lambda item: _position(item[0])):
                for name in sorted(reader.qualified_names(call.func)):
                    if not name.startswith(torch_api.DISTRIBUTED_CALLS):
                        continue
                    if called is None:
                        called = _called(self.readers, self.by_name)
                    if function is None or function in called:
                        return Use(self.numbers[id(reader)], call, name)
        return None

    def may_train(self) -> bool:
        """Whether the full analysis may find anything to do in a program that is not already
        distributed (asked after :meth:`distributed_use`): False only where it is sure to answer
        "nothing to do", with nothing else to say.

        The full analysis trains where a ``.backward()`` runs in the entry script or in a function
        its calls reach (:meth:`reaches_backward`), and refuses where a computed import may load a
        module that trains (DDP014) or where code that is called builds a torch optimizer (which it
        may hand to a training loop out of sight, DDP016). Optimizers are looked for also in the
        methods Python calls on its own (``forward``, ``__call__``...). A call that may set up
        distributed training by a name these trees do not resolve (a star import) also leaves the
        answer to the full analysis."""
        if self.loads_by_computed_name() or self.reaches_backward():
            return True
        reach = self._reached()
        reach.grow(
            [f for reader in self.readers for f in reader.every if f.in_class and f.node.name in CALLED_BY_PYTHON]
        )
        for reader, call in reach.calls_by_module():
            if _last_name(call.func) in _DISTRIBUTED_NAMES:
                return True
            if any(torch_api.builds_optimizer(name) for name in reader.qualified_names(call.func)):
                return True
        return False

    def reaches_backward(self) -> bool:
        """Whether a ``.backward()`` may run where the full analysis looks for the training step.

        A definition counts as reached where reached code mentions its name (a call, an attribute,
        a callback handed on, an alias), a class with all of its methods and a function with the
        functions defined in it; from every definition of the entry script, the module-level code
        of every module, and its decorated definitions (a registry may call them)."""
        return any(_is_backward(call) for _, call in self._reached().calls_by_module())

    def loads_by_computed_name(self) -> tuple[str, int, str] | None:
        """The first import of code that runs whose module is computed: (module, line, construct)."""
        return next((found for found in self.runs.dynamic if loads_code(found[2])), None)

    def first_backward(self) -> tuple[int, ast.Call] | None:
        """The first ``.backward()`` of the code that runs, called or not, in the order of the index:
        the module's number and the call."""
        for reader in self.readers:
            found = [call for call, _ in reader.calls if _is_backward(call)]
            if found:
                return self.numbers[id(reader)], min(found, key=_position)
        return None

    def _reached(self) -> _Closure:
        if self._closure is None:
            self._closure = _Closure(self.readers)
            entry, *others = self.readers
            self._closure.grow(entry.every, top=self.readers)
            self._closure.grow(
                [f for reader in others for f in reader.every if f.node.decorator_list and not f.in_class]
            )
        return self._closure


class _Closure:
    """The definitions reached from some roots by the names their code mentions."""

    def __init__(self, readers: list[_Reader]) -> None:
        self.readers = readers
        self.functions: dict[str, list[_Function]] = {}
        for reader in readers:
            for function in reader.every:
                self.functions.setdefault(function.node.name, []).append(function)
            for name, methods in reader.classes.items():
                self.functions.setdefault(name, []).extend(methods)
        self.seen: set[_Function] = set()
        self.mentioned: set[str] = set()
        self.tops: list[_Reader] = []

    def grow(self, roots: Sequence[_Function], top: Sequence[_Reader] = ()) -> None:
        todo = list(roots)
        for reader in top:
            self.tops.append(reader)
            todo += self._named(reader, reader.top_mentions)
            if any(_serves_every_function(reader, call) for call, owner in reader.calls if owner is None):
                todo += self._globals(reader)
        while todo:
            function = todo.pop()
            if function in self.seen:
                continue
            self.seen.add(function)
            reader = function.reader
            todo += function.inner
            todo += self._named(reader, function.mentions)
            if any(_serves_every_function(reader, call) for call in function.calls):
                todo += self._globals(reader)

    def _globals(self, reader: _Reader) -> list[_Function]:
        """The functions in a module's globals: its own, and those it imports (by their names; with a star
        import, ``eval(args.runner)`` of ``from runners import *``, those of every module of the program)."""
        if reader.star_imports:
            return [function for other in self.readers for function in other.every]
        imported = {full.rsplit(".", 1)[-1] for fulls in reader.imports.values() for full in fulls}
        return [*reader.every, *self._named(reader, imported)]

    def _named(self, reader: _Reader, mentions: set[str]) -> list[_Function]:
        found: list[_Function] = []
        names = {n for n in mentions if n not in self.mentioned}
        names |= {alias for n in mentions for alias in reader.aliases.get(n, ()) if alias not in self.mentioned}
        for name in names:
            self.mentioned.add(name)
            found += self.functions.get(name, ())
        return found

    def calls_by_module(self) -> list[tuple[_Reader, ast.Call]]:
        found = [(reader, call) for reader in self.tops for call, function in reader.calls if function is None]
        for function in self.seen:
            found += [(function.reader, call) for call in function.calls]
        return found


def _is_backward(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "backward"


def _last_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _serves_every_function(reader: _Reader, call: ast.Call) -> bool:
    """``fire.Fire()``, ``globals()``, ``eval(...)``: the functions of the module are reached by a string."""
    last = _last_name(call.func)
    return last in DYNAMIC_NAMES or (last == "Fire" and not call.args and not call.keywords)


_DISTRIBUTED_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in torch_api.DISTRIBUTED_CALLS)


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
                todo += [(function.reader, inner) for inner in function.calls]
    return called


def _callees(reader: _Reader, call: ast.Call, by_name: dict[str, list[_Function]]) -> list[_Function]:
    found: list[_Function] = []
    if not call.args and not call.keywords and "fire.Fire" in reader.qualified_names(call.func):
        found += [f for (owner, _), f in reader.functions.items() if owner is None]
        # what the module imports is in its globals too (by name: a superset of what it may be)
        found += [
            f
            for fulls in reader.imports.values()
            for full in sorted(fulls)
            for f in by_name.get(full.rsplit(".", 1)[-1], [])
        ]
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

    def __init__(self, module: TreeModule, skipped: frozenset[int]) -> None:
        self.package = module.package
        self.imports: dict[str, set[str]] = {}
        # (the class that owns it, or None; its name) -> the last such definition, as the index keeps it
        self.functions: dict[tuple[ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None, str], _Function] = {}
        self.calls: list[tuple[ast.Call, _Function | None]] = []
        self.every: list[_Function] = []  # every definition, in source order
        self.classes: dict[str, list[_Function]] = {}  # a class's name -> its methods
        self.top_mentions: set[str] = set()  # the names module-level code reads
        self.aliases: dict[str, set[str]] = {}  # ``from m import a as b``: b -> a
        self.star_imports = False  # ``from runners import *``: names whose origin only the imported modules tell
        self._skipped = skipped
        self._compound = 0
        self._statements(module.tree.body, None, None)

    def qualified_names(self, node: ast.expr) -> set[str]:
        return qualified_names(self.imports, node)

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
            if isinstance(stmt, ast.ImportFrom) and any(alias.name == "*" for alias in stmt.names):
                self.star_imports = True
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for local, full in imported(stmt, self.package):
                    self.imports.setdefault(local, set()).add(full)
                    self.aliases.setdefault(local, set()).add(full.rsplit(".", 1)[-1])
            if isinstance(stmt, _FUNCTION):
                inner = _Function(stmt, self, isinstance(owner, ast.ClassDef))
                self.functions[(owner, stmt.name)] = inner
                self.every.append(inner)
                if isinstance(owner, ast.ClassDef):
                    self.classes.setdefault(owner.name, []).append(inner)
                if function is not None:
                    function.inner.append(inner)
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
        mentions = self.top_mentions if function is None else function.mentions
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is ast.Name:
                mentions.add(node.id)  # type: ignore[attr-defined]
                continue
            if kind is ast.Attribute:
                mentions.add(node.attr)  # type: ignore[attr-defined]
            elif kind is ast.Call:
                call = cast(ast.Call, node)
                self.calls.append((call, function))
                if function is not None:
                    function.calls.append(call)
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, ast.AST):
                    stack.append(value)
                elif isinstance(value, list):
                    stack.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, ast.stmt))


def _reader(module: TreeModule, runs: Reach) -> _Reader:
    """The module read, or as read for an earlier program of this process with the same parts
    that never run."""
    skipped = frozenset(s.first for s in runs.skipped.get(module.name, ()))
    return _READERS.get(module.tree, (module.name, module.package, skipped), lambda: _Reader(module, skipped))


_READERS: KeptByTree[_Reader] = KeptByTree()


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
