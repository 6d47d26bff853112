"""Data drawn anew in every step: each rank seeds the generators it draws from with the seed plus its rank.

The finder tells which generators the step draws from (torch, numpy, ``random``, through the script's
own functions) and refuses a random value that decides the control flow; the rewrite seeds them right
before the training loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from ddpify.concerns.tensors.lineage import Refused, _code, _StepReader
from ddpify.engine.edits import EditPlan, statement
from ddpify.engine.index import Index


@dataclass(frozen=True)
class Reseed:
    """Data drawn from a random generator in every step: each rank seeds it differently before the loop."""

    loop: cst.BaseStatement  # the training loop: the seeds go right before it
    seeds: tuple[str, ...]  # the statements that reseed, one per library drawn from
    draws: tuple[str, ...]  # the calls that draw, for the report


RANDOM_TORCH = frozenset(
    f"torch.{name}"
    for name in ("normal", "bernoulli", "poisson", "multinomial", "rand_like", "randn_like", "randint_like")
)


def _is_draw(name: str) -> bool:
    return (
        name.startswith(("torch.rand", "numpy.random.", "random."))
        and name not in ("numpy.random.seed", "random.seed", "numpy.random.default_rng")
    ) or name in RANDOM_TORCH


def _library(name: str) -> str:
    return name.split(".", 1)[0]


def _draws(index: Index, call: cst.Call) -> bool:
    """``torch.randn(...)`` and other random draws: data made anew each step."""
    return any(_is_draw(n) for n in index.qualified_names(call.func))


class _DrawFinder(_StepReader):
    """Random draws in the training step, and the seeds that make them differ between the ranks."""

    def _draws(self, call: cst.Call, depth: int = 0) -> bool:
        """Whether ``call`` draws from a random generator, itself or in the script's function it runs."""
        index = self.index
        if _draws(index, call):
            return True
        callee = index.resolve_callee(call, index.scope_of(call))
        return (
            callee is not None
            and depth < 3
            and any(isinstance(n, cst.Call) and self._draws(n, depth + 1) for n in index.walk(callee[0].body))
        )

    def _libraries(self, call: cst.Call, depth: int = 0) -> set[str]:
        """The generators ``call`` draws from (``torch``, ``numpy``, ``random``), through the script's functions."""
        index = self.index
        found = {_library(name) for name in index.qualified_names(call.func) if _is_draw(name)}
        if any(a.keyword is not None and a.keyword.value == "generator" for a in call.args):
            raise Refused(call, f"`{_code(index, call)}` draws from a generator of its own, the same on every rank")
        callee = index.resolve_callee(call, index.scope_of(call))
        if callee is not None and depth < 3:
            for node in index.walk(callee[0].body):
                if isinstance(node, cst.Call):
                    found |= self._libraries(node, depth + 1)
        return found

    def _reseed(self, draws: list[cst.Call], step: cst.For | cst.While) -> Reseed:
        """Data drawn anew in each step: each rank reseeds the generators it comes from before the loop.

        The seed that each rank gets is the script's own plus the rank: torch's is read back with
        ``torch.initial_seed()``; numpy's and ``random``'s must be a number or a name set by
        ``np.random.seed(...)`` / ``random.seed(...)`` before the loop (unseeded, they differ per process
        already). A random value from one of those generators that decides the control flow of the step
        would then differ between the ranks, so that is refused.
        """
        index = self.index
        if self.setup.runs_before_setup(index, step):
            raise Refused(step, "the training loop runs before the process group is set up (at import time)")
        libraries: set[str] = set()
        for call in draws:
            libraries |= self._libraries(call)
        for node in (step, *index.walk(step)):
            tests = (
                [node.test]
                if isinstance(node, (cst.If, cst.While, cst.IfExp))
                else [node.iter]
                if isinstance(node, cst.For) and node is not step
                else []
            )
            for test in tests:
                if self._depends(test, step, lambda n: isinstance(n, cst.Call) and self._reseeded(n, libraries)):
                    raise Refused(
                        test,
                        f"a random value decides the control flow of the training step (`{_code(index, test)}`): "
                        "drawn differently on each rank, it would make them take different paths",
                        hazard=True,
                    )
        anchor = self._once_before(step)
        rank = f"{self.dist}.get_rank()"
        if index.module_of(anchor) is not index.module:  # other scripts may import it without a process group
            rank = f"({rank} if {self.dist}.is_initialized() else 0)"
        seeds: list[str] = []
        if "torch" in libraries:
            torch_name = self._imported_as("torch")
            seeds.append(f"{torch_name}.manual_seed({torch_name}.initial_seed() + {rank})")
        for library, seed_call in (("numpy", "numpy.random.seed"), ("random", "random.seed")):
            if library not in libraries:
                continue
            seeded = [c for c in index.calls if index.is_call_to(c, frozenset({seed_call})) and self._before(c, anchor)]
            if not seeded:
                continue  # never seeded: each process draws differently already
            value = seeded[-1].args[0].value if seeded[-1].args else None
            if not isinstance(value, (cst.Integer, cst.Name)) or (
                isinstance(value, cst.Name) and index.ref_of(value, index.scope_of(step)) is None
            ):
                raise Refused(seeded[-1], f"ddpify cannot seed `{_code(index, seeded[-1])}` differently per rank")
            seeds.append(f"{_code(index, seeded[-1].func)}({_code(index, value)} + {rank})")
        return Reseed(anchor, tuple(seeds), tuple(sorted({_code(index, c.func) for c in draws})))

    def _reseeded(self, call: cst.Call, libraries: set[str]) -> bool:
        """Whether ``call`` draws from a generator that each rank is about to seed apart (``random.random()``
        stays the same on every rank where only numpy's generator is reseeded)."""
        if not self._draws(call):
            return False
        try:
            return bool(self._libraries(call) & libraries)
        except Refused:
            return True

    def _callers_up(self, node: cst.CSTNode) -> list[cst.Call]:
        """The calls that run ``node``'s function, one per level up, while each level has a single caller."""
        index = self.index
        chain: list[cst.Call] = []
        scope = index.scope_of(node)
        while isinstance(scope, cst.FunctionDef) and len(chain) < 4:
            callers = index.callers(scope)
            if len(callers) != 1:
                break
            chain.append(callers[0])
            scope = index.scope_of(callers[0])
        return chain

    def _once_before(self, step: cst.For | cst.While) -> cst.BaseStatement:
        """Where the seeds go: before the training loop, or, where its function is called in a loop
        (``train(...)`` once per epoch), before that loop, so that each rank seeds once, not at every call
        (which would draw the same samples again each epoch)."""
        index = self.index
        anchor: cst.BaseStatement = step
        for call in self._callers_up(step):
            loops = list(index.enclosing_loops(call))
            if loops:
                anchor = loops[-1]
        return anchor

    def _before(self, seed: cst.Call, anchor: cst.CSTNode) -> bool:
        """Whether the ``seed`` call runs before ``anchor``: earlier in its function, or earlier in a
        function that calls it (``np.random.seed(0)`` in ``main`` before ``train(...)``)."""
        index = self.index
        places = [anchor, *self._callers_up(anchor)]
        return any(index.scope_of(seed) is index.scope_of(p) and index.after(p, seed) for p in places)

    def _imported_as(self, module: str) -> str:
        """The name the script imports ``module`` as."""
        for local, full in self.index.imports[self.index.module].items():
            if module in full and local in self.index.bound[self.index.module]:
                return local
        return module


