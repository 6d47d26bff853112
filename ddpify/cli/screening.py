"""The first pass: what a file imports and what its code could run, read with CPython's ``ast`` only.

A folder of a real repository holds hundreds of files, and almost none of them
train. Reading each one with libcst and building ddpify's index would cost many
times a parse of the whole repository; this pass reads each file once with
``ast`` (several times faster) and keeps a few small facts, from which
:func:`may_train` decides whether a program can train at all. Only programs
that may train are read by the full analysis; the others are "nothing to do"
without it.

The decision errs on the side of training. The full analysis counts a program
as training when ``.backward()`` runs in code its entry script reaches through
calls: its own module-level code and main block, then functions, methods and
constructors it calls, across modules (``ddpify.engine``). Here, by name alone
and without scopes:

* every module's module-level code counts as running (an imported module's
  ``if __name__ == "__main__":`` block does not, as Python never runs it), and
  so does every decorated definition (a registry may call it), but for
  decorators known to do neither (pytest's, ``torch.no_grad()``:
  :func:`ddpify.engine.reach.never_registers`);
* a name that running code mentions anywhere (``f``, ``obj.f``, an import
  ``as`` alias) makes every function, method or class of that name in the
  program run, a class with all of its methods;
* ``globals()``, ``vars()``, ``locals()``, ``eval``, ``exec`` make every
  definition of their file run, and ``getattr(module, name)`` with a computed
  name every definition of the program;
* any ``.backward`` (or a name ``backward``) in running code counts as a
  backward pass, and so does a mention of ``optim`` or of an optimizer class
  of ``torch.optim``: an optimizer handed to a library's training loop is
  refused by the full analysis (DDP016), not passed over.

So a program this pass calls non-training is one the full analysis calls
non-training too (``tests/test_screening.py`` compares them on every fixture
tree). A file CPython cannot parse is never decided here.

Before:  500 files -> 500 libcst parses and indexes (each with its modules)
After:   500 ``ast`` parses, then libcst for the few programs that may train
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ddpify import collector
from ddpify.engine.reach import DYNAMIC_NAMES, definition_header, is_main_block, never_registers, parse
from ddpify.modules import absolute_import

# Names whose mention in running code may mean training: a backward pass, an optimizer (which a
# library's training loop may step out of sight), or hydra's instantiate (the objects it builds).
_TRAINS = frozenset(
    {
        "backward",
        "optim",
        *("SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "NAdam", "RAdam"),
        *("ASGD", "LBFGS", "SparseAdam"),
        "instantiate",  # hydra's: builds the objects a configuration names, whose code may train
    }
)
# Calls that load a module whose name is a value: ``(qualified name of the call, what it is)``.
DYNAMIC_IMPORTS = {
    "importlib.import_module": "importlib.import_module()",
    "importlib.__import__": "importlib.__import__()",
    "__import__": "__import__()",
    # hydra builds the object its config names by a dotted string (``_target_: agent.Agent``)
    "hydra.utils.instantiate": "hydra.utils.instantiate()",
    "hydra.utils.call": "hydra.utils.call()",
    "hydra.utils.get_class": "hydra.utils.get_class()",
    "hydra.utils.get_method": "hydra.utils.get_method()",
    "hydra.utils.get_object": "hydra.utils.get_object()",
}
# Calls that load code from a path: never followed.
CODE_LOADERS = {
    "importlib.util.spec_from_file_location": "importlib.util.spec_from_file_location()",
    "importlib.machinery.SourceFileLoader": "importlib.machinery.SourceFileLoader()",
    "runpy.run_path": "runpy.run_path()",
    "runpy.run_module": "runpy.run_module()",
    "imp.load_source": "imp.load_source()",
}
# Changes of the module search path, by call.
PATH_CHANGES = {
    "sys.path.insert": "sys.path.insert()",
    "sys.path.append": "sys.path.append()",
    "sys.path.extend": "sys.path.extend()",
    "site.addsitedir": "site.addsitedir()",
}


@dataclass(frozen=True)
class Import:
    """One module an import statement names: ``import a.b`` -> ``(0, "a.b", ())``;
    ``from ..m import x, y`` -> ``(2, "m", ("x", "y"))``."""

    level: int
    module: str
    names: tuple[str, ...]
    line: int
    column: int


@dataclass(frozen=True)
class Load:
    """An import ddpify cannot follow as a statement: a module loaded by a call, or a change of
    ``sys.path``.

    ``module`` is the constant name of a module loaded by a call (``import_module("utils")``),
    None when the name is computed. ``own_folder`` marks a change of ``sys.path`` that adds
    the file's own folder (``os.path.dirname(__file__)``).
    """

    line: int
    column: int
    construct: str  # "importlib.import_module()", "sys.path.insert()", ...
    kind: str  # "call" (a module by name), "path" (code from a path), "search" (sys.path)
    module: str | None = None
    own_folder: bool = False
    # the folders a change of ``sys.path`` adds, where the code names them: each relative to the file's own
    # folder (``os.path.join(os.path.dirname(__file__), "..", "lib")``: ("../lib", True)), or to the folder
    # the program runs from (``sys.path.append("core")``: ("core", False)); () where they are not known
    added: tuple[tuple[str, bool], ...] = ()


@dataclass(eq=False)
class Unit:
    """Code that runs as a whole once it runs: a file's module-level code, or one definition."""

    mentions: set[str] = field(default_factory=set)
    backward: bool = False
    dynamic_names: bool = False  # globals(), eval(), ...: every definition of its file may run
    # getattr(module, computed): the modules it may name (as imported); when one is the program's,
    # every definition of the program may run
    getattr_owners: set[str] = field(default_factory=set)
    members: list[Unit] = field(default_factory=list)  # a class's methods


