"""Optimizers that steer by the loss: every rank sees the same one.

``torch.optim.LBFGS`` calls its closure as often as the loss values tell it
(a change below ``tolerance_change`` ends the step; the strong-Wolfe line
search probes until the loss falls far enough). DDP averages the gradients,
but each rank's loss is its own: the ranks would then run the closure a
different number of times, and their gradient all-reduces stop pairing up (a
hang, or "Connection closed by peer"). Which closures those are, and whether
what they return varies between ranks, is the uniformity analysis's answer
(:mod:`ddpify.engine.uniformity.steering`). A loss that varies is averaged over
the ranks, so every rank decides alike::

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
from ddpify.engine.program import Program
from ddpify.engine.uniformity import steering
from ddpify.result import Options

UNFOLLOWED_CLOSURE = Code(
    "DDP313",
    Severity.ERROR,
    "closures",
    "an optimizer that steers by the loss (LBFGS) is given a closure ddpify cannot follow to its `return`",
    "define the closure with `def` next to the step, and return the loss from it",
)
CODES = (UNFOLLOWED_CLOSURE,)

HELPER = '''
def {helper}(loss):
    """The loss averaged over the ranks: an optimizer that steers by it (LBFGS) then takes the same steps on each."""
    {skip}total = torch.as_tensor(loss).detach().clone()
    {dist}.all_reduce(total)
    return total / {dist}.get_world_size()
'''


@dataclass(frozen=True)
class Facts:
    returned: tuple[cst.BaseExpression, ...]  # each per-rank loss a closure of such an optimizer returns


def find(program: Program) -> Facts:
    """The losses that decide how often a step runs the model, where the uniformity analysis says they vary."""
    index = program.index
    returned: list[cst.BaseExpression] = []
    for found in steering.steering_losses(index):
        if found.returned is None:
            program.report(
                found.closure,
                UNFOLLOWED_CLOSURE,
                f"`{index.module.code_for_node(found.closure)}` is the closure of an optimizer that steers by the "
                "loss (LBFGS); every rank must return the same loss from it, or the ranks take different steps: "
                "define it with `def` next to the step",
            )
            continue
        returned.extend(v for v in found.returned if steering.varies(index, v) and v not in returned)
    return Facts(tuple(returned))


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
