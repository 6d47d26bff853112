"""The training step as the tensors concern reads it: what its loss is computed from, and where values are bound.

``_StepReader`` holds what every finder of the concern reads (the index, the models, the process group
setup) and follows values through the step; ``Refused`` says why the data cannot be sharded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from ddpify.concerns import model, process_group
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.syntax import assigned
from ddpify.engine.uniformity.sources import Seeding


class Refused(Exception):
    """The training data cannot be sharded safely: why, and where."""

    def __init__(self, node: cst.CSTNode, reason: str, *, whole: bool = False, hazard: bool = False) -> None:
        super().__init__(reason)
        self.node = node
        self.reason = reason
        self.whole = whole  # the reason is the whole message, not why tensors cannot be sharded
        # left whole on every rank, the data would still not train in sync (ranks taking different paths)
        self.hazard = hazard


@dataclass
class _Lineage:
    """What the loss is computed from, within the training step."""

    leaves: list[cst.Name] = field(default_factory=list)  # reads of values made before the step
    step_variables: list[cst.Name] = field(default_factory=list)  # reads of a loop variable of the step
    subscripts: list[cst.Subscript] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)


class _StepReader:
    """The training step's context, and the values it reads followed back to where they are bound."""

    def __init__(
        self,
        index: Index,
        models: model.Facts,
        setup: process_group.Facts,
        dist: str,
        seeded_draws: frozenset[cst.Call] = frozenset(),
    ) -> None:
        self.index = index
        self.model_refs = models.refs
        self.setup = setup
        self.dist = dist
        self.seeding = Seeding(index)
        self.seeded_draws = seeded_draws  # draws given a seeded generator of their own

    # -- the loss's lineage in the training step --------------------------
    def _lineage(
        self, roots: list[cst.BaseExpression], scope: Scope, step: cst.For | cst.While | cst.FunctionDef
    ) -> _Lineage:
        index = self.index
        found = _Lineage()
        seen: set[cst.CSTNode] = set()
        queue: list[cst.CSTNode] = list(roots)
        while queue:
            expr = queue.pop()
            if expr in seen:
                continue
            seen.add(expr)
            for node in index.walk(expr):
                if isinstance(node, cst.Subscript):
                    found.subscripts.append(node)
                elif isinstance(node, cst.Call):
                    found.calls.append(node)
                if not isinstance(node, cst.Name) or not index.names_a_variable(node):
                    continue
                ref = index.ref_of(node, index.scope_of(node))
                if ref is None:
                    continue
                bound_in_step = [
                    binding for binding in self._bindings(ref, scope) if binding is step or index.inside(binding, step)
                ]
                if not bound_in_step:
                    found.leaves.append(node)
                for binding in bound_in_step:
                    if isinstance(binding, cst.For) and binding.target is not None and _binds(binding.target, ref):
                        found.step_variables.append(node)
                        queue.append(binding.iter)  # ``for xb in x.split(bs)``: the batches come from ``x``
                    elif isinstance(binding, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and binding.value:
                        queue.append(binding.value)
                        if isinstance(binding, cst.AugAssign):
                            queue.append(binding.target)
                    else:
                        found.step_variables.append(node)
        return found

    def _bindings(self, ref: Ref, scope: Scope) -> Iterator[cst.CSTNode]:
        """The statements in ``scope`` that bind ``ref``: assignments, loop targets, with-items."""
        if ref.scope is not scope:
            return
        index = self.index
        for node in index.walk(scope):
            if index.scope_of(node) is not scope:
                continue
            if isinstance(node, cst.Assign):
                if any(_binds(t.target, ref) for t in node.targets):
                    yield node
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
                if _binds(node.target, ref):
                    yield node
            elif (isinstance(node, cst.WithItem) and node.asname is not None and _binds(node.asname.name, ref)) or (
                isinstance(node, cst.CompFor) and _binds(node.target, ref)
            ):
                yield node

    def _assignments(self, ref: Ref) -> list[cst.Assign | cst.AugAssign | cst.AnnAssign]:
        index = self.index
        found: list[cst.Assign | cst.AugAssign | cst.AnnAssign] = []
        for stmt in index.statements:
            for small in stmt.body:
                if index.scope_of(small) is not ref.scope and not (
                    isinstance(ref.scope, cst.Module) and index.scope_of(small) is index.module
                ):
                    continue
                if (isinstance(small, cst.Assign) and any(_binds(t.target, ref) for t in small.targets)) or (
                    isinstance(small, (cst.AugAssign, cst.AnnAssign))
                    and small.value is not None
                    and _binds(small.target, ref)
                ):
                    found.append(small)
        return found

    def _depends(
        self, expr: cst.CSTNode, step: cst.For | cst.While, wanted: Callable[[cst.CSTNode], bool], depth: int = 0
    ) -> bool:
        """Whether ``expr``, or a name it reads that the training step assigns, satisfies ``wanted``."""
        index = self.index
        for node in index.walk(expr):
            if wanted(node):
                return True
            if not isinstance(node, cst.Name) or not index.names_a_variable(node) or depth > 5:
                continue
            ref = index.ref_of(node, index.scope_of(node))
            if ref is None:
                continue
            for binding in self._bindings(ref, index.scope_of(node)):
                if (
                    isinstance(binding, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                    and index.inside(binding, step)
                    and binding.value is not None
                    and self._depends(binding.value, step, wanted, depth + 1)
                ):
                    return True
        return False


def _value_of(assignment: cst.Assign | cst.AugAssign | cst.AnnAssign, ref: Ref) -> cst.BaseExpression | None:
    """What ``assignment`` gives ``ref``: ``b`` in ``x, y = a, b`` for ``y``, else its whole value."""
    value = assignment.value
    if isinstance(assignment, cst.Assign) and isinstance(value, (cst.Tuple, cst.List)):
        for target in assignment.targets:
            elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else None
            if elements is not None and len(elements) == len(value.elements):
                for element, item in zip(elements, value.elements):
                    if _binds(element.value, ref):
                        return item.value
    return value


def _binds(target: cst.BaseExpression, ref: Ref) -> bool:
    for single in assigned(target):
        if isinstance(single, cst.StarredElement):
            single = single.value
        if isinstance(single, cst.Name) and single.value == ref.path:
            return True
    return False


def _code(index: Index, node: cst.CSTNode) -> str:
    return index.module.code_for_node(node).strip()
