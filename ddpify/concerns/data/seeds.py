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

import ddpify.engine.match as m
from ddpify.concerns.data.facts import RANDOM_SPLIT, Loader, Order, Split
from ddpify.concerns.samplers import OwnSampler, rng_draws
from ddpify.engine.called import enclosing_function
from ddpify.engine.edits import EditPlan, fresh, insert_arg
from ddpify.engine.index import Index, Ref
from ddpify.engine.syntax import argument
from ddpify.engine.uniformity.sources import GLOBAL_SEEDS, Seeding, rng_family
from ddpify.engine.values import built_by, passed_values

# Draws that order or pick rows: what a data set built from them holds, and where.
PERMUTATIONS = frozenset(
    {
        "random.shuffle",
        "random.sample",
        "numpy.random.shuffle",
        "numpy.random.permutation",
        "numpy.random.choice",
        "torch.randperm",
    }
)
_TORCH_PERMUTATION = frozenset({"torch.randperm"})
_SHUFFLES = frozenset({"random.shuffle", "random.sample", "numpy.random.shuffle"})
# The module each global RNG is drawn through: where a seeded generator of its own comes from.
_RNG_MODULES = {"random": "random", "numpy": "numpy.random", "torch": "torch"}
# scikit-learn's splits and shuffles draw from numpy's global RNG unless given ``random_state``.
SKLEARN_DRAWS = frozenset(
    {
        "sklearn.model_selection.train_test_split",
        "sklearn.model_selection._split.train_test_split",
        "sklearn.utils.shuffle",
    }
)


