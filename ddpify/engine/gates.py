"""Paths that run only under one setting: the branch of ``if args.arch == "twin":`` and what only it reaches.

A program often trains in one of several ways picked by a flag (``--arch``,
``--gan_type``): each branch of an ``if`` on the flag builds its own model or
runs its own training function. Where one of those ways cannot be converted,
the others still can; :func:`gate_of` finds the one branch that every run of a
construct goes through, so that the conversion can stop that path at its
start instead of refusing the whole program.

A branch is a *setting's* branch when its ``if`` test is decided before the
path runs and the same on every pass: it calls nothing, and reads no name that
a loop around it assigns. A construct is reached only through such a branch
when it lies in the branch, or in a function whose every call (a method: in a
class whose every construction) is reached only through one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.index import Index
from ddpify.engine.syntax import assigned


@dataclass(frozen=True)
class Gate:
    """One branch of an ``if`` on a setting: ``chain`` is the outermost ``if`` of its ``elif`` chain."""

    branch: cst.BaseSuite
    test: cst.BaseExpression  # the test that selects the branch, or (``orelse``) that passes it over
    chain: cst.If
    orelse: bool = False


def gates_of(index: Index, node: cst.CSTNode, depth: int = 0) -> list[Gate] | None:
    """The setting's branches that every run of ``node`` goes through (one per way it is reached), or None
    when it may run on a path that no setting selects."""
    own = gate_in_function(index, node)
    if own is not None:
        return [own]
    scope = index.scope_of(node)
    if not isinstance(scope, cst.FunctionDef) or depth > 4:
        return None
    runs = _runs_of(index, scope)
    if not runs:
        return None
    gates: list[Gate] = []
    for run in runs:
        found = gates_of(index, run, depth + 1)
        if found is None:
            return None
        gates += [g for g in found if g not in gates]
    return gates


def branches(chain: cst.If) -> list[cst.BaseSuite]:
    """Every branch of ``chain`` and its ``elif``s, ``else`` last."""
    found: list[cst.BaseSuite] = []
    current: cst.If | cst.Else | None = chain
    while isinstance(current, cst.If):
        found.append(current.body)
        current = current.orelse
    if isinstance(current, cst.Else):
        found.append(current.body)
    return found


def gate_in_function(index: Index, node: cst.CSTNode) -> Gate | None:
    """The innermost setting's branch around ``node`` in its own function (or module)."""
    child: cst.CSTNode = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            if child is ancestor.body:
                if _is_setting(index, ancestor) and _has_alternative(index, ancestor):
                    return Gate(ancestor.body, ancestor.test, chain_of(index, ancestor))
            elif isinstance(child, cst.Else) and _is_setting(index, ancestor):
                return Gate(child.body, ancestor.test, chain_of(index, ancestor), orelse=True)
        child = ancestor
    return None


def _has_alternative(index: Index, stmt: cst.If) -> bool:
    return stmt.orelse is not None or isinstance(index.parent(stmt), cst.If) or passed_over_trains(index, stmt)


def passed_over_trains(index: Index, chain: cst.If) -> bool:
    """Whether a run that passes over ``chain`` (an ``if`` without ``else``) still trains: another statement of
    its block trains (``if args.loss == "wgan-gp":`` around a penalty step, beside the steps every run takes),
    or of a block around it in its function (``if n_gpus > 1: net = SplitDataParallel(net)`` inside ``if
    n_gpus > 0:``, with the training loop after the outer ``if``)."""
    if chain.orelse is not None:
        return False
    inner: cst.CSTNode | None = chain
    block = index.parent(chain)
    while isinstance(block, cst.IndentedBlock):
        if any(
            index.trains(stmt)
            for stmt in block.body
            if stmt is not inner and not isinstance(stmt, cst.FunctionDef | cst.ClassDef)
        ):
            return True
        inner = index.parent(block)  # the compound statement around the block
        if isinstance(inner, cst.Else | cst.ExceptHandler | cst.Finally):
            inner = index.parent(inner)
        if not isinstance(inner, cst.If | cst.For | cst.While | cst.With | cst.Try):
            return False
        block = index.parent(inner)
        while isinstance(block, cst.If | cst.Else):  # an ``elif``: the chain's own block holds it
            inner, block = block, index.parent(block)
    return False


def chain_of(index: Index, stmt: cst.If) -> cst.If:
    """The outermost ``if`` of the ``elif`` chain that ``stmt`` belongs to."""
    while isinstance(parent := index.parent(stmt), cst.If) and parent.orelse is stmt:
        stmt = parent
    return stmt


def _is_setting(index: Index, stmt: cst.If) -> bool:
    """Whether the test calls nothing and reads no name that a loop around the ``if`` assigns."""
    test = stmt.test
    if any(isinstance(n, (cst.Call, cst.Await, cst.NamedExpr)) for n in index.walk(test)):
        return False
    read = {n.value for n in index.walk(test) if isinstance(n, cst.Name)}
    for ancestor in index.ancestors(stmt):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(ancestor, (cst.For, cst.While)) and read & _names_bound_in(index, ancestor):
            return False
    return True


def _names_bound_in(index: Index, block: cst.CSTNode) -> set[str]:
    """The names that an assignment, a loop, a ``with ... as`` or a ``:=`` inside ``block`` writes."""
    targets: list[cst.BaseExpression] = []
    for node in index.walk(block):
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets.append(node.target)
        elif isinstance(node, cst.AsName):
            targets.append(cast(cst.BaseExpression, node.name))
    names: set[str] = set()
    for target in targets:
        for single in assigned(target):
            if isinstance(single, cst.StarredElement):
                single = single.value
            if isinstance(single, cst.Name):
                names.add(single.value)
    return names


def _runs_of(index: Index, function: cst.FunctionDef) -> list[cst.CSTNode]:
    """What runs ``function``: its calls, or for a method the constructions of its class; [] when it is also
    handed on as a value, or built where ddpify cannot see."""
    owner = index.parent(index.parent(function))  # FunctionDef -> IndentedBlock -> ClassDef
    if isinstance(owner, cst.ClassDef):
        if _subclassed(index, owner):
            return []  # a subclass's objects run it too
        built = [call for call in index.calls if index.local_class(call.func) is owner]
        named = [n for n in _names(index, owner.name.value) if n is not owner.name and not _super_of(index, n)]
        return list(built) if len(named) == len(built) else []
    calls = index.callers(function)
    named = [n for n in _names(index, function.name.value) if n is not function.name]
    return list(calls) if len(named) == len(calls) else []


def _super_of(index: Index, name: cst.Name) -> bool:
    """``super(Trainer, self)``: the class named only to reach its base, not used as a value."""
    arg = index.parent(name)
    call = index.parent(arg)
    return (
        isinstance(arg, cst.Arg)
        and isinstance(call, cst.Call)
        and m.matches(call.func, m.Name("super"))
        and call.args[0] is arg
    )


def _subclassed(index: Index, cls: cst.ClassDef) -> bool:
    name = cls.name.value
    return any(
        isinstance(n, cst.ClassDef)
        and any(isinstance(b, cst.Name) and b.value == name for base in n.bases for b in index.walk(base.value))
        for module in index.modules or [index.module]
        for n in index.walk(module)
    )


def _names(index: Index, name: str) -> list[cst.Name]:
    """Every ``Name`` (and attribute) spelled ``name`` in the program outside imports: a bare count that errs
    on the side of "also used as a value"."""
    return [
        n
        for module in index.modules or [index.module]
        for n in index.walk(module)
        if isinstance(n, cst.Name)
        and n.value == name
        and not any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in index.ancestors(n))
    ]
