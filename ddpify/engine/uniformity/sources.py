"""Where a value that differs between processes comes from: the clock, an id of the process, an unseeded draw.

The same program runs once per rank. A call to the clock or for a fresh id
gives each process its own value whatever the program does. A draw from a
global random number generator (torch's, numpy's or ``random``'s) gives every
rank the same value once that generator has been seeded alike on every rank
before it, and each rank its own otherwise. :func:`per_process` answers for
one call; :class:`Seeding` answers "has this generator always been seeded when
this runs", following the program's own functions and their callers.
"""

from __future__ import annotations

import libcst as cst

from ddpify.engine.index import Index, Scope
from ddpify.engine.syntax import argument

# Calls whose value is each process's own, whatever the program does.
CLOCKS = frozenset(
    {
        "datetime.datetime.now",
        "datetime.datetime.today",
        "datetime.datetime.utcnow",
        "time.time",
        "time.time_ns",
        "time.strftime",
        "time.localtime",
        "time.ctime",
        "time.asctime",
        "time.perf_counter",
        "time.monotonic",
        "time.process_time",
    }
)
PROCESS_IDS = frozenset({"uuid.uuid1", "uuid.uuid4", "os.getpid", "secrets.token_hex", "secrets.token_urlsafe"})

# Seeds that seed every library's generator at once, and what seeds each global generator.
SEED_EVERYTHING = frozenset(
    {
        "lightning.seed_everything",
        "lightning.pytorch.seed_everything",
        "pytorch_lightning.seed_everything",
        "lightning.fabric.utilities.seed.seed_everything",
        "transformers.set_seed",
        "accelerate.utils.set_seed",
    }
)
GLOBAL_SEEDS = SEED_EVERYTHING | {"torch.manual_seed", "torch.random.manual_seed"}
RNG_SEEDS = {
    "torch": GLOBAL_SEEDS,
    "numpy": SEED_EVERYTHING | {"numpy.random.seed"},
    "random": SEED_EVERYTHING | {"random.seed"},
}
# torch's functions that draw from its global generator unless handed their own (``generator=``).
GLOBAL_TORCH_DRAWS = frozenset(
    f"torch.{name}"
    for name in (
        "randperm",
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "multinomial",
        "bernoulli",
        "normal",
    )
)
# numpy.random functions that draw nothing from the global generator (a seeded generator is the program's own).
NUMPY_GENERATORS = frozenset(f"numpy.random.{name}" for name in ("RandomState", "default_rng", "Generator"))
NOT_NUMPY_DRAWS = NUMPY_GENERATORS | frozenset(f"numpy.random.{name}" for name in ("seed", "SeedSequence", "get_state"))
NOT_RANDOM_DRAWS = frozenset({"random.seed", "random.Random", "random.SystemRandom", "random.getstate"})


def rng_family(index: Index, call: cst.Call) -> str:
    """``torch``, ``numpy`` or ``random`` when ``call`` draws from that global generator; '' otherwise."""
    for name in sorted(index.qualified_names(call.func)):
        if name in GLOBAL_TORCH_DRAWS and argument(call, "generator") is None:
            return "torch"
        if name.startswith("numpy.random.") and name not in NOT_NUMPY_DRAWS:
            return "numpy"
        if name.startswith("random.") and name not in NOT_RANDOM_DRAWS:
            return "random"
    return ""


# Draws of one number or one choice: the settings of a random search, not data.
SCALAR_DRAWS = frozenset(
    {
        "random.random",
        "random.randint",
        "random.randrange",
        "random.choice",
        "random.uniform",
        "random.getrandbits",
        "numpy.random.rand",
        "numpy.random.randint",
        "numpy.random.uniform",
        "numpy.random.choice",
        "numpy.random.random",
    }
)


def per_process(
    index: Index, call: cst.Call, seeding: Seeding | None = None, draws: frozenset[str] | None = None
) -> str:
    """Why ``call``'s value is each process's own ('' when every rank computes the same).

    A draw from a global generator (only those of ``draws`` when given) is each
    process's own unless that generator has always been seeded before it; with
    ``seeding`` None every draw counts as unseeded.
    """
    if index.is_call_to(call, CLOCKS):
        return "the clock"
    if index.is_call_to(call, PROCESS_IDS):
        return "an id of the process"
    if _steps_an_environment(index, call):
        return "a step of this process's own environment"
    if isinstance(call.func, cst.Name):  # ``get_timestamp()`` of the program: ``return datetime.now()...``
        returning = seeding.returning_the_clock() if seeding is not None else _functions_returning_the_clock(index)
        if returning and (made := _returns_the_clock(index, call, returning)):
            return made
    family = rng_family(index, call)
    if (
        family
        and (draws is None or index.is_call_to(call, draws))
        and (seeding is None or not seeding.seeded_before(call, family))
    ):
        return f"an unseeded draw from {family}'s generator"
    return ""


# Environments each process makes for itself: what they answer (``done`` at an episode's end) is its own.
ENVIRONMENTS = frozenset({"gym.make", "gymnasium.make", "gym.vector.make", "gymnasium.vector.make"})


