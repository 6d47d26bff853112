"""Models kept in a list, each trained by its own optimizer (an ensemble, one model per target).

A list of models is a list built by a comprehension (``nets = [Net().to(device) for _ in range(k)]``)
or filled by ``nets.append(...)`` in a loop. An optimizer trains one of its models when its
parameters come from a model taken out of the list: ``for net in nets``, ``zip(nets, opts)``,
``enumerate(nets)``, or ``nets[i]``. Every model in the list is then wrapped, once the list is
ready, by rebuilding it from the wrapped models::

    nets = [Net().to(device) for _ in range(3)]           nets = [Net().to(device) for _ in range(3)]
    opts = [SGD(net.parameters()) for net in nets]   ->   opts = [SGD(net.parameters()) for net in nets]
                                                          nets = [DDP(net) for net in nets]

A model taken out of the list after that is a wrapper: what is read through it other than a
forward call (``net.state_dict()``, ``nets[0].head``) goes to ``.module``, as for a single model.

This module only reads the script; :mod:`ddpify.concerns.model` decides where the wrap goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ddpify import torch_api
from ddpify.engine.index import Index, Ref

_COMPREHENSIONS = (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)
_FILLS = frozenset({"append", "extend", "insert"})


@dataclass(frozen=True)
class ModelList:
    """A list whose items are models: ``nets``, built at ``built`` (the statement that fills it last)."""

    ref: Ref
    built: cst.BaseStatement
    item: cst.BaseExpression  # how one model is built: ``Net().to(device)``; the name appended, for a filled list
    name: str  # the name each model is wrapped under in ``[DDP(<name>) for <name> in nets]``
    fills: tuple[cst.Call, ...] = ()  # ``nets.append(net)``, for a list filled in a loop
    members: tuple[cst.BaseExpression, ...] = ()  # the items of a list written out: ``[net_a, net_b]``


def taken_from(index: Index, receiver: cst.BaseExpression) -> ModelList | None:
    """The list of models that ``receiver`` (or the model it is part of) is taken from, if any.

    ``net`` in ``[SGD(net.parameters()) for net in nets]`` or ``for net, opt in zip(nets, opts)``,
    ``nets[i]`` in ``SGD(nets[i].parameters())``.
    """
    node = receiver
    while isinstance(node, cst.Attribute) and index.ref_of(node, index.scope_of(node)) is None:
        node = node.value
    if isinstance(node, cst.Subscript):
        return _built_in_place(model_list(index, node.value, "model"))
    if not isinstance(node, cst.Name):
        return None
    for target, iterated in _bindings(index, node):
        while isinstance(iterated, cst.Call) and iterated.args and index.is_call_to(iterated, torch_api.PROGRESS_BARS):
            iterated = iterated.args[0].value  # ``for net in tqdm(nets)``
        collection = _iterated(target, iterated, node.value)
        if collection is not None:
            return _built_in_place(model_list(index, collection, node.value))
        if any(isinstance(n, cst.Name) and n.value == node.value for n in index.walk(target)):
            return None  # bound by a loop over something else
    return None


def parts_of_one_model(index: Index, listed: ModelList) -> Ref | None:
    """The model whose parts a list written out holds (``[model.conv1, model.conv2]``), if it is one."""
    roots = set()
    for member in listed.members:
        if not isinstance(member, cst.Attribute):
            return None
        roots.add(index.root_ref(member.value, index.scope_of(member)))
    return roots.pop() if len(roots) == 1 else None


def _built_in_place(listed: ModelList | None) -> ModelList | None:
    """``listed`` unless it holds models that also have names of their own (``[net_a, net_b]``), which
    wrapping the list would leave unwrapped."""
    if listed is None or any(isinstance(member, cst.Name) for member in listed.members):
        return None
    return listed


def model_list(index: Index, expr: cst.BaseExpression, name: str) -> ModelList | None:
    """``expr`` as a list of models: built once by a comprehension or a list of calls, or filled in a loop."""
    scope = index.scope_of(expr)
    ref = index.ref_of(expr, scope)
    if ref is None:
        return None
    assignments = list(_assignments(index, ref))
    if len(assignments) != 1:
        return None
    built, value = assignments[0]
    if isinstance(value, cst.ListComp):
        return ModelList(ref, built, value.elt, name)
    if isinstance(value, cst.List) and value.elements and not any(e.value is expr for e in value.elements):
        # nets = [Net().to(device), Net().to(device)], or nets = [net_a, net_b]
        return ModelList(ref, built, value.elements[0].value, name, members=tuple(e.value for e in value.elements))
    if not (isinstance(value, cst.List) and not value.elements):
        return None
    # ``nets = []`` filled by ``nets.append(net)`` in a loop of the same block
    fills = [
        call
        for scope_ in index.scopes_reading(ref)
        for read in index.mentions(scope_, ref)
        if (call := _fill(index, read)) is not None
    ]
    if not fills:
        return None
    block = index.parent(built)
    last: cst.BaseStatement | None = None
    for call in fills:
        stmt: cst.CSTNode = index.statement_of(call)
        while index.parent(stmt) is not block:
            parent = index.parent(stmt)
            if parent is None or isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                return None  # filled somewhere else than where it is built
            stmt = parent
        if not (isinstance(stmt, (cst.For, cst.While)) and isinstance(call.args[-1].value, cst.Name)):
            return None
        if last is None or index.after(stmt, last):
            last = stmt
    if last is None:
        return None
    return ModelList(ref, last, fills[-1].args[-1].value, name, tuple(fills))


def _assignments(index: Index, ref: Ref) -> Iterator[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """The values ``ref`` is assigned: ``nets = []``, also ``nets, opts = [], []``."""
    for stmt in index.statements:
        for small in stmt.body:
            if not isinstance(small, cst.Assign):
                continue
            for target in small.targets:
                pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target.target, small.value)]
                if isinstance(target.target, cst.Tuple) and isinstance(small.value, cst.Tuple):
                    if len(target.target.elements) != len(small.value.elements):
                        continue
                    pairs = [(t.value, v.value) for t, v in zip(target.target.elements, small.value.elements)]
                for assigned, value in pairs:
                    if index.ref_of(assigned, index.scope_of(small)) == ref:
                        yield stmt, value


def item_reads(index: Index, lists: set[Ref], after: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    """Where a model is taken out of one of ``lists`` after ``after``: ``nets[0]``, ``net`` in ``for net in nets``."""
    for ref in lists:
        for scope in index.scopes_reading(ref):
            for read in index.mentions(scope, ref):
                if index.scope_of(read) is index.scope_of(after) and not index.after(read, after):
                    continue
                parent = index.parent(read)
                if isinstance(parent, cst.Subscript) and parent.value is read:
                    yield parent
                    continue
                yield from _loop_reads(index, read)


def _loop_reads(index: Index, read: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The loop variable's reads in ``for net in nets`` / ``zip(nets, opts)`` / ``enumerate(nets)`` over ``read``."""
    iterated: cst.CSTNode = read
    parent = index.parent(read)
    position: int | None = None
    if isinstance(parent, cst.Arg):
        call = index.parent(parent)
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)):
            return
        if call.func.value == "enumerate" and call.args[0] is parent:
            position = 1
        elif call.func.value == "zip":
            position = call.args.index(parent)
        else:
            return
        iterated, parent = call, index.parent(call)
    if not (isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is iterated):
        return
    target: cst.BaseExpression = parent.target
    if position is not None:
        if not isinstance(target, (cst.Tuple, cst.List)) or position >= len(target.elements):
            return
        target = target.elements[position].value
    if not isinstance(target, cst.Name):
        return
    ref = index.ref_of(target, index.scope_of(target))
    if ref is None:
        return
    if isinstance(parent, cst.For):
        yield from index.mentions(parent.body, ref)
        return
    comprehension = index.parent(parent)
    while isinstance(comprehension, cst.CompFor):
        comprehension = index.parent(comprehension)
    if comprehension is not None:
        yield from (r for r in index.mentions(comprehension, ref) if r is not target)


