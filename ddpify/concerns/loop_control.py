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
        if loss.item() < tolerance:   # rank-local decision
            break

Every rank takes rank 0's decision instead: the test of each such ``if``
between the exit and the loop becomes ``same_on_every_rank(<test>)`` (one
broadcast where every rank reaches the test), so that the ranks leave the loop
together. A counter from ``range`` or
``enumerate`` is the same on every rank and is not reported, and so is a
decision drawn from an evaluation over a loader without a DistributedSampler:
every rank sees the whole set through the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns import data, model
from ddpify.concerns.data.reads import Reads
from ddpify.engine import uniformity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index, Ref
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument
from ddpify.engine.uniformity.batches import RankLocal
from ddpify.engine.values import built_by, loader_argument
from ddpify.result import Options

CODES = ()
PLATEAU_SCHEDULERS = frozenset(
    {"torch.optim.lr_scheduler.ReduceLROnPlateau", "torch.optim.lr_scheduler.lr_scheduler.ReduceLROnPlateau"}
)


@dataclass(frozen=True)
class Facts:
    # ``if loss.item() < tol: break``: each exit, with the tests between it and its loop read from this
    # rank's batches (outermost first), which every rank takes from rank 0
    rank_local_exits: tuple[tuple[cst.Break | cst.Return, tuple[cst.If, ...]], ...]
    # ``scheduler.step(train_loss)`` of a ReduceLROnPlateau: the metric each rank computes from its own batches
    plateau_metrics: tuple[cst.Arg, ...] = ()
    # ``if not torch.isfinite(loss): continue`` before the backward pass: each skip, with the tests between it
    # and its loop read from this rank's batches; every rank skips the step where any rank does
    rank_local_skips: tuple[tuple[cst.Continue, tuple[cst.If, ...]], ...] = ()


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    training = [loader for loader in loaders.loaders if loader.training]
    finder = _Finder(
        program, training, [loader for loader in loaders.loaders if _draws_its_own_share(program.index, loader)]
    )
    if not models.models:
        return Facts(tuple(finder.rank_local_exits()))
    return Facts(tuple(finder.rank_local_exits()), tuple(finder.plateau_metrics()), tuple(finder.rank_local_skips()))


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    """A rank-local exit is decided on rank 0 for every rank; a plateau scheduler steps on the mean of its
    metric over the ranks."""
    for node, tests in facts.rank_local_exits:
        for test in tests:
            uniformity.decide_on_rank_zero(plan, test.test)
        keyword = "break" if isinstance(node, cst.Break) else "return"
        plan.change(
            node,
            f"`{keyword}` is decided by a value computed from this rank's batches: every rank takes rank 0's "
            "decision, so that the ranks leave the training loop together",
        )
    for skip, tests in facts.rank_local_skips:
        for test in tests:
            uniformity.decide_on_any_rank(plan, test.test)
        plan.change(
            skip,
            "`continue` skips the backward pass on a value computed from this rank's batches: every rank skips "
            "the step where any rank does, so that the gradient all-reduces of the ranks stay paired",
        )
    if not facts.plateau_metrics:
        return
    helper = uniformity.mean_over_ranks(plan)
    for arg in facts.plateau_metrics:
        plan.replace(
            arg.value, lambda node: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, node))])
        )
        plan.change(
            arg,
            f"`{plan.index.module_of(arg).code_for_node(arg.value)}` is computed from this rank's batches: the "
            "plateau scheduler steps on its mean over the ranks, so that every rank lowers its learning rate alike",
        )


def _draws_its_own_share(index: Index, loader: data.Loader) -> bool:
    """An evaluation loader left whole that still differs between ranks: it shuffles with each process's own
    random state and drops the last, short batch (``shuffle=True, drop_last=True``): each rank leaves out
    other samples, so what it computes over them (a validation loss deciding early stopping) differs."""
    if loader.training or loader_argument(index, loader.call, "generator") is not None:
        return False
    flags = [loader_argument(index, loader.call, name) for name in ("shuffle", "drop_last")]
    return all(flag is not None and m.matches(flag, m.Name("True")) for flag in flags)


