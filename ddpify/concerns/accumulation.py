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

Only a condition that follows a counter of the micro-steps is accumulation: a
modulo of the batch index or of a counter the body advances, or a counter that
the step compares and resets. ``if other_optimizer is not None: ...step()`` is
not: skipping the all-reduce there would stop gradient sync for a whole run.

Limits: the step condition must be pure arithmetic on values known before the
forward pass (it is evaluated earlier; a counter advanced after the forward
pass is not); otherwise the loop is left as it is and every micro-step
all-reduces, which is slower but still correct.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns import model
from ddpify.diagnostics import Code
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program
from ddpify.engine.syntax import assigned, straight_line, walk
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
        for ref in index.holders(optimizer):
            optimizer_refs |= index.downstream(ref)
    lineages = [trained.lineage for trained in models.models]
    for loop in index.loops:
        body = straight_line(loop.body)
        backward = next(
            (
                i
                for i, st in enumerate(body)
                if isinstance(st, cst.SimpleStatementLine) and any(_is_backward(n) for n in index.walk(st))
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
        if step_if is None or not _pure(step_if.test) or not _accumulates(index, loop, step_if, optimizer_refs):
            continue
        scope = index.scope_of(loop)
        run = []
        first = None
        for position, stmt in enumerate(body[: backward + 1]):
            for node in index.walk(stmt):
                if isinstance(node, cst.Call) and (carried := index.carried_ref(node.func, scope)) is not None:
                    for lineage in lineages:
                        if carried in lineage:
                            text = index.module.code_for_node(node.func)
                            if text not in run:
                                run.append(text)
                            first = position if first is None else first
        if not run or first is None:
            continue
        # The condition is evaluated before the forward pass: what it reads must not change in between.
        rebound = {name for st in body[first : body.index(step_if)] for name in _bound(index, st)}
        if not (_names(index, step_if.test) & rebound):
            yield Accumulation(_outermost(index, loop, body[first], step_if), step_if.test, tuple(run))


def _outermost(
    index: Index, loop: cst.For | cst.While, forward: cst.BaseStatement, step_if: cst.If
) -> cst.BaseStatement:
    """The statement to set the flag before: the outermost block of the loop's body around ``forward``
    (``with torch.autocast(...):``) that does not also hold the step."""
    for statement in _outer_first(loop.body):
        if (statement is forward or index.inside(forward, statement)) and not index.inside(step_if, statement):
            return statement
    return forward


def _outer_first(suite: cst.BaseSuite) -> Iterator[cst.BaseStatement]:
    """The statements of ``suite`` and, after each ``with`` or ``try``, those of its body."""
    for statement in suite.body if isinstance(suite, cst.IndentedBlock) else ():
        yield statement
        if isinstance(statement, (cst.With, cst.Try)):
            yield from _outer_first(statement.body)


def _accumulates(index: Index, loop: cst.For | cst.While, step_if: cst.If, optimizer_refs: set[Ref]) -> bool:
    """Whether ``step_if`` skips the step on some micro-steps: its test follows a counter of the micro-steps.

    The counter is the loop's own target or a name advanced by every pass of the body
    (``step += 1``). The test depends on it through a modulo (``(i + 1) % k == 0``,
    also combined with ``or i == len(loader) - 1``) or by comparing a counter that the
    step resets (``if n == k: ...; n = 0``). A test on anything else
    (``if encoder_optimizer is not None``) gates the step on every micro-step or none,
    so it is not accumulation. Neither is a step whose block runs its own backward pass
    (a generator trained every k-th step), nor a loop that also steps an optimizer outside
    the block: those gradients must be all-reduced every micro-step.
    """
    if any(_is_backward(n) for n in index.walk(step_if.body)):
        return False
    if any(_is_step(index, n, optimizer_refs) and not index.inside(n, step_if) for n in index.walk(loop.body)):
        return False
    counters = _counters(index, loop)
    for node in index.walk(step_if.test):
        if (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Modulo)
            and _names(index, node.left) & counters
        ):
            return True
    reset = {
        name
        for st in straight_line(step_if.body)
        if isinstance(st, cst.SimpleStatementLine)
        for small in st.body
        if isinstance(small, (cst.Assign, cst.AnnAssign))
        for target in (small.targets if isinstance(small, cst.Assign) else [small])
        for name in _names(index, target.target)
    }
    return any(
        isinstance(node, cst.Comparison) and _names(index, node) & counters & reset for node in index.walk(step_if.test)
    )


def _counters(index: Index, loop: cst.For | cst.While) -> set[str]:
    """Names that advance on every pass of ``loop``: its target, and names incremented at the top of its body."""
    counters = _names(index, loop.target) if isinstance(loop, cst.For) else set()
    for st in straight_line(loop.body):
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
                counters |= _names(index, small.target)
            elif (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and isinstance(small.value, cst.BinaryOperation)
                and isinstance(small.value.operator, cst.Add)
                and small.targets[0].target.value in _names(index, small.value)
            ):
                counters.add(small.targets[0].target.value)
    return counters


def _names(index: Index, node: cst.CSTNode) -> set[str]:
    return {n.value for n in index.walk(node) if isinstance(n, cst.Name)}


def _bound(index: Index, statement: cst.BaseStatement) -> Iterator[str]:
    """Names (re)bound anywhere in ``statement``."""
    for node in index.walk(statement):
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For)):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        for target in targets:
            for single in assigned(target):
                if isinstance(single, cst.Name):
                    yield single.value


def _is_backward(node: cst.CSTNode) -> bool:
    return m.matches(node, m.Call(func=m.Attribute(attr=m.Name("backward"))))


def _is_step(index: Index, node: cst.CSTNode, optimizer_refs: set[Ref]) -> bool:
    """``optimizer.step()``, or a step that is given the optimizer (``scaler.step(optimizer)`` with AMP)."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "step"):
        return False
    scope = index.scope_of(node)
    receivers = [node.func.value, *(arg.value for arg in node.args[:1] if arg.keyword is None)]
    return any(index.carried_ref(receiver, scope) in optimizer_refs for receiver in receivers)


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
