"""Parameters drawn again after the wrap: DDP copies rank 0's weights to every rank once, when it wraps.

A program that initialises its model's parameters again after that point (a ``reset_params()``
method that a later method calls, ``model.apply(init)`` in another function) draws them on
each rank from that rank's own generator. DDP averages gradients, never weights, so the ranks
would train from different weights for the whole run. Unless the generator is seeded before
it, alike on every rank, rank 0's parameters are copied to every rank again right after.
"""

from __future__ import annotations

import libcst as cst

from ddpify.concerns.model.reads import WrapperReads
from ddpify.engine.index import Ref
from ddpify.engine.program import Program
from ddpify.engine.uniformity.sources import Seeding

# torch.nn.init's functions that draw from the generator (not ``zeros_``, ``ones_``, ``constant_``, ``eye_``...)
_DRAWING = ("uniform", "normal", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal")
DRAWING_INITS = frozenset(
    f"torch.nn.init.{name}{suffix}" for name in (*_DRAWING, "orthogonal", "sparse") for suffix in ("", "_")
) | {"torch.nn.init.trunc_normal_"}
# in-place draws of a tensor, and a module's own initialisation (``nn.Linear.reset_parameters()`` draws)
DRAWING_METHODS = frozenset(
    {"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_"}
    | {"reset_parameters"}
)
# what a model hands out to be initialised one by one
_PARTS = frozenset({"parameters", "named_parameters", "children", "named_children", "modules", "named_modules"})


class Redrawn:
    """Where a wrapped model's parameters are drawn again, each rank from its own generator."""

    def __init__(self, program: Program, reads: WrapperReads) -> None:
        self.program = program
        self.index = program.index
        self.reads = reads
        self.seeding = Seeding(self.index)

    def after_wrap(
        self, target: Ref, wrap: cst.BaseStatement
    ) -> tuple[tuple[cst.BaseStatement, cst.BaseExpression], ...]:
        """The statements, in source order, that draw parameters of the model wrapped after ``wrap`` again
        where every rank's generator is not known to be seeded alike, each with the model as that statement
        reads it (``self.model`` in a method, ``net`` in a helper): rank 0's are copied after each."""
        return tuple((stmt, read) for stmt, read, seeded in self._drawn_after_wrap(target, wrap) if not seeded)

    def seeded_after_wrap(self, target: Ref, wrap: cst.BaseStatement) -> tuple[cst.BaseStatement, ...]:
        """The statements that draw them again from a generator seeded alike on every rank: the same weights
        everywhere, where every rank runs the statement."""
        return tuple(stmt for stmt, _, seeded in self._drawn_after_wrap(target, wrap) if seeded)

    def _drawn_after_wrap(
        self, target: Ref, wrap: cst.BaseStatement
    ) -> list[tuple[cst.BaseStatement, cst.BaseExpression, bool]]:
        index = self.index
        found: dict[cst.BaseStatement, cst.BaseExpression] = {}
        for read in self.reads.reads_after_wrap(target, wrap):
            stmt = self._draws_through(read)
            if stmt is None or stmt in found or index.inside(wrap, stmt) or stmt is wrap:
                continue
            found[stmt] = read
        return [
            (stmt, read, self.seeding.seeded_before(stmt, "torch"))
            for stmt, read in sorted(found.items(), key=lambda item: index.order[item[0]])
        ]

    def _draws_through(self, read: cst.BaseExpression) -> cst.BaseStatement | None:
        """The statement in which ``read`` (the model) has its parameters drawn again: a loop over
        ``read.parameters()`` (or its children, modules) that draws, ``read.apply(init)`` with an ``init``
        that draws, ``read.reset_parameters()``, or a method of the program's own class that draws."""
        index = self.index
        node: cst.CSTNode = read
        parent = index.parent(node)
        while isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is node:
            call = index.parent(parent)
            if not (isinstance(parent, cst.Attribute) and isinstance(call, cst.Call) and call.func is parent):
                node, parent = parent, call  # ``model.encoder`` or ``model[-1]`` on to ``.apply``
                continue
            name = parent.attr.value
            scope = index.scope_of(call)
            if name in _PARTS:
                loop = self._loop_over(call)
                return loop if loop is not None and self._draws(loop.body) else None
            if name == "apply" and call.args:
                function = index.function_named(call.args[0].value, scope)
                body = function.body if function is not None else call.args[0].value
                return index.statement_of(call) if self._draws(body) else None
            if name in DRAWING_METHODS:
                return index.statement_of(call)
            callee = index.runs(call, scope)
            if callee is not None and self._draws(callee[0].body):
                return index.statement_of(call)
            return None
        return None

    def _loop_over(self, call: cst.Call) -> cst.For | None:
        """The ``for`` whose iterable holds ``call`` (its body may hold more loops: ``for child in
        model.children(): for p in child.parameters(): ...``)."""
        for ancestor in self.index.ancestors(call):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.BaseSuite)):
                return None
            if isinstance(ancestor, cst.For) and (ancestor.iter is call or self.index.inside(call, ancestor.iter)):
                return ancestor
        return None

    def _draws(self, body: cst.CSTNode, depth: int = 0) -> bool:
        """Whether running ``body`` draws into a tensor in place: torch.nn.init's drawing functions, a tensor's
        in-place draws, a module's ``reset_parameters()``, also through the program's own functions."""
        index = self.index
        for node in index.walk(body):
            if not isinstance(node, cst.Call):
                continue
            if index.is_call_to(node, DRAWING_INITS):
                return True
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in DRAWING_METHODS:
                return True
            if depth < 3:
                callee = index.runs(node, index.scope_of(node))
                if callee is not None and self._draws(callee[0].body, depth + 1):
                    return True
        return False
