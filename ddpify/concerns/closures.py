"""Optimizers that steer by the loss: every rank sees the same one.

``torch.optim.LBFGS`` calls its closure as often as the loss values tell it
(a change below ``tolerance_change`` ends the step; the strong-Wolfe line
search probes until the loss falls far enough). DDP averages the gradients,
but each rank's loss is its own: the ranks would then run the closure a
different number of times, and their gradient all-reduces stop pairing up (a
hang, or "Connection closed by peer"). The loss the closure returns is
averaged over the ranks instead, so every rank decides alike::

    def closure():                          def closure():
        optimizer.zero_grad()                   optimizer.zero_grad()
        loss = criterion(model(x), y)    ->     loss = criterion(model(x), y)
        loss.backward()                         loss.backward()
        return loss                             return mean_over_ranks(loss)

A closure that cannot be followed to its ``return`` (an attribute, a
``functools.partial``) is refused (DDP313).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument
from ddpify.result import Options

UNFOLLOWED_CLOSURE = Code(
    "DDP313",
    Severity.ERROR,
    "closures",
    "an optimizer that steers by the loss (LBFGS) is given a closure ddpify cannot follow to its `return`",
    "define the closure with `def` next to the step, and return the loss from it",
)
CODES = (UNFOLLOWED_CLOSURE,)

# Optimizers whose step runs the closure a number of times that its loss values decide.
STEERED_BY_LOSS = frozenset({"torch.optim.LBFGS", "torch.optim.lbfgs.LBFGS"})

HELPER = '''
def {helper}(loss):
    """The loss averaged over the ranks: an optimizer that steers by it (LBFGS) then takes the same steps on each."""
    {skip}total = torch.as_tensor(loss).detach().clone()
    {dist}.all_reduce(total)
    return total / {dist}.get_world_size()
'''


@dataclass(frozen=True)
class Facts:
    returned: tuple[cst.BaseExpression, ...]  # what each closure of such an optimizer returns


def find(program: Program) -> Facts:
    index = program.index
    returned: list[cst.BaseExpression] = []
    for call in index.calls:
        closure = _closure_of_step(index, call)
        if closure is None:
            continue
        values = _returned(index, closure, index.scope_of(call))
        if values is None:
            program.report(
                closure,
                UNFOLLOWED_CLOSURE,
                f"`{index.module.code_for_node(closure)}` is the closure of an optimizer that steers by the loss "
                "(LBFGS); every rank must return the same loss from it, or the ranks take different steps: define "
                "it with `def` next to the step",
            )
            continue
        returned.extend(v for v in values if v not in returned)
    return Facts(tuple(returned))


def _closure_of_step(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """The closure in ``optimizer.step(closure)`` where ``optimizer`` is built by an LBFGS."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"):
        return None
    closure = argument(call, "closure", 0)
    if closure is None:
        return None
    ref = index.carried_ref(call.func.value, index.scope_of(call))
    if ref is None or not any(
        isinstance(a.value, cst.Call) and index.is_call_to(a.value, STEERED_BY_LOSS) for a in index.assignments_to(ref)
    ):
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
            return [r.value for r in returns if r.value is not None] or None
        if isinstance(current, cst.Module):
            return None
        current = index.scope_of(current)


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    if not facts.returned:
        return
    dist = plan.names.dist
    helper = fresh("mean_over_ranks", plan.index.identifiers)
    forms = [
        cst.parse_module(HELPER.format(helper=helper, dist=dist, skip=skip)).body[0]
        for skip in ("", f"if not {dist}.is_initialized():\n        return loss\n    ")
    ]
    plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
    if "torch" not in plan.index.bound[plan.index.module]:
        plan.need_import("torch")
    for value in facts.returned:
        plan.replace(
            value, lambda node: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, node))])
        )
        plan.change(value, "the loss LBFGS steers by is averaged over the ranks, so that each takes the same steps")
