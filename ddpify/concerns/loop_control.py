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

from ddpify.concerns import data, model
from ddpify.concerns.data import ranks
from ddpify.diagnostics import Code, Severity
from ddpify.engine import uniformity
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, dotted
from ddpify.engine.uniformity.batches import RankLocal
from ddpify.engine.uniformity.files import queried
from ddpify.engine.values import built_by
from ddpify.result import Options

SWALLOWED_STEP = Code(
    "DDP230",
    Severity.WARNING,
    "loop_control",
    "an exception raised inside the training step is caught and the loop goes on (`except Exception: continue`): "
    "a rank that raises leaves the step's gradient all-reduce, and the other ranks wait in it for good",
    "let the exception propagate (torchrun then stops every rank), or catch only what every rank raises alike",
)
CODES = (SWALLOWED_STEP,)
PLATEAU_SCHEDULERS = frozenset(
    {"torch.optim.lr_scheduler.ReduceLROnPlateau", "torch.optim.lr_scheduler.lr_scheduler.ReduceLROnPlateau"}
)


@dataclass(frozen=True)
class Facts:
    # ``if loss.item() < tol: break``: each exit, with the tests between it and its loop read from this
    # rank's batches (outermost first), which every rank takes from rank 0
    rank_local_exits: tuple[tuple[cst.Break | cst.Return | cst.Raise, tuple[cst.If, ...]], ...]
    # ``scheduler.step(train_loss)`` of a ReduceLROnPlateau: the metric each rank computes from its own batches
    plateau_metrics: tuple[cst.Arg, ...] = ()
    # ``if not torch.isfinite(loss): continue`` before the backward pass: each skip, with the tests between it
    # and its loop read from this rank's batches; every rank skips the step where any rank does
    rank_local_skips: tuple[tuple[cst.Continue, tuple[cst.If, ...]], ...] = ()
    # the values that differ between ranks (the data concern's uniformity analysis), which checkpoints ask too
    rank_local: RankLocal | None = None
    # ``try: x, y = draw() / except IndexError: continue`` before the backward pass: an exception is this
    # process's own; each such ``try``, with the ``continue`` (or ``break``) that ends its handlers
    raised_skips: tuple[tuple[cst.Try, tuple[cst.Continue | cst.Break, ...]], ...] = ()
    # ``if loss_d.item() < eps: netD.apply(weights_init)``: weights drawn again under a test read from this rank's
    # batches, where every rank then takes rank 0's (a broadcast): each such statement, with those tests
    rank_local_redraws: tuple[tuple[cst.BaseStatement, tuple[cst.If, ...]], ...] = ()
    # ``if d_acc <= d_thresh: d_loss.backward(); d_opt.step()``: a step run or not on a value read from this
    # rank's batches; it runs where the test holds on every rank, so that the gradient all-reduces stay paired
    rank_local_gates: tuple[cst.If, ...] = ()
    # ``while worse < patience:`` around a training step, the test read from this rank's batches (a patience
    # counter set on this rank's loss): every rank takes rank 0's decision, so that the ranks run as many passes
    rank_local_whiles: tuple[cst.While, ...] = ()


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    varying = ranks.rank_local(program.index, loaders)
    finder = _Finder(program, varying)
    for handler in finder.swallowed_steps():
        program.report(
            handler,
            SWALLOWED_STEP,
            "this handler catches an exception of the training step and the loop goes on: a rank that raises "
            "(out of memory, a bad batch) leaves the gradient all-reduce, and the other ranks wait in it for good; "
            "let it propagate, and torchrun stops every rank",
        )
    if not models.models:
        return Facts(tuple(finder.rank_local_exits()), rank_local=varying)
    return Facts(
        tuple(finder.rank_local_exits()),
        tuple(finder.plateau_metrics()),
        tuple(finder.rank_local_skips()),
        varying,
        tuple(finder.raised_skips()),
        tuple(finder.rank_local_redraws(models)),
        tuple(finder.rank_local_gates()),
        tuple(finder.rank_local_whiles()),
    )


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    """A rank-local exit is decided on rank 0 for every rank; a plateau scheduler steps on the mean of its
    metric over the ranks."""
    for node, tests in facts.rank_local_exits:
        if isinstance(node, cst.Raise):
            # ``if loss > 1e8: raise ...``: every rank raises where any rank would, as the one process did
            for test in tests:
                uniformity.decide_on_any_rank(plan, test.test)
            plan.change(
                node,
                "`raise` is decided by a value computed from this rank's batches: every rank raises where any rank "
                "would, so that no rank is left waiting in the next gradient all-reduce",
            )
            continue
        for test in tests:
            uniformity.decide_on_rank_zero(plan, test.test)
        keyword = "break" if isinstance(node, cst.Break) else "return"
        looks = any(_looks_at_files(plan.index, t.test) for t in tests)
        plan.change(
            node,
            f"`{keyword}` is decided by "
            + (
                "a look at a file, which each rank takes at its own moment"
                if looks
                else "a value computed from this rank's batches"
            )
            + ": every rank takes rank 0's decision, so that the ranks leave the training loop together",
        )
    for skip, tests in facts.rank_local_skips:
        for test in tests:
            uniformity.decide_on_any_rank(plan, test.test)
        plan.change(
            skip,
            "`continue` skips the backward pass on a value computed from this rank's batches: every rank skips "
            "the step where any rank does, so that the gradient all-reduces of the ranks stay paired",
        )
    for attempt, leaps in facts.raised_skips:
        _skip_where_any_rank_raised(plan, attempt, leaps)
    decided = {test for _, tests in (*facts.rank_local_exits, *facts.rank_local_skips) for test in tests}
    for drawn, tests in facts.rank_local_redraws:
        for test in tests:
            if test not in decided:
                decided.add(test)
                uniformity.decide_on_any_rank(plan, test.test)
        plan.change(
            drawn,
            "the weights are drawn again on a value computed from this rank's batches: every rank draws them where "
            "any rank would, so that the replicas keep the same weights",
        )
    for loop in facts.rank_local_whiles:
        if uniformity.decide_on_rank_zero(plan, loop.test):
            plan.change(
                loop,
                "whether the loop runs another pass is decided by a value computed from this rank's batches: every "
                "rank takes rank 0's decision, so that the ranks run as many training steps",
            )
    for gate in facts.rank_local_gates:
        if gate in decided:
            continue
        decided.add(gate)
        if uniformity.decide_on_every_rank(plan, gate.test):
            plan.change(
                gate,
                "whether this training step runs is decided by a value computed from this rank's batches: it runs "
                "where the test holds on every rank, so that the gradient all-reduces of the ranks stay paired",
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


def _skip_where_any_rank_raised(plan: EditPlan, attempt: cst.Try, leaps: tuple[cst.Continue | cst.Break, ...]) -> None:
    """``try: ... except E: continue`` -> a flag the handler sets, and ``if on_any_rank(flag): continue`` after
    the ``try``, so that every rank skips the step where any rank raised."""
    flag = fresh("skip_step", plan.index.identifiers)
    keyword = "continue" if isinstance(leaps[0], cst.Continue) else "break"
    plan.insert_before(attempt, cst.parse_statement(f"{flag} = False"))
    for leap in leaps:
        plan.replace(leap, lambda _: cast(cst.SimpleStatementLine, cst.parse_statement(f"{flag} = True")).body[0])
    plan.insert_after(attempt, cst.parse_statement(f"if {uniformity.on_any_rank(plan)}({flag}):\n    {keyword}\n"))
    plan.change(
        leaps[0],
        f"`{keyword}` after an exception is this rank's own: every rank skips the step where any rank raised, so "
        "that the gradient all-reduces of the ranks stay paired",
    )


class _Finder:
    def __init__(self, program: Program, rank_local: RankLocal) -> None:
        self.program = program
        self.index = program.index
        self.rank_local = rank_local

    def rank_local_exits(self) -> Iterator[tuple[cst.Break | cst.Return | cst.Raise, tuple[cst.If, ...]]]:
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
            exits = [node for node in index.walk(loop.body) if isinstance(node, (cst.Break, cst.Return, cst.Raise))]
            if not exits or not index.trains(loop.body):
                continue
            for node in exits:
                if node in found:
                    continue
                inner = next(index.enclosing_loops(node), None)
                if (
                    isinstance(node, cst.Break)
                    and inner is not loop
                    and inner is not None
                    and _runs_nothing(index, inner)
                ):
                    continue  # ``for token in row: if token == pad: break``: it leaves only a loop of its own
                tests = self._rank_local_tests(node, loop)
                if tests:
                    found.add(node)
                    yield node, tuple(tests)

    def swallowed_steps(self) -> Iterator[cst.ExceptHandler]:
        """``try: loss = model(x); loss.backward(); opt.step() / except Exception: continue`` in a training loop:
        each handler of a ``try`` around the step that catches what one rank alone may raise and does not raise
        again."""
        index = self.index
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            for attempt in index.walk(loop.body):
                if not (
                    isinstance(attempt, cst.Try)
                    and next(index.enclosing_loops(attempt), None) is loop
                    and index.trains(attempt.body)
                ):
                    continue
                for handler in attempt.handlers:
                    if not _not_own(index, handler) and not any(
                        isinstance(node, cst.Raise) for node in index.walk(handler.body)
                    ):
                        yield handler

    def rank_local_skips(self) -> Iterator[tuple[cst.Continue, tuple[cst.If, ...]]]:
        """``if not torch.isfinite(loss): continue`` before the backward pass: the rank that skips joins the
        next step's gradient all-reduce while the others are in this one's."""
        index = self.index
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            last = _last_training_statement(index, loop)
            if last is None:
                continue
            for node in index.walk(loop.body):
                if not isinstance(node, cst.Continue) or index.order[index.statement_of(node)] > last:
                    continue
                tests = self._rank_local_tests(node, loop)
                if tests and next(index.enclosing_loops(node), None) is loop:
                    yield node, tuple(tests)

    def raised_skips(self) -> Iterator[tuple[cst.Try, tuple[cst.Continue | cst.Break, ...]]]:
        """``try: x, y = draw() / except IndexError: continue`` in a training loop, before its step: a rank
        that raises skips to the next step's gradient all-reduce while the others are in this one's.

        Only a ``try`` that every pass of the loop's body runs (in ``with`` and ``try`` blocks too, not under an
        ``if``), that holds no training step
        itself, and whose handlers all end in the same plain ``continue`` or ``break``; exhausting an iterator
        (``StopIteration``) and an interrupt are not this rank's own.
        """
        index = self.index
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            last = _last_training_statement(index, loop)
            for attempt in _run_unconditionally(loop.body):
                if not isinstance(attempt, cst.Try) or index.trains(attempt) or last is None:
                    continue
                if index.order[attempt] > last:
                    continue
                leaps = [_ends_in_leap(handler) for handler in attempt.handlers]
                if (
                    leaps
                    and None not in leaps
                    and len({type(leap) for leap in leaps}) == 1
                    and not any(_not_own(index, handler) for handler in attempt.handlers)
                ):
                    yield attempt, tuple(cast(list[cst.Continue | cst.Break], leaps))

    def rank_local_redraws(self, models: model.Facts) -> Iterator[tuple[cst.BaseStatement, tuple[cst.If, ...]]]:
        """The statements that draw a wrapped model's weights again under tests read from this rank's batches: a
        rank that skips the draw trains on other weights from then on (DDP averages gradients, never weights),
        and skips the broadcast of rank 0's that follows an unseeded draw."""
        seen: set[cst.BaseStatement] = set()
        for trained in models.models:
            for drawn in [*(stmt for stmt, _ in trained.redrawn), *trained.redrawn_seeded]:
                loop = next(self.index.enclosing_loops(drawn), None)
                if drawn in seen or loop is None:
                    continue
                seen.add(drawn)
                tests = self._rank_local_tests(drawn, loop)
                if tests:
                    yield drawn, tuple(tests)

    def rank_local_gates(self) -> Iterator[cst.If]:
        """``if d_acc <= d_thresh:`` around a backward pass in a training loop, the test read from this rank's
        batches: a rank that skips the step meets the others' gradient all-reduces with its next one."""
        index = self.index
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            for node in index.walk(loop.body):
                if (
                    isinstance(node, cst.If)
                    and next(index.enclosing_loops(node), None) is loop
                    and (index.trains(node.body) or (node.orelse is not None and index.trains(node.orelse)))
                    and self.rank_local.reads(node.test, loop)
                ):
                    yield node

    def rank_local_whiles(self) -> Iterator[cst.While]:
        """``while worse < patience:`` around a training step, the test read from this rank's batches: a rank
        that leaves the loop first leaves the others waiting in their next gradient all-reduce."""
        index = self.index
        for loop in index.loops:
            if isinstance(loop, cst.While) and index.trains(loop.body) and self.rank_local.reads(loop.test, loop):
                yield loop

    def _rank_local_tests(self, node: cst.CSTNode, loop: cst.For | cst.While) -> list[cst.If]:
        """The tests between ``node`` and its innermost loop that read values of this rank's batches, outermost
        first."""
        tests: list[cst.If] = []
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef)):
                break
            if isinstance(ancestor, cst.If) and (
                self.rank_local.reads(ancestor.test, loop) or _looks_at_files(self.index, ancestor.test)
            ):
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