def _bindings(index: Index, node: cst.Name) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The (target, iterable) of every loop or comprehension around ``node``, innermost first."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.For) and not index.inside(node, ancestor.iter) and node is not ancestor.iter:
            yield ancestor.target, ancestor.iter
        elif isinstance(ancestor, _COMPREHENSIONS):
            fors: list[cst.CompFor] = []
            comp: cst.CompFor | None = ancestor.for_in
            while comp is not None:
                fors.append(comp)
                comp = comp.inner_for_in
            for comp in reversed(fors):
                if not index.inside(node, comp.iter) and node is not comp.iter:
                    yield comp.target, comp.iter
        elif isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return


def _iterated(target: cst.BaseExpression, iterated: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
    """What ``name`` is an item of, when ``for <target> in <iterated>`` binds it: ``nets`` in ``zip(nets, opts)``."""
    if isinstance(target, cst.Name):
        return iterated if target.value == name else None
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(iterated, cst.Call):
        return None
    names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
    if name not in names or not isinstance(iterated.func, cst.Name):
        return None
    position = names.index(name)
    args = [a.value for a in iterated.args if a.keyword is None and not a.star]
    if iterated.func.value == "enumerate" and len(names) == 2 and position == 1 and args:
        return args[0]
    if iterated.func.value == "zip" and len(args) == len(names):
        return args[position]
    return None


def _fill(index: Index, read: cst.BaseExpression) -> cst.Call | None:
    """``nets.append(net)`` (``extend``, ``insert``) on ``read``."""
    attribute = index.parent(read)
    call = index.parent(attribute)
    if (
        isinstance(attribute, cst.Attribute)
        and attribute.value is read
        and attribute.attr.value in _FILLS
        and isinstance(call, cst.Call)
        and call.func is attribute
        and call.args
    ):
        return call
    return None