class Seeds:
    def __init__(self, index: Index) -> None:
        self.index = index
        self.seeding = Seeding(index)
        self._run_per_step: dict[cst.FunctionDef, bool] = {}  # see _per_step
        self._values: dict[tuple[Ref, cst.CSTNode], list[tuple[cst.BaseExpression, cst.CSTNode]]] = {}

    def unseeded_splits(self) -> Iterator[Split]:
        """``random_split`` without ``generator=`` and with no global seed set before it."""
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, RANDOM_SPLIT) or argument(call, "generator", 2) is not None:
                continue
            if any(arg.star for arg in call.args) or self.seeding.seeded_before(call):
                continue
            yield Split(call, self._script_seed(call))

    def unseeded_orders(self, loaders: tuple[Loader, ...]) -> Iterator[Order]:
        """Unseeded draws that order or pick the rows of a training loader's data set: in the expressions
        it is built from, in-place shuffles of the names they read, and in the functions and constructors
        of the program those expressions call (never in ``__getitem__``: DataLoader workers run that)."""
        index = self.index
        self._run_per_step = {}  # (it holds for these loops only)
        found: dict[cst.Call, str] = {}  # each draw and its RNG, in the order found
        starts = [
            dataset.value
            for loader in loaders
            if loader.training and loader.stream is None and (dataset := argument(loader.call, "dataset", 0))
        ]
        steps: list[cst.CSTNode] = []  # the training loops: the draws of a step are per-step, not the data's
        if not any(loader.training for loader in loaders):
            # no DataLoader trains: what the training step hands its model (``model(features[idx])``), where
            # ``idx`` comes from a split drawn at start-up
            steps = [loop for loop in index.loops if index.trains(loop.body)]
            starts = list(self._training_inputs(steps))
        for start in starts:
            # (expression, the place in the program's flow it stands for: a seed set before it counts)
            wanted: list[tuple[cst.BaseExpression | cst.BaseSuite, cst.CSTNode]] = [(start, start)]
            seen: set[cst.CSTNode] = set()
            while wanted:
                expr, site = wanted.pop(0)
                if expr in seen or len(seen) > 200:
                    continue
                seen.add(expr)
                for node in index.walk(expr):
                    if isinstance(node, cst.Call):
                        if steps and self._per_step(node, steps):
                            continue  # ``corpus.window(...)`` at each step: its draws pick each step's batch
                        family = self._order_family(node)
                        if family and node not in found and not self._seeded(node, site, family):
                            found[node] = family
                        wanted += [(body, site) for body in self._bodies_run(node)]
                    elif isinstance(node, cst.Name) and index.names_a_variable(node):
                        wanted += self._values_of(node, site)
        for call, family in found.items():
            how = self._seeding_form(call)
            # a draw that runs once gets a generator of its own, seeded alike, where it draws; a shuffle that runs
            # again (a data set built anew each epoch shuffles its list again) draws from one generator its module
            # makes once, or each time round would give the same order. (A draw that picks from a range and runs
            # again is left: it may be a training step's, which the program's calls do not always show.)
            once = how == "random_state" or self._runs_once(call)
            if how and (once or self.index.is_call_to(call, _SHUFFLES)):
                yield Order(call, family, self._script_seed(call), how, once)

    def _per_step(self, node: cst.CSTNode, steps: list[cst.CSTNode]) -> bool:
        """Whether ``node`` may run at each training step: inside a training loop, in a generator, or in a
        function some call of which is."""
        index = self.index
        if any(index.inside(node, loop) for loop in steps):
            return True
        function = enclosing_function(index, node)
        if function is None:
            return False
        known = self._run_per_step.get(function)  # (the same for every node of the function)
        if known is None:
            self._run_per_step[function] = False  # (a recursion, or a function its callers reach again)
            known = self._run_per_step[function] = any(  # batches made as they are drawn
                isinstance(n, cst.Yield) for n in index.walk(function.body)
            ) or any(self._per_step(call, steps) for call in index.callers(function))  # ``sampler.next()``
        return known

    def _runs_once(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``node`` runs once in a run: outside loops and comprehensions, in a function (if any) that
        one call runs, itself run once."""
        index = self.index
        for ancestor in index.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While, cst.BaseComp, cst.Lambda)):
                return False
            if isinstance(ancestor, cst.FunctionDef):
                callers = index.callers(ancestor)
                return (
                    depth < 6
                    and len(callers) == 1
                    and not index.is_generator(ancestor)
                    and self._runs_once(callers[0], depth + 1)
                )
            if isinstance(ancestor, cst.ClassDef):
                return True
        return True

    def _training_inputs(self, steps: list[cst.CSTNode]) -> Iterator[cst.BaseExpression]:
        """What the training loops ``steps`` hand the program's own objects and functions (``model(features[idx])``,
        ``criterion(out, labels[idx])``): the training step's data."""
        index = self.index
        for loop in steps:
            for node in index.walk(cast(cst.For | cst.While, loop).body):
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Name | cst.Attribute)
                    and not index.qualified_names(node.func)
                ):
                    yield from (arg.value for arg in node.args if not arg.star)

    def _order_family(self, call: cst.Call) -> str:
        """The global RNG from which ``call`` orders or picks rows without a generator of its own; ''."""
        index = self.index
        if index.is_call_to(call, PERMUTATIONS):
            return rng_family(index, call)
        if index.is_call_to(call, SKLEARN_DRAWS) or any(
            name.startswith("sklearn.datasets.make_") for name in index.qualified_names(call.func)
        ):  # ``train_test_split(...)``, ``make_moons(n_samples=3000, noise=0.05)``
            shuffle = argument(call, "shuffle")
            unshuffled = shuffle is not None and m.matches(shuffle.value, m.Name("False"))
            return "" if argument(call, "random_state") is not None or unshuffled else "numpy"
        func = call.func
        if (  # pandas: ``frame.sample(frac=1)``, ``frame.sample(n=100)``
            isinstance(func, cst.Attribute)
            and func.attr.value == "sample"
            and not index.qualified_names(func)
            and any(a.keyword is not None and a.keyword.value in ("frac", "n") for a in call.args)
            and argument(call, "random_state") is None
        ):
            return "numpy"
        return ""

    def _seeded(self, draw: cst.Call, site: cst.CSTNode, family: str) -> bool:
        return self.seeding.seeded_before(draw, family) or self.seeding.seeded_before(site, family)

    def _seeding_form(self, call: cst.Call) -> str:
        """How ``call`` gets a seeded generator of its own ('' where it cannot be spelled here)."""
        index = self.index
        if index.is_call_to(call, _TORCH_PERMUTATION):
            return "generator"
        if not index.is_call_to(call, PERMUTATIONS):
            return "random_state"
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, (cst.Name, cst.Attribute)):
            return "rng"  # ``random.shuffle``, ``np.random.permutation``
        module = _RNG_MODULES[rng_family(index, call)].split(".")[0]
        if module not in index.bound[index.module_of(call)] or index.imports[index.module_of(call)].get(module) == {
            module
        }:
            return "rng"  # ``shuffle(files)`` after ``from random import shuffle``: through the module
        return ""

    def _bodies_run(self, call: cst.Call) -> list[cst.BaseSuite]:
        """The bodies of the program's function, or class's ``__init__``, that ``call`` runs."""
        index = self.index
        cls = index.local_class(call.func)
        if cls is not None:
            init = index.method(cls, "__init__")
            return [init.body] if init is not None else []
        callee = index.runs(call, index.scope_of(call))
        return [callee[0].body] if callee is not None else []

    def _values_of(self, name: cst.Name, site: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        """What ``name`` is assigned, and the in-place shuffles of it (outside loops) before ``site``."""
        index = self.index
        ref = index.ref_of(name, index.scope_of(name))
        if ref is None:
            return []
        known = self._values.get((ref, site))  # a name read again and again: its values once per site
        if known is None:
            known = self._values[(ref, site)] = self._values_of_ref(ref, site)
        return known

    def _values_of_ref(self, ref: Ref, site: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        index = self.index
        values: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        for scope in index.scopes_reading(ref):
            for read in index.mentions(scope, ref):
                # ``rows = ...``, ``train, val = train_test_split(rows)``: what the assignment stores
                target = next((a for a in index.ancestors(read) if isinstance(a, cst.AssignTarget)), None)
                assign = index.parent(target)
                if isinstance(assign, cst.Assign) and assign.value not in (v for v, _ in values):
                    values.append((assign.value, assign.value))
                    continue
                # ``for cluster in clusters:``: the items of what it iterates
                loop = next((a for a in index.ancestors(read) if isinstance(a, cst.For | cst.CompFor)), None)
                if (
                    loop is not None
                    and (read is loop.target or index.inside(read, loop.target))
                    and loop.iter not in (v for v, _ in values)
                ):
                    values.append((loop.iter, loop.iter))
                    continue
                arg = index.parent(read)
                call = index.parent(arg)
                if (
                    isinstance(arg, cst.Arg)
                    and isinstance(call, cst.Call)
                    and call.args[0] is arg
                    and index.after(site, call)
                    and not any(True for _ in index.enclosing_loops(call))
                ):
                    values.append((call, call))
        if not values:  # a parameter: what every call passes for it
            values += [(value, value) for value in passed_values(index, ref) or ()]
        return values

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


def seed_order(plan: EditPlan, order: Order, generators: dict[tuple[cst.Module, str], str]) -> None:
    """Give a draw that orders or picks a training data set's rows its own seeded generator (``generators``:
    the generators made once in a module so far, by module and RNG)."""
    index = plan.index
    call = order.call
    # the same name however the script imports it
    name = min(index.qualified_names(call.func), default=index.module_of(call).code_for_node(call.func))
    if not order.once:
        _draw_from_the_module_generator(plan, order, name, generators)
        return
    if order.how == "generator":
        value = f"torch.Generator().manual_seed({order.seed})"
        keyword = "generator"
        if "torch" not in index.bound[index.module_of(call)]:
            plan.need_import("torch")
    elif order.how == "random_state":
        value, keyword = order.seed, "random_state"
    else:
        maker = "Random" if order.family == "random" else "default_rng"
        if isinstance(call.func, cst.Attribute):
            rng = cst.Call(cst.Attribute(call.func.value, cst.Name(maker)), [cst.Arg(cst.parse_expression(order.seed))])
            method = call.func.attr
        else:  # a name imported from the module: the module's own generator
            module = _RNG_MODULES[order.family]
            if module.split(".")[0] not in index.bound[index.module_of(call)]:
                plan.need_import(module.split(".")[0])
            rng = cast(cst.Call, cst.parse_expression(f"{module}.{maker}({order.seed})"))
            method = cst.Name(cast(cst.Name, call.func).value)

        def seeded(node: cst.CSTNode) -> cst.CSTNode:
            return cast(cst.Call, node).with_changes(func=cst.Attribute(rng, method))

        plan.replace(call, seeded)
        plan.change(call, _order_summary(name, f"a generator of its own seeded with {order.seed}", order.family))
        return
    arg = cst.Arg(
        value=cst.parse_expression(value),
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), arg, len(cast(cst.Call, n).args)))
    plan.change(call, _order_summary(name, f"{keyword}={value}", order.family))


