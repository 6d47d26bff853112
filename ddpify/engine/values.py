"""What a value in the script can hold, where the script spells it out: the keys of a ``**kwargs`` dict."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddpify.engine.index import Index, Scope


def dict_keys(index: Index, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> frozenset[str] | None:
    """The keys a ``**kwargs`` dict can hold, from its literal definitions and updates; None if unknown."""
    if depth > 3:
        return None
    if isinstance(expr, cst.Dict):
        keys = set()
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                keys.add(element.key.evaluated_value)
            elif isinstance(element, cst.StarredDictElement):
                inner = dict_keys(index, element.value, scope, depth + 1)
                if inner is None:
                    return None
                keys |= inner
            else:
                return None
        return frozenset(keys)
    if isinstance(expr, cst.IfExp):
        body, orelse = dict_keys(index, expr.body, scope, depth + 1), dict_keys(index, expr.orelse, scope, depth + 1)
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("dict")):
        if any(a.keyword is None for a in expr.args):
            return None
        return frozenset(a.keyword.value for a in expr.args)
    ref = index.ref_of(expr, scope)
    if ref is None or index.flows_into(ref):
        return None
    keys: set[str] = set()
    assigned = False
    for assign in index.assignments_to(ref):
        found = dict_keys(index, assign.value, index.scope_of(assign), depth + 1)
        if found is None:
            return None
        keys |= found
        assigned = True
    for read in index.mentions(ref.scope if not isinstance(ref.scope, cst.ClassDef) else index.module, ref, scope):
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
            element = parent.slice[0].slice if parent.slice else None
            if isinstance(index.parent(parent), cst.AssignTarget):
                if isinstance(element, cst.Index) and isinstance(element.value, cst.SimpleString):
                    keys.add(element.value.evaluated_value)
                else:
                    return None
    return frozenset(keys) if assigned else None
