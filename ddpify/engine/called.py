"""What the program *calls*, as opposed to what *may run*.

The index reads what may run (:mod:`ddpify.engine.reach`): a function that is
mentioned anywhere that runs, imported or re-exported included, counts, since
an edit that lands in code that may run costs little and one that is missing
leaves the program unconverted. That is the right doubt for edits, and the
wrong one for a finding that makes ddpify do *less*: a package that re-exports
``init_distributed_mode`` from a helpers module does not make the program
distributed; a call of it does.

:func:`called_functions` answers "is called": starting from the code that runs
when the modules load (module level, class bodies, the entry's main block), a
function is called when a call there resolves to it, names it (``helpers.setup``,
``self.setup``: a method called by name on an object of a class ddpify cannot
type), or passes it on (``mp.spawn(worker, ...)``, ``fire.Fire(main)``), and so
on from the calls inside each called function. An import, a re-export or
``__all__`` is not a call. Methods that Python calls on its own (``__init__``,
``__call__``, ``forward``, ``__getitem__``, ...) are called where their class is.
"""

from __future__ import annotations

import libcst as cst

from ddpify.engine.index import Index
from ddpify.engine.syntax import dotted


def called_functions(index: Index) -> set[cst.FunctionDef]:
    """Every function of the program that the code that runs calls, directly or through others."""
    by_name: dict[str, list[cst.FunctionDef]] = {}
    for (_, name), function in sorted(index.functions.items(), key=lambda item: index.order[item[1]]):
        by_name.setdefault(name, []).append(function)
    calls_in: dict[cst.FunctionDef | None, list[cst.Call]] = {}
    for call in index.calls:
        calls_in.setdefault(enclosing_function(index, call), []).append(call)
    called: set[cst.FunctionDef] = set()
    todo = list(calls_in.get(None, []))
    for function in index.functions.values():
        if _called_by_python(index, function):
            called.add(function)
            todo += calls_in.get(function, [])
    while todo:
        call = todo.pop()
        for function in _callees(index, call, by_name):
            if function not in called:
                called.add(function)
                todo += calls_in.get(function, [])
    return called


def enclosing_function(index: Index, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The innermost ``def`` around ``node``; None at module level or in a class body."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return ancestor
    return None


def commands_of(index: Index, call: cst.Call) -> list[cst.FunctionDef]:
    """``fire.Fire()`` with no component: every function of its module's globals (its own, and those it
    imports) is a command that may be called."""
    if call.args or not (index.qualified_names(call.func) & {"fire.Fire"}):
        return []
    module = index.module_of(call)
    own = [f for (scope, _), f in index.functions.items() if scope is module]
    # the module's globals: the functions it imports from other modules of the program are commands too
    imported = [
        d
        for fulls in index.imports.get(module, {}).values()
        for full in sorted(fulls)
        if isinstance(d := index.local_definition(full), cst.FunctionDef) and d not in own
    ]
    return [*own, *imported]


def _callees(index: Index, call: cst.Call, by_name: dict[str, list[cst.FunctionDef]]) -> list[cst.FunctionDef]:
    found = commands_of(index, call)
    resolved = index.resolve_callee(call, index.scope_of(call))
    if resolved is not None:
        found.append(resolved[0])
    else:  # ``train = train_a if flag else train_b``: either may be called
        found += index.functions_chosen(call)
    func = call.func
    named = func.attr.value if isinstance(func, cst.Attribute) else dotted(func)  # ``Runner(args).train()`` too
    if named:
        found += by_name.get(named.rsplit(".", 1)[-1], [])
    for arg in call.args:  # a function handed on is called by whatever receives it
        passed = dotted(arg.value)
        if passed:
            found += by_name.get(passed.rsplit(".", 1)[-1], [])
    return found


# Methods that Python or torch call on an object of their class (also read by :mod:`ddpify.engine.already`).
CALLED_BY_PYTHON = frozenset(
    {"forward", "__call__", "__enter__", "__exit__", "__iter__", "__next__", "__getitem__", "__len__"}
)


def _called_by_python(index: Index, function: cst.FunctionDef) -> bool:
    """A method that Python or torch calls on an object of its class, which runs where the class is built."""
    return index.method_class(function) is not None and function.name.value in CALLED_BY_PYTHON


def runs_whenever_training_does(index: Index, function: cst.FunctionDef, called: set[cst.FunctionDef]) -> bool:
    """Whether ``function`` runs on every run that trains: it is called (see :func:`called_functions`), and
    trains itself, or one of its calls sits outside every ``if`` and ``except`` of a function that runs on
    every run that trains (or of the code that runs when the modules load). ``if args.parallel:
    model.parallelize()`` does not make ``parallelize`` run whenever ``main`` trains; ``train()`` under
    ``if not args.eval:`` runs whenever training does. A function handed on as a value, whose calls ddpify
    cannot see, counts as running."""
    return _whenever_training_does(index, function, called, frozenset())


def _whenever_training_does(
    index: Index, function: cst.FunctionDef, called: set[cst.FunctionDef], seen: frozenset[cst.FunctionDef]
) -> bool:
    if function not in called:
        return False
    if function in seen or _called_by_python(index, function) or function.name.value == "__init__":
        return True
    if index.trains(function.body):
        return True
    calls = index.callers(function)
    if not calls:
        return True
    for call in calls:
        if _conditional(index, call):
            continue
        caller = enclosing_function(index, call)
        if caller is None or _whenever_training_does(index, caller, called, seen | {function}):
            return True
    return False


def _conditional(index: Index, node: cst.CSTNode) -> bool:
    """Whether ``node`` sits in a branch of its function (or module) that a run may skip."""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if (
            isinstance(ancestor, (cst.If, cst.IfExp))
            and child is not ancestor.test
            and ancestor is not index.main_guard
        ):
            return True
        if isinstance(ancestor, cst.BooleanOperation) and child is not ancestor.left:
            return True
        if isinstance(ancestor, cst.ExceptHandler):
            return True
        child = ancestor
    return False
