"""Global RNGs seeded alike on every rank: ``random_split`` seeds and the draws of a script's own sampler.

The data must be the same on every rank before it is sharded: a
``random_split`` with no global seed set before it gets its own seeded
``generator=``, and a sampler whose indices or weights come from an unseeded
RNG is refused (by the finder, DDP202, with the reason found here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import libcst as cst

from ddpify.concerns.data.facts import RANDOM_SPLIT, Split
from ddpify.concerns.samplers import OwnSampler, rng_draws
from ddpify.engine.edits import EditPlan, insert_arg
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument
from ddpify.engine.uniformity.sources import GLOBAL_SEEDS, Seeding
from ddpify.engine.values import built_by


class Seeds:
    def __init__(self, index: Index) -> None:
        self.index = index
        self.seeding = Seeding(index)

    def unseeded_splits(self) -> Iterator[Split]:
        """``random_split`` without ``generator=`` and with no global seed set before it."""
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, RANDOM_SPLIT) or argument(call, "generator", 2) is not None:
                continue
            if any(arg.star for arg in call.args) or self.seeding.seeded_before(call):
                continue
            yield Split(call, self._script_seed(call))

    def _script_seed(self, split: cst.Call) -> str:
        """The seed the script gives torch later on, when it is a number or a module-level constant; else 0."""
        index = self.index
        for call in index.calls:
            if index.is_call_to(call, GLOBAL_SEEDS) and index.after(call, split) and call.args:
                value = call.args[0].value
                if isinstance(value, cst.Integer):
                    return value.value
                if isinstance(value, cst.Name):
                    constant = Ref(index.module, value.value)
                    assigned_before = [a for a in index.assignments_to(constant) if index.after(split, a)]
                    if (
                        index.ref_of(value, index.scope_of(split)) == constant
                        and assigned_before
                        and all(isinstance(value, cst.Integer) for _, value in index.values_assigned(constant))
                    ):
                        return value.value
        return "0"

    def unseeded_draw(self, own: OwnSampler) -> str:
        """Why the samplers' own arguments would differ between ranks: drawn from an RNG no seed was set for."""
        index = self.index
        for value in own.wrapped:
            built: list[cst.BaseExpression] = []
            built_by(index, value, trail=built)
            for draw, family in (d for b in built for d in rng_draws(index, b)):
                if not self.seeding.seeded_before(draw, family):
                    name = min(index.qualified_names(draw.func))  # the same name on every run
                    return (
                        f"the indices or weights it draws from come from `{name}` (line {index.position(draw)[0]}), "
                        f"unseeded: they would differ between ranks; seed {family}'s RNG the same way on every rank "
                        "before it"
                    )
        return ""


def seed_split(plan: EditPlan, split: Split) -> None:
    """Give ``random_split`` its own seeded generator, so that every rank splits the same way."""
    generator = cst.Arg(
        value=cst.parse_expression(f"torch.Generator().manual_seed({split.seed})"),
        keyword=cst.Name("generator"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    plan.replace(split.call, lambda n: insert_arg(cast(cst.Call, n), generator, len(cast(cst.Call, n).args)))
    if "torch" not in plan.index.bound[plan.index.module]:
        plan.need_import("torch")
    plan.change(
        split.call,
        f"random_split gets a generator seeded with {split.seed}: the global RNG is not seeded before it, "
        "so each rank would split differently",
    )
