"""Gradients written by hand are averaged over the ranks, as DDP averages those of ``backward()``.

DDP's hooks average what a backward pass through the wrapper leaves in
``.grad``. A gradient that the program computes itself with
``torch.autograd.grad`` and stores in ``.grad`` (a differentiable
architecture search stepping its architecture weights on the validation
loss, a meta-learner) comes from this rank's shard alone: each rank would
step on its own, and the replicas drift apart. The value stored is averaged
over the ranks first::

    (g,) = torch.autograd.grad(loss, [alpha])   (g,) = torch.autograd.grad(loss, [alpha])
    alpha.grad = g                        ->    alpha.grad = mean_gradient_over_ranks(g)

The same holds for ``p.grad.copy_(g)`` and ``p.grad.data = g``. A value that
is not computed from ``torch.autograd.grad`` (``p.grad = None``, a gradient
scaled after the backward pass) is left as it is: it is either no gradient or
one already averaged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns import model
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.syntax import dotted
from ddpify.result import Options

CODES = ()

HELPER = '''
def {helper}(grad):
    """A gradient computed by hand, averaged over the ranks as DDP averages those of backward()."""
{unset}    grad = grad.detach().clone()
    {dist}.all_reduce(grad)
    return grad / {dist}.get_world_size()
'''


@dataclass(frozen=True)
class Facts:
    stored: tuple[cst.BaseExpression, ...]  # each value computed by torch.autograd.grad and stored in a ``.grad``


def find(program: Program, models: model.Facts) -> Facts:
    """The values stored in a ``.grad`` that come from ``torch.autograd.grad``, where a model is wrapped."""
    if not models.models:
        return Facts(())
    index = program.index
    scopes = {index.scope_of(call) for call in index.calls if index.is_call_to(call, torch_api.AUTOGRAD_GRAD)}
    stored: list[cst.BaseExpression] = []
    for scope in sorted(scopes, key=lambda s: index.order.get(s, -1)):
        stored += [v for v in _stored_gradients(index, scope) if v not in stored]
    return Facts(tuple(sorted(stored, key=lambda v: index.order[v])))


def _stored_gradients(index: Index, scope: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    """In one function (or module), the values from ``torch.autograd.grad`` that go into a ``.grad``: through
    names assigned from its result and loop variables drawn from them (``for p, g in zip(params, grads)``)."""
    derived: set[str] = set()

    def carries(expr: cst.CSTNode) -> bool:
        return any(
            (isinstance(node, cst.Call) and index.is_call_to(node, torch_api.AUTOGRAD_GRAD))
            or (isinstance(node, cst.Name) and node.value in derived)
            for node in index.walk(expr)
        )

    nodes = [node for node in index.walk(scope) if index.scope_of(node) is scope]
    for _ in range(2):  # twice: a name a loop's body derives feeds the same loop's next pass
        for node in nodes:
            source, targets = _binding(node)
            if source is not None and carries(source):
                derived.update(name for target in targets for name in _bound(target))
    derived.discard("")
    for node in nodes:
        if isinstance(node, cst.Assign) and any(_is_grad(t.target) for t in node.targets) and carries(node.value):
            yield node.value
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "copy_"
            and _is_grad(node.func.value)
            and node.args
            and carries(node.args[0].value)
        ):
            yield node.args[0].value


def _binding(node: cst.CSTNode) -> tuple[cst.BaseExpression | None, list[cst.BaseExpression]]:
    """What a statement binds names from, and the targets it binds (a loop binds its variables from what it
    iterates)."""
    if isinstance(node, cst.Assign):
        return node.value, [t.target for t in node.targets]
    if isinstance(node, cst.AugAssign | cst.AnnAssign):
        return node.value, [node.target]
    if isinstance(node, cst.For):
        return node.iter, [node.target]
    return None, []


def _is_grad(target: cst.BaseExpression) -> bool:
    """``p.grad`` or ``p.grad.data``."""
    if isinstance(target, cst.Attribute) and target.attr.value == "data":
        target = target.value
    return isinstance(target, cst.Attribute) and target.attr.value == "grad"


def _names(target: cst.BaseExpression) -> str:
    return dotted(target) or ""


def _bound(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Tuple | cst.List):
        return {name for element in target.elements for name in _bound(element.value)}
    return {_names(target)}


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    if not facts.stored:
        return
    dist = plan.names.dist
    helper = fresh("mean_gradient_over_ranks", plan.index.identifiers)
    forms = [
        cst.parse_module(HELPER.format(helper=helper, dist=dist, unset=unset)).body[0]
        for unset in ("", f"    if not {dist}.is_initialized():\n        return grad\n")
    ]
    plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
    for value in facts.stored:
        plan.replace(
            value, lambda node: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, node))])
        )
        plan.change(
            value,
            "a gradient computed with torch.autograd.grad is averaged over the ranks before it is stored, "
            "as DDP averages those of backward()",
        )