@dataclass(frozen=True, eq=False)
class Facts:
    """What the first pass keeps of one file: its imports and the units of its code."""

    imports: tuple[Import, ...]
    top: Unit  # module-level code, main block left out
    main: Unit | None  # ``if __name__ == "__main__":`` blocks: they run only in the entry script
    definitions: Mapping[str, tuple[Unit, ...]]  # functions, methods and classes, by name
    decorated: tuple[Unit, ...]  # module-level definitions a decorator may register (and so run)
    aliases: Mapping[str, frozenset[str]]  # ``import ... as alias`` -> the names it stands for
    loads: tuple[Load, ...]

    def imported_modules(self, package: str) -> list[str]:
        """Every module name an import may load, packages first: ``a``, ``a.b`` for ``import a.b``;
        ``package`` is the one relative imports start from."""
        names: list[str] = []
        for _, loaded in self.imported_by_statement(package):
            names += loaded
        return list(dict.fromkeys(names))

    def imported_by_statement(self, package: str) -> Iterator[tuple[Import, list[str]]]:
        """Each import statement's record with the module names it may load (as :meth:`imported_modules`)."""
        for record in self.imports:
            base = absolute_import(record.level, record.module, package)
            if base is None:
                continue
            yield record, [*_with_packages(base), *(f"{base}.{name}" for name in record.names if name != "*")]

    def relative_imports(self) -> Iterator[Import]:
        return (record for record in self.imports if record.level)


def screen(source: bytes | str) -> Facts | None:
    """The facts of one file's text; None when CPython cannot parse it."""
    with collector.paused():
        tree = parse(source)
        return None if tree is None else _Reader().read(tree)  # unparsable: the full analysis says why