def _steps_an_environment(index: Index, call: cst.Call) -> bool:
    """``env.step(action)`` or ``env.reset()`` of an environment made by ``gym.make(...)``."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in ("step", "reset")):
        return False
    ref = index.carried_ref(func.value, index.scope_of(call))
    if ref is None:
        return False
    return any(
        isinstance(value, cst.Call) and index.is_call_to(value, ENVIRONMENTS)
        for place in index.lineage(ref)
        for _, value in index.values_assigned(place)
    )


def _returns_the_clock(index: Index, call: cst.Call, returning: dict[cst.FunctionDef, str]) -> str:
    """``get_timestamp()``: a call of a function of ``returning`` (see :func:`_functions_returning_the_clock`);
    what it returns, '' otherwise."""
    resolved = index.resolve_callee(call, index.scope_of(call))
    if resolved is None or resolved[1] != 0 or resolved[0] not in returning:
        return ""
    return f"{returning[resolved[0]]} (through `{resolved[0].name.value}()`)"


def _functions_returning_the_clock(index: Index) -> dict[cst.FunctionDef, str]:
    """The functions of the program that return the clock or an id of the process in one of their ``return``s
    (``return datetime.now().strftime(...)``), each with what it returns: found from those calls, which are few,
    not by reading every function a call runs."""
    found: dict[cst.FunctionDef, str] = {}
    for call in index.calls:
        what = (
            "the clock"
            if index.is_call_to(call, CLOCKS)
            else "an id of the process"
            if index.is_call_to(call, PROCESS_IDS)
            else ""
        )
        if not what:
            continue
        returned = next((a for a in index.ancestors(call) if isinstance(a, cst.Return | cst.BaseStatement)), None)
        function = index.scope_of(returned) if isinstance(returned, cst.Return) else None
        if isinstance(function, cst.FunctionDef):
            found.setdefault(function, what)
    return found


class Seeding:
    """Whether a global generator has always been seeded, alike on every rank, when a statement runs."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._calls_in: dict[Scope, list[cst.Call]] | None = None
        self._returning: dict[cst.FunctionDef, str] | None = None

    def returning_the_clock(self) -> dict[cst.FunctionDef, str]:
        """:func:`_functions_returning_the_clock`, found once."""
        if self._returning is None:
            self._returning = _functions_returning_the_clock(self.index)
        return self._returning

    def calls_in(self, scope: Scope) -> list[cst.Call]:
        """The calls whose scope is ``scope``, in source order."""
        if self._calls_in is None:
            self._calls_in = {}
            for call in self.index.calls:
                self._calls_in.setdefault(self.index.scope_of(call), []).append(call)
        return self._calls_in.get(scope, [])

    def seeded_before(self, node: cst.CSTNode, family: str = "torch", depth: int = 0) -> bool:
        """Whether ``family``'s generator has always been seeded when ``node`` runs.

        A seed counts when it runs unconditionally earlier in ``node``'s own function
        (itself or through the program's functions it calls), or when every caller of
        that function has always seeded before calling it.
        """
        index = self.index
        seeds = RNG_SEEDS[family]
        scope = index.scope_of(node)
        for call in self.calls_in(scope):
            if (
                index.after(node, call)
                and self.seeds(call, seeds)
                and not any(
                    _decides(index, a, call) and not index.inside(node, a)
                    for a in index.ancestors(call)
                    if index.inside(a, scope) or scope is index.module
                )
            ):
                return True
        if not isinstance(scope, cst.FunctionDef) or depth > 4:
            return False
        if self._seeded_at_import(node, seeds):
            return True
        callers = index.callers(scope)
        return bool(callers) and all(self.seeded_before(caller, family, depth + 1) for caller in callers)

    def _seeded_at_import(self, node: cst.CSTNode, seeds: frozenset[str]) -> bool:
        """``random.seed(1143)`` at the top level of a module the program imports, before any statement there
        that runs the program's code: the module's functions run only after it, the import having finished."""
        index = self.index
        module = index.module_of(node)
        if module is index.module:
            return False  # the entry script's own top level trains too
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                    continue
                return False
            calls = [c for c in index.walk(stmt) if isinstance(c, cst.Call)]
            if any(index.is_call_to(c, seeds) for c in calls):
                return True
            if any(index.resolve_callee(c, module) is not None for c in calls):
                return False
        return False

    def seeds(self, node: cst.CSTNode, seeds: frozenset[str] = GLOBAL_SEEDS, depth: int = 0) -> bool:
        """Whether running the call ``node`` seeds a generator (through the program's own functions too)."""
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
            self.seeds(inner, seeds, depth + 1)
            for inner in index.walk(body)
            if isinstance(inner, cst.Call) and self._runs_whenever(inner, body)
        )

    def _runs_whenever(self, node: cst.CSTNode, block: cst.CSTNode) -> bool:
        """Whether ``node`` runs each time ``block`` does (no condition, loop or handler in between)."""
        for ancestor in self.index.ancestors(node):
            if ancestor is block:
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) or _decides(
                self.index, ancestor, node
            ):
                return False
        return False


def _decides(index: Index, statement: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether the compound ``statement`` decides if ``node``, inside it, runs: a condition or a loop does;
    a ``try`` does only for its handlers and its ``else`` (its body and ``finally`` run in order unless
    something raises, as the statements after it do)."""
    if isinstance(statement, (cst.Try, cst.TryStar)):
        final = statement.finalbody
        return not (index.inside(node, statement.body) or (final is not None and index.inside(node, final)))
    return isinstance(statement, (cst.If, cst.For, cst.While))
