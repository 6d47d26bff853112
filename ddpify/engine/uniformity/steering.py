"""Optimizers that steer by the loss: values that decide how often a step runs the model.

``torch.optim.LBFGS`` calls its closure as often as the loss values tell it
(a change below ``tolerance_change`` ends the step; the strong-Wolfe line
search probes until the loss falls far enough). Each call is a forward pass
and, under DDP, a gradient all-reduce, so what the closure returns decides how
many collectives a step runs: it must be the same on every rank, like the trip
count of a training loop. A loss is each rank's own (its forward pass over its
own batch), so only a constant is uniform here.

:func:`steering_losses` finds each ``optimizer.step(closure)`` of such an
optimizer and what the closure returns, or that it cannot be followed to its
``return`` (an attribute, a ``functools.partial``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ddpify.engine.index import Index, Scope
from ddpify.engine.syntax import argument
from ddpify.engine.values import built_by, passed_values

# Optimizers whose step runs the closure a number of times that its loss values decide.
STEERED_BY_LOSS = frozenset({"torch.optim.LBFGS", "torch.optim.lbfgs.LBFGS"})


@dataclass(frozen=True)
class Steering:
    """``optimizer.step(closure)`` of an optimizer that steers by the loss."""

    closure: cst.BaseExpression
    returned: tuple[cst.BaseExpression, ...] | None  # None: the closure cannot be followed to its ``return``


def steering_losses(index: Index) -> Iterator[Steering]:
    """Each closure of an optimizer that steers by the loss, with what it returns, in source order."""
    for call in index.calls:
        closure = _closure_of_step(index, call)
        if closure is not None:
            returned = _returned(index, closure, index.scope_of(call))
            yield Steering(closure, tuple(returned) if returned else None)


def varies(index: Index, value: cst.BaseExpression) -> bool:
    """Whether a returned loss may differ between ranks: anything but a constant does."""
    return any(
        isinstance(node, cst.Call) or (isinstance(node, cst.Name) and node.value not in {"True", "False", "None"})
        for node in index.walk(value)
    )


def _closure_of_step(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """The closure in ``optimizer.step(closure)`` where ``optimizer`` is built by an LBFGS."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"):
        return None
    closure = argument(call, "closure", 0)
    if closure is None:
        return None
    ref = index.carried_ref(call.func.value, index.scope_of(call))
    if ref is None:
        return None
    # the optimizer as built: ``LBFGS(...)``, or what a helper returns, or what a caller hands in
    held = [value for _, value in index.values_assigned(ref)] + list(passed_values(index, ref) or ())
    built = [b for value in held for b in built_by(index, value) or (value,)]
    if not any(isinstance(value, cst.Call) and index.is_call_to(value, STEERED_BY_LOSS) for value in built):
        return None
    return closure.value


def _returned(index: Index, closure: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression] | None:
    """What ``closure`` returns: the body of a lambda, or each ``return`` value of a local ``def``."""
    if isinstance(closure, cst.Lambda):
        return [closure.body]
    if not isinstance(closure, cst.Name):
        return None
    current: Scope = scope
    while True:
        function = index.functions.get((current, closure.value))
        if function is not None:
            returns = [
                n for n in index.walk(function.body) if isinstance(n, cst.Return) and index.scope_of(n) is function
            ]
            return [r.value for r in returns if r.value is not None]
        if isinstance(current, cst.Module):
            return None
        current = index.scope_of(current)
