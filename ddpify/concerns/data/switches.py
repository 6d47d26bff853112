"""Whether a call turns off the backward pass of the function it calls.

``run_epoch(net, loader, criterion, optimizer=None)`` trains when it is given an
optimizer and only evaluates when it is not: the backward pass runs under
``if optimizer is not None:`` (or ``if training:`` after ``training = optimizer
is not None``, ``if mode == "train":``...). A call that leaves the optimizer out
hands the function evaluation data. This reads the tests around each backward
pass with the call's arguments (and the parameters' defaults) as constants;
whatever it cannot evaluate counts as possibly training.
"""

from __future__ import annotations

import libcst as cst

from ddpify.engine.index import Index
from ddpify.engine.syntax import argument, parameter_names

_Unknown = object()  # a value that cannot be told from the call
_Value = object  # None, True, False, a string, a number, _Unknown, or _SOMETHING
_SOMETHING = object()  # a value that is certainly not None (a name or an object passed in)


def backward_switched_off(index: Index, function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether every backward pass of ``function`` (in its own body) is skipped when ``call`` runs it."""
    backwards = [
        c
        for c in index.walk(function.body)
        if isinstance(c, cst.Call)
        and isinstance(c.func, cst.Attribute)
        and c.func.attr.value == "backward"
        and index.scope_of(c) is function
    ]
    if not backwards:
        return False
    values = _Values(index, function, call)
    return all(values.skipped(backward) for backward in backwards)


class _Values:
    def __init__(self, index: Index, function: cst.FunctionDef, call: cst.Call) -> None:
        self.index = index
        self.function = function
        self.call = call
        callee = index.resolve_callee(call, index.scope_of(call))
        self.skipped_params = callee[1] if callee is not None else 0

    def skipped(self, node: cst.CSTNode) -> bool:
        """Whether an ``if`` around ``node`` (inside the function) takes the other branch."""
        child = node
        for ancestor in self.index.ancestors(node):
            if ancestor is self.function:
                return False
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                test = self.value(ancestor.test, 0)
                if test is not _Unknown and test is not _SOMETHING:
                    if ancestor.body is child and not test:
                        return True
                    if ancestor.body is not child and test:
                        return True
            child = ancestor
        return False

    def value(self, expr: cst.BaseExpression, depth: int) -> _Value:
        if depth > 4:
            return _Unknown
        if isinstance(expr, cst.Name):
            if expr.value in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[expr.value]
            return self._name(expr.value, depth)
        if isinstance(expr, cst.SimpleString):
            return expr.evaluated_value
        if isinstance(expr, cst.Integer):
            return int(expr.value)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.value(expr.expression, depth + 1)
            if inner is _SOMETHING:
                return _Unknown
            return _Unknown if inner is _Unknown else not inner
        if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
            return self._compare(expr, depth)
        if isinstance(expr, cst.BooleanOperation):
            left, right = self.value(expr.left, depth + 1), self.value(expr.right, depth + 1)
            known = [v for v in (left, right) if v is not _Unknown and v is not _SOMETHING]
            if isinstance(expr.operator, cst.And):
                if any(not v for v in known):
                    return False
                return True if len(known) == 2 else _Unknown
            if any(v for v in known):
                return True
            return False if len(known) == 2 else _Unknown
        return _Unknown

    def _compare(self, expr: cst.Comparison, depth: int) -> _Value:
        target = expr.comparisons[0]
        left, right = self.value(expr.left, depth + 1), self.value(target.comparator, depth + 1)
        operator = target.operator
        if isinstance(operator, (cst.Is, cst.IsNot)) and (left is None or right is None):
            other = right if left is None else left
            if other is _Unknown:
                return _Unknown
            same = other is None
            return same if isinstance(operator, cst.Is) else not same
        if _Unknown in (left, right) or _SOMETHING in (left, right):
            return _Unknown
        if isinstance(operator, cst.Equal):
            return left == right
        if isinstance(operator, cst.NotEqual):
            return left != right
        return _Unknown

    def _name(self, name: str, depth: int) -> _Value:
        """A parameter's value at the call, or a name the function binds once from such values."""
        params = self.function.params
        positional = parameter_names(self.function)
        if name in positional or name in {p.name.value for p in params.kwonly_params}:
            at = positional.index(name) - self.skipped_params if name in positional else None
            if at is not None and at < 0:
                return _Unknown  # self
            arg = argument(self.call, name, at)
            if arg is not None:
                if arg.star:
                    return _Unknown
                value = self.value(arg.value, depth + 1)
                return _SOMETHING if value is _Unknown and _not_none(arg.value) else value
            if any(a.star for a in self.call.args):
                return _Unknown
            param = next(
                p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name
            )
            return _Unknown if param.default is None else self._default(param.default)
        assignments = [
            n
            for n in self.index.walk(self.function.body)
            if isinstance(n, cst.Assign)
            and self.index.scope_of(n) is self.function
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in n.targets)
        ]
        bound = self.index.bound.get(self.function, set())
        if len(assignments) == 1 and name in bound:
            return self.value(assignments[0].value, depth + 1)
        return _Unknown

    def _default(self, default: cst.BaseExpression) -> _Value:
        if isinstance(default, cst.Name) and default.value in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[default.value]
        if isinstance(default, cst.SimpleString):
            return default.evaluated_value
        return _Unknown


def _not_none(expr: cst.BaseExpression) -> bool:
    """An argument that is an object, not a literal: a name other than None, an attribute, a call."""
    return isinstance(expr, (cst.Attribute, cst.Call)) or (isinstance(expr, cst.Name) and expr.value != "None")
