"""Small questions about syntax that every concern asks: names, arguments, imports, targets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

# the engine's own node classes count among libcst's (NODE_KINDS and the like are found below)
from ddpify.engine import annotated, one_line  # noqa: F401
from ddpify.modules import absolute_import


def _kinds(base: type) -> frozenset[type]:
    """``base`` and every class below it: ``type(node) in`` this set answers ``isinstance(node, base)``
    for libcst's nodes without ``ABCMeta.__instancecheck__``, a Python call on every test."""
    found: set[type] = {base}
    stack: list[type] = [base]
    while stack:
        below: list[type] = stack.pop().__subclasses__()
        for kind in below:
            if kind not in found:
                found.add(kind)
                stack.append(kind)
    return frozenset(found)


NODE_KINDS = _kinds(cst.CSTNode)
STATEMENT_KINDS = _kinds(cst.BaseStatement)
COMPOUND_KINDS = _kinds(cst.BaseCompoundStatement)


def dotted(expr: cst.CSTNode) -> str:
    """``torch.utils.data`` for that attribute chain; empty for anything that is not a plain dotted name
    (``f().x``, ``a[0].b``)."""
    kind = type(expr)  # not isinstance: every libcst class is an ABC, and this runs for every name read
    if kind is cst.Name:
        return cast(cst.Name, expr).value
    if kind is cst.Attribute:
        expr = cast(cst.Attribute, expr)
        inner = dotted(expr.value)
        return f"{inner}.{expr.attr.value}" if inner else ""
    return ""


def argument(call: cst.Call, name: str, position: int | None = None) -> cst.Arg | None:
    """The argument passed for the parameter ``name``: by keyword, or positionally at ``position``.

    A ``*args`` at or before ``position`` hides what is passed there: None.
    """
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    if position is None:
        return None
    for at, arg in enumerate(call.args):
        if arg.star or arg.keyword is not None:
            return None
        if at == position:
            return arg
    return None


def has_keyword(call: cst.Call, name: str) -> bool:
    return argument(call, name) is not None


def imported_names(node: cst.Import | cst.ImportFrom, package: str = "") -> Iterator[tuple[str, str]]:
    """``(local name, what it refers to)`` for each name an import binds.

    ``import torch.nn as nn`` -> ``("nn", "torch.nn")``; ``import torch.nn`` -> ``("torch", "torch")``;
    ``from torch.utils.data import DataLoader as DL`` -> ``("DL", "torch.utils.data.DataLoader")``.
    A relative import is resolved from ``package``, the package of the importing module;
    star imports bind nothing that can be resolved.
    """
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = alias.evaluated_name
            if alias.asname is not None:
                yield alias.evaluated_alias or full, full
            else:
                root = full.split(".")[0]
                yield root, root
        return
    base = relative_base(node, package)
    if base is None or isinstance(node.names, cst.ImportStar):
        return
    for alias in node.names:
        yield alias.evaluated_alias or alias.evaluated_name, f"{base}.{alias.evaluated_name}"


def relative_base(node: cst.ImportFrom, package: str) -> str | None:
    """The full name of the module ``node`` imports from: ``from ..data import x`` in package
    ``pkg.sub`` -> ``pkg.data``. None for a relative import that leaves ``package``."""
    return absolute_import(len(node.relative), dotted(node.module) if node.module is not None else "", package)


def assigned(target: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The single targets of an assignment target, tuples and lists unpacked."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from assigned(element.value)
    else:
        yield target


def unpacked_into(
    target: cst.BaseExpression, value: cst.BaseExpression, item: cst.CSTNode
) -> cst.BaseExpression | None:
    """Where ``a, b = x, y`` puts ``item``, one of the items of ``value``: the item of ``target`` at its
    position; None where the two are not flat sequences of one length (``nets = [a, b]``, a starred item)."""
    if not (
        isinstance(value, (cst.Tuple, cst.List))
        and isinstance(target, (cst.Tuple, cst.List))
        and len(value.elements) == len(target.elements)
        and not any(isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements))
    ):
        return None
    return next((into.value for each, into in zip(value.elements, target.elements) if each.value is item), None)


def single_target(node: cst.CSTNode | None) -> cst.BaseExpression | None:
    """What one assignment of a value binds: ``x`` of ``x = v`` and of the annotated ``x: T = v``
    (which Python runs alike); None for anything else (several targets, a bare annotation)."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        return node.targets[0].target
    if isinstance(node, cst.AnnAssign) and node.value is not None:
        return node.target
    return None


def straight_line(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of ``suite`` that run one after another on every pass: the body of each ``with``
    block and of each ``try`` block spliced in where it stands (``with open(log) as f:`` around a step,
    ``try: ... except KeyboardInterrupt:`` around the epochs), since they run in order unless
    something raises; handlers, ``else`` and ``finally`` blocks are left where they are."""
    if not isinstance(suite, cst.IndentedBlock):
        return []
    found: list[cst.BaseStatement] = []
    for statement in suite.body:
        if isinstance(statement, (cst.With, cst.Try)):
            found += straight_line(statement.body)
        else:
            found.append(statement)
    return found


def parameter_names(function: cst.FunctionDef) -> list[str]:
    """The parameters a call can fill by position, in order."""
    p = function.params
    return [param.name.value for param in (*p.posonly_params, *p.params)]


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and everything below it, in source order (for trees the index has not seen)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def is_name(expr: cst.BaseExpression, value: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == value
