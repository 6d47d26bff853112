"""Values computed from this rank's own training batches, and tests that read them.

Once the training data is sharded, each rank draws its own batches: the
batch, the loss and every value computed from them differ between ranks. So
does what a function of the program that draws training batches returns, and
what a call handed the training loader computes. :class:`RankLocal` finds the
names that hold such values in a block (a training loop, or a function) and
answers whether an expression reads one, or a value each process draws for
itself (:func:`~ddpify.engine.uniformity.sources.per_process`).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import dotted, parameter_names
from ddpify.engine.uniformity.sources import Seeding, per_process


class RankLocal:
    """Which values differ between ranks because each rank draws its own training batches."""

    def __init__(
        self,
        index: Index,
        sites: Sequence[cst.CSTNode],
        loader_refs: frozenset[Ref],
        loader_calls: frozenset[cst.Call] = frozenset(),
    ) -> None:
        self.index = index
        self.sites = list(sites)  # where training batches are drawn: ``for`` loops, ``next()`` calls
        self.loader_refs = loader_refs
        self.loader_calls = loader_calls  # the constructions of those loaders, handed on where they are built
        self.seeding = Seeding(index)
        self._names: dict[cst.CSTNode, set[str]] = {}
        self._drawing: dict[cst.FunctionDef, bool] = {}
        self._bindings: dict[tuple[object, str], list[cst.CSTNode]] = {}
        self._parameters: dict[cst.FunctionDef, set[str]] = {}

    def reads(self, expr: cst.CSTNode, block: cst.CSTNode) -> bool:
        """Whether ``expr``, in ``block``, reads a value that differs between ranks."""
        index = self.index
        local = self.names(block)
        entries = {name.split("[", 1)[0] for name in local if "[" in name}  # holders of a varying entry
        for node in index.walk(expr):
            if (
                isinstance(node, cst.Name)
                and node.value in local
                and index.names_a_variable(node)
                and not self._rebound(node, local)
                and not self._bound_alike_before(node, block)
            ):
                return True
            if isinstance(node, cst.Subscript) and _keyed(node) in local:
                return True
            if (
                isinstance(node, (cst.Name, cst.Attribute))
                and dotted(node) in entries
                and not (isinstance(entry := index.parent(node), cst.Subscript) and _keyed(entry))
            ):
                return True  # the whole dict, handed on or read under a key computed at run time
            if isinstance(node, cst.Attribute) and dotted(node) in local:  # ``self.loss``, not all of ``self``
                return True
            if isinstance(node, cst.Call) and (per_process(index, node, self.seeding) or self._varies(node)):
                return True
        return False

    def names(self, block: cst.CSTNode) -> set[str]:
        """The names of ``block`` (a loop or a function) that hold values computed from this rank's batches."""
        if block in self._names:
            return self._names[block]
        index = self.index
        local: set[str] = set()
        for site in self.sites:
            if site is not block and not index.inside(site, block):
                continue
            if isinstance(site, cst.For):
                targets = _loop_targets(site)
            else:
                drawn = next((a for a in index.ancestors(site) if isinstance(a, (cst.Assign, cst.AnnAssign))), None)
                targets = _targets(drawn) if drawn is not None else []
            local |= {name for t in targets for name in _bound(t)}
        if isinstance(block, cst.FunctionDef):
            local |= self._varying_parameters(block)
        body = block.body if isinstance(block, (cst.For, cst.While)) else block
        own = block if isinstance(block, (cst.FunctionDef, cst.Module)) else index.scope_of(block)
        assignments = [
            n
            for n in index.walk(body)
            if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and index.scope_of(n) is own and n is not block
        ]
        # ``losses.append(loss.item())``, ``meter.update(loss.item(), n)``: the container holds them too
        filled = [
            (holder, n)
            for n in index.walk(body)
            if isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in _FILLING
            and (holder := dotted(n.func.value))
            and index.scope_of(n) is own
        ]
        # ``stopper(val_loss)``, ``meter.step(loss)``: an object of the program's own class that keeps
        # what it is given in its fields holds this rank's value too (``stopper.early_stop``)
        filled += [
            (holder, n)
            for n in index.walk(body)
            if isinstance(n, cst.Call)
            and index.scope_of(n) is own
            and (holder := _object_called(n))
            and self._keeps_what_it_is_given(n)
        ]
        # ``for part in out.split(2):``: a loop over such a value binds its target to one of its parts
        loops = [
            n
            for n in index.walk(body)
            if isinstance(n, cst.For) and n is not block and n not in self.sites and index.scope_of(n) is own
        ]
        self._names[block] = local
        while True:  # until nothing more is found: a value may pass through any number of names, in any order
            before = len(local)
            for assign in assignments:
                if (assign.value is not None and self.reads(assign.value, block)) or self._decided_here(assign, block):
                    local |= {name for t in _targets(assign) for name in _bound(t)}
            for loop in loops:
                if self.reads(loop.iter, block):
                    local |= {name for t in _loop_targets(loop) for name in _bound(t)}
            for holder, call in filled:
                if holder not in local and any(self.reads(arg.value, block) for arg in call.args):
                    local.add(holder)
            if len(local) == before:
                return local

    def _bound_alike_before(self, name: cst.Name, block: cst.CSTNode) -> bool:
        """Whether the last binding of ``name`` before this read is a plain assignment of a value that is the
        same on every rank, in a block around the read: ``accuracy = run_epoch(model, valid_loader)`` after
        ``accuracy = run_epoch(model, train_loader, opt)`` (the name holds a rank's own value only before)."""
        index = self.index
        scope = index.scope_of(name)
        key = (scope, name.value)
        bindings = self._bindings.get(key)
        if bindings is None:
            root = scope.body if isinstance(scope, (cst.FunctionDef, cst.Lambda)) else scope
            bindings = sorted(
                (node for node in index.walk(root) if index.scope_of(node) is scope and _binds(node, name.value)),
                key=lambda n: index.order[n],
            )
            self._bindings[key] = bindings
        before = [b for b in bindings if index.order[b] < index.order[name] and not index.inside(name, b)]
        if not before:
            return False
        last = before[-1]
        if not (
            isinstance(last, cst.Assign)
            and len(last.targets) == 1
            and isinstance(last.targets[0].target, cst.Name)
            and index.inside(last, block)
            and self._runs_before(index.statement_of(last), name)
        ):
            return False
        # nothing in between may fill the object it names (``meter.update(loss)``, ``log(meter)``)
        root = scope.body if isinstance(scope, (cst.FunctionDef, cst.Lambda)) else scope
        for other in index.walk(root):
            if (
                isinstance(other, cst.Name)
                and other.value == name.value
                and other is not name
                and index.order[last] < index.order[other] < index.order[name]
                and not index.inside(other, last)
                and not _only_read(index, other)
            ):
                return False
        return not self.reads(last.value, block)

    def _runs_before(self, stmt: cst.BaseStatement, read: cst.CSTNode) -> bool:
        """Whether ``stmt`` runs on every path to ``read`` within a pass: its block holds the read, or it
        sits in the body of a ``with`` (or a ``try``) whose own block does."""
        index = self.index
        current: cst.CSTNode = stmt
        while True:
            block = index.parent(current)
            if block is None:
                return False
            if index.inside(read, block):
                return True
            owner = index.parent(block)
            if not (isinstance(owner, (cst.With, cst.Try)) and owner.body is block):
                return False
            current = owner

    def _varying_parameters(self, function: cst.FunctionDef) -> set[str]:
        """The parameters of ``function`` that some call hands a value differing between ranks
        (``stopper(epoch_loss, model, path)``: ``val_loss`` in the stopper's ``__call__``)."""
        known = self._parameters.get(function)
        if known is not None:
            return known
        self._parameters[function] = set()  # a call of its own, or a cycle of calls, adds nothing more
        index = self.index
        found: set[str] = set()
        names = parameter_names(function)
        for call in index.callers(function):
            block = next(index.enclosing_loops(call), None) or index.scope_of(call)
            for position, arg in enumerate(call.args):
                parameter = index.parameter_of(arg)
                name = parameter.path if parameter is not None and parameter.scope is function else ""
                if not name and function.name.value == "__call__" and not arg.star:  # ``stopper(loss, model)``
                    name = (
                        arg.keyword.value
                        if arg.keyword is not None
                        else (names[position + 1] if position + 1 < len(names) else "")
                    )
                if name and self.reads(arg.value, block):
                    found.add(name)
        self._parameters[function] = found
        return found

    def _decided_here(self, node: cst.CSTNode, block: cst.CSTNode) -> bool:
        """Whether ``node`` runs or not on a test inside ``block`` that reads a value differing between ranks:
        ``if loss < best: wait = 0 else: wait += 1`` makes ``wait`` differ between ranks too, whatever it is
        assigned (a control dependence, as a divergence analysis follows it)."""
        index = self.index
        for ancestor in index.ancestors(node):
            if ancestor is block or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if (
                isinstance(ancestor, (cst.If, cst.While))
                and not _decided_alike(index, ancestor)
                and self.reads(ancestor.test, block)
            ):
                return True
        return False

    def _keeps_what_it_is_given(self, call: cst.Call) -> bool:
        """Whether ``call`` runs a method of the program's own class that sets a field of its object."""
        index = self.index
        for method, _ in index.instance_methods(call, index.scope_of(call)):
            owner = index.self_name(method)
            if owner and any(
                isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                and any(
                    isinstance(target, cst.Attribute) and m.matches(target.value, m.Name(owner))
                    for target in _targets(n)
                )
                for n in index.walk(method.body)
            ):
                return True
        return False

    def draws_batches(self, function: cst.FunctionDef, depth: int = 0) -> bool:
        """Whether ``function`` draws training batches, itself or through the program's functions it calls."""
        if function in self._drawing:
            return self._drawing[function]
        index = self.index
        self._drawing[function] = False  # a recursive call draws nothing more
        found = any(index.inside(site, function.body) for site in self.sites)
        if not found and depth <= 3:
            for node in index.walk(function.body):
                if isinstance(node, cst.Call):
                    callee = index.resolve_callee(node, index.scope_of(node))
                    if callee is not None and callee[0] is not function and self.draws_batches(callee[0], depth + 1):
                        found = True
                        break
        self._drawing[function] = found
        return found

    def _varies(self, call: cst.Call) -> bool:
        """A call of the program's function that draws training batches, or one handed the training loader."""
        index = self.index
        if "builtins.len" in index.qualified_names(call.func):
            return False  # ``len(loader)``: every rank's shard has as many batches (the sampler pads it)
        callee = index.resolve_callee(call, index.scope_of(call))
        drawing = callee is not None and self.draws_batches(callee[0])
        if drawing and callee is not None and not self._draws_only_what_it_is_handed(callee[0]):
            return True
        # ``run_epoch(model, valid_loader)`` of a function that draws from the loader it is handed: its value
        # differs between ranks where the call hands it the training loader (or the object's constructor does,
        # ``Epoch(model, train_loader).run()``)
        scope = index.scope_of(call)
        handed = [(arg, scope) for arg in call.args]
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if (
            drawing
            and callee is not None
            and isinstance(receiver, cst.Name)
            and isinstance(scope, cst.FunctionDef)
            and receiver.value == index.self_name(scope)
        ):
            # ``self.train_epoch()`` drawing from ``self.loader``: what each construction of the class hands it
            cls = index.method_class(callee[0])
            init = index.method(cls, "__init__") if cls is not None else None
            built = index.callers(init) if init is not None else []
            if not built:
                return True
            handed += [(arg, index.scope_of(each)) for each in built for arg in each.args]
        elif isinstance(receiver, cst.Name) and (ref := index.ref_of(receiver, scope)) is not None:
            values = [value for _, value in index.values_assigned(ref)]
            receiver = values[0] if len(values) == 1 else None
        if isinstance(receiver, cst.Call):
            handed += [(arg, scope) for arg in receiver.args]
        return any(
            arg.value in self.loader_calls or index.carried_ref(arg.value, where) in self.loader_refs
            for arg, where in handed
        )

    def _draws_only_what_it_is_handed(self, function: cst.FunctionDef) -> bool:
        """Whether every pass over training batches in ``function`` loops over one of its parameters
        (``for x, y in loader:``, also through ``enumerate``/``tqdm``), and nothing it calls draws any."""
        index = self.index
        own = [site for site in self.sites if index.inside(site, function.body)]
        parameters = set(parameter_names(function))
        cls = index.method_class(function)
        init = index.method(cls, "__init__") if cls is not None else None
        for site in own:
            if not isinstance(site, cst.For) or index.scope_of(site) is not function:
                return False
            iterated = site.iter
            while isinstance(iterated, cst.Call) and iterated.args:  # ``enumerate(loader)``, ``tqdm(loader)``
                iterated = iterated.args[0].value
            if isinstance(iterated, cst.Name) and iterated.value in parameters:
                continue
            # ``self.loader``, which ``__init__`` only sets from its parameter of that name
            field = index.ref_of(iterated, function)
            assigned = list(index.assignments_to(field)) if field is not None and init is not None else []
            if not assigned or not all(
                index.scope_of(a) is init and isinstance(a.value, cst.Name) and a.value.value in parameter_names(init)
                for a in assigned
                if init is not None
            ):
                return False
        return bool(own) and not any(
            isinstance(node, cst.Call)
            and (callee := index.resolve_callee(node, index.scope_of(node))) is not None
            and callee[0] is not function
            and self.draws_batches(callee[0])
            for node in index.walk(function.body)
        )

    def _rebound(self, name: cst.Name, local: set[str]) -> bool:
        """Whether ``name`` is read inside a loop or comprehension over other data that binds it anew.

        ``for xb, yb in val_loader:`` reuses the training batch's names for the
        validation batch; inside that loop they hold the full set's batches.
        """
        index = self.index
        for ancestor in index.ancestors(name):
            if isinstance(ancestor, cst.For) and ancestor not in self.sites and index.inside(name, ancestor.body):
                bound, data = ancestor.target, ancestor.iter
            elif isinstance(ancestor, (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)):
                bound, data = ancestor.for_in.target, ancestor.for_in.iter
            else:
                continue
            over_local = any(isinstance(n, cst.Name) and n.value in local for n in index.walk(data))
            if not over_local and any(isinstance(n, cst.Name) and n.value == name.value for n in index.walk(bound)):
                return True
        return False


