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

from ddpify.concerns.data.facts import GLOBAL_SEEDS, RANDOM_SPLIT, RNG_SEEDS, Split
from ddpify.concerns.samplers import OwnSampler, rng_draws
from ddpify.engine.edits import EditPlan, insert_arg
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument


class Seeds:
    def __init__(self, index: Index) -> None:
        self.index = index

    def unseeded_splits(self) -> Iterator[Split]:
        """``random_split`` without ``generator=`` and with no global seed set before it."""
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, RANDOM_SPLIT) or argument(call, "generator", 2) is not None:
                continue
            if any(arg.star for arg in call.args) or self._seeded_before(call, 0):
                continue
            yield Split(call, self._script_seed(call))

    def _seeds(self, node: cst.CSTNode, depth: int = 0, seeds: frozenset[str] = GLOBAL_SEEDS) -> bool:
        """Whether running the call ``node`` seeds the global RNG (through the script's own functions too)."""
        index = self.index
        if not isinstance(node, cst.Call):
            return False
        if index.is_call_to(node, seeds):
            return True
        callee = index.resolve_callee(node, index.scope_of(node))
        if callee is None or depth > 3:
            return False
        body = callee[0].body
        return any(
            self._seeds(inner, depth + 1, seeds)
            for inner in index.walk(body)
            if isinstance(inner, cst.Call) and self._runs_whenever(inner, body)
        )

    def _runs_whenever(self, node: cst.CSTNode, block: cst.CSTNode) -> bool:
        """Whether ``node`` runs each time ``block`` does (no condition, loop or handler in between)."""
        for ancestor in self.index.ancestors(node):
            if ancestor is block:
                return True
            if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
        return False

    def _seeded_before(self, node: cst.CSTNode, depth: int, seeds: frozenset[str] = GLOBAL_SEEDS) -> bool:
        """Whether a global seed has always been set when ``node`` runs."""
        index = self.index
        scope = index.scope_of(node)
        for call in index.calls:
            if (
                index.scope_of(call) is scope
                and index.after(node, call)
                and self._seeds(call, 0, seeds)
                and not any(
                    isinstance(a, (cst.If, cst.For, cst.While, cst.Try)) and not index.inside(node, a)
                    for a in index.ancestors(call)
                    if index.inside(a, scope) or scope is index.module
                )
            ):
                return True
        if not isinstance(scope, cst.FunctionDef) or depth > 4:
            return False
        callers = index.callers(scope)
        return bool(callers) and all(self._seeded_before(caller, depth + 1, seeds) for caller in callers)

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
                        and all(isinstance(a.value, cst.Integer) for a in index.assignments_to(constant))
                    ):
                        return value.value
        return "0"

    def unseeded_draw(self, own: OwnSampler) -> str:
        """Why the samplers' own arguments would differ between ranks: drawn from an RNG no seed was set for."""
        index = self.index
        for value in own.wrapped:
            ref = index.ref_of(value, index.scope_of(value))
            built = [a.value for a in index.assignments_to(ref)] if ref is not None else [value]
            for draw, family in (d for b in built if isinstance(b, cst.Call) for d in rng_draws(index, b)):
                if not self._seeded_before(draw, 0, RNG_SEEDS[family]):
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
