"""Reads of a wrapped model that must go to ``.module``, and the lists, dicts and attributes that keep the model.

After the wrap, the model's name holds the DistributedDataParallel wrapper: forward calls and
the methods the wrapper answers for the module stay as they are, but ``state_dict()``, custom
methods, submodules, ``model[0]`` and the model saved or deep-copied whole read ``.module``.
A second reference kept before the wrap would still train the plain module (DDP307); one kept
after it holds the wrapper (DDP309).
"""

from __future__ import annotations

from collections.abc import Iterator
from math import inf
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import checkpoints, model_collections
from ddpify.concerns.model.codes import STORED_BEFORE_WRAP, WRAPPER_IN_CONTAINER
from ddpify.concerns.model.optimizers import TrainedModels
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program, is_backward
from ddpify.engine.syntax import dotted, parameter_names, unpacked_into
from ddpify.engine.values import binds, passed_values

DEEPCOPY = frozenset({"copy.deepcopy"})


_RETURN_THE_MODULE = torch_api.MODULE_CHAINING_METHODS


class WrapperReads:
    """Where the wrapped model is read, kept and run, for the finder and the training-step checks."""

    def __init__(self, program: Program, trained: TrainedModels) -> None:
        self.program = program
        self.index = program.index
        self.trained = trained
        self._warned_holders: set[str] = set()
        # per (model, wrap): the places the wrapped model reaches, and each read of it there
        self._from_wrap: dict[tuple[Ref, cst.BaseStatement], tuple[set[Ref], list[tuple[Ref, cst.BaseExpression]]]] = {}

    def stored_after(self, target: Ref, wrap: cst.BaseStatement) -> tuple[cst.BaseExpression, ...]:
        """Reads of the wrapped model taken out of a list it is kept in after the wrap, that need ``.module``.

        A list filled only with this model (``nets.append(net)`` in the loop that builds it) holds
        nothing but wrappers: ``net.state_dict()`` in ``for net in nets`` gets ``.module``. Any other
        holder (``nets = [net_a, net_b]``, ``self.net = net``) is reported (DDP309).
        """
        index = self.index
        scope = index.scope_of(wrap)
        reads: list[cst.BaseExpression] = []
        for read in index.mentions(scope, target):
            if not index.after(read, wrap) or index.statement_of(read) is wrap:
                continue
            holder = self.stored_in(read)
            if holder is None or self.needs_module(read):  # a checkpoint dict gets ``model.module``
                continue
            listed = model_collections.model_list(index, holder, "model")
            if listed is not None and self._holds_only_models(listed, target, scope):
                taken = model_collections.item_reads(index, index.downstream(listed.ref), wrap)
                reads += [r for r in taken if self.needs_module(r)]
                continue
            holder_ref = index.root_ref(holder, scope)
            text = index.module.code_for_node(holder)
            if (holder_ref is not None and holder_ref == target) or text in self._warned_holders:
                continue
            if holder_ref is not None and self._read_by_key_only(holder_ref):
                continue  # ``kw = {"net": model}``: ``kw["net"]`` is followed like the model's name
            self._warned_holders.add(text)
            self.program.report(
                read,
                WRAPPER_IN_CONTAINER,
                f"`{text}` keeps the model wrapped in DistributedDataParallel: a "
                "`state_dict()` or attribute read through it is the wrapper's (checkpoint keys gain `module.`); "
                "use `.module` there",
            )
            break
        return tuple(reads)

    def _read_by_key_only(self, holder: Ref) -> bool:
        """Whether a dict is read only by constant keys (``kw["net"]``), wherever it goes (``return kw``, ``kwargs,
        opt = create()``): each entry is then followed like a name, and nothing reads the wrapper unseen."""
        index = self.index
        for ref in index.downstream(holder):
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    parent = index.parent(read)
                    if isinstance(parent, cst.Subscript) and parent.value is read:
                        if index.ref_of(parent, index.scope_of(parent)) is None:
                            return False  # ``kw[name]``
                        continue
                    if not isinstance(parent, (cst.Return, cst.Element, cst.AssignTarget)):
                        return False  # ``kw.values()``, ``render(**kw)``: not by a key
                    # else bound, or handed on whole (``return kw, opt``): its new place is looked at too
        return True

    def _holds_only_models(self, listed: model_collections.ModelList, target: Ref, scope: Scope) -> bool:
        """Whether every item of ``listed`` is a trained model: ``nets.append(net)`` of ``target`` only, or
        ``[net_a, net_b]`` where each is a model an optimizer trains (so each is wrapped)."""
        index = self.index
        if listed.fills:
            return all(index.ref_of(fill.args[-1].value, scope) == target for fill in listed.fills)
        if not listed.members:
            return False
        trained = self.trained.all_trained()
        return all(index.ref_of(member, scope) in trained for member in listed.members)

    def refuse_stored_before(
        self,
        target: Ref,
        anchor: cst.BaseStatement,
        wrap: cst.BaseStatement,
        realiased: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        """``nets = [net_a, net_b]`` (or ``net = net_a``) before ``net_a = DDP(net_a)``: ``nets`` still trains
        the plain module."""
        found = self.stored_before(target, anchor, wrap, realiased)
        if found is not None:
            self.program.report(found[0], STORED_BEFORE_WRAP, found[1])

    def stored_before(
        self,
        target: Ref,
        anchor: cst.BaseStatement,
        wrap: cst.BaseStatement,
        realiased: frozenset[str] | set[str] = frozenset(),
    ) -> tuple[cst.CSTNode, str, bool] | None:
        """Where something keeps the model before the wrap after ``anchor`` and trains it after, why, and
        whether it is a function that builds the model and hands it on before returning it (``model, trainer =
        build()``), where a wrap inside that function would reach both."""
        index = self.index
        scope = index.scope_of(wrap)
        # ``model, trainer = build()``: the builder handed its model to an object before it returned it, and
        # the wrap comes after the call: the object keeps the plain module
        upstream = [flow for flow in index.flows_into(target) if flow.src.scope is not target.scope]
        for flow in upstream:
            if index.after(flow.stmt, wrap) or not isinstance(flow.src.scope, cst.FunctionDef):
                continue
            seen, frontier = {flow.src, target}, [flow.src]
            while frontier and len(seen) < 50:  # where else the builder's model goes, through any call
                place = frontier.pop()
                for onward in index.flows_from(place):
                    if onward.dst in seen or onward.dst.scope is target.scope:
                        continue
                    if onward.dst.path.startswith("self.") and self._trains_through(onward.dst):
                        return (
                            flow.stmt,
                            f"`{onward.dst.path}` keeps the model before it is ready to be wrapped in "
                            f"DistributedDataParallel (after line {index.position(anchor)[0]}): it would train "
                            "the plain module; wrap the model where it is built, before it is handed on",
                            True,
                        )
                    seen.add(onward.dst)
                    frontier.append(onward.dst)
        for assign, _ in index.unpacked_values(target):  # ``model, trainer = build()``: ``trainer`` may keep it
            if index.after(assign, wrap):
                continue
            others = [
                r
                for element in cast(cst.Tuple, assign.targets[0].target).elements
                if (r := index.ref_of(element.value, scope)) is not None and r != target
            ]
            for other in others:
                trainers = [c for _, v in index.unpacked_values(other) for c in index.classes_built(v)]
                if any(self._trains_on_call(read) for read in index.mentions(scope, other)) or any(
                    self._trains_its_field(cls) for cls in trainers
                ):
                    return (
                        assign,
                        f"`{other.path}` comes back with the model from the same call and trains it: it keeps the "
                        "model from before the wrap, so it would train the plain module; wrap the model where it is "
                        "built, before it is handed on",
                        True,
                    )
        for read in index.mentions(scope, target):
            if index.after(read, wrap) or index.inside(read, wrap) or index.statement_of(read) is wrap:
                continue
            holder = self.stored_in(read) or self.aliased_in(read)
            if holder is None:
                continue
            holder_ref = index.root_ref(holder, scope)
            if holder_ref is None or any(
                index.after(r, wrap)
                for ref in self.with_aliases(holder_ref, scope)
                if not (isinstance(holder, cst.Name) and ref.path in realiased)  # taken again after the wrap
                for r in index.mentions(scope, ref)
            ):
                return (
                    read,
                    f"`{index.module.code_for_node(holder)}` keeps the model before it is ready to be wrapped "
                    f"in DistributedDataParallel (after line {index.position(anchor)[0]}), and is used after the "
                    "wrap: it would train the plain module; store the model after it is on its device",
                    False,
                )
        return None

    def _trains_on_call(self, read: cst.BaseExpression) -> bool:
        """Whether ``read`` is the object of a method call that trains (``trainer.step(x, y)``)."""
        index = self.index
        attribute = index.parent(read)
        call = index.parent(attribute) if isinstance(attribute, cst.Attribute) and attribute.value is read else None
        if not (isinstance(call, cst.Call) and call.func is attribute):
            return False
        callee = index.runs(call, index.scope_of(call))
        return callee is not None and index.trains(callee[0].body)

    def _trains_its_field(self, cls: cst.ClassDef) -> bool:
        """Whether a method of ``cls`` that trains calls a module it keeps (``self.model(x)``)."""
        index = self.index
        for node in index.walk(cls.body):
            if (
                isinstance(node, cst.FunctionDef)
                and index.trains(node.body)
                and any(
                    isinstance(call, cst.Call)
                    and isinstance(call.func, cst.Attribute)
                    and isinstance(call.func.value, cst.Name)
                    and call.func.value.value == index.self_name(node)
                    for call in index.walk(node.body)
                )
            ):
                return True
        return False

    def _trains_through(self, field: Ref) -> bool:
        """Whether a training step calls the model kept in ``field`` (``self.model(x)`` where it trains)."""
        index = self.index
        for scope in index.scopes_reading(field):
            for read in index.mentions(scope, field):
                call = index.parent(read)
                if (
                    isinstance(call, cst.Call)
                    and call.func is read
                    and isinstance(scope, cst.FunctionDef)
                    and index.trains(scope.body)
                ):
                    return True
        return False

    def realiased(self, target: Ref, wrap: cst.BaseStatement) -> tuple[tuple[str, str], ...]:
        """The other names taken for the model before ``wrap`` (``net = model``, then ``other = net``), each
        bound once and used after the wrap, with how the model is written there: taken again after the
        wrap, they name the wrapper. Not where the model is bound to another object in between (only
        moves, ``model = model.to(device)``, keep it the same): those are refused (DDP307)."""
        index = self.index
        scope = index.scope_of(wrap)
        found: list[tuple[str, str]] = []
        for ref in self.with_aliases(target, scope)[1:]:
            binds = list(index.assignments_to(ref))
            if len(binds) != 1 or index.after(binds[0], wrap):
                continue
            if not any(index.after(r, wrap) for r in index.mentions(scope, ref)):
                continue
            if not self._only_moved_between(target, binds[0], wrap):
                continue
            found.append((ref.path, index.spelled(target, scope)))
        return tuple(found)

    def _only_moved_between(self, target: Ref, start: cst.CSTNode, wrap: cst.BaseStatement) -> bool:
        """Whether every binding of ``target`` between ``start`` and the wrap keeps the same module
        (``model = model.to(device)``, ``.cuda()``, ``.float()``: a module's own methods that return it)."""
        index = self.index
        plain = list(index.assignments_to(target))
        scope = target.scope if not isinstance(target.scope, cst.ClassDef) else index.scope_of(wrap)
        for mention in index.mentions(scope, target):
            if (
                index.after(mention, start)
                and not index.after(mention, wrap)
                and binds(index, mention)
                and index.parent(index.parent(mention)) not in plain
            ):
                return False  # ``model, optimizer = build(model)``: bound to what the call gives
        for assign in plain:
            if not index.after(assign, start) or index.after(assign, wrap):
                continue
            value = assign.value
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
                if value.func.attr.value not in _RETURN_THE_MODULE:
                    return False
                value = value.func.value
            if (
                not isinstance(value, (cst.Name, cst.Attribute))
                or index.ref_of(value, index.scope_of(assign)) != target
            ):
                return False
        return True

    def with_aliases(self, ref: Ref, scope: Scope) -> list[Ref]:
        """``ref`` and every other name taken for it in ``scope``, transitively (``b = a``, then ``c = b``)."""
        found, todo = [ref], [ref]
        while todo and len(found) < 16:
            for read in self.index.mentions(scope, todo.pop()):
                alias = self.aliased_in(read)
                alias_ref = self.index.ref_of(alias, scope) if alias is not None else None
                if alias_ref is not None and alias_ref not in found:
                    found.append(alias_ref)
                    todo.append(alias_ref)
        return found

    def aliased_in(self, read: cst.BaseExpression) -> cst.Name | None:
        """``net`` in ``net = model``: another name for the model itself, which the wrap does not rebind."""
        parent = self.index.parent(read)
        if (
            isinstance(parent, cst.Assign)
            and parent.value is read
            and len(parent.targets) == 1
            and isinstance(target := parent.targets[0].target, cst.Name)
            and isinstance(read, (cst.Name, cst.Attribute))
            and target.value != self.index.module_of(read).code_for_node(read)
        ):
            return target
        return None

    def stored_in(self, read: cst.BaseExpression) -> cst.BaseExpression | None:
        """What keeps a second reference to the model: ``nets`` in ``nets = [net_a, net_b]``, ``self.net = net``."""
        index = self.index
        node: cst.CSTNode = read
        parent = index.parent(node)
        while isinstance(parent, (cst.Element, cst.DictElement, cst.List, cst.Tuple, cst.Set, cst.Dict)):
            if isinstance(parent, cst.DictElement) and parent.value is not node:
                return None
            node, parent = parent, index.parent(parent)
        holder = index.parent(parent)
        if (  # ``dict(model=model, ...)``, kept like a dict display
            isinstance(parent, cst.Arg)
            and parent.keyword is not None
            and isinstance(holder, cst.Call)
            and m.matches(holder.func, m.Name("dict"))
        ):
            node, parent = holder, index.parent(holder)
        call = index.parent(parent)
        if (  # nets.append(net)
            isinstance(parent, cst.Arg)
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in {"append", "extend", "insert"}
            and call.args[-1] is parent
        ):
            return call.func.value
        if node is read and not (
            isinstance(parent, cst.Assign)
            and any(isinstance(t.target, (cst.Attribute, cst.Subscript)) for t in parent.targets)
        ):
            return None
        if isinstance(parent, cst.Assign) and parent.value is node:
            target = parent.targets[0].target
            unpacked = unpacked_into(target, parent.value, read)
            if unpacked is not None:  # ``best, best_loss = model, inf``: a name, followed as the model's
                return None if isinstance(unpacked, cst.Name) else unpacked
            return target
        # ``nn.ModuleList([a, b])`` builds a new module; ``for net in [a, b]: net.to(device)`` prepares both
        return None

    def copied(self, read: cst.BaseExpression) -> bool:
        """``copy.deepcopy(model)``, ``other.load_state_dict(model.state_dict())``: another model takes this
        one's weights, which must be every rank's same weights (the wrap broadcasts rank 0's)."""
        index = self.index
        parent = index.parent(read)
        if isinstance(parent, cst.Attribute) and parent.value is read and parent.attr.value == "parameters":
            return self._parameters_copied(parent)
        if isinstance(parent, cst.Attribute) and parent.value is read and parent.attr.value == "state_dict":
            call = index.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                return False
            parent = index.parent(call)
            taker = index.parent(parent)
            return (
                isinstance(parent, cst.Arg)
                and isinstance(taker, cst.Call)
                and m.matches(taker.func, m.Attribute(attr=m.Name("load_state_dict")))
                and taker.args[0] is parent
            )
        call = index.parent(parent)
        return (
            isinstance(parent, cst.Arg)
            and isinstance(call, cst.Call)
            and index.is_call_to(call, DEEPCOPY)
            and call.args[0] is parent
        )

    def _parameters_copied(self, method: cst.Attribute) -> bool:
        """``for t, p in zip(target.parameters(), model.parameters()): t.data.copy_(p.data)``: a loop over
        the model's parameters beside another's that copies them into that other model (a target network
        started from the online one)."""
        index = self.index
        call = index.parent(method)
        arg = index.parent(call) if isinstance(call, cst.Call) and call.func is method else None
        zipped = index.parent(arg) if isinstance(arg, cst.Arg) else None
        loop = index.parent(zipped) if isinstance(zipped, cst.Call) and m.matches(zipped.func, m.Name("zip")) else None
        if not (isinstance(loop, cst.For) and loop.iter is zipped and isinstance(loop.target, cst.Tuple)):
            return False
        return any(
            (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("copy_", "set_")
            )
            or (
                isinstance(node, cst.Assign)
                and any(m.matches(t.target, m.Attribute(attr=m.Name("data"))) for t in node.targets)
            )
            for node in index.walk(loop.body)
        )

    def runs_model(self, read: cst.BaseExpression) -> bool:
        parent = self.index.parent(read)
        if isinstance(parent, cst.Call) and parent.func is read:
            return True
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            return isinstance(call, cst.Call) and self.index.resolve_callee(call, self.index.scope_of(call)) is not None
        return False

    def parts_run_by(self, read: cst.BaseExpression, depth: int = 0) -> list[cst.Attribute] | None:
        """``embed(x, model)`` whose function only reads attributes of its parameter (``model.emb(x)``): handed
        to the program's function, the model itself never runs there, only its parts may. The attributes read
        (through the functions it hands the model on to); None where the model may run or go elsewhere."""
        index = self.index
        parent = index.parent(read)
        parameter = index.parameter_of(parent) if isinstance(parent, cst.Arg) and depth <= 3 else None
        if parameter is None or not isinstance(function := parameter.scope, cst.FunctionDef):
            return None
        if function.name.value == "__init__":
            return None
        found: list[cst.Attribute] = []
        for inner in index.mentions(function, parameter):
            attribute = index.parent(inner)
            if isinstance(attribute, cst.Param):
                continue
            if isinstance(attribute, cst.Attribute) and attribute.value is inner:
                found.append(attribute)
                continue
            deeper = self.parts_run_by(inner, depth + 1)
            if deeper is None:
                return None
            found += deeper
        return found or None

    def only_prepares(self, read: cst.BaseExpression, depth: int = 0) -> bool:
        """``initialize_weights(model)``: the model handed to a function of the program that only sets
        it up (changes its weights in place, loads or freezes them): the function neither runs the model
        nor trains, keeps no reference to it, and hands it on only to functions like itself."""
        index = self.index
        parent = index.parent(read)
        call = index.parent(parent) if isinstance(parent, cst.Arg) else None
        if not isinstance(call, cst.Call) or not isinstance(parent, cst.Arg) or depth > 3:
            return False
        callee = index.resolve_callee(call, index.scope_of(call))
        if callee is None or callee[0].name.value == "__init__" or index.trains(callee[0].body):
            return False
        function, skipped = callee
        if parent.keyword is not None:
            name: str | None = parent.keyword.value
        else:
            at = call.args.index(parent)
            if any(a.star or a.keyword is not None for a in call.args[:at]):
                return False
            names = parameter_names(function)[skipped:]
            name = names[at] if at < len(names) else None
        if name is None or name not in parameter_names(function):
            return False
        for inner in index.mentions(function, Ref(function, name)):
            if self.stored_in(inner) is not None:
                return False
            if self.runs_model(inner) and not self.only_prepares(inner, depth + 1):
                return False
        return True

    def wrapper_reads(self, target: Ref, wrap: cst.BaseStatement) -> Iterator[cst.BaseExpression]:
        """Reads of the model after it is wrapped that the wrapper does not answer for the module."""
        return (read for read in self.reads_after_wrap(target, wrap) if self.needs_module(read))

    def reads_after_wrap(self, target: Ref, wrap: cst.BaseStatement) -> Iterator[cst.BaseExpression]:
        """Every read of the wrapped model: of its own name after the wrap, and wherever it flows from there."""
        index = self.index
        reads = self._reads_from_wrap(target, wrap)
        plain = self._built_anew(target, wrap, [read for _, read in reads])
        elsewhere = self._field_built_anew(target, wrap)
        for ref, read in reads:
            order = index.order[read]
            if ref is target and any(start < order <= (index.last[end] if end else inf) for start, end in plain):
                continue
            if ref is target and any(
                index.scope_of(a) is index.scope_of(read) and index.after(read, a) for a in elsewhere
            ):
                continue  # ``self.model = Net()`` then ``self.model.load_state_dict(...)`` in ``load_model()``
            yield read

    def _field_built_anew(self, target: Ref, wrap: cst.BaseStatement) -> list[cst.Assign]:
        """``self.model = Net()`` in another method than the wrap's (``load_model()`` for evaluation): a
        new, plain model in that field from there on."""
        index = self.index
        if not (isinstance(target.scope, cst.ClassDef) and target.path.startswith("self.")):
            return []
        lineage = index.lineage(target)
        # a method that builds an optimizer too builds a model to train (a subclass's ``build_model()``)
        training = {index.scope_of(optimizer) for optimizer in self.trained.optimizers()}
        return [
            a
            for a in index.assignments_to(target)
            if (scope := index.scope_of(a)) is not index.scope_of(wrap)
            and scope not in training
            and not index.inside(wrap, scope)
            and isinstance(a.value, cst.Call)
            and not any(index.mentions(a.value, ref) for ref in lineage)
        ]

    def wrapped_again(self, target: Ref, wrap: cst.BaseStatement) -> list[cst.BaseStatement]:
        """The statements after which a model built anew after training is wrapped again (see ``_built_anew``)."""
        reads = [read for _, read in self._reads_from_wrap(target, wrap)]
        return [end for _, end in self._built_anew(target, wrap, reads) if end is not None]

    def _reads_from_wrap(self, target: Ref, wrap: cst.BaseStatement) -> list[tuple[Ref, cst.BaseExpression]]:
        """Each read of the model from the wrap on, with the place it reads, before any rebinding counts."""
        return self._followed_from_wrap(target, wrap)[1]

    def _followed_from_wrap(
        self, target: Ref, wrap: cst.BaseStatement
    ) -> tuple[set[Ref], list[tuple[Ref, cst.BaseExpression]]]:
        """The places the model reaches from the wrap on, and each read of it there (found once)."""
        known = self._from_wrap.get((target, wrap))
        if known is not None:
            return known
        index = self.index
        wrap_scope = index.scope_of(wrap)

        def after_wrap(node: cst.CSTNode, depth: int = 0) -> bool:
            scope = index.scope_of(node)
            if scope is not wrap_scope and not index.inside(node, wrap_scope):
                return True
            if index.after(node, wrap):
                return True
            # a function defined before the wrap runs after it where it is called after it
            return (
                isinstance(scope, cst.FunctionDef)
                and scope is not wrap_scope
                and depth < 4
                and any(after_wrap(call, depth + 1) for call in index.callers(scope))
            )

        wrapped = {target}
        queue = [target]
        while queue:
            ref = queue.pop()
            for flow in index.flows_from(ref):
                if self._unwraps_itself(flow.dst):
                    continue  # it gets ``model.module`` (see _needs_module)
                if flow.dst not in wrapped and (ref is not target or after_wrap(flow.stmt)):
                    wrapped.add(flow.dst)
                    queue.append(flow.dst)
        reads = [
            (ref, read)
            for ref in sorted(wrapped, key=lambda r: r.path)
            for read in (
                *(read for scope in index.scopes_reading(ref) for read in index.mentions(scope, ref)),
                *self._through_instances(ref),
            )
            if ref is not target or after_wrap(read)
        ]
        self._from_wrap[(target, wrap)] = wrapped, reads
        return wrapped, reads

    def handed_plain(self, target: Ref, wrap: cst.BaseStatement) -> frozenset[Ref]:
        """The places the wrapped model reaches that may hold a plain model too, and so get ``.module`` only
        where they hold the wrapper: ``best_model``, the model itself until a better epoch keeps a deep copy
        of it, and ``evaluate(m)`` handed either; a helper handed the model and, by another call, an EMA copy."""
        index = self.index
        wrapped = self._followed_from_wrap(target, wrap)[0]

        # the program's other trained models are wrapped too (``embeddings(encoder)``, ``embeddings(wide)``);
        # this one only from its wrap on (``best = model`` before it holds the plain model)
        own = index.downstream(target)
        others = [r for r in self.trained.all_trained() if r not in own and target not in index.downstream(r)]
        trained = wrapped.union(*(index.downstream(ref) for ref in others))

        def wrapper(value: cst.BaseExpression | None) -> bool:
            return value is not None and index.carried_ref(value, index.scope_of(value)) in trained

        # a field that another method fills with a new, plain model holds either from then on
        mixed: set[Ref] = {target} if self._field_built_anew(target, wrap) else set()
        for ref in sorted(wrapped - {target}, key=lambda r: r.path):
            if isinstance(ref.scope, cst.FunctionDef) and ref.path in parameter_names(ref.scope):
                given = passed_values(index, ref) or []
            elif ref.path.startswith("self.") or isinstance(ref.scope, cst.ClassDef):
                continue  # an attribute: the objects holding it are not followed here
            else:
                # a value the program's own function returns arrives by a flow at its assignment
                arrived = {flow.stmt for flow in index.flows_into(ref) if flow.src in trained}
                given = [
                    value
                    for node, value in (*index.values_assigned(ref), *index.unpacked_values(ref))
                    if node not in arrived and index.parent(node) not in arrived
                ]
            if not all(wrapper(value) for value in given):
                mixed.add(ref)
        queue = list(mixed)
        while queue:
            for flow in index.flows_from(queue.pop()):
                if flow.dst in wrapped and flow.dst not in mixed and flow.dst is not target:
                    mixed.add(flow.dst)
                    queue.append(flow.dst)
        return frozenset(mixed)

    def reads_of(self, target: Ref, wrap: cst.BaseStatement, places: frozenset[Ref]) -> set[cst.BaseExpression]:
        """The reads (from the wrap on) of the model through ``places``."""
        return {read for ref, read in self._reads_from_wrap(target, wrap) if ref in places}

    def _through_instances(self, ref: Ref) -> Iterator[cst.Attribute]:
        """``trainer.model`` after ``trainer = Trainer(model, ...)`` in the same function: the attribute
        ``self.model`` of the program's class, read through an instance of it."""
        index = self.index
        cls = ref.scope
        if not (isinstance(cls, cst.ClassDef) and ref.path.startswith("self.")):
            return
        for attribute in index.attributes.get(ref.path[5:], ()):
            scope = index.scope_of(attribute)
            holder = index.carried_ref(attribute.value, scope) if isinstance(attribute.value, cst.Name) else None
            if holder is None or holder.scope is not scope:
                continue
            held = (*index.values_assigned(holder), *index.unpacked_values(holder))  # ``loader, trainer = build()``
            built = [index.classes_built(value) for _, value in held if isinstance(value, (cst.Call, cst.Name))]
            if built and all(classes == [cls] for classes in built):
                yield attribute

    def _built_anew(
        self, target: Ref, wrap: cst.BaseStatement, reads: list[cst.BaseExpression]
    ) -> list[tuple[int, cst.BaseStatement | None]]:
        """``model = Net()`` again after training: a new, plain model from there on (in source order).

        Each such rebinding, with the statement after which the new model is wrapped again, where some
        call after it runs a function of the program that reads the model as the wrapped one
        (``evaluate(test_data)`` with ``model.module.init_hidden(...)`` inside), or None: the rebinding
        itself, or the last statement right after it in its block that prepares the new model
        (``model.load_state_dict(...)``, ``model.to(device)``). In its own block: a reload under
        ``if stalled:`` in the epoch loop is wrapped there, and the training that follows it trains the
        wrapper.
        """
        index = self.index
        wrap_scope = index.scope_of(wrap)
        passed_on = index.downstream(target) - {target}  # ``model = train(model)`` hands the same model back
        rebound: list[cst.CSTNode] = [
            a
            for a in index.assignments_to(target)
            if index.scope_of(a) is wrap_scope
            and index.after(a, wrap)
            and index.carried_ref(a.value, wrap_scope) != target
            and not any(
                flow.src in passed_on for flow in index.flows_into(target) if flow.stmt is index.statement_of(a)
            )
        ]
        # ``model_load(path)`` whose ``global model`` rebinds it to what it loads: the call is the rebinding
        rebound += [
            index.statement_of(c)
            for c in index.calls
            if index.scope_of(c) is wrap_scope
            and index.after(c, wrap)
            and (callee := index.resolve_callee(c, wrap_scope)) is not None
            and _rebinds_global(index, callee[0], target)
        ]
        rebound.sort(key=index.order.__getitem__)
        if not rebound:
            return []
        # functions that read the model as the wrapped one (``.module``)
        readers = {
            scope
            for read in reads
            if self.needs_module(read) and isinstance(scope := index.scope_of(read), cst.FunctionDef)
        }
        spans: list[tuple[int, cst.BaseStatement | None]] = []
        for assign in rebound:
            calls = (
                c
                for c in index.calls
                if index.scope_of(c) is wrap_scope
                and index.starts_after(c, assign)
                and (callee := index.resolve_callee(c, wrap_scope)) is not None
                and callee[0] in readers
            )
            first = min(calls, key=lambda c: index.order[c], default=None)
            spans.append((index.order[assign], self._prepared_after(target, assign) if first else None))
        return spans

    def _prepared_after(self, target: Ref, assign: cst.CSTNode) -> cst.BaseStatement:
        """The statement of ``assign``, or the last of those right after it in its block that only move the
        model, load its weights or hand it to a function that only sets it up."""
        index = self.index
        last: cst.BaseStatement = index.statement_of(assign)
        while True:
            block = index.parent(last)
            siblings = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else [last]
            for stmt in siblings[siblings.index(last) + 1 :]:
                reads = index.mentions(stmt, target)
                if not reads or index.trains(stmt) or not all(self._prepares(read) for read in reads):
                    return last
                last = stmt
            owner = index.parent(block)
            if not isinstance(owner, cst.With):
                return last
            last = owner  # ``with open(path) as f: model = torch.load(f)``: ready after the ``with``

    def _prepares(self, read: cst.BaseExpression) -> bool:
        """``model.to(device)``, ``model.load_state_dict(state)``, ``model = model.cuda()``, ``init(model)``,
        ``model.rnn.flatten_parameters()`` on a line of its own."""
        index = self.index
        node: cst.CSTNode = read
        parent = index.parent(node)
        while isinstance(parent, cst.Attribute) and parent.value is node:
            call = index.parent(parent)
            if isinstance(call, cst.Call) and call.func is parent:
                if parent.attr.value in ("to", "cuda", "cpu", "load_state_dict", "float", "half", "double"):
                    return True
                return node is not read and isinstance(index.parent(call), cst.Expr)  # a part's own method
            node, parent = parent, call
        return self.only_prepares(read)

    def _named_by_string(self, arg: cst.Arg) -> bool:
        """The object of ``hasattr``, ``getattr``, ``setattr`` or ``delattr`` with a constant name that the
        wrapper does not have itself (not ``"module"``, ``"parameters"``, ...)."""
        call = self.index.parent(arg)
        if not (
            isinstance(call, cst.Call)
            and len(call.args) >= 2
            and call.args[0] is arg
            and self.index.is_call_to(call, _BY_NAME)
            and isinstance(name := call.args[1].value, cst.SimpleString)
        ):
            return False
        value = name.evaluated_value
        return isinstance(value, str) and value not in torch_api.WRAPPER_SAFE_ATTRIBUTES

    def _guarded_by_hasattr(self, attribute: cst.Attribute) -> bool:
        """``model.X if hasattr(model, "X") else model``: the script copes with a missing ``X`` itself.

        ``X`` may not be an attribute of the module at all (a wrapper's ``module``, or a typo that a
        single-GPU run never reaches); rewriting it to ``model.module.X`` would invent a name.
        """
        if not isinstance(attribute.value, cst.Name):
            return False
        receiver, name = attribute.value.value, attribute.attr.value
        if name not in torch_api.WRAPPER_SAFE_ATTRIBUTES:
            return False  # the test asks the module too (``_named_by_string``): the read follows it
        for ancestor in self.index.ancestors(attribute):
            test = ancestor.test if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) else None
            if test is not None and _hasattr_test(test, receiver, name):
                return True
            if isinstance(ancestor, cst.BooleanOperation) and _hasattr_test(ancestor.left, receiver, name):
                return True
        return False

    def _unwraps_itself(self, param: Ref) -> bool:
        """A parameter the function tests with ``hasattr(model, ...)`` and never runs: it expects a plain module.
        A function that trains keeps the wrapper whatever it tests (``model.forward(x)`` there, then
        ``model.module if hasattr(model, "module") else model`` to save: its forward must go through DDP)."""
        function = param.scope
        if not isinstance(function, cst.FunctionDef) or param.path.startswith("self."):
            return False
        calls = [node for node in self.index.walk(function.body) if type(node) is cst.Call]
        hasattr_test = m.Call(func=m.Name("hasattr"), args=[m.Arg(m.Name(param.path)), m.Arg()])
        tested = any(m.matches(call, hasattr_test) for call in calls)
        runs = any(
            m.matches(call.func, m.Name(param.path) | m.Attribute(value=m.Name(param.path), attr=m.Name("forward")))
            for call in calls
        )
        return tested and not runs and not self.index.trains(function.body)

    def needs_module(self, read: cst.BaseExpression) -> bool:
        if self._unwrapped_before(read):
            return False
        parent = self.index.parent(read)
        if isinstance(parent, cst.IfExp) and read is not parent.test:  # ``(model if c else models[0]).state_dict()``
            return self.needs_module(parent)
        if isinstance(parent, cst.Subscript) and parent.value is read:  # model[0] of an nn.Sequential
            return True
        if isinstance(parent, cst.Attribute) and parent.value is read:
            return parent.attr.value not in torch_api.WRAPPER_SAFE_ATTRIBUTES and not self._guarded_by_hasattr(parent)
        if isinstance(parent, (cst.DictElement, cst.Element)) or (
            isinstance(parent, cst.Assign) and isinstance(parent.targets[0].target, cst.Subscript)
        ):  # torch.save({"model": model, ...}, f), also through a name: checkpoint["model"] = model
            return checkpoints.saved(self.index, read)
        if isinstance(parent, cst.Arg) and self._named_by_string(parent):
            return True  # hasattr(model, "block") asks the module, as model.block reads it
        if isinstance(parent, cst.Arg) and self._class_asked(parent):
            return True  # isinstance(model, LatentODE) asks the module's class, never the wrapper's
        if isinstance(parent, cst.Arg) and self._handed_to_its_own_method(read, parent):
            return True  # model.serialize(model, epoch): a method of the module, written for the module
        if isinstance(parent, cst.Arg) and (param := self.index.parameter_of(parent)) is not None:
            return self._unwraps_itself(param)  # unwrap(model) that tests hasattr(model, ...): give it the module
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            # torch.save(model, f); an EMA or teacher copy: copy.deepcopy(model) copies the module, not the wrapper
            return (
                isinstance(call, cst.Call)
                and self.index.is_call_to(
                    call, torch_api.SAVE | torch_api.PICKLE_DUMPS | DEEPCOPY | torch_api.EXPORT_MODEL
                )
                and call.args[0] is parent
            ) or checkpoints.saved(self.index, read)  # torch.save(dict(model=model), f)
        return False

    def _handed_to_its_own_method(self, read: cst.BaseExpression, arg: cst.Arg) -> bool:
        """``self.model.serialize(self.model, ...)``: the model handed to one of its own methods (a static one,
        called through the model), which the wrapper does not answer for."""
        index = self.index
        call = index.parent(arg)
        func = call.func if isinstance(call, cst.Call) else None
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value not in torch_api.WRAPPER_SAFE_ATTRIBUTES
            and dotted(func.value) is not None
            and dotted(func.value) == dotted(read)
            and isinstance(call, cst.Call)
            and index.resolve_callee(call, index.scope_of(call)) is None  # (else its reads inside are followed)
        ):
            return False
        # only where no method of that name runs the model it is handed (a training step must go through DDP)
        methods = [
            f
            for (owner, name), f in index.functions.items()
            if name == func.attr.value and isinstance(owner, cst.ClassDef)
        ]
        return bool(methods) and not any(self._runs_a_parameter(f) for f in methods)

    def _runs_a_parameter(self, function: cst.FunctionDef) -> bool:
        """Whether ``function`` calls one of its parameters (``net(index)``) or runs a backward pass."""
        params = set(parameter_names(function))
        return any(
            isinstance(node, cst.Call)
            and ((isinstance(node.func, cst.Name) and node.func.value in params) or is_backward(node))
            for node in self.index.walk(function.body)
        )

    def _class_asked(self, arg: cst.Arg) -> bool:
        """``isinstance(model, Net)``: the model as the first argument of ``isinstance`` asked about classes of
        its own, not about a wrapper (``nn.DataParallel``, DDP) or ``nn.Module``, which the wrapper is too."""
        call = self.index.parent(arg)
        if not (
            isinstance(call, cst.Call)
            and len(call.args) == 2
            and call.args[0] is arg
            and "builtins.isinstance" in self.index.qualified_names(call.func)
        ):
            return False
        classes = call.args[1].value
        named = [e.value for e in classes.elements] if isinstance(classes, cst.Tuple) else [classes]
        wrappers = torch_api.DATA_PARALLEL | torch_api.NN_MODULE | _DDP_CLASSES
        return all(not (self.index.qualified_names(c) & wrappers) and not m.matches(c, m.Name("DDP")) for c in named)

    def _unwrapped_before(self, read: cst.BaseExpression) -> bool:
        """``model = model.module`` (under ``if isinstance(model, DDP):`` or not) earlier in the function:
        the name holds the module itself from there on."""
        if not isinstance(read, cst.Name):
            return False
        index = self.index
        scope = index.scope_of(read)
        ref = index.ref_of(read, scope)
        if ref is None or ref.scope is not scope:
            return False
        stmt = index.statement_of(read)
        unwrapping = m.Attribute(value=m.Name(read.value), attr=m.Name("module"))
        return any(
            m.matches(value, unwrapping) and index.after(stmt, index.statement_of(assign))
            for assign, value in index.values_assigned(ref)
        )