# Exceptions that every rank raises alike, or that stop every rank at once
_NOT_OWN = frozenset({"StopIteration", "StopAsyncIteration", "KeyboardInterrupt", "SystemExit", "GeneratorExit"})


# methods of strings, lists, dicts and tensors' ``item``/``tolist``, which run no model and no collective
_PLAIN_METHODS = frozenset(
    {"append", "extend", "insert", "replace", "join", "split", "strip", "lower", "upper", "item", "tolist"}
    | {"get", "format", "startswith", "endswith", "keys", "values", "items", "add", "update", "index", "count"}
)


def _runs_nothing(index: Index, loop: cst.For | cst.While) -> bool:
    """Whether ``loop`` calls only builtins and plain methods (``int(token)``, ``text.append(c)``): leaving it
    early on one rank changes no count of forwards or collectives between the ranks."""
    for node in index.walk(loop.body):  # (not its iterable, built once: ``tqdm(row)``)
        if not isinstance(node, cst.Call) or isinstance(index.parent(node), cst.WithItem):
            continue  # (a context entered, ``with torch.no_grad():``, runs nothing of the model)
        if isinstance(node.func, cst.Attribute):
            if node.func.attr.value not in _PLAIN_METHODS:
                return False
        elif not (names := index.qualified_names(node.func)) or not all(n.startswith("builtins.") for n in names):
            return False
    return True


