"""What a value in the script can hold, where the script spells it out: the keys of a ``**kwargs`` dict."""

from __future__ import annotations

import libcst as cst

import ddpify.engine.match as m
from ddpify.engine.index import Index, Scope


def dict_keys(index: Index, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> frozenset[str] | None:
    """The keys a ``**kwargs`` dict can hold, from its literal definitions and updates; None if unknown."""
    if depth > 3:
        return None
    if isinstance(expr, cst.Dict):
        literal: set[str] = set()
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and (key := _string(element.key)) is not None:
                literal.add(key)
            elif isinstance(element, cst.StarredDictElement):
                inner = dict_keys(index, element.value, scope, depth + 1)
                if inner is None:
                    return None
                literal |= inner
            else:
                return None
        return frozenset(literal)
    if isinstance(expr, cst.IfExp):
        body, orelse = dict_keys(index, expr.body, scope, depth + 1), dict_keys(index, expr.orelse, scope, depth + 1)
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("dict")):
        names = [a.keyword.value for a in expr.args if a.keyword is not None]
        return frozenset(names) if len(names) == len(expr.args) else None
    ref = index.ref_of(expr, scope)
    if ref is None or index.flows_into(ref):
        return None
    keys: set[str] = set()
    assigned = False
    for assign, value in index.values_assigned(ref):
        found = dict_keys(index, value, index.scope_of(assign), depth + 1)
        if found is None:
            return None
        keys |= found
        assigned = True
    for read in index.mentions(ref.scope if not isinstance(ref.scope, cst.ClassDef) else index.module, ref):
        parent = index.parent(read)
        if isinstance(parent, cst.Attribute) and parent.value is read:
            call = index.parent(parent)
            if parent.attr.value == "update" and isinstance(call, cst.Call) and len(call.args) == 1:
                found = dict_keys(index, call.args[0].value, index.scope_of(call), depth + 1)
                if found is None:
                    return None
                keys |= found
            elif parent.attr.value not in {"get", "copy", "items", "keys", "values"}:
                return None
        elif isinstance(parent, cst.Subscript):
            subscript = parent.slice[0].slice if parent.slice else None
            if isinstance(index.parent(parent), cst.AssignTarget):
                key = _string(subscript.value) if isinstance(subscript, cst.Index) else None
                if key is None:
                    return None
                keys.add(key)
    return frozenset(keys) if assigned else None


def _string(expr: cst.BaseExpression) -> str | None:
    """The text of a plain string literal, or None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None