class _Reader:
    """Reads one tree into :class:`Facts` in one walk."""

    def __init__(self) -> None:
        self.imports: list[Import] = []
        self.definitions: dict[str, list[Unit]] = {}
        self.decorated: list[Unit] = []
        self.aliases: dict[str, set[str]] = {}
        self.bound: dict[str, str] = {}  # a name an import binds -> the module or object it names
        self.calls: list[tuple[tuple[str, ...], ast.Call | ast.stmt]] = []
        self.getattrs: list[tuple[tuple[str, ...], Unit]] = []
        self.loading_aliases: set[str] = set()  # ``from importlib import import_module as load``
        self.decorators: list[tuple[list[ast.expr], Unit]] = []
        self.assigned: dict[str, list[ast.expr]] = {}  # a plain name -> the values assigned to it
        # a parameter of a function of the file -> the arguments its calls in the file give it
        self.passed: dict[str, list[ast.expr]] = {}

    def read(self, tree: ast.Module) -> Facts:
        top, main = Unit(), Unit()
        has_main = False
        for stmt in tree.body:
            if is_main_block(stmt):
                has_main = True
                self.statements([stmt], main, in_class=None)
            else:
                self.statements([stmt], top, in_class=None)
        functions = {
            stmt.name: [a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args)]
            for stmt in tree.body
            if isinstance(stmt, ast.FunctionDef)
        }
        changes_path = any(self.qualified(dotted) in PATH_CHANGES for dotted, _ in self.calls)
        for node in ast.walk(tree) if changes_path else ():  # ``add_path(lib_path)`` of ``_init_paths.py``
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
                for parameter, argument in zip(functions[node.func.id], node.args, strict=False):
                    self.passed.setdefault(parameter, []).append(argument)
        for owner, unit in self.getattrs:
            if owner[0] in self.bound:
                unit.getattr_owners.add(self.qualified(owner))
        for decorators, unit in self.decorators:
            if not all(self.never_registers(decorator) for decorator in decorators):
                self.decorated.append(unit)
        return Facts(
            imports=tuple(self.imports),
            top=top,
            main=main if has_main else None,
            definitions={name: tuple(units) for name, units in self.definitions.items()},
            decorated=tuple(self.decorated),
            aliases={alias: frozenset(names) for alias, names in self.aliases.items()},
            loads=tuple(self.loads()),
        )

    def statements(self, stmts: Sequence[ast.stmt], unit: Unit, *, in_class: Unit | None) -> None:
        """Module-level or class-level statements: a definition there becomes a unit of its own
        (what its header evaluates stays with the code around it)."""
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.definition(stmt, unit, in_class=in_class)
            elif isinstance(stmt, _COMPOUND):
                for name, value in ast.iter_fields(stmt):
                    if name in _BLOCKS:
                        self.statements(value, unit, in_class=in_class)
                    elif name == "handlers":
                        for handler in value:
                            if handler.type is not None:
                                self.expression(handler.type, unit)
                            self.statements(handler.body, unit, in_class=in_class)
                    elif name == "cases":
                        for case in value:
                            self.expression(case.pattern, unit)
                            if case.guard is not None:
                                self.expression(case.guard, unit)
                            self.statements(case.body, unit, in_class=in_class)
                    elif isinstance(value, ast.AST):
                        self.expression(value, unit)
                    elif isinstance(value, list):  # with-items
                        for item in value:
                            self.expression(item, unit)
            else:
                self.expression(stmt, unit)

    def definition(
        self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, around: Unit, *, in_class: Unit | None
    ) -> None:
        for part in definition_header(stmt):
            self.expression(part, around)
        unit = Unit()
        self.definitions.setdefault(stmt.name, []).append(unit)
        if stmt.decorator_list and in_class is None:  # a method runs with its class
            self.decorators.append((stmt.decorator_list, unit))
        if in_class is not None:
            in_class.members.append(unit)
        if isinstance(stmt, ast.ClassDef):
            self.statements(stmt.body, unit, in_class=unit)
        else:
            for part in (*stmt.body, *_annotations(stmt)):
                self.expression(part, unit)

    def expression(self, root: ast.AST, unit: Unit) -> None:
        """Everything below ``root`` belongs to ``unit`` (nested functions and classes included)."""
        stack = [root]
        mentions = unit.mentions
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is ast.Name:
                name = node.id  # type: ignore[attr-defined]
                mentions.add(name)
                if name in _TRAINS:
                    unit.backward = True
                continue
            if kind is ast.Attribute:
                attr = node.attr  # type: ignore[attr-defined]
                mentions.add(attr)
                if attr in _TRAINS:
                    unit.backward = True
            elif kind is ast.Call:
                self.call(node, unit)  # type: ignore[arg-type]
            elif kind is ast.Import or kind is ast.ImportFrom:
                self.import_(node, unit)  # type: ignore[arg-type]
                continue
            elif kind is ast.Assign or kind is ast.AugAssign:
                self.assignment(node)  # type: ignore[arg-type]
            elif kind is ast.Constant:
                continue
            for name in _fields(kind):
                value = getattr(node, name)
                if type(value) is list:
                    stack.extend(value)
                elif value is not None:
                    stack.append(value)

    def import_(self, node: ast.Import | ast.ImportFrom, unit: Unit) -> None:
        line, column = node.lineno, node.col_offset + 1
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.imports.append(Import(0, alias.name, (), line, column))
                local = alias.asname or alias.name.split(".")[0]
                self.bound[local] = alias.name if alias.asname else local
            return
        names = tuple(alias.name for alias in node.names)
        self.imports.append(Import(node.level, node.module or "", names, line, column))
        for alias in node.names:
            if alias.asname is not None:  # calls through the alias run the original
                self.aliases.setdefault(alias.asname, set()).add(alias.name)
                if alias.name in _LOADING_CALLS:
                    self.loading_aliases.add(alias.asname)
            base = "." * node.level + (node.module or "")
            self.bound[alias.asname or alias.name] = f"{base}.{alias.name}" if node.module else f"{base}{alias.name}"

    def call(self, node: ast.Call, unit: Unit) -> None:
        func = _dotted(node.func)
        if func is None:
            return
        if (func[-1] in DYNAMIC_NAMES and len(func) == 1) or (
            func[-1] == "Fire" and not node.args and not node.keywords
        ):
            unit.dynamic_names = True  # ``fire.Fire()``: every function of the file is a command
        elif func == ("getattr",) and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            owner = _dotted(node.args[0])
            if owner is not None:  # decided once the file's imports are known: is the owner a module?
                self.getattrs.append((owner, unit))
        elif func[-1] in _LOADING_CALLS or func[0] in self.loading_aliases:
            self.calls.append((func, node))

    def assignment(self, node: ast.Assign | ast.AugAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                self.assigned.setdefault(target.id, []).append(node.value if isinstance(node, ast.Assign) else target)
            inner = target.value if isinstance(target, ast.Subscript) else target
            name = _dotted(inner)
            if name is not None and name[-1] == "path":
                self.calls.append((name, node))

    def never_registers(self, decorator: ast.expr) -> bool:
        name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
        return name is not None and name[0] in self.bound and never_registers(self.qualified(name))

    def qualified(self, dotted: tuple[str, ...]) -> str:
        head = self.bound.get(dotted[0], dotted[0])
        return ".".join((head, *dotted[1:]))

    def loads(self) -> Iterator[Load]:
        for dotted, node in self.calls:
            line, column = node.lineno, node.col_offset + 1
            if isinstance(node, ast.stmt):  # sys.path = ..., sys.path += ..., sys.path[:0] = ...
                if self.qualified(dotted) == "sys.path":
                    yield Load(line, column, "sys.path assignment", "search")
                continue
            name = self.qualified(dotted)
            if (dotted == ("__import__",) or name in DYNAMIC_IMPORTS) and _loads_itself(node):
                continue  # ``import_module(__name__)``: the module holding the call, loaded already
            if dotted == ("__import__",) or name in DYNAMIC_IMPORTS:
                construct = DYNAMIC_IMPORTS.get(name, "__import__()")
                yield Load(line, column, construct, "call", _constant_module(node))
            elif name in CODE_LOADERS:
                yield Load(line, column, CODE_LOADERS[name], "path")
            elif name in PATH_CHANGES:
                added = node.args[-1] if node.args else None
                own = added is not None and _names_own_folder(added)
                folders = _Folder(self).values(added) if added is not None and name != "sys.path.extend" else ()
                yield Load(line, column, PATH_CHANGES[name], "search", own_folder=own, added=folders)


def may_train(entry: Facts, modules: Mapping[str, Facts]) -> bool:
    """Whether the program of ``entry`` and ``modules`` (by the name each is imported as) may run
    ``.backward()``; see the module docstring."""
    first = FirstPass()
    first.add("__main__", entry)
    for name, facts in modules.items():
        first.add(name, facts)
    return first.may_train("__main__", {name: name for name in modules})


@dataclass
class _Reached:
    """What runs of a set of modules on their own (their module-level code and what it mentions)."""

    backward: bool
    seen: set[int]
    mentioned: set[str]
    everything: bool


class FirstPass:
    """:func:`may_train` for many programs of one project that share their modules.

    Files are added once, by a key (their real path). The reach of a set of
    modules without their entry script is kept, so that the entries of one
    project, which mostly import the same modules, each add only their own code.
    """

    MEMO = 64  # module sets kept

    def __init__(self) -> None:
        self.files: dict[str, Facts] = {}
        self.by_name: dict[str, list[tuple[str, Unit]]] = {}
        self.owner: dict[int, Facts] = {}
        self.memo: dict[frozenset[tuple[str, str]], _Reached] = {}

    def add(self, key: str, facts: Facts) -> None:
        if self.files.get(key) is facts:
            return
        self.files[key] = facts
        for name, units in facts.definitions.items():
            self.by_name.setdefault(name, []).extend((key, unit) for unit in units)
            for unit in units:
                self._own(unit, facts)
        self.owner[id(facts.top)] = facts
        if facts.main is not None:
            self.owner[id(facts.main)] = facts

    def _own(self, unit: Unit, facts: Facts) -> None:
        self.owner[id(unit)] = facts
        for member in unit.members:
            self._own(member, facts)

    def may_train(self, entry: str, modules: Mapping[str, str]) -> bool:
        """Whether the program of the file ``entry`` and the files ``modules`` (all added; each with
        the name it is imported as) may train."""
        named = frozenset((key, name) for key, name in modules.items() if key != entry)
        files = frozenset(key for key, _ in named)
        names = {name for _, name in named}
        part = self.memo.get(named)
        if part is None:
            part = self._modules_alone(named, files, names)
        if part.backward:
            return True
        facts = self.files[entry]
        todo = [facts.top, *([facts.main] if facts.main is not None else []), *facts.decorated]
        # What the modules mention reaches the entry's definitions of those names too.
        todo += [unit for name, units in facts.definitions.items() if name in part.mentioned for unit in units]
        if part.everything:
            todo += [unit for units in facts.definitions.values() for unit in units]
        walk = _Reached(False, set(part.seen), set(part.mentioned), part.everything)
        return self._walk(todo, files | {entry}, names, walk)

    def _modules_alone(self, named: frozenset[tuple[str, str]], files: frozenset[str], names: set[str]) -> _Reached:
        todo: list[Unit] = []
        for key in sorted(files):
            facts = self.files[key]
            todo += [facts.top, *facts.decorated]
        part = _Reached(False, set(), set(), False)
        part.backward = self._walk(todo, files, names, part)
        if len(self.memo) >= self.MEMO:
            del self.memo[next(iter(self.memo))]
        self.memo[named] = part
        return part

    def _walk(self, todo: list[Unit], files: frozenset[str], names: set[str], walk: _Reached) -> bool:
        """Whether a backward pass runs in ``todo`` or what it mentions, among ``files`` (the modules
        imported as ``names``); ``walk`` records what was reached."""
        seen, mentioned = walk.seen, walk.mentioned
        while todo:
            unit = todo.pop()
            if id(unit) in seen:
                continue
            seen.add(id(unit))
            if unit.backward:
                return True
            todo += unit.members
            facts = self.owner.get(id(unit))
            if unit.dynamic_names and facts is not None:
                todo += [u for units in facts.definitions.values() for u in units]
                # the functions the file imports are in its globals too (``fire.Fire()`` serves them)
                imported = sorted({name for record in facts.imports for name in record.names if name != "*"})
                todo += [u for name in imported for key, u in self.by_name.get(name, ()) if key in files]
            if not walk.everything and any(o.startswith(".") or o in names for o in unit.getattr_owners):
                walk.everything = True
                todo += [u for key in files for units in self.files[key].definitions.values() for u in units]
            names = unit.mentions - mentioned
            if facts is not None and facts.aliases:
                names |= {o for n in unit.mentions if n in facts.aliases for o in facts.aliases[n]} - mentioned
            for name in names:
                mentioned.add(name)
                todo += [u for key, u in self.by_name.get(name, ()) if key in files]
        return False


_COMPOUND = (
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
_BLOCKS = frozenset({"body", "orelse", "finalbody"})
_LOADING_CALLS = frozenset(name.rsplit(".", 1)[-1] for name in (*DYNAMIC_IMPORTS, *CODE_LOADERS, *PATH_CHANGES))


_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}
# Fields that never hold code: contexts, operators, plain values.
_LEAF_FIELDS = frozenset(
    {"ctx", "op", "ops", "type_comment", "id", "attr", "arg", "name", "names", "module", "level", "value_kind"}
)


def _fields(kind: type[ast.AST]) -> tuple[str, ...]:
    """The fields of a node kind that may hold code (nodes, lists of nodes); none for anything else."""
    found = _CHILD_FIELDS.get(kind)
    if found is None:
        # (a list may also hold a None, a ``**`` in a dict display, or names: they have no fields)
        every: tuple[str, ...] = getattr(kind, "_fields", ())
        found = _CHILD_FIELDS[kind] = tuple(f for f in every if f not in _LEAF_FIELDS)
    return found


def _annotations(stmt: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    args = stmt.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    found: list[ast.AST] = [a.annotation for a in every if a.annotation is not None]
    return found + ([stmt.returns] if stmt.returns else [])


def _dotted(expr: ast.AST) -> tuple[str, ...] | None:
    """``a.b.c`` as ``("a", "b", "c")``; None for anything else."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return tuple(reversed(parts))


def _loads_itself(call: ast.Call) -> bool:
    """``importlib.import_module(__name__)``: the module that makes the call."""
    return bool(call.args) and isinstance(first := call.args[0], ast.Name) and first.id == "__name__"


def _constant_module(call: ast.Call) -> str | None:
    """The module a call loads when its name is a constant and absolute: ``import_module("a.b")``."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value:
        name: str = first.value
        if not name.startswith(".") and all(part.isidentifier() for part in name.split(".")):
            return name
    return None


# Stand-ins for the file and for the folder the program runs from, deep enough that ``..`` never
# reaches the root, while a folder is worked out with os.path's own functions.
_FILE_FOLDER = "/" + "/".join(f"f{i}" for i in range(16))
_RUN_FOLDER = "/" + "/".join(f"r{i}" for i in range(16))


class _Folder:
    """The folder an expression names, worked out without running it: ``__file__``, string constants,
    ``os.path.join``/``dirname``/``abspath``, ``Path(...).parent / "lib"``, ``str(...)``, and names
    assigned once in the file. ``value`` gives it relative to the file's folder or to the folder the
    program runs from, or None."""

    _SAME = frozenset({"abspath", "realpath", "normpath", "expanduser", "str", "Path", "resolve", "absolute"})

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.depth = 0

    def values(self, expr: ast.expr) -> tuple[tuple[str, bool], ...]:
        """Each folder ``expr`` names (one, or one per call of the function whose parameter it is), or ()."""
        named = self.reader.assigned.get(expr.id, []) if isinstance(expr, ast.Name) else [expr]
        passed = self.reader.passed.get(expr.id, []) if isinstance(expr, ast.Name) and not named else []
        found = [self._relative(value) for value in (named if len(named) == 1 else passed)]
        return tuple(f for f in found if f is not None) if found and None not in found else ()

    def _relative(self, expr: ast.expr) -> tuple[str, bool] | None:
        path = self._path(expr)
        if path is None:
            return None
        for root, from_file in ((_FILE_FOLDER, True), (_RUN_FOLDER, False)):
            top = root[: root.index("/", 1)]  # a path from the stand-in keeps its first part
            if path == top or path.startswith(top + "/"):
                return posixpath.relpath(path, root), from_file
        return None

    def _path(self, expr: ast.expr) -> str | None:
        self.depth += 1
        try:
            return self._evaluated(expr) if self.depth < 20 else None
        finally:
            self.depth -= 1

    def _evaluated(self, expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return posixpath.normpath(posixpath.join(_RUN_FOLDER, expr.value))
        if isinstance(expr, ast.Name):
            if expr.id == "__file__":
                return _FILE_FOLDER + "/file.py"
            values = self.reader.assigned.get(expr.id, [])
            return self._path(values[0]) if len(values) == 1 else None
        if isinstance(expr, ast.Attribute) and expr.attr == "parent":
            inner = self._path(expr.value)
            return posixpath.dirname(inner) if inner is not None else None
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "parents":
            inner = self._path(expr.value.value)
            steps = expr.slice.value if isinstance(expr.slice, ast.Constant) else None
            if inner is None or not isinstance(steps, int) or steps < 0:
                return None
            for _ in range(steps + 1):
                inner = posixpath.dirname(inner)
            return inner
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):  # Path(...) / "lib"
            left, right = self._path(expr.left), expr.right
            if left is None or not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                return None
            return posixpath.normpath(posixpath.join(left, right.value))
        if not isinstance(expr, ast.Call) or expr.keywords:
            return None
        name = expr.func.attr if isinstance(expr.func, ast.Attribute) else getattr(expr.func, "id", None)
        receiver = [expr.func.value] if isinstance(expr.func, ast.Attribute) and name in ("resolve", "absolute") else []
        parts = [*receiver, *expr.args]
        if name in self._SAME and len(parts) == 1:
            return self._path(parts[0])
        if name == "dirname" and len(parts) == 1:
            inner = self._path(parts[0])
            return posixpath.dirname(inner) if inner is not None else None
        if name == "join" and parts:
            first = self._path(parts[0])
            rest = [p.value for p in parts[1:] if isinstance(p, ast.Constant) and isinstance(p.value, str)]
            if first is None or len(rest) != len(parts) - 1:
                return None
            return posixpath.normpath(posixpath.join(first, *rest))
        return None


def _names_own_folder(expr: ast.AST) -> bool:
    """Whether ``expr`` is the folder of the file itself: ``os.path.dirname(os.path.abspath(__file__))``,
    ``str(Path(__file__).resolve().parent)`` and the like (one step up from ``__file__``, no
    strings joined)."""
    steps = 0
    has_file = False
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id == "__file__":
            has_file = True
        elif isinstance(node, (ast.Constant, ast.Subscript, ast.BinOp, ast.JoinedStr)):
            return False
        elif isinstance(node, ast.Attribute) and node.attr in ("parent", "dirname"):
            steps += 1
        elif isinstance(node, ast.Attribute) and node.attr in ("parents", "join", "joinpath"):
            return False
    return has_file and steps == 1


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