def _ends_in_leap(handler: cst.ExceptHandler) -> cst.Continue | cst.Break | None:
    """The plain ``continue`` or ``break`` a handler's body ends with, alone on its line."""
    last = handler.body.body[-1]
    if isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1:
        leap = last.body[0]
        return leap if isinstance(leap, cst.Continue | cst.Break) else None
    return None


def _not_own(index: Index, handler: cst.ExceptHandler) -> bool:
    """Whether the handler catches an exception that is no one rank's own (``StopIteration``)."""
    caught = handler.type
    if caught is None:
        return False
    names = caught.elements if isinstance(caught, cst.Tuple) else [caught]
    return any({dotted(e.value if isinstance(e, cst.Element) else e).rsplit(".", 1)[-1]} & _NOT_OWN for e in names)


def _run_unconditionally(block: cst.BaseSuite) -> Iterator[cst.BaseStatement]:
    """The statements of ``block`` that each pass runs, inside its ``with`` and ``try`` blocks too."""
    if not isinstance(block, cst.IndentedBlock):
        return
    for stmt in block.body:
        yield stmt
        if isinstance(stmt, cst.With | cst.Try):
            yield from _run_unconditionally(stmt.body)


def _looks_at_files(index: Index, test: cst.BaseExpression) -> bool:
    """``if os.path.exists("stop"): break``: each rank looks at its own moment, and a file made meanwhile
    (by a person, or by another rank) stops one rank and not the others."""
    return any(isinstance(n, cst.Call) and queried(index, n) is not None for n in index.walk(test))


def _last_training_statement(index: Index, loop: cst.For | cst.While) -> int | None:
    """The source order of the last simple statement of ``loop``'s body that trains (its step), if any."""
    return max(
        (
            index.order[stmt]
            for stmt in index.walk(loop.body)
            if isinstance(stmt, cst.SimpleStatementLine) and index.trains(stmt)
        ),
        default=None,
    )
