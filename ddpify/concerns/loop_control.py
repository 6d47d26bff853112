"""Loop control: decisions that end the training loop must be the same on every rank.

Under DDP every rank runs the same training steps in lockstep: each backward
pass all-reduces gradients with the other ranks. A ``break`` or ``return``
inside the training loop that depends on a value computed from this rank's
own training batches -- the loss, a training metric, what a function that
draws them returns -- or on a clock or a random draw can fire on one rank and
not on another; the ranks still in the loop then wait forever for the one that
left::

    for x, y in loader:
        loss = loss_fn(model(x), y)
        ...
        if loss.item() < tolerance:   # DDP601: rank-local decision
            break

There is no safe automatic rewrite (the value must be all-reduced, or decided
on rank 0 and broadcast, at a point every rank reaches), so this concern only
reports (DDP601) and rewrites nothing. A counter from ``range`` or
``enumerate`` is the same on every rank and is not reported, and so is a
decision drawn from an evaluation over a loader without a DistributedSampler:
every rank sees the whole set through the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ddpify.concerns import data, model
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program
from ddpify.engine.uniformity.batches import RankLocal
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


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    training = [loader for loader in loaders.loaders if loader.training]
    return Facts(tuple(_Finder(program, training).rank_local_exits()))


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    """Nothing to rewrite: a rank-local exit is only reported."""


class _Finder:
    def __init__(self, program: Program, training: list[data.Loader]) -> None:
        self.program = program
        self.index = program.index
        sites = [site for loader in training for site in loader.sites]
        refs = frozenset(ref for loader in training for ref in _trained_refs(self.index, loader))
        self.rank_local = RankLocal(self.index, sites, refs)

    def rank_local_exits(self) -> Iterator[cst.Break | cst.Return]:
        """``if loss.item() < tol: break`` -- each rank decides on its own shard, and the others hang.

        Whether the test differs between ranks is the uniformity analysis's answer
        (:class:`~ddpify.engine.uniformity.batches.RankLocal`): values from this rank's
        training batches, a clock, an unseeded draw. An evaluation over a loader without
        a DistributedSampler sees the full set through the same weights on every rank, so
        a decision drawn from it is the same everywhere.
        """
        index = self.index
        reported: set[cst.CSTNode] = set()
        for loop in index.loops:
            exits = [node for node in index.walk(loop.body) if isinstance(node, (cst.Break, cst.Return))]
            if not exits or not index.trains(loop.body):
                continue
            for node in exits:
                if node in reported:
                    continue
                for ancestor in index.ancestors(node):
                    if ancestor is loop or isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                        break
                    if isinstance(ancestor, cst.If) and self.rank_local.reads(ancestor.test, loop):
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


def _trained_refs(index: Index, loader: data.Loader) -> frozenset[Ref]:
    """The places holding the loader that its training loops draw from: where one factory also builds
    the validation loader (which keeps the whole set), the places only that one reaches are left out."""
    if not loader.evaluated:
        return loader.refs
    found: set[Ref] = set()
    for site in loader.sites:
        ref = index.carried_ref(site.iter, index.scope_of(site)) if isinstance(site, cst.For) else None
        if ref is None:
            return loader.refs
        found |= {ref, *(place for place in index.upstream(ref) if place in loader.refs)}
    return frozenset(found)