def _without_leading(count: int) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A statement without the first ``count`` of its leading lines."""
    return lambda node: statement(node).with_changes(leading_lines=statement(node).leading_lines[count:])


def rewrite_reseed(reseed: Reseed, plan: EditPlan) -> None:
    """Seed each rank's generators differently right before the training loop."""
    lines = [statement(cst.parse_statement(f"{seed}\n")) for seed in reseed.seeds]
    if not lines:  # generators never seeded differ per process already
        plan.change(reseed.loop, f"data drawn in each step ({', '.join(reseed.draws)}): unseeded, it differs per rank")
        return
    note = cst.EmptyLine(
        comment=cst.Comment("# Each rank draws its own samples; the weights came from rank 0 in the wrap.")
    )
    # The blank lines above the loop go above the seeds; its own comments stay on it.
    blanks = list(itertools.takewhile(lambda line: line.comment is None, statement(reseed.loop).leading_lines))
    leading = [note]
    if blanks and not plan.before.get(reseed.loop):
        leading = [*blanks, note]
        plan.replace(reseed.loop, _without_leading(len(blanks)))
    lines[0] = lines[0].with_changes(leading_lines=leading)
    plan.insert_before(reseed.loop, *lines)
    plan.change(
        reseed.loop,
        f"data drawn in each step ({', '.join(reseed.draws)}): each rank seeds its generator with the seed plus "
        "its rank, so the ranks train on different samples (the global batch is world_size times larger)",
    )
