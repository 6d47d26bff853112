"""Values drawn per process that decide what every rank must do alike get rank 0's value on every rank.

Each process computes ``f"runs/{datetime.now():%Y%m%d-%H%M%S}"``, ``uuid.uuid4().hex`` or
``random.choice([5, 10])`` for itself. Where such a value names a file or folder, the ranks
write N run folders or race to create one; where it sets up an optimizer (a random search's
learning rate) the replicas drift apart; where it bounds a training loop, one rank stops
early and the others wait for it forever in the gradient all-reduce. Which values these are
is the rank-uniformity analysis's answer (:mod:`ddpify.engine.uniformity`); every rank then
takes rank 0's value::

    epochs = random.choice([5, 10, 20])
    ->  epochs = same_on_every_rank(random.choice([5, 10, 20]))

with ``same_on_every_rank`` (``dist.broadcast_object_list`` of rank 0's value) written
into the script. Limits: a value computed before the process group exists (at import
time) cannot be shared: a file name is reported (DDP507), a value that sets up an
optimizer or bounds a training loop refuses the conversion (DDP508). Values built from
it in other statements are followed within one function (and ``self`` fields of one class).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify.concerns import downloads, process_group
from ddpify.diagnostics import Code, Severity
from ddpify.engine import uniformity
from ddpify.engine.edits import EditPlan
from ddpify.engine.index import Index
from ddpify.engine.program import Program
from ddpify.engine.uniformity import files
from ddpify.engine.uniformity.sources import Seeding, per_process
from ddpify.result import Options

NAME_PER_RANK = Code(
    "DDP507",
    Severity.WARNING,
    "run_names",
    "a file or folder is named by the clock or at random before the process group exists: each rank names its own",
    "compute the name after the process group is set up (inside the function that trains), or pass it in",
)
TRAINING_PER_RANK = Code(
    "DDP508",
    Severity.ERROR,
    "run_names",
    "a value drawn from the clock or at random before the process group exists sets up an optimizer or bounds a "
    "training loop: each rank would train with its own",
    "draw it after the process group is set up (inside the function that trains), or seed the generator first",
)
STEPS_PER_RANK = Code(
    "DDP509",
    Severity.ERROR,
    "run_names",
    "a training loop ends on a value drawn anew on each rank at each pass (an action sampled in a rollout, an "
    "exploration draw): the ranks would run different numbers of training steps",
    "update on a fixed number of steps per round (collect the rollouts, then train), or seed the generators alike",
)
CODES = (NAME_PER_RANK, TRAINING_PER_RANK, STEPS_PER_RANK)


@dataclass(frozen=True)
class Facts:
    # ``run_dir = <per-process value>``, where the value decides what every rank must decide alike, and what
    names: tuple[tuple[cst.Assign, str], ...]
    # ``os.path.exists(path)`` in an ``if`` that then changes ``path``: another rank may change it first
    looks: tuple[cst.Call, ...] = ()


def find(program: Program, setup: process_group.Facts, fetches: downloads.Facts) -> Facts:
    index = program.index
    found: list[tuple[cst.Assign, str]] = []
    for value in uniformity.deciding_values(index):
        assign = value.assign
        if setup.runs_before_setup(index, assign):
            program.report(
                assign,
                NAME_PER_RANK if value.decides == uniformity.NAMES_A_PATH else TRAINING_PER_RANK,
                f"`{index.module.code_for_node(assign.targets[0].target)}` is drawn from the clock or at random before "
                f"the process group exists, and {value.decides}: each rank computes its own; compute it after "
                "the process group is set up",
            )
            continue
        found.append((assign, value.decides))
    for loop, draw in _loops_ended_by_draws(index):
        program.report(
            loop.test,
            STEPS_PER_RANK,
            f"this training loop ends on a value drawn on each rank at each pass (`{index.module_of(draw).code_for_node(draw)}`"
            f", line {index.position(draw)[0]}): the ranks would run different numbers of training steps and wait "
            "for each other forever in the gradient all-reduce; train on a fixed number of steps per round (collect "
            "the rollouts, then update), or seed the generator alike on every rank",
        )
    looks = tuple(
        call
        for call in files.raced_checks(index)
        if not setup.runs_before_setup(index, call)
        and not uniformity.in_worker_code(index, call)
        and not fetches.in_turns(index, call)  # rank 0 first, then the others: no race, and no collective
    )
    return Facts(tuple(found), looks)


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    if not facts.names and not facts.looks:
        return
    helper = uniformity.same_on_every_rank(plan)

    def shared(node: cst.CSTNode) -> cst.CSTNode:
        return cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, node))])

    for assign, decides in facts.names:
        plan.replace(assign.value, shared)
        target = plan.index.module.code_for_node(assign.targets[0].target)
        plan.change(assign, f"`{target}` {decides}: rank 0's value on every rank, not one per rank")
    for look in facts.looks:
        plan.replace(look, shared)
        plan.change(
            look,
            f"`{plan.index.module_of(look).code_for_node(look)}`: rank 0's answer on every rank, "
            "given before any rank changes that path",
        )


def _loops_ended_by_draws(index: Index) -> Iterator[tuple[cst.While, cst.Call]]:
    """``while not done:`` that trains, where ``done`` comes, within the loop's own body, from a draw
    that differs between ranks (``action = dist.sample()``, then ``state, reward, done = env.step(action)``):
    each rank would take its own number of passes, each with a backward pass."""
    seeding = Seeding(index)
    for loop in index.loops:
        if not isinstance(loop, cst.While) or not index.trains(loop.body):
            continue
        values: dict[str, list[cst.BaseExpression]] = {}
        for node in index.walk(loop.body):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    for name in index.walk(target.target):
                        if isinstance(name, cst.Name):
                            values.setdefault(name.value, []).append(node.value)
        wanted: list[cst.CSTNode] = [loop.test]
        seen: set[str] = set()
        found: cst.Call | None = None
        while wanted and found is None:
            for node in index.walk(wanted.pop()):
                if isinstance(node, cst.Call) and _draws(index, node, seeding, values):
                    found = node
                    break
                if isinstance(node, cst.Name) and node.value in values and node.value not in seen:
                    seen.add(node.value)  # what the loop's body assigned it, with what that was built from
                    wanted += values[node.value]
        if found is not None:
            yield loop, found


def _draws(index: Index, call: cst.Call, seeding: Seeding, values: dict[str, list[cst.BaseExpression]]) -> bool:
    """Whether ``call`` draws a value of its own on each rank: an unseeded draw from a global generator, or a
    sample of a torch distribution (``Categorical(logits=...).sample()``) where torch is not seeded."""
    if per_process(index, call, seeding):
        return True
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in ("sample", "rsample")):
        return False
    made = values.get(func.value.value, []) if isinstance(func.value, cst.Name) else [func.value]
    return any(
        isinstance(value, cst.Call)
        and any(q.startswith("torch.distributions.") for q in index.qualified_names(value.func))
        for value in made
    ) and not seeding.seeded_before(call, "torch")
