"""The script being converted, as every concern's finder sees it: its index, its path, fresh names, findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from ddpify import torch_api
from ddpify.diagnostics import Code, Diagnostic
from ddpify.engine.called import called_functions, commands_of, enclosing_function, runs_whenever_training_does
from ddpify.engine.collect import Source, build_index
from ddpify.engine.index import Index, Ref
from ddpify.engine.reach import Reach


@dataclass(frozen=True)
class Names:
    """Names the generated code uses, chosen so they clash with nothing in the script."""

    dist: str
    ddp: str
    sampler: str
    setup: str
    os: str
    atexit: str
    random: str = "random"
    numpy: str = "np"


@dataclass
class Program:
    """One script and the modules of the program it imports, read once: finders look things
    up in ``index`` and report what they cannot convert."""

    index: Index
    path: str  # the entry script's
    names: Names
    findings: list[tuple[cst.CSTNode, Code, str]] = field(default_factory=list)
    _called: set[cst.FunctionDef] | None = field(default=None, repr=False)

    def called(self) -> set[cst.FunctionDef]:
        """The functions the program calls (:func:`called_functions`), found once."""
        if self._called is None:
            self._called = called_functions(self.index)
        return self._called

    def runs_whenever_training_does(self, node: cst.CSTNode) -> bool:
        """Whether the function around ``node`` runs on every run that trains
        (:func:`~ddpify.engine.called.runs_whenever_training_does`); code at module level does."""
        function = enclosing_function(self.index, node)
        return function is None or runs_whenever_training_does(self.index, function, self.called())

    def report(self, node: cst.CSTNode, code: Code, message: str) -> None:
        self.index.want_position(node)
        self.findings.append((node, code, message))

    def diagnostics(self) -> list[Diagnostic]:
        """What the finders reported, at its place in the input."""
        index = self.index
        return [code.at(*index.position(node), message, index.path_of(node)) for node, code, message in self.findings]

    @property
    def trains(self) -> bool:
        """Whether the script runs a backward pass anywhere; in a program of several modules, anywhere
        in the entry script or in the code of other modules that it runs (an evaluation script that
        imports the module of a training loop does not train)."""
        if len(self.index.modules) <= 1:
            return any(is_backward(call) for call in self.index.calls)
        return _reaches_backward(self.index)

    def called_and_trains(self) -> cst.FunctionDef | None:
        """The first function, in source order, that the program calls (:func:`called_functions`: also a
        method called by name on an object of a class ddpify cannot type, ``trainer.fit()`` after
        ``trainer = TRAINERS[name](...)``) and that runs a backward pass."""
        index = self.index
        called = sorted(self.called(), key=index.order.__getitem__)
        return next((function for function in called if index.trains(function.body)), None)

    def first_backward(self) -> cst.Call | None:
        return next((call for call in self.index.calls if is_backward(call)), None)

    def optimizer_handed_away(self) -> tuple[cst.Call, cst.Call] | None:
        """An optimizer that code which runs builds and hands to a call the program does not define
        (``engine.train(step, loader, epochs, optimizer)``), with that call: the training loop is then
        a library's, out of sight. The optimizer is followed from where it is built (``opt = SGD(...)``,
        or ``return SGD(...)`` in a helper) to every place it flows to."""
        index = self.index
        for call in index.calls:
            if not any(torch_api.builds_optimizer(name) for name in index.qualified_names(call.func)):
                continue
            holder = index.parent(call)
            scope = index.scope_of(call)
            function = enclosing_function(index, call)
            if function is not None and function not in self.called():
                continue
            if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
                built = index.ref_of(holder.targets[0].target, scope)
            elif isinstance(holder, cst.Return) and isinstance(scope, cst.FunctionDef):
                built = Ref(scope, "<return>")
            elif isinstance(holder, cst.Arg):  # ``Warmup(torch.optim.Adam(...))``: handed on where it is built
                outer = index.parent(holder)
                if isinstance(outer, cst.Call) and self._out_of_sight(outer):
                    return call, outer
                built = index.parameter_of(holder)
            else:
                continue
            if built is None:
                continue
            for place in sorted(
                index.downstream(built) | {built}, key=lambda r: (index.order.get(r.scope, -1), r.path)
            ):
                for reader in index.scopes_reading(place):
                    for read in index.mentions(reader, place):
                        arg = index.parent(read)
                        outer = index.parent(arg)
                        if isinstance(arg, cst.Arg) and isinstance(outer, cst.Call) and self._out_of_sight(outer):
                            return call, outer
        return None

    def _out_of_sight(self, call: cst.Call) -> bool:
        """Whether ``call`` runs code the program does not define, and that is neither torch's nor a builtin."""
        index = self.index
        scope = index.scope_of(call)
        if isinstance(call.func, cst.Attribute) and isinstance(
            call.func.value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
        ):
            return False  # ``"Set optimizer : {}".format(optimizer)``: text, not a training loop
        return (
            index.resolve_callee(call, scope) is None
            and index.instance_method(call, scope) is None
            and not any(name.startswith(("torch.", "builtins.")) for name in index.qualified_names(call.func))
        )


