"""What runs: the code of a program that its entry script can execute, read with CPython's ``ast``.

``python train.py`` runs the entry script's module-level code, its main block
included; the module-level code of every module it imports (and of their
packages), but never an imported module's own ``if __name__ == "__main__":``
block; and the functions and classes that code refers to, transitively. What
nothing refers to never runs: a ``test()`` at the bottom of a model file, a
helper that only another script's main block calls, a module imported only
from such code. The analysis, every finding, every rewrite and the "already
distributed" test see only what runs (:func:`build_index` skips the rest), so
no edit lands in code the program does not run, and code that never runs
cannot refuse a program.

A function or class runs when running code *mentions* it, not only when it
calls it: passed as a callback (``model.apply(init_weights)``), kept in a
dict, returned, decorated (a registry), it may run; a decorator known to
neither call nor keep what it decorates (pytest's marks and fixtures, which
run only under pytest; ``torch.no_grad()``, ``functools.wraps``) does not count. A class that runs keeps
all of its methods, but for a module of ``torch.nn.Module``'s own (through the program's classes): its
method runs when running code mentions its name (``.fit``, ``getattr(m, "fit")``), when it is a
special method, or when ``nn.Module`` itself calls methods of that name (``forward``, ``train``,
``state_dict``...). A Keras-like ``compile()``/``fit()`` pair that the entry never calls is not its
training. Where the names cannot be followed (``getattr(module,
name)``, ``globals()``, ``eval``), every definition of that module runs; an
import whose module is computed (``importlib.import_module(name)``) makes
every module of the program run (but the entry script, which runs as
``__main__``: the module so loaded may import the others, not it). This errs on the side of running: code
kept that does not run costs an edit, code dropped that runs would go
unconverted.

Definitions are named by their place among the compound statements of their
module in source order (``def``, ``class``, ``if``, ``for``...), which CPython's
tree and libcst's tree number alike, so that the libcst index can skip them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from ddpify.modules import absolute_import

COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
)
_DEFINITION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Calls through which a module's own names are reached by a computed string.
DYNAMIC_NAMES = frozenset({"globals", "vars", "locals", "eval", "exec"})
# ``fire.Fire()`` with no component makes every function of its module a command of the command line
_EVERY_FUNCTION_A_COMMAND = frozenset({"fire.Fire", "Fire"})
_DYNAMIC_IMPORTS = frozenset({"__import__", "importlib.import_module", "import_module"})
# hydra builds the object its config names by a dotted string (``_target_: agent.Agent``)
CONFIG_LOADS = frozenset(
    f"hydra.utils.{name}" for name in ("instantiate", "call", "get_class", "get_method", "get_object")
)


def loads_code(construct: str) -> bool:
    """Whether a construct of :attr:`Runs.dynamic` loads code by a computed name: an import, or an object a
    configuration names (``hydra.utils.instantiate()``)."""
    return "import" in construct or construct.removesuffix("()") in CONFIG_LOADS


# Calls that reach an attribute by a computed name (a method among them may run): the name is their
# second argument (the first for the ``operator`` ones)
_COMPUTED_ATTRIBUTES = frozenset(
    {"getattr", "hasattr", "operator.attrgetter", "attrgetter", "operator.methodcaller", "methodcaller"}
)


@dataclass(frozen=True)
class ModuleSource:
    """One module of a program for :func:`reach`: its dotted name, the package its relative
    imports start from, and its tree (None where CPython cannot parse it)."""

    name: str
    package: str
    tree: ast.Module | None


@dataclass(frozen=True)
class Skipped:
    """A definition (or an imported module's main block) that never runs: the compound statement
    numbered ``first`` in its module, whose subtree holds the statements up to ``last``."""

    first: int
    last: int
    kind: str  # "def", "class" or "if": checked against libcst's node at the same place
    name: str


@dataclass(frozen=True)
class Reach:
    """Which modules of a program run, and, in each one that does, what never runs."""

    modules: frozenset[str]
    skipped: dict[str, tuple[Skipped, ...]]
    trees: tuple[ast.Module, ...] = ()  # every module's, run or not
    dynamic: tuple[tuple[str, int, str], ...] = ()  # (module, line, construct) that made more code run

    @functools.cached_property
    def identifiers(self) -> frozenset[str]:
        """Every name written anywhere in the program, run or not (read only where an answer needs
        more than these trees: fresh names for new code)."""
        return frozenset(name for tree in self.trees for name in _identifiers(tree))

    def runs(self, module: str) -> bool:
        return module in self.modules


@dataclass(eq=False)
class _Unit:
    """Code that runs as a whole once it runs: a module's top-level code, or one definition."""

    module: _Module
    node: ast.AST
    refs: list[ast.AST] = field(default_factory=list)  # the nodes whose names it reads
    # a class's methods that run only when their name is mentioned (:func:`_named_only`), if it is a module
    methods: list[_Unit] = field(default_factory=list)
    # per ref, in walk order: the attributes, imports and calls below it, then the names it reads
    # (read once per module, however many programs import it)
    scanned: list[tuple[list[ast.AST], list[str], list[str]]] | None = None


@dataclass(eq=False)
class _Module:
    source: ModuleSource
    entry: bool
    top: _Unit | None = None
    definitions: dict[str, list[_Unit]] = field(default_factory=dict)
    methods: list[_Unit] = field(default_factory=list)  # every class's methods that run only when named
    imports: dict[str, set[str]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    main_block: ast.If | None = None


def reach(entry: ModuleSource, others: Sequence[ModuleSource]) -> Reach:
    """What of the program of ``entry`` and ``others`` runs when ``entry`` is run as a script."""
    modules = {m.name: _module(m, entry=m is entry) for m in (entry, *others)}
    walker = _Walker(modules)
    walker.run(modules[entry.name])
    skipped: dict[str, tuple[Skipped, ...]] = {}
    trees: list[ast.Module] = []
    for name, module in modules.items():
        tree = module.source.tree
        if tree is None:
            continue
        trees.append(tree)
        if name in walker.live_modules:
            skipped[name] = tuple(_skipped(module, walker.live_units))
    return Reach(frozenset(walker.live_modules), skipped, tuple(trees), tuple(walker.dynamic))


def _module(source: ModuleSource, *, entry: bool) -> _Module:
    """The module read (:func:`_read`), or as read for an earlier program of this process."""

    def read() -> _Module:
        module = _Module(source, entry=entry)
        _read(module)
        return module

    if source.tree is None:
        return read()
    return _READ.get(source.tree, (source.name, source.package, entry), read)


def _read(module: _Module) -> None:
    """The module's definitions, imports and top-level code."""
    tree = module.source.tree
    if tree is None:
        return
    top = _Unit(module, tree)
    module.top = top
    for stmt in tree.body:
        if not module.entry and is_main_block(stmt):
            module.main_block = stmt  # type: ignore[assignment]
            continue
        _read_statement(module, stmt, top)
    for node in _imports(tree.body):
        for local, full in imported(node, module.source.package):
            module.imports.setdefault(local, set()).add(full)
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            base = absolute_import(node.level, node.module or "", module.source.package)
            if base is not None:
                module.stars.append(base)


def _read_statement(module: _Module, stmt: ast.stmt, top: _Unit) -> None:
    """A statement of module-level code: a definition becomes a unit of its own (what its header
    evaluates stays with the code around it); control flow is followed into its blocks."""
    if isinstance(stmt, _DEFINITION):
        unit = _Unit(module, stmt, [stmt])
        if isinstance(stmt, ast.ClassDef):
            named = [s for s in stmt.body if _named_only(module, s)]
            if named:
                unit.refs = [s for s in stmt.body if s not in named]
                unit.methods = [_Unit(module, s, [s]) for s in named]
                module.methods += unit.methods
        module.definitions.setdefault(stmt.name, []).append(unit)
        top.refs += definition_header(stmt)
        return
    if isinstance(stmt, COMPOUND):
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list) and value and all(isinstance(s, ast.stmt) for s in value):
                for inner in value:
                    _read_statement(module, inner, top)
            elif name == "handlers":
                for handler in value:
                    top.refs += [n for n in (handler.type,) if n is not None]
                    for inner in handler.body:
                        _read_statement(module, inner, top)
            elif name == "cases":
                for case in value:
                    top.refs += [case.pattern, *([case.guard] if case.guard else [])]
                    for inner in case.body:
                        _read_statement(module, inner, top)
            elif isinstance(value, ast.AST):
                top.refs.append(value)
            elif isinstance(value, list):  # with-items
                top.refs += [v for v in value if isinstance(v, ast.AST)]
        return
    top.refs.append(stmt)


def _named_only(module: _Module, stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is a method that runs only where it is named, if its class is a module: no special
    method, none that ``nn.Module`` calls itself, none with a decorator that may register it."""
    return (
        isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not (stmt.name.startswith("__") and stmt.name.endswith("__"))
        and stmt.name not in _CALLED_BY_MODULE
        and all(
            dotted(d) in _PLAIN_METHOD
            or any(
                never_registers(name)
                for name in qualified_names(module.imports, d.func if isinstance(d, ast.Call) else d)
            )
            for d in stmt.decorator_list
        )
    )


# The methods ``torch.nn.Module`` calls on a module by their names (an override of one runs
# without the program naming it): its call, repr, mode, state-dict and ``_apply`` machinery.
_CALLED_BY_MODULE = frozenset(
    {
        "forward",
        "extra_repr",
        "_get_name",
        "train",
        "eval",
        "state_dict",
        "load_state_dict",
        "_save_to_state_dict",
        "_load_from_state_dict",
        "get_extra_state",
        "set_extra_state",
        "_apply",
        "apply",
        "to",
        "to_empty",
        "cuda",
        "cpu",
        "type",
        "float",
        "double",
        "half",
        "bfloat16",
        "zero_grad",
        "requires_grad_",
        "share_memory",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "_named_members",
        "register_buffer",
        "register_parameter",
        "register_module",
        "add_module",
        "get_submodule",
        "get_parameter",
        "get_buffer",
        "reset_parameters",
        "_call_impl",
        "_wrapped_call_impl",
        "_replicate_for_data_parallel",
    }
)
_PLAIN_METHOD = frozenset({"staticmethod", "classmethod", "property"})
# The classes whose subclasses' methods run only where named (besides those of :data:`_CALLED_BY_MODULE`)
_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


def definition_header(definition: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.AST]:
    """What the ``def`` or ``class`` statement itself evaluates when it runs: decorators, bases, defaults."""
    parts: list[ast.AST] = list(definition.decorator_list)
    if isinstance(definition, ast.ClassDef):
        return parts + list(definition.bases) + list(definition.keywords)
    args = definition.args
    return parts + [d for d in (*args.defaults, *args.kw_defaults) if d is not None]


class _Walker:
    """The units that run, found from the entry script's top-level code."""

    def __init__(self, modules: dict[str, _Module]) -> None:
        self.modules = modules
        self.live_modules: set[str] = set()
        self.live_units: set[_Unit] = set()
        self.todo: list[_Unit] = []
        self.dynamic: list[tuple[str, int, str]] = []
        self.named: set[str] = set()  # the attribute names running code mentions
        self.waiting: dict[str, list[_Unit]] = {}  # methods of running modules, by the name that runs them
        self.every_method = False  # an attribute named by a computed string: any method may run
        self.modules_classes: dict[_Unit, bool] = {}
        self.escaped: set[str] = set()  # modules read as values: their definitions run by attribute name

    def run(self, entry: _Module) -> None:
        self._run_module(entry.source.name)
        for units in entry.definitions.values():  # (none run unless mentioned; decorated ones do)
            for unit in units:
                self._decorated(unit)
        while self.todo:
            unit = self.todo.pop()
            if unit.scanned is None:
                unit.scanned = [_scanned(root) for root in unit.refs]
            for events, names, bare in unit.scanned:
                self._scan(unit.module, events, names)
                self._escape(unit.module, bare)

    def _run_module(self, name: str) -> None:
        """Importing ``name`` runs it and its packages."""
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            module = self.modules.get(prefix)
            if module is None or prefix in self.live_modules:
                continue
            self.live_modules.add(prefix)
            if module.top is not None:
                self._run(module.top)
            for units in module.definitions.values():
                for unit in units:
                    self._decorated(unit)

    def _decorated(self, unit: _Unit) -> None:
        """A decorated definition may be registered somewhere when its module runs: it may run,
        unless every decorator is one known to neither call nor register it (a test of pytest's,
        ``torch.no_grad()``)."""
        node = unit.node
        if isinstance(node, _DEFINITION) and not all(
            any(
                never_registers(name)
                for name in qualified_names(unit.module.imports, d.func if isinstance(d, ast.Call) else d)
            )
            for d in node.decorator_list
        ):
            self._run(unit)

    def _run(self, unit: _Unit) -> None:
        if unit not in self.live_units:
            self.live_units.add(unit)
            self.todo.append(unit)
            if unit.methods:
                module_class = self._module_class(unit)
                for method in unit.methods:
                    name = cast(ast.FunctionDef, method.node).name
                    if not module_class or self.every_method or name in self.named:
                        self._run(method)
                    else:
                        self.waiting.setdefault(name, []).append(method)

    def _module_class(self, unit: _Unit, depth: int = 0) -> bool:
        """Whether the class of ``unit`` derives from ``torch.nn.Module`` alone, directly or through the
        program's classes (another base may call its methods by name)."""
        known = self.modules_classes.get(unit)
        if known is not None:
            return known
        node = cast(ast.ClassDef, unit.node)
        found = bool(node.bases) and depth < 20 and not node.keywords
        for base in node.bases if found else ():
            if qualified_names(unit.module.imports, base) & _MODULE_BASES:
                continue
            own = self._lookup_expr(unit.module, base)
            if not own or not all(
                isinstance(t, _Unit) and isinstance(t.node, ast.ClassDef) and self._module_class(t, depth + 1)
                for t in own
            ):
                found = False
        self.modules_classes[unit] = found
        return found

    def _name(self, name: str) -> None:
        """Running code mentions ``name`` as an attribute: the methods of that name may run."""
        if name not in self.named:
            self.named.add(name)
            for method in self.waiting.pop(name, ()):
                self._run(method)

    def _every_method(self) -> None:
        self.every_method = True
        for methods in self.waiting.values():
            for method in methods:
                self._run(method)
        self.waiting.clear()

    def _scan(self, module: _Module, events: list[ast.AST], names: list[str]) -> None:
        for node in events:
            if isinstance(node, ast.Attribute):
                self._name(node.attr)
                self._attribute(module, node)
            elif isinstance(node, ast.Constant):  # ``getattr(model, "fit")``, ``hasattr``, a table of names
                self._name(cast(str, node.value))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(module, node)
            else:
                self._dynamic(module, cast(ast.Call, node))
        for name in names:
            for target in self._lookup(module, name, set()):
                self._mark(target)

    def _escape(self, module: _Module, bare: list[str]) -> None:
        """A module of the program read as a value (``RUNNERS = {"a": runner_a}``, handed on, returned): its
        functions and classes may run wherever running code names them as an attribute
        (``RUNNERS[name].build_runner()``), as the methods of a class do."""
        for name in bare:
            for target in self._lookup(module, name, set()):
                if not isinstance(target, str) or target not in self.modules or target in self.escaped:
                    continue
                self.escaped.add(target)
                for units in self.modules[target].definitions.values():
                    for unit in units:
                        if not isinstance(unit.node, _DEFINITION):
                            continue
                        defined = unit.node.name
                        if self.every_method or defined in self.named:
                            self._run(unit)
                        else:
                            self.waiting.setdefault(defined, []).append(unit)

    def _mark(self, target: _Unit | str) -> None:
        if isinstance(target, str):
            self._run_module(target)
        else:
            self._run(target)

    def _attribute(self, module: _Module, node: ast.Attribute) -> None:
        """``utils.f`` or ``pkg.sub.Model``: the definition at the end of a chain of modules."""
        chain: list[str] = []
        current: ast.AST = node
        while isinstance(current, ast.Attribute):
            chain.append(current.attr)
            current = current.value
        if not isinstance(current, ast.Name):
            return
        targets = [t for t in self._lookup(module, current.id, set()) if isinstance(t, str)]
        for attr in reversed(chain):
            found: list[_Unit | str] = []
            for owner in targets:
                found += self._member(owner, attr, set())
            for target in found:
                self._mark(target)
            targets = [t for t in found if isinstance(t, str)]
            if not targets:
                return

    def _import(self, module: _Module, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._run_module(alias.name)
            return
        base = absolute_import(node.level, node.module or "", module.source.package)
        if base is None:
            return
        self._run_module(base)
        for alias in node.names:
            if alias.name == "*":
                continue
            for target in self._member(base, alias.name, set()):
                if isinstance(target, str):  # a submodule: importing it runs its code
                    self._mark(target)
                # a definition imported by name runs where the name is used, not where it is imported (a
                # package's ``__init__`` that re-exports its classes runs none of them)

    def _dynamic(self, module: _Module, call: ast.Call) -> None:
        """Names reached through a computed string: everything they could name runs."""
        func = dotted(call.func)
        name = module.source.name
        line = getattr(call, "lineno", 1)
        commands = (
            not call.args
            and not call.keywords
            and bool(({func} | qualified_names(module.imports, call.func)) & _EVERY_FUNCTION_A_COMMAND)
        )
        named_by = call.args[0:1] if func.endswith(("attrgetter", "methodcaller")) else call.args[1:2]
        configured = sorted(qualified_names(module.imports, call.func) & CONFIG_LOADS)
        if func in DYNAMIC_NAMES or (
            func in _COMPUTED_ATTRIBUTES and any(type(a) is not ast.Constant for a in named_by)
        ):
            self._every_method()
        if func in DYNAMIC_NAMES or commands:
            self.dynamic.append((name, line, f"{func}()"))
            self._run_all(module)
            # ``eval(args.runner)`` after ``from runners import *``: the names the star imports bring are
            # globals of this module too
            starred, todo = set(), list(module.stars)
            while todo:
                star = todo.pop()
                if star in starred or star not in self.modules:
                    continue
                starred.add(star)
                self._run_all(self.modules[star])
                todo += self.modules[star].stars
        elif func == "getattr" and len(call.args) >= 2 and not isinstance(call.args[1], ast.Constant):
            owners = [t for t in self._lookup_expr(module, call.args[0]) if isinstance(t, str)]
            for owner in owners:
                self.dynamic.append((name, line, "getattr()"))
                self._run_all(self.modules[owner])
        elif (func in _DYNAMIC_IMPORTS or configured) and call.args:
            first = call.args[0]
            if not configured and isinstance(first, ast.Name) and first.id == "__name__":
                return  # ``import_module(__name__)``: this module, which runs already
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and func != "__import__":
                package = _keyword_constant(call, "package") or module.source.package
                level = len(first.value) - len(first.value.lstrip("."))
                target = absolute_import(level, first.value.lstrip("."), package)
                if target is not None:
                    self._run_module(target)
                return
            self.dynamic.append((name, line, f"{configured[0]}()" if configured else f"{func}()"))
            for other in self.modules.values():  # any of them, and anything in it (``lib.Model()``)
                if not other.entry:  # the entry script runs as ``__main__``: no module imports it by name
                    self._run_all(other)

    def _run_all(self, module: _Module) -> None:
        """Every function in ``module``'s globals may run: its own, and those it imports from the program."""
        self._run_module(module.source.name)
        for units in module.definitions.values():
            for unit in units:
                self._run(unit)
        for name in sorted(module.imports):
            for found in self._lookup(module, name, set()):
                if not isinstance(found, str):
                    self._run(found)

    def _lookup_expr(self, module: _Module, expr: ast.AST) -> list[_Unit | str]:
        if isinstance(expr, ast.Name):
            return self._lookup(module, expr.id, set())
        if isinstance(expr, ast.Attribute):
            owners = [t for t in self._lookup_expr(module, expr.value) if isinstance(t, str)]
            return [t for owner in owners for t in self._member(owner, expr.attr, set())]
        return []

    def _lookup(self, module: _Module, name: str, seen: set[tuple[str, str]]) -> list[_Unit | str]:
        """What ``name`` may refer to in ``module``: its own definitions, and what it imports under
        that name from modules of the program (definitions, or modules)."""
        key = (module.source.name, name)
        if key in seen:
            return []
        seen.add(key)
        found: list[_Unit | str] = list(module.definitions.get(name, ()))
        for full in module.imports.get(name, ()):
            if full in self.modules:
                found.append(full)
            owner, _, member = full.rpartition(".")
            if owner in self.modules:
                # ``from pkg import Model`` where ``pkg/__init__.py`` rebinds ``Model`` from its submodule
                # ``pkg/Model.py`` to the class defined there: the package's attribute wins
                found += [t for t in self._member(owner, member, seen) if t != full]
        if found:
            return found  # a name the module defines or imports itself hides what a star import brings
        for star in module.stars:
            if star in self.modules:
                found += self._lookup(self.modules[star], name, seen)
        return found

    def _member(self, owner: str, name: str, seen: set[tuple[str, str]]) -> list[_Unit | str]:
        """``owner.name``: a submodule of the package ``owner``, or a name defined or imported there."""
        if owner not in self.modules:
            return []
        found: list[_Unit | str] = []
        submodule = f"{owner}.{name}"
        if submodule in self.modules:
            found.append(submodule)
        return found + self._lookup(self.modules[owner], name, seen)


def _skipped(module: _Module, live: set[_Unit]) -> Iterator[Skipped]:
    """The definitions of a running module that never run, and its main block (unless it is the entry)."""
    tree = module.source.tree
    assert tree is not None
    dead = {id(u.node) for units in module.definitions.values() for u in units if u not in live}
    dead |= {id(u.node) for u in module.methods if u not in live}
    if module.main_block is not None:
        dead.add(id(module.main_block))
    if not dead:
        return
    counter = 0

    def visit(stmts: Sequence[ast.stmt]) -> Iterator[Skipped]:
        nonlocal counter
        for stmt in stmts:
            if not isinstance(stmt, COMPOUND):
                continue
            first = counter
            counter += 1
            if id(stmt) in dead:
                counter += sum(1 for _ in compounds_below(stmt))
                kind = "if" if isinstance(stmt, ast.If) else "class" if isinstance(stmt, ast.ClassDef) else "def"
                yield Skipped(first, counter - 1, kind, getattr(stmt, "name", ""))
            else:
                for block in blocks(stmt):
                    yield from visit(block)

    yield from visit(tree.body)


def blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists of a compound statement, in source order."""
    for name, value in ast.iter_fields(stmt):
        if name == "handlers":
            for handler in value:
                yield handler.body
        elif name == "cases":
            for case in value:
                yield case.body
        elif isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value


def compounds_below(stmt: ast.stmt) -> Iterator[ast.stmt]:
    for block in blocks(stmt):
        for inner in block:
            if isinstance(inner, COMPOUND):
                yield inner
                yield from compounds_below(inner)


def is_main_block(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare) or len(stmt.test.ops) != 1:
        return False
    if not isinstance(stmt.test.ops[0], ast.Eq):
        return False
    sides = [stmt.test.left, stmt.test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    constants = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(constants) == 1


def imported(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[tuple[str, str]]:
    """``(local name, full name)`` for each name an import binds; ``import a.b`` binds ``a``
    (and makes ``a.b`` reachable as an attribute of it)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname is not None:
                yield alias.asname, alias.name
            else:
                yield alias.name.split(".")[0], alias.name.split(".")[0]
        return
    base = absolute_import(node.level, node.module or "", package)
    if base is None:
        return
    for alias in node.names:
        if alias.name != "*":
            yield alias.asname or alias.name, f"{base}.{alias.name}"


# Decorators that neither call the function they decorate nor keep it where something else may
# (pytest collects tests only when pytest runs the file; grad modes and caches wrap it).
_NEVER_REGISTER = (
    "pytest",
    "_pytest",
    "torch.no_grad",
    "torch.inference_mode",
    "torch.enable_grad",
    "torch.jit",
    "functools",
    "contextlib.contextmanager",
    "abc.abstractmethod",
    "typing",
    "dataclasses.dataclass",
)


def never_registers(decorator: str) -> bool:
    """Whether the decorator of this qualified name is one of :data:`_NEVER_REGISTER`."""
    return any(decorator == known or decorator.startswith(known + ".") for known in _NEVER_REGISTER)


def qualified_names(imports: Mapping[str, set[str]], expr: ast.AST) -> set[str]:
    """What a name or attribute chain refers to through a module's ``imports`` (each name it binds ->
    what it imports): ``nn.Linear`` -> ``torch.nn.Linear`` after ``import torch.nn as nn``."""
    text = dotted(expr)
    root, _, rest = text.partition(".")
    return {f"{full}.{rest}" if rest else full for full in imports.get(root, ())} if text else set()


def dotted(expr: ast.AST) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = dotted(expr.value)
        return f"{inner}.{expr.attr}" if inner else ""
    return ""


def _keyword_constant(call: ast.Call, name: str) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


def _identifier(node: ast.AST) -> str | None:
    """The name ``node`` writes, if it writes one."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, _DEFINITION):
        return node.name
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.alias):
        return (node.asname or node.name).split(".")[0]
    return None


def _imports(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements among ``statements`` and in their blocks, at any depth (an import is a
    statement: no expression holds one)."""
    stack = list(reversed(statements))
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
        elif isinstance(stmt, COMPOUND):
            inner: list[ast.stmt] = []
            for block in blocks(stmt):
                inner += block
            stack += reversed(inner)


def _identifiers(tree: ast.Module) -> Iterator[str]:
    for node in _walk(tree):
        name = _identifier(node)
        if name is not None:
            yield name


def _scanned(root: ast.AST) -> tuple[list[ast.AST], list[str], list[str]]:
    """What :meth:`_Walker._scan` looks at below ``root``: its attributes, imports and calls in walk
    order, the names it reads, each once, in the order first read, and those of them read as values
    somewhere (not only as the root of an attribute, ``utils.f``)."""
    events: list[ast.AST] = []
    names: dict[str, int] = {}
    roots: dict[str, int] = {}
    for node in _walk(root):
        kind = type(node)
        if kind is ast.Name:
            names[node.id] = names.get(node.id, 0) + 1  # type: ignore[attr-defined]
        elif (
            kind is ast.Attribute
            or kind is ast.Import
            or kind is ast.ImportFrom
            or kind is ast.Call
            or (kind is ast.Constant and isinstance(node.value, str) and node.value.isidentifier())  # type: ignore[attr-defined]
        ):
            events.append(node)
            if kind is ast.Attribute and type(value := node.value) is ast.Name:  # type: ignore[attr-defined]
                roots[value.id] = roots.get(value.id, 0) + 1
    return events, list(names), [name for name, count in names.items() if count > roots.get(name, 0)]


def _walk(root: ast.AST) -> Iterator[ast.AST]:
    """``root`` and every node below it (``ast.walk`` without its generator per node)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST))


def parse(source: str | bytes) -> ast.Module | None:
    """CPython's tree of ``source``, or None where it cannot be parsed.

    The first pass, the reach of each program and the early answers all read the same modules:
    a tree is kept by its text for the next reader of this process (trees are never changed).
    """
    return _TREES.get(source, "", _parse)


def _parse(source: str | bytes, path: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


T = TypeVar("T")


class KeptByText:
    """What was made from a module's text (its tree), kept for the next reader of this process,
    found by the text and its path: at most :attr:`LIMIT` bytes of text, the least recently used
    left out first. What is kept is never changed (edits make new trees)."""

    LIMIT = 8 << 20

    def __init__(self) -> None:
        self.kept: OrderedDict[tuple[bytes, bool, str], tuple[int, object]] = OrderedDict()
        self.size = 0

    def get(self, source: str | bytes, path: str, make: Callable[[str | bytes, str], T]) -> T:
        """The value kept for ``source`` at ``path``, or ``make(source, path)``, kept from now on."""
        data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
        key = (hashlib.blake2b(data, digest_size=16).digest(), isinstance(source, bytes), path)
        found = self.kept.get(key)
        if found is not None:
            self.kept.move_to_end(key)
            return cast(T, found[1])
        made = make(source, path)
        if len(data) <= self.LIMIT:
            self.kept[key] = (len(data), made)
            self.size += len(data)
            while self.size > self.LIMIT:
                _, (dropped, _) = self.kept.popitem(last=False)
                self.size -= dropped
        return made


_TREES = KeptByText()


class KeptByTree(Generic[T]):
    """What was made from a tree, by the tree and a key: the programs of a folder share their
    library's modules. The tree is kept alive with it; at most :attr:`LIMIT` lines of code are
    kept, the least recently used left out first."""

    LIMIT = 200_000

    def __init__(self) -> None:
        self.kept: OrderedDict[tuple[int, Hashable], tuple[ast.Module, int, T]] = OrderedDict()
        self.lines = 0

    def get(self, tree: ast.Module, key: Hashable, make: Callable[[], T]) -> T:
        found = self.kept.get((id(tree), key))
        if found is not None and found[0] is tree:
            self.kept.move_to_end((id(tree), key))
            return found[2]
        made = make()
        lines = (tree.body[-1].end_lineno or 0) if tree.body else 0
        if lines <= self.LIMIT:
            self.kept[(id(tree), key)] = (tree, lines, made)
            self.lines += lines
            while self.lines > self.LIMIT:
                _, (_, dropped, _) = self.kept.popitem(last=False)
                self.lines -= dropped
        return made


_READ: KeptByTree[_Module] = KeptByTree()  # the modules read, by tree, name, package and role