class _Finder:
    def __init__(self, program: Program, training: list[data.Loader], varying: list[data.Loader]) -> None:
        self.program = program
        self.index = program.index
        sites = [site for loader in training for site in loader.sites]
        reads = Reads(self.index)
        sites += [site for loader in varying for site, _ in reads.iterations(set(loader.refs))]
        refs = frozenset(ref for loader in training for ref in _trained_refs(self.index, loader))
        self.rank_local = RankLocal(self.index, sites, refs)

    def rank_local_exits(self) -> Iterator[tuple[cst.Break | cst.Return, tuple[cst.If, ...]]]:
        """``if loss.item() < tol: break`` -- each rank decides on its own shard, and the others hang.

        Whether the test differs between ranks is the uniformity analysis's answer
        (:class:`~ddpify.engine.uniformity.batches.RankLocal`): values from this rank's
        training batches, a clock, an unseeded draw. An evaluation over a loader without
        a DistributedSampler sees the full set through the same weights on every rank, so
        a decision drawn from it is the same everywhere.
        """
        index = self.index
        found: set[cst.CSTNode] = set()
        for loop in index.loops:
            exits = [node for node in index.walk(loop.body) if isinstance(node, (cst.Break, cst.Return))]
            if not exits or not index.trains(loop.body):
                continue
            for node in exits:
                if node in found:
                    continue
                tests = self._rank_local_tests(node, loop)
                if tests:
                    found.add(node)
                    yield node, tuple(tests)

    def rank_local_skips(self) -> Iterator[tuple[cst.Continue, tuple[cst.If, ...]]]:
        """``if not torch.isfinite(loss): continue`` before the backward pass: the rank that skips joins the
        next step's gradient all-reduce while the others are in this one's."""
        index = self.index
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            last = max(
                (
                    index.order[stmt]
                    for stmt in index.walk(loop.body)
                    if isinstance(stmt, cst.SimpleStatementLine) and index.trains(stmt)
                ),
                default=None,
            )
            if last is None:
                continue
            for node in index.walk(loop.body):
                if not isinstance(node, cst.Continue) or index.order[index.statement_of(node)] > last:
                    continue
                tests = self._rank_local_tests(node, loop)
                if tests and next(index.enclosing_loops(node), None) is loop:
                    yield node, tuple(tests)

    def _rank_local_tests(self, node: cst.CSTNode, loop: cst.For | cst.While) -> list[cst.If]:
        """The tests between ``node`` and its innermost loop that read values of this rank's batches, outermost
        first."""
        tests: list[cst.If] = []
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                break
            if isinstance(ancestor, cst.If) and self.rank_local.reads(ancestor.test, loop):
                tests.insert(0, ancestor)
        return tests

    def plateau_metrics(self) -> Iterator[cst.Arg]:
        """``scheduler.step(mean_loss)`` of a ``ReduceLROnPlateau``, the metric read from this rank's batches:
        each rank would lower its learning rate at its own epoch, and the ranks drift apart."""
        index = self.index
        for call in index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            metric = argument(call, "metrics", 0)
            if metric is None or metric.star:
                continue
            built = built_by(index, func.value)
            if not built or not any(
                isinstance(b, cst.Call) and index.qualified_names(b.func) & PLATEAU_SCHEDULERS for b in built
            ):
                continue
            block = next(index.enclosing_loops(call), None) or index.scope_of(call)
            if self.rank_local.reads(metric.value, block):
                yield metric


def _trained_refs(index: Index, loader: data.Loader) -> frozenset[Ref]:
    """The places holding the loader that its training loops draw from: where one factory also builds
    the validation loader (which keeps the whole set), the places only that one reaches are left out."""
    if not loader.evaluated:
        return loader.refs
    found: set[Ref] = set()
    for site in loader.sites:
        iterated = site.iter if isinstance(site, cst.For) else None
        while isinstance(iterated, cst.Call) and m.matches(iterated.func, m.Name("enumerate")) and iterated.args:
            iterated = iterated.args[0].value  # ``for i, (x, y) in enumerate(loader)``
        ref = index.carried_ref(iterated, index.scope_of(site)) if iterated is not None else None
        if ref is None:
            return loader.refs
        found |= {ref, *(place for place in index.upstream(ref) if place in loader.refs)}
    return frozenset(found)