def read_program(module: cst.Module, path: str, others: Sequence[Source] = (), runs: Reach | None = None) -> Program:
    """The program of the entry script ``module``; with ``runs``, only the code of it that runs."""
    index = build_index(module, others, path, runs)
    return Program(index, path, _names(index))


def _reaches_backward(index: Index) -> bool:
    """Whether the entry script, or a function or method of the program that it calls, runs ``.backward()``."""
    seen: set[cst.FunctionDef] = set()
    todo: list[cst.CSTNode] = [index.module]
    while todo:
        for node in index.walk(todo.pop()):
            if not isinstance(node, cst.Call):
                continue
            if is_backward(node):
                return True
            for callee in _callees(index, node):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
    return False


def _callees(index: Index, call: cst.Call) -> list[cst.FunctionDef]:
    """The functions of the program a call may run: resolved directly, or a method of an instance
    of the program's own class (``solver = Solver(...)``, then ``solver.train()``, or
    ``Solver(...).train()``), or every function of a module that ``fire.Fire()`` serves; and any function
    of the program handed to the call as an argument."""
    scope = index.scope_of(call)
    # a function of the program handed on (``partial(step, ...)``, ``Thread(target=work)``) may run
    handed = [f for arg in call.args if (f := index.function_named(arg.value, scope)) is not None]
    resolved = index.resolve_callee(call, scope)
    if resolved is not None:
        return [resolved[0], *handed]
    commands = commands_of(index, call)
    if commands:
        return [*commands, *handed]
    func = call.func
    if not isinstance(func, cst.Attribute):  # ``train(...)`` after ``train = train_a if flag else train_b``
        return [*index.functions_chosen(call), *handed]
    if (instance := index.instance_method(call, scope)) is not None:  # ``Runner(args).train()``
        return [instance[0], *handed]
    ref = index.root_ref(func.value, scope)
    if ref is None:
        return handed
    methods = (index.method(cls, func.attr.value, dispatch=True) for cls in index.constructed_classes(ref))
    return [*(method for method in methods if method is not None), *handed]


def is_backward(call: cst.Call) -> bool:
    """``<loss>.backward(...)``."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"


def without_grad(index: Index, node: cst.CSTNode) -> bool:
    """Inside ``with torch.no_grad():`` (or ``inference_mode``): no gradient can come from here."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                call = item.item
                if isinstance(call, cst.Call) and index.qualified_names(call.func) & torch_api.NO_GRAD:
                    return True
    return False


def _names(index: Index) -> Names:
    used = index.identifiers

    def fresh(base: str, fallback: str) -> str:
        return base if base not in used else fallback

    os_name = "os" if _free_for_module(index, "os") else "os_"
    atexit_name = "atexit" if _free_for_module(index, "atexit") else "atexit_"
    return Names(
        dist="dist" if _free_for_module(index, "dist", "torch.distributed") else "torch_dist",
        ddp=fresh("DDP", "DistributedDataParallel"),
        sampler=fresh("DistributedSampler", "DistributedSampler_"),
        setup=fresh("setup_distributed", "setup_ddp_process_group"),
        os=os_name,
        atexit=atexit_name,
        random="random" if _free_for_module(index, "random") else "random_",
        numpy="np" if _free_for_module(index, "np", "numpy") else "numpy_",
    )


def _free_for_module(index: Index, name: str, full: str | None = None) -> bool:
    """Whether generated code can call the module ``full`` (by default the standard module ``name``)
    as ``name``: no module of the program uses the name for anything else (a module that imports it
    under that name is fine)."""
    if name not in index.identifiers:
        return True
    for module in index.modules or [index.module]:
        if imports_module(module, name, full or name):
            continue
        if any(name in names and index.module_of(scope) is module for scope, names in index.bound.items()):
            return False
        if module is index.module and any(
            index.module_of(n) is module and not _imported_from(index, n) for n in index.names.get(name, ())
        ):
            return False  # the entry script mentions it without importing it
    return True


def _imported_from(index: Index, name: cst.Name) -> bool:
    """Whether ``name`` is (part of) the module an import takes names from: ``os`` of ``from os.path import
    join``, which binds no ``os``."""
    node: cst.CSTNode = name
    parent = index.parent(node)
    while isinstance(parent, cst.Attribute) and parent.value is node:
        node, parent = parent, index.parent(parent)
    return isinstance(parent, cst.ImportFrom) and parent.module is node


def imports_module(module: cst.Module, name: str, full: str) -> bool:
    """Whether ``module`` has a top-level ``import <full>`` binding ``name`` (``import os``,
    ``import torch.distributed as dist``)."""
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import) and any(
                (alias.evaluated_name == full and (alias.evaluated_alias or alias.evaluated_name) == name)
                # ``import os.path`` binds ``os``
                or (alias.asname is None and alias.evaluated_name.startswith(f"{full}.") and name == full)
                for alias in small.names
            ):
                return True
    return False
