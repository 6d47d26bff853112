"""Loop control: decisions that end the training loop must be the same on every rank.

Under DDP every rank runs the same training steps in lockstep: each backward
pass all-reduces gradients with the other ranks. A ``break`` or ``return``
inside the training loop that depends on a value computed from this rank's
own batches -- the loss, a metric, anything read through ``.item()`` or out of
the model -- can fire on one rank and not on another; the ranks still in the
loop then wait forever for the one that left::

    for x, y in loader:
        loss = loss_fn(model(x), y)
        ...
        if loss.item() < tolerance:   # DDP601: rank-local decision
            break

There is no safe automatic rewrite (the value must be all-reduced, or decided
on rank 0 and broadcast, at a point every rank reaches), so this concern only
reports (DDP601) and rewrites nothing. A counter from ``range`` or
``enumerate`` is the same on every rank and is not reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from ddpify.concerns import model
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Ref
from ddpify.engine.program import Program
from ddpify.result import Options

RANK_LOCAL_EXIT = Code(
    "DDP601",
    Severity.WARNING,
    "loop_control",
    "a break/return in the training loop decided by a value computed from this rank's batches",
    "all-reduce the value (or decide on rank 0 and broadcast it) before deciding",
)
CODES = (RANK_LOCAL_EXIT,)


@dataclass(frozen=True)
class Facts:
    rank_local_exits: tuple[cst.Break | cst.Return, ...]  # reported, left as they are


def find(program: Program, models: model.Facts) -> Facts:
    return Facts(tuple(_Finder(program).rank_local_exits(models.refs)))


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    """Nothing to rewrite: a rank-local exit is only reported."""


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index

    def rank_local_exits(self, model_refs: frozenset[Ref]) -> Iterator[cst.Break | cst.Return]:
        """``if loss.item() < tol: break`` -- each rank decides on its own shard, and the others hang."""
        index = self.index
        reported: set[cst.CSTNode] = set()
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            local = self._rank_local_names(loop, model_refs)
            for node in self.index.walk(loop.body):
                if not isinstance(node, (cst.Break, cst.Return)) or node in reported:
                    continue
                for ancestor in index.ancestors(node):
                    if ancestor is loop or isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                        break
                    if isinstance(ancestor, cst.If) and self._reads_rank_local(ancestor.test, local):
                        reported.add(node)
                        yield node
                        keyword = "break" if isinstance(node, cst.Break) else "return"
                        self.program.report(
                            node,
                            RANK_LOCAL_EXIT,
                            f"`{keyword}` depends on a value computed from this rank's batches: ranks can leave the "
                            "training loop at different steps and hang; all-reduce the value (or decide on rank 0 "
                            "and broadcast) before deciding",
                        )
                        break

    def _rank_local_names(self, loop: cst.For | cst.While, model_refs: frozenset[Ref]) -> set[str]:
        local: set[str] = set()
        if isinstance(loop, cst.For) and not m.matches(loop.iter, m.Call(func=m.Name("range"))):
            targets: list[cst.CSTNode] = [loop.target]
            if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))) and isinstance(loop.target, cst.Tuple):
                targets = [e.value for e in loop.target.elements[1:]]  # the batch counter is the same everywhere
            local |= {n.value for t in targets for n in self.index.walk(t) if isinstance(n, cst.Name)}
        assignments = [n for n in self.index.walk(loop.body) if isinstance(n, (cst.Assign, cst.AugAssign))]
        for _ in range(3):
            for assign in assignments:
                if self._reads_rank_local(assign.value, local, model_refs):
                    targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
                    local |= {n.value for t in targets for n in self.index.walk(t) if isinstance(n, cst.Name)}
        return local

    def _reads_rank_local(self, expr: cst.CSTNode, local: set[str], model_refs: frozenset[Ref] = frozenset()) -> bool:
        for node in self.index.walk(expr):
            if isinstance(node, cst.Name) and node.value in local:
                return True
            if isinstance(node, cst.Call):
                if m.matches(node.func, m.Attribute(attr=m.Name("item"))):
                    return True
                if model_refs and self.index.carried_ref(node.func, self.index.scope_of(node)) in model_refs:
                    return True
        return False
