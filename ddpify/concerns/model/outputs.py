"""Which outputs of a wrapped model a training step uses: all of them, or only some.

DDP expects a gradient for every parameter that took part in a forward. A step that
leaves outputs unused (``out, aux = model(x)`` with ``aux`` read only sometimes, never,
or as ``_``; ``model(x)[0]``) leaves the submodules behind them without one:

* in a step that trains the model itself, it needs ``find_unused_parameters=True``,
  unless another forward of the same step uses every output;
* in a step that trains another model (a GAN's generator through
  ``validity, _ = discriminator(fake)``), the forward goes through ``.module``, so that
  DDP expects nothing of it; the discriminator's own step runs the wrapper.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns.model.facts import Model
from ddpify.concerns.model.forward import reaches_backward
from ddpify.concerns.model.reads import WrapperReads
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program, is_backward
from ddpify.engine.syntax import single_target


class OutputUse:
    """How the training steps use a wrapped model's outputs."""

    def __init__(self, program: Program, reads: WrapperReads) -> None:
        self.program = program
        self.index = program.index
        self.reads = reads

    def _head_slots(self, classes: set[cst.ClassDef]) -> set[int] | None:
        """The places of the outputs ``forward`` returns from a submodule of their own (``return
        self.adv(h), self.aux(h)``): leaving one unused leaves that submodule without a gradient.
        None where the model's forward is not the program's (every output may be one)."""
        index = self.index
        slots: set[int] = set()
        carried: set[int] = set()  # outputs that another output of some return is computed from
        forwards = [f for cls in classes if (f := index.functions.get((cls, "forward"))) is not None]
        if not forwards:
            return None
        for forward in forwards:
            self_name = index.self_name(forward)
            heads: dict[str, int] = {}  # ``aux = self.aux(h)``: names bound once from a submodule
            for node in index.walk(forward.body):
                if isinstance(target := single_target(node), cst.Name):  # ``h = ...`` or ``h: T = ...``
                    value = cast(cst.BaseExpression, cast(cst.Assign | cst.AnnAssign, node).value)
                    name = target.value
                    heads[name] = heads.get(name, 0) + (2 if not self._submodule_call(value, self_name) else 1)
            # what each name of forward is computed from (``loss = F.cross_entropy(logits, ...)``)
            made_from: dict[str, set[str]] = {}
            for node in index.walk(forward.body):
                if isinstance(node, cst.Assign | cst.AnnAssign) and node.value is not None:
                    read = {n.value for n in index.walk(node.value) if isinstance(n, cst.Name)}
                    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                    for target in targets:
                        for bound in index.walk(target):
                            if isinstance(bound, cst.Name):
                                made_from.setdefault(bound.value, set()).update(read)
            for node in index.walk(forward.body):
                if not (isinstance(node, cst.Return) and isinstance(node.value, cst.Tuple)):
                    continue
                for slot, element in enumerate(node.value.elements):
                    value = element.value
                    named = isinstance(value, cst.Name) and heads.get(value.value) == 1
                    if not (named or self._submodule_call(value, self_name)):
                        continue
                    # ``return logits, loss`` with the loss made from the logits: the other output
                    # carries the gradient to the same parameters
                    others = [e.value for e in node.value.elements if e is not element]
                    if named and any(
                        _depends_on(index, other, cast(cst.Name, value).value, made_from) for other in others
                    ):
                        carried.add(slot)
                        continue
                    slots.add(slot)
        return slots - carried

    @staticmethod
    def _submodule_call(expr: cst.BaseExpression, self_name: str | None) -> bool:
        """``self.aux(h)``."""
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and isinstance(expr.func.value, cst.Name)
            and expr.func.value.value == self_name
        )

    def _partial_uses(self, model: Model, classes: set[cst.ClassDef]) -> Iterator[tuple[cst.BaseExpression, str]]:
        """Forwards of the model in a training loop whose outputs a step leaves unused, each with why:
        ``out, aux = model(x)`` with ``aux`` read only under an ``if``, never read, or ``_``, or
        ``model(x)[0]``. The parameters that only those outputs depend on then get no gradient."""
        index = self.index
        scope = index.scope_of(model.insert_after)
        heads = self._head_slots(classes)

        def head(slot: int) -> bool:
            return heads is None or slot in heads

        for read in self._mentions(scope, model):
            call = index.parent(read)
            assign = index.parent(call)
            if (
                isinstance(call, cst.Call)
                and call.func is read
                and isinstance(assign, cst.Subscript)
                and m.matches(assign, m.Subscript(slice=[m.SubscriptElement(m.Index(m.Integer()))]))
                and index.in_a_training_loop(call)
                and (
                    heads is None
                    or heads - {int(cast(cst.Integer, cast(cst.Index, assign.slice[0].slice).value).value)}
                )
            ):  # ``discriminator(x)[0]``: one output of several
                yield read, f"`{model.expression}(...)[...]` leaves the other outputs unused in a training step"
                continue
            if not (
                isinstance(call, cst.Call)
                and call.func is read
                and isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Tuple)
            ):
                continue
            loops = list(index.enclosing_loops(call))
            if not loops or not index.trains(loops[0].body):
                continue
            for slot, element in enumerate(assign.targets[0].target.elements):
                output = element.value
                if not isinstance(output, cst.Name):
                    continue
                if output.value == "_":
                    if head(slot):
                        yield read, f"`{model.expression}(...)` has outputs that a training step leaves unused"
                        break
                    continue
                ref = index.ref_of(output, index.scope_of(assign))
                if ref is None:
                    continue
                uses = [
                    r
                    for r in index.mentions(loops[0].body, ref)
                    if index.starts_after(r, assign) and not index.inside(r, assign) and not index.stored(r)
                ]
                if not uses and not index.mentions(index.scope_of(assign), ref)[1:] and head(slot):
                    yield read, f"`{output.value}` from `{model.expression}(...)` is never used in the training step"
                    break
                tests = [self._only_when(use, loops[0]) for use in uses]
                if uses and all(test is not None for test in tests):
                    condition = index.module.code_for_node(cast(cst.BaseExpression, tests[0]))
                    yield read, f"`{output.value}` from `{model.expression}(...)` is used only when `{condition}` holds"
                    break

    def _mentions(self, node: cst.CSTNode, model: Model) -> list[cst.BaseExpression]:
        """The model's reads under ``node``, by its own name and by every other name taken for it (``net =
        model`` after the wrap names the wrapper too)."""
        scope = self.index.scope_of(model.insert_after)
        return [r for ref in self.reads.with_aliases(model.ref, scope) for r in self.index.mentions(node, ref)]

    def output_used_sometimes(self, model: Model, classes: set[cst.ClassDef]) -> str | None:
        """Why some of the model's parameters may get no gradient in a step that trains it
        (``find_unused_parameters=True``), or None."""
        partial = list(self._partial_uses(model, classes))
        partial_reads = {read for read, _ in partial}
        for read, why in partial:
            if (
                self._steps_another(read, model)
                or self._whole_forward_beside(read, model, partial_reads)
                or self._apart_from_the_step(read)
            ):
                continue
            return why
        return None

    def _apart_from_the_step(self, read: cst.BaseExpression) -> bool:
        """Whether the forward of ``read`` feeds none of the backward passes of the function it runs in, which
        has some (``preview, _ = model(fixed_x)`` printed every k steps): a forward that no backward follows
        leaves DDP nothing to wait for."""
        index = self.index
        call = index.parent(read)
        if not isinstance(call, cst.Call):
            return False
        scope = index.scope_of(call)
        steps = any(isinstance(node, cst.Call) and is_backward(node) for node in index.walk(scope))
        return steps and not reaches_backward(index, call)

    def _whole_forward_beside(self, read: cst.BaseExpression, model: Model, partial: set[cst.BaseExpression]) -> bool:
        """Whether the same step (between the backward passes around ``read``) also runs a forward of the
        model whose outputs it uses: ``real_pred, real_aux = D(x)`` beside ``fake_pred, _ = D(fake)``.
        Every parameter then gets its gradient from that one."""
        index = self.index
        loop = next(index.enclosing_loops(read), None)
        if loop is None:
            return False
        at = index.order[read]
        backwards = [
            index.order[c]
            for c in index.walk(loop.body)
            if isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"
        ]
        start = max((o for o in backwards if o < at), default=index.order[loop])
        end = min((o for o in backwards if o > at), default=index.last[loop])
        return any(
            other is not read
            and other not in partial
            and start < index.order[other] < end
            and isinstance(call := index.parent(other), cst.Call)
            and call.func is other
            for other in self._mentions(loop.body, model)
        )

    def forwards_for_another_model(self, model: Model, classes: set[cst.ClassDef]) -> tuple[cst.BaseExpression, ...]:
        """Forwards of the model that leave outputs unused in a step that trains another model (a GAN's
        generator step through ``validity, _ = discriminator(fake)``): they go through ``.module``, so that
        DDP expects no gradient of this model from them; the step that trains it runs the wrapper."""
        return tuple(read for read, _ in self._partial_uses(model, classes) if self._steps_another(read, model))

    def _steps_another(self, read: cst.BaseExpression, model: Model) -> bool:
        """Whether the first optimizer step after ``read`` in its loop is of an optimizer that does not hold
        this model's parameters."""
        index = self.index
        loop = next(index.enclosing_loops(read), None)
        if loop is None:
            return False
        at = index.order[read]
        steps = [
            c
            for c in index.walk(loop.body)
            if isinstance(c, cst.Call)
            and isinstance(c.func, cst.Attribute)
            and c.func.attr.value == "step"
            and index.order[c] > at
        ]
        if not steps:
            return False
        step = min(steps, key=lambda c: index.order[c])
        scope = index.scope_of(step)
        stepped = {index.carried_ref(cast(cst.Attribute, step.func).value, scope)}
        if step.args:  # scaler.step(optimizer)
            stepped.add(index.carried_ref(step.args[0].value, scope))
        trained = self.reads.trained
        optimizers = [
            o
            for o in trained.optimizers()
            if (bound := single_target(index.parent(o))) is not None
            and index.lineage(index.ref_of(bound, index.scope_of(o)) or Ref(scope, "<none>")) & stepped
        ]
        if len(optimizers) != 1:
            return False
        refs, untraced = trained.trained_refs(optimizers[0])
        if untraced is not None or not refs:
            return False
        lineage = index.lineage(model.ref)
        return not any(index.lineage(ref) & lineage for ref in refs)

    def _only_when(self, node: cst.CSTNode, loop: cst.CSTNode) -> cst.BaseExpression | None:
        """The test of an ``if`` inside ``loop`` whose body (not its test) holds ``node``."""
        child = node
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                return None
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                return ancestor.test
            child = ancestor
        return None


def _depends_on(index: Index, expr: cst.BaseExpression, name: str, made_from: dict[str, set[str]]) -> bool:
    """Whether ``expr`` is computed from ``name``, directly or through names made from it."""
    seen: set[str] = set()
    todo = [n.value for n in index.walk(expr) if isinstance(n, cst.Name)]
    while todo:
        current = todo.pop()
        if current == name:
            return True
        if current not in seen:
            seen.add(current)
            todo += made_from.get(current, ())
    return False
