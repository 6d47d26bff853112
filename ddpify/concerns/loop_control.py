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
import libcst.matchers as m

from ddpify.concerns import data, model
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan
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


def find(program: Program, models: model.Facts, loaders: data.Facts) -> Facts:
    training = [loader for loader in loaders.loaders if loader.training]
    return Facts(tuple(_Finder(program, training).rank_local_exits()))


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    """Nothing to rewrite: a rank-local exit is only reported."""


# Values that differ between processes whatever the data: clocks and unseeded randomness.
RANK_LOCAL_CALLS = frozenset(
    {
        "time.time",
        "time.perf_counter",
        "time.monotonic",
        "time.process_time",
        "random.random",
        "random.randint",
        "random.uniform",
        "random.choice",
        "numpy.random.rand",
        "numpy.random.randn",
        "numpy.random.randint",
        "numpy.random.random",
        "numpy.random.uniform",
        "numpy.random.choice",
        "torch.rand",
        "torch.randn",
        "torch.randint",
        "torch.randperm",
        "torch.rand_like",
        "torch.randn_like",
        "torch.bernoulli",
        "torch.multinomial",
        "torch.normal",
    }
)


class _Finder:
    def __init__(self, program: Program, training: list[data.Loader]) -> None:
        self.program = program
        self.index = program.index
        self.sites = [site for loader in training for site in loader.sites]
        self.loader_refs = frozenset(ref for loader in training for ref in loader.refs)
        # the script's functions that draw training batches: what they return is this rank's
        self.drawing = {scope for site in self.sites if isinstance(scope := self.index.scope_of(site), cst.FunctionDef)}

    def rank_local_exits(self) -> Iterator[cst.Break | cst.Return]:
        """``if loss.item() < tol: break`` -- each rank decides on its own shard, and the others hang.

        A value is rank-local when it comes from this rank's training batches (through
        assignments, the script's functions that draw them, or calls handed the training
        loader), a clock or an unseeded random draw. An evaluation over a loader without a
        DistributedSampler sees the full set through the same weights on every rank, so a
        decision drawn from it is the same everywhere.
        """
        index = self.index
        reported: set[cst.CSTNode] = set()
        for loop in index.loops:
            if not index.trains(loop.body):
                continue
            local = self._rank_local_names(loop)
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

    def _rank_local_names(self, loop: cst.For | cst.While) -> set[str]:
        index = self.index
        local: set[str] = set()
        for site in self.sites:
            if site is not loop and not index.inside(site, loop):
                continue
            if isinstance(site, cst.For):
                targets: list[cst.CSTNode] = [site.target]
                if m.matches(site.iter, m.Call(func=m.Name("enumerate"))) and isinstance(site.target, cst.Tuple):
                    targets = [e.value for e in site.target.elements[1:]]  # the batch counter is the same everywhere
            else:
                drawn = next((a for a in index.ancestors(site) if isinstance(a, cst.Assign)), None)
                targets = [t.target for t in drawn.targets] if drawn is not None else []
            local |= {n.value for t in targets for n in index.walk(t) if isinstance(n, cst.Name)}
        assignments = [n for n in index.walk(loop.body) if isinstance(n, (cst.Assign, cst.AugAssign))]
        for _ in range(3):
            for assign in assignments:
                if self._reads_rank_local(assign.value, local):
                    targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
                    local |= {n.value for t in targets for n in index.walk(t) if isinstance(n, cst.Name)}
        return local

    def _reads_rank_local(self, expr: cst.CSTNode, local: set[str]) -> bool:
        index = self.index
        for node in index.walk(expr):
            if isinstance(node, cst.Name) and node.value in local:
                parent = index.parent(node)
                if not (isinstance(parent, cst.Attribute) and parent.attr is node) and not self._rebound(node, local):
                    return True
            if isinstance(node, cst.Call):
                if index.is_call_to(node, RANK_LOCAL_CALLS):
                    return True
                callee = index.resolve_callee(node, index.scope_of(node))
                if callee is not None and self._draws_batches(callee[0]):
                    return True
                if any(index.carried_ref(arg.value, index.scope_of(node)) in self.loader_refs for arg in node.args):
                    return True  # handed the training loader: it reads this rank's shard
        return False

    def _rebound(self, name: cst.Name, local: set[str]) -> bool:
        """Whether ``name`` is read inside a loop or comprehension over other data that binds it anew.

        ``for xb, yb in val_loader:`` reuses the training batch's names for the
        validation batch; inside that loop they hold the full set's batches.
        """
        index = self.index
        for ancestor in index.ancestors(name):
            if isinstance(ancestor, cst.For) and ancestor not in self.sites and index.inside(name, ancestor.body):
                bound, data = ancestor.target, ancestor.iter
            elif isinstance(ancestor, (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)):
                bound, data = ancestor.for_in.target, ancestor.for_in.iter
            else:
                continue
            over_local = any(isinstance(n, cst.Name) and n.value in local for n in index.walk(data))
            if not over_local and any(isinstance(n, cst.Name) and n.value == name.value for n in index.walk(bound)):
                return True
        return False

    def _draws_batches(self, function: cst.FunctionDef, depth: int = 0) -> bool:
        """Whether ``function`` draws training batches, itself or through the script's functions it calls."""
        if function in self.drawing:
            return True
        if depth > 3:
            return False
        index = self.index
        for node in index.walk(function.body):
            if isinstance(node, cst.Call):
                callee = index.resolve_callee(node, index.scope_of(node))
                if callee is not None and callee[0] is not function and self._draws_batches(callee[0], depth + 1):
                    return True
        return False