_DDP_CLASSES = frozenset(
    {"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"}
)
_BY_NAME = frozenset({"builtins.hasattr", "builtins.getattr", "builtins.setattr", "builtins.delattr"})


def _hasattr_test(test: cst.BaseExpression, receiver: str, attribute: str) -> bool:
    """Whether ``test`` contains ``hasattr(<receiver>, "<attribute>")``."""
    pattern = m.Call(
        func=m.Name("hasattr"),
        args=[m.Arg(m.Name(receiver)), m.Arg(m.SimpleString(f'"{attribute}"') | m.SimpleString(f"'{attribute}'"))],
    )
    return bool(m.findall(test, pattern))


def _rebinds_global(index: Index, function: cst.FunctionDef, target: Ref) -> bool:
    """Whether ``function`` declares the module-level ``target`` ``global`` and assigns it (``global model``, then
    ``model, optimizer = torch.load(f)``): a call of it puts another object under the model's name."""
    if not isinstance(target.scope, cst.Module) or index.module_of(function) is not target.scope:
        return False
    name = target.path
    declared = any(
        isinstance(node, cst.Global) and any(n.name.value == name for n in node.names)
        for node in index.walk(function.body)
    )
    return declared and any(
        isinstance(node, cst.Name) and node.value == name and index.stored(node) and index.scope_of(node) is function
        for node in index.walk(function.body)
    )
