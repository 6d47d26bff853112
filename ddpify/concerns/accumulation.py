"""Accumulation: with gradient accumulation, gradients are all-reduced only on the updating micro-step.

A loop that runs ``loss.backward()`` every micro-step and ``optimizer.step()``
under ``if (i + 1) % k == 0`` would all-reduce gradients k times per update
under DDP. The all-reduce of the other micro-steps is skipped by setting DDP's
``require_backward_grad_sync`` before the forward pass, which is what
``no_sync()`` does, without re-indenting the step::

    for i, (x, y) in enumerate(loader):          for i, (x, y) in enumerate(loader):
                                                     # All-reduce gradients only in the micro-step ...
                                            ->       model.require_backward_grad_sync = (i + 1) % k == 0
        loss = loss_fn(model(x), y) / k              loss = loss_fn(model(x), y) / k
        loss.backward()                              loss.backward()
        if (i + 1) % k == 0:                         if (i + 1) % k == 0:
            optimizer.step()                             optimizer.step()

Limits: the step condition must be pure arithmetic on values known before the
forward pass (it is evaluated earlier); otherwise the loop is left as it is
and every micro-step all-reduces, which is slower but still correct.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ddpify.concerns import model
from ddpify.diagnostics import Code
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program
from ddpify.engine.syntax import walk
from ddpify.result import Options

CODES: tuple[Code, ...] = ()


@dataclass(frozen=True)
class Accumulation:
    """Gradient accumulation: several backward passes per optimizer step."""

    forward: cst.BaseStatement  # the first statement of the micro-step that runs the model
    condition: cst.BaseExpression  # true on the micro-step that ends with ``optimizer.step()``
    models: tuple[str, ...]  # the wrapped models the micro-step runs


@dataclass(frozen=True)
class Facts:
    accumulations: tuple[Accumulation, ...]


def find(program: Program, models: model.Facts) -> Facts:
    return Facts(tuple(_accumulations(program.index, models)))


def _accumulations(index: Index, models: model.Facts) -> Iterator[Accumulation]:
    """``loss.backward()`` every micro-step, ``optimizer.step()`` under ``if (i + 1) % k == 0``."""
    optimizer_refs: set[Ref] = set()
    for optimizer in models.optimizers:
        parent = index.parent(optimizer)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            ref = index.ref_of(parent.targets[0].target, index.scope_of(optimizer))
            if ref is not None:
                optimizer_refs |= index.downstream(ref)
    lineages = [trained.lineage for trained in models.models]
    for loop in index.loops:
        if not isinstance(loop.body, cst.IndentedBlock):
            continue
        body = list(loop.body.body)
        backward = next(
            (
                i
                for i, st in enumerate(body)
                if isinstance(st, cst.SimpleStatementLine)
                and any(m.matches(n, m.Call(func=m.Attribute(attr=m.Name("backward")))) for n in index.walk(st))
            ),
            None,
        )
        if backward is None:
            continue
        step_if = next(
            (
                st
                for st in body[backward + 1 :]
                if isinstance(st, cst.If)
                and st.orelse is None
                and any(_is_step(index, n, optimizer_refs) for n in index.walk(st.body))
            ),
            None,
        )
        if step_if is None or not _pure(step_if.test):
            continue
        scope = index.scope_of(loop)
        run = []
        first = None
        for position, stmt in enumerate(body[: backward + 1]):
            for node in index.walk(stmt):
                if isinstance(node, cst.Call) and (ref := index.carried_ref(node.func, scope)) is not None:
                    for lineage in lineages:
                        if ref in lineage:
                            text = index.module.code_for_node(node.func)
                            if text not in run:
                                run.append(text)
                            first = position if first is None else first
        assigned = {n.value for st in body[: first or 0] for n in index.walk(st) if isinstance(n, cst.Name)}
        tested = {n.value for n in index.walk(step_if.test) if isinstance(n, cst.Name)}
        if run and first is not None and not (tested & assigned):
            yield Accumulation(body[first], step_if.test, tuple(run))


def _is_step(index: Index, node: cst.CSTNode, optimizer_refs: set[Ref]) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "step"
        and index.carried_ref(node.func.value, index.scope_of(node)) in optimizer_refs
    )


def _pure(expr: cst.BaseExpression) -> bool:
    """Arithmetic and comparisons on names, attributes, numbers and ``len()``: safe to evaluate earlier."""
    for node in walk(expr):
        if isinstance(node, cst.Call) and not m.matches(node.func, m.Name("len")):
            return False
        if isinstance(node, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda)):
            return False
    return True


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for accumulation in facts.accumulations:
        condition = plan.index.module.code_for_node(accumulation.condition)
        lines = [
            cst.parse_statement(f"{name}.require_backward_grad_sync = {condition}\n") for name in accumulation.models
        ]
        comment = cst.EmptyLine(
            comment=cst.Comment("# All-reduce gradients only in the micro-step that updates the weights.")
        )
        lines[0] = lines[0].with_changes(leading_lines=[comment])
        plan.insert_before(accumulation.forward, *lines)
        plan.change(
            accumulation.forward, "gradient accumulation: gradients are all-reduced only before optimizer.step()"
        )