def _only_read(index: Index, name: cst.Name) -> bool:
    """Whether this mention of a name only reads its value, handed to a call of no object of its own
    (``print(accuracy)``, ``f"{accuracy}"``): not ``meter.update(...)``, nor a method call on it."""
    parent = index.parent(name)
    if isinstance(parent, cst.Attribute) and parent.value is name:
        return False
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and bool(index.qualified_names(call.func))
    return isinstance(parent, (cst.FormattedStringExpression, cst.Comparison, cst.BinaryOperation))


def _binds(node: cst.CSTNode, name: str) -> bool:
    """Whether ``node`` (an assignment, a loop, a ``with``, an import...) binds ``name``."""
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
        return any(name in _bound(t) for t in _targets(node))
    if isinstance(node, (cst.For, cst.CompFor)):
        return name in _bound(node.target)
    if isinstance(node, cst.AsName):
        return name in _bound(node.name)
    if isinstance(node, cst.NamedExpr):
        return name in _bound(node.target)
    return False


def _decided_alike(index: Index, test: cst.If | cst.While) -> bool:
    """Whether the conversion makes every rank take the same branch of ``test`` whatever it reads: an ``if``
    around an exit from the loop or around a training step (the loop-control concern decides it for every
    rank), so that what it assigns is the same on every rank too."""
    if not isinstance(test, cst.If):
        return False
    return index.trains(test) or any(isinstance(node, (cst.Break, cst.Return, cst.Raise)) for node in index.walk(test))