def _draw_from_the_module_generator(
    plan: EditPlan, order: Order, name: str, generators: dict[tuple[cst.Module, str], str]
) -> None:
    """``data_rng.shuffle(files)``, after ``data_rng = random.Random(0)`` among the module's first statements: a
    draw that runs more than once draws anew each time, alike on every rank."""
    index = plan.index
    call = order.call
    module = index.module_of(call)
    key = (module, order.family)
    seed = order.seed if order.seed.isdigit() else "0"  # (a constant the module may define further down)
    rng = generators.get(key)
    if rng is None:
        used = set(index.bound[module]) | set(generators.values())
        rng = generators[key] = fresh("data_generator" if order.how == "generator" else "data_rng", used)
        if order.how == "generator":
            maker = f"torch.Generator().manual_seed({seed})"
            if "torch" not in index.bound[module]:
                plan.need_import("torch")
        else:
            spelled = _RNG_MODULES[order.family]
            if isinstance(call.func, cst.Attribute):
                spelled = module.code_for_node(call.func.value)
            elif spelled.split(".")[0] not in index.bound[module]:
                plan.need_import(spelled.split(".")[0])
            maker = f"{spelled}.{'Random' if order.family == 'random' else 'default_rng'}({seed})"
        made = cst.parse_statement(f"{rng} = {maker}\n")
        comment = "# the data order's own generator, seeded alike on every rank: each call draws anew"
        plan.insert_before(
            _after_the_imports(index, module, call),
            cast(cst.SimpleStatementLine, made).with_changes(
                leading_lines=[cst.EmptyLine(), cst.EmptyLine(), cst.EmptyLine(comment=cst.Comment(comment))]
            ),
        )
    if order.how == "generator":
        arg = cst.Arg(
            value=cst.Name(rng),
            keyword=cst.Name("generator"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), arg, len(cast(cst.Call, n).args)))
    else:
        method = call.func.attr if isinstance(call.func, cst.Attribute) else cst.Name(cast(cst.Name, call.func).value)
        plan.replace(call, lambda n: cast(cst.Call, n).with_changes(func=cst.Attribute(cst.Name(rng), method)))
    plan.change(call, _order_summary(name, f"a generator its module makes once, seeded with {seed}", order.family))


def _after_the_imports(index: Index, module: cst.Module, draw: cst.CSTNode) -> cst.BaseStatement:
    """The first of ``module``'s statements after its last import, or the one holding ``draw`` if that comes
    first."""
    body = list(module.body)
    last_import = max(
        (
            i
            for i, stmt in enumerate(body)
            if isinstance(stmt, cst.SimpleStatementLine)
            and any(isinstance(s, cst.Import | cst.ImportFrom) for s in stmt.body)
        ),
        default=-1,
    )
    holding = next(i for i, stmt in enumerate(body) if stmt is draw or index.inside(draw, stmt))
    return body[min(last_import + 1, holding)]


def _order_summary(name: str, what: str, family: str) -> str:
    return (
        f"`{name}` gets {what}: {family}'s RNG is not seeded before it, so each rank would "
        "build its training data differently and the shards would overlap"
    )