# Methods that put a value into the object they are called on: a list, a set, a dict, a running average
_FILLING = frozenset({"append", "extend", "insert", "add", "update"})


def _object_called(call: cst.Call) -> str:
    """The object whose method (or ``__call__``) ``call`` runs, as written: ``stopper``, ``self.meter``."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    return dotted(func.value) if isinstance(func, cst.Attribute) else ""


def _loop_targets(loop: cst.For) -> list[cst.CSTNode]:
    """What a loop binds to the items it draws: its target, less the counter of ``enumerate(...)``, which is the
    same on every rank."""
    if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))) and isinstance(loop.target, cst.Tuple):
        return [e.value for e in loop.target.elements[1:]]
    return [loop.target]


def _targets(assign: cst.Assign | cst.AugAssign | cst.AnnAssign) -> list[cst.CSTNode]:
    """What an assignment writes: each target of ``a = b = ...``; the one of ``a += ...`` or ``a: T = ...``."""
    return [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]


def _bound(target: cst.CSTNode) -> set[str]:
    """What an assignment to ``target`` makes hold its value: names, and dotted attributes (``self.loss``,
    not ``self``); the container, for an item (``losses[i]``)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in _bound(element.value)}
    if isinstance(target, cst.StarredElement):
        return _bound(target.value)
    if isinstance(target, cst.Subscript):
        keyed = _keyed(target)  # ``opt["path"] = ...``: that entry, not the whole dict
        return {keyed} if keyed else _bound(target.value)
    name = dotted(target)
    return {name} if name else set()


def _keyed(subscript: cst.Subscript) -> str:
    """``opt["path"]`` as ``opt['path']``: a dict entry of a named holder under a string key ('' otherwise)."""
    holder = dotted(subscript.value)
    if not holder or len(subscript.slice) != 1:
        return ""
    index = subscript.slice[0].slice
    key = index.value if isinstance(index, cst.Index) else None
    if not isinstance(key, cst.SimpleString) or not isinstance(value := key.evaluated_value, str):
        return ""
    return f"{holder}[{value!r}]"
