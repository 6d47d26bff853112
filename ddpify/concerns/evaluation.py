"""Evaluation: with ``--shard-eval``, each rank evaluates its share and the sums are combined.

Without the option nothing changes: every rank evaluates the whole set through
the same weights, so its numbers are the single-process ones (correct, not
faster). With it, an evaluation ``DataLoader`` (one whose batches never reach
a backward pass) gets ``DistributedSampler(shuffle=False)``, and the sums and
counts its loop accumulates are added up over all ranks right after the loop,
before anything reads them, so every rank prints, compares and returns the
same whole-set metric (an early stop or a best-model choice agrees
everywhere)::

    loader = DataLoader(val_set, batch_size=256)
    ->  loader = DataLoader(val_set, batch_size=256, sampler=DistributedSampler(val_set, shuffle=False))

    correct, total = 0, 0                      correct, total = 0, 0
    for x, y in loader:                        for x, y in loader:
        correct += (pred(x) == y).sum()   ->       correct += (pred(x) == y).sum()
        total += len(y)                            total += len(y)
                                               correct, total = sum_over_ranks(correct, total)
    acc = correct / total                      acc = correct / total

``sum_over_ranks`` is a small helper emitted next to the setup: it adds up
numbers and tensors of any shape in one ``all_reduce`` and gives each back in
its own type (an ``int`` count stays an ``int``, a CUDA tensor stays on its
GPU). ``len(loader)`` in the loop's function but outside the loop
(``loss_sum / len(loader)``, an average of per-batch means) becomes the number
of batches over all ranks; a batch count taken in another function is not
followed.

A ``DistributedSampler`` gives every rank the same number of samples, so it
repeats up to ``world size - 1`` samples when the set does not divide evenly:
equal batch counts keep any collective in the forward pass matched on every
rank, and the price is that the summed metrics include those few repeated
samples. A count the script accumulates itself (``total += y.size(0)``) counts
them too, so an average stays an average (over the padded set); a division by
``len(loader.dataset)`` is off by at most ``world size - 1`` samples. When the
set divides evenly by the world size, the metrics are exactly the
single-process ones.

Recognised: a ``for`` loop over the loader (also through ``enumerate``,
``iter`` or a progress bar) whose state after the loop is only names set to
zero before it and increased with ``+=`` (or ``x = x + ...``), Python numbers
or tensors. Anything else -- predictions appended to a list, a running-average
object, ``torch.cat`` onto a tensor, the last batch's loss read after the
loop, a state carried from batch to batch (an RNN's hidden state), a loader
also drawn with ``next()`` or in a comprehension or with its own sampler, a
loop also handed data that is not a sharded loader, an evaluation run only
when a condition on this rank's training batches or a clock holds (the ranks
would not all reach the sum) -- is refused (DDP220, an error naming the line
and what it keeps) rather than guessed: convert without ``--shard-eval``, or
accumulate sums and counts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.concerns import data
from ddpify.diagnostics import Code, Severity
from ddpify.engine.called import enclosing_function
from ddpify.engine.edits import EditPlan, fresh, insert_arg, statement
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, assigned, parameter_names
from ddpify.engine.uniformity.batches import RankLocal
from ddpify.engine.values import spread_values
from ddpify.result import Options

NOT_SHARDABLE = Code(
    "DDP220",
    Severity.ERROR,
    "evaluation",
    "--shard-eval: an evaluation loop whose results are not sums and counts ddpify can add up over the ranks",
    "accumulate sums and counts from zero (`correct += ...`, `total += ...`) and divide after the loop, "
    "or convert without --shard-eval (every rank then evaluates the whole set)",
)
CODES = (NOT_SHARDABLE,)


@dataclass(frozen=True)
class Loop:
    """A ``for`` loop over an evaluation loader."""

    loop: cst.For
    sums: tuple[str, ...]  # names set to zero before the loop and increased in it, in the order they start
    batch_counts: tuple[cst.Call, ...] = ()  # ``len(loader)`` outside the loop, in its function
    problem: str | None = None  # why its results cannot be added up over the ranks
    # the program adds up its results over the ranks itself after the loop (``reduce_value(correct)``, whose
    # ``dist.all_reduce`` runs where a group exists): its loader must be sharded, and nothing added
    reduced: bool = False


@dataclass(frozen=True)
class Loader:
    call: cst.Call
    loops: tuple[Loop, ...]
    spread: cst.Arg | None = None  # ``DataLoader(ds, **kwargs)``: the ``**kwargs`` argument
    problem: tuple[cst.CSTNode, str] | None = None  # where and why it cannot be sharded


@dataclass(frozen=True)
class Facts:
    loaders: tuple[Loader, ...]


# The collectives that add up (or gather) every rank's values: a program that calls them on what its
# evaluation loop left expects each rank to have evaluated its own share.
_SUMMING_COLLECTIVES = frozenset(
    {
        "torch.distributed.all_reduce",
        "torch.distributed.reduce",
        "torch.distributed.all_gather",
        "torch.distributed.all_gather_object",
        "torch.distributed.all_gather_into_tensor",
    }
)
# Objects whose method calls in an evaluation loop are output, not results: progress bars, trackers, loggers.
OUTPUT_FACTORIES = torch_api.PROGRESS_BARS | torch_api.TRACKER_FACTORIES | torch_api.LOGGER_FACTORIES
TENSOR_ZEROS = frozenset({"torch.zeros", "torch.tensor", "torch.zeros_like", "torch.as_tensor"})
# Method calls on ``self.<field>`` that keep results in the object.
COLLECTING_METHODS = frozenset({"append", "extend", "insert", "update", "add", "add_", "accumulate"})


def find(program: Program, loaders: data.Facts) -> Facts:
    finder = _Finder(program, loaders)
    return Facts(tuple(finder.evaluation_loaders()))


class _Finder:
    def __init__(self, program: Program, loaders: data.Facts) -> None:
        self.index = program.index
        self.loaders = loaders
        # Every place holding a DataLoader that will draw a per-rank share (training ones always do).
        self.shared_refs = frozenset(ref for loader in loaders.loaders for ref in loader.refs)
        training = [loader for loader in loaders.loaders if loader.training]
        self.rank_local = RankLocal(
            self.index,
            [site for loader in training for site in loader.sites],
            frozenset(ref for loader in training for ref in loader.refs),
            frozenset(loader.call for loader in training),
        )
        self._loops: dict[cst.For, Loop] = {}

    def evaluation_loaders(self) -> Iterator[Loader]:
        for loader in self.loaders.loaders:
            if loader.training or not loader.refs:
                continue
            loops: list[Loop] = []
            problem: tuple[cst.CSTNode, str] | None = self._sampling_problem(loader)
            for site, ref in self._sites(loader.refs):
                if isinstance(site, cst.For) and ref is not None:
                    loops.append(self._loop(site, ref, loader.refs))
                elif problem is None:
                    problem = (
                        site,
                        "--shard-eval: this evaluation DataLoader is also drawn here outside a `for` loop "
                        "(`next()`, a comprehension), where its share could not be added up over the ranks",
                    )
            if loops:
                yield Loader(loader.call, tuple(loops), loader.spread, problem)

    def _sampling_problem(self, loader: data.Loader) -> tuple[cst.CSTNode, str] | None:
        call = loader.call
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if arg.star == "*":
                return arg, "--shard-eval: cannot add a sampler to a DataLoader built from `*args`"
            if keyword in torch_api.DATALOADER_SAMPLING_KEYWORDS or (
                keyword is None and not arg.star and position >= torch_api.DATALOADER_POSITIONS["sampler"]
            ):
                return arg, "--shard-eval: this evaluation DataLoader already has its own sampler"
        if argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"]) is None:
            return call, "--shard-eval: cannot find the dataset this evaluation DataLoader reads"
        if loader.spread is not None:
            keys = loader.spread_keys
            # ``shuffle=False`` may stand beside the sampler added; anything else in the dict may not
            shuffles = (spread_values(self.index, call, "shuffle") if keys is not None else None) or ()
            if (
                keys is None
                or keys & torch_api.DATALOADER_SAMPLING_KEYWORDS
                or not all(m.matches(s, m.Name("False")) for s in shuffles)
            ):
                return (
                    loader.spread,
                    "--shard-eval: the `**` arguments of this evaluation DataLoader may hold a sampler",
                )
        return None

    def _sites(self, refs: frozenset[Ref]) -> Iterator[tuple[cst.CSTNode, Ref | None]]:
        """Where batches are drawn from the loader: ``for`` loops (with the place they draw from),
        comprehensions and ``next()`` calls."""
        index = self.index
        for loop in index.loops:
            if isinstance(loop, cst.For):
                ref = self._iterated(loop.iter, index.scope_of(loop), refs)
                if ref is not None:
                    yield loop, ref
        for comprehension in index.comprehensions:
            if self._iterated(comprehension.iter, index.scope_of(comprehension), refs) is not None:
                yield comprehension, None
        for call in index.calls:
            if (
                m.matches(call.func, m.Name("next"))
                and call.args
                and index.carried_ref(call.args[0].value, index.scope_of(call)) in refs
            ):
                yield call, None

    def _iterated(self, expr: cst.BaseExpression, scope: Scope, refs: frozenset[Ref]) -> Ref | None:
        """The loader's place that ``for ... in expr`` draws from: ``loader``, ``enumerate(loader)``, ``tqdm(loader)``."""
        ref = self.index.carried_ref(expr, scope)
        if ref in refs:
            return ref
        if isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("enumerate")) and expr.args:
            return self._iterated(expr.args[0].value, scope, refs)
        return None

    def _loop(self, loop: cst.For, ref: Ref, refs: frozenset[Ref]) -> Loop:
        if loop not in self._loops:
            found = _LoopReader(self.index, loop, refs).read()
            if found.problem is None:
                problem = self._other_sources(loop, ref) or self._rank_local_gate(loop)
                found = Loop(found.loop, found.sums, found.batch_counts, problem)
            reduced = self._reduced_after(loop)
            self._loops[loop] = replace(found, reduced=reduced)
        return self._loops[loop]

    def _reduced_after(self, loop: cst.For) -> bool:
        """Whether a statement after ``loop`` in its function runs a collective that adds up values over the
        ranks (``dist.all_reduce``, directly or in a function of the program it calls) on what the loop
        left: a name the loop binds."""
        index = self.index
        scope = index.scope_of(loop)
        bound = {n.value for n in index.walk(loop) if isinstance(n, cst.Name) and index.names_a_variable(n)}
        for call in index.calls:
            if index.scope_of(call) is not scope or not index.after(call, loop) or index.inside(call, loop):
                continue
            handed = {n.value for arg in call.args for n in index.walk(arg.value) if isinstance(n, cst.Name)}
            if handed & bound and self._reduces(call, 0):
                return True
        return False

    def _reduces(self, call: cst.Call, depth: int) -> bool:
        index = self.index
        if index.is_call_to(call, _SUMMING_COLLECTIVES):
            return True
        callee = index.resolve_callee(call, index.scope_of(call))
        if callee is None or depth > 2:
            return False
        function = callee[0]
        return any(
            enclosing_function(index, inner) is function and self._reduces(inner, depth + 1)
            for inner in index.walk(function.body)
            if isinstance(inner, cst.Call)
        )

    def _rank_local_gate(self, node: cst.CSTNode, depth: int = 0) -> str | None:
        """Why some ranks may run the evaluation while others do not: a condition around it (or around
        a call that runs it) decided by this rank's own training batches, a clock or a random draw.
        Every rank must reach the sum, or the ones that do wait forever."""
        index = self.index
        for ancestor in index.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, (cst.If, cst.While)) and self.rank_local.reads(
                ancestor.test, index.scope_of(ancestor)
            ):
                test = index.module.code_for_node(ancestor.test)
                return (
                    f"--shard-eval: this evaluation runs only while `{test}`, which depends on this rank's own "
                    "batches, a clock or a random draw: the ranks could disagree on whether to add up its sums, "
                    "and the ones that do would wait forever"
                )
        scope = index.scope_of(node)
        if isinstance(scope, cst.FunctionDef) and depth < 4:
            for call in index.callers(scope):
                found = self._rank_local_gate(call, depth + 1)
                if found is not None:
                    return found
        return None

    def _other_sources(self, loop: cst.For, ref: Ref) -> str | None:
        """Why the loop may also run over data that is not sharded (a function handed something else)."""
        index = self.index
        scope = ref.scope
        if not isinstance(scope, cst.FunctionDef) or ref.path not in parameter_names(scope):
            return None
        position = parameter_names(scope).index(ref.path)
        for call in index.callers(scope):
            callee = index.resolve_callee(call, index.scope_of(call))
            offset = callee[1] if callee is not None else 0
            arg = argument(call, ref.path, position - offset)
            if arg is None or index.carried_ref(arg.value, index.scope_of(call)) not in self.shared_refs:
                line = index.module.code_for_node(call).strip()
                return (
                    f"--shard-eval: this evaluation loop also runs over data that is not a sharded DataLoader "
                    f"(`{line}`), whose sums must not be added up over the ranks"
                )
        return None


class _LoopReader:
    """What one evaluation loop leaves behind, and whether all of it is sums ddpify can add up."""

    def __init__(self, index: Index, loop: cst.For, refs: frozenset[Ref]) -> None:
        self.index = index
        self.loop = loop
        self.refs = refs  # the places holding the loader
        self.scope = self.index.scope_of(loop)

    def read(self) -> Loop:
        loop = self.loop
        if loop.orelse is not None:
            return self._refused("has an `else:` clause")
        inside = [n for n in self.index.walk(loop) if n is not loop]
        if any(isinstance(n, (cst.Return, cst.Yield)) for n in inside if self.index.scope_of(n) is self.scope):
            return self._refused("returns from inside the loop")
        bound = self._bound_in_loop(inside)
        sums: dict[str, tuple[int, int]] = {}  # each sum, and where it is set to zero
        for node in inside:
            if isinstance(node, cst.AugAssign):
                if not isinstance(node.target, cst.Name):
                    target = self.index.module.code_for_node(node.target)
                    return self._refused(f"keeps its results in `{target}`")
                name = node.target.value
                if not self._read_after(name):
                    continue
                if not isinstance(node.operator, cst.AddAssign) or set(bound[name]) != {"+="}:
                    return self._refused(f"updates `{name}` in a way other than adding to it")
                start = self._zero_before(name)
                if start is None:
                    return self._refused(f"adds to `{name}`, which is not set to zero right before the loop")
                sums[name] = start
            elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
                kept = self._collected_in(node.value)
                if kept is not None:
                    return self._refused(kept)
        drawn = {n.value for n in self.index.walk(loop.target) if isinstance(n, cst.Name)}
        for name, kinds in bound.items():
            if "=" in kinds and name not in drawn and self._carried(name):
                return self._refused(
                    f"carries `{name}` from one batch to the next, but a rank's batches are not consecutive "
                    "once the set is shared out"
                )
            if name in sums or not self._read_after(name):
                continue
            start = self._zero_before(name) if set(kinds) == {"=+"} else None
            if start is not None:
                sums[name] = start
                continue
            return self._refused(f"leaves `{name}` (its value from this rank's last batch) to be read after it")
        if not sums:
            return self._refused("accumulates no sum or count to add up over the ranks")
        return Loop(loop, tuple(sorted(sums, key=sums.__getitem__)), tuple(self._batch_counts()))

    def _refused(self, why: str) -> Loop:
        return Loop(
            self.loop,
            (),
            (),
            f"--shard-eval: this evaluation loop {why}; ddpify adds up only sums and counts set to zero before "
            "the loop and increased with `+=`: accumulate those, or convert without --shard-eval",
        )

    def _bound_in_loop(self, inside: list[cst.CSTNode]) -> dict[str, list[str]]:
        """Every name the loop binds, with how: ``=`` (set), ``=+`` (``x = x + ...``), ``+=`` or another ``op=``."""
        bound: dict[str, list[str]] = {}

        def bind(target: cst.BaseExpression, how: str) -> None:
            for single in assigned(target):
                if isinstance(single, cst.StarredElement):
                    single = single.value
                if isinstance(single, cst.Name):
                    bound.setdefault(single.value, []).append(how)

        bind(self.loop.target, "=")
        for node in inside:
            if isinstance(node, cst.For):
                bind(node.target, "=")
            elif isinstance(node, cst.Assign):
                value = node.value
                for target in node.targets:
                    adds = (
                        isinstance(target.target, cst.Name)
                        and isinstance(value, cst.BinaryOperation)
                        and isinstance(value.operator, cst.Add)
                        and m.matches(value.left, m.Name(target.target.value))
                    )
                    bind(target.target, "=+" if adds else "=")
            elif isinstance(node, cst.AugAssign):
                bind(node.target, "+=" if isinstance(node.operator, cst.AddAssign) else "op=")
            elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)):
                bind(node.target, "=")
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                bind(cast(cst.BaseExpression, node.asname.name), "=")
        return bound

    def _carried(self, name: str) -> bool:
        """Whether an iteration reads ``name`` before setting it: it reads the previous batch's value."""
        index = self.index
        first = next(
            (
                n
                for n in index.walk(self.loop.body)
                if isinstance(n, cst.Name) and n.value == name and index.names_a_variable(n)
            ),
            None,
        )
        if first is None:
            return False
        if not self._is_set(first):
            return True
        assign = next((a for a in index.ancestors(first) if isinstance(a, cst.Assign)), None)
        return assign is not None and any(isinstance(n, cst.Name) and n.value == name for n in index.walk(assign.value))

    def _place(self, name: str) -> Ref:
        return self.index.ref_of(cst.Name(name), self.scope) or Ref(self.scope, name)

    def _reads(self, name: str) -> Iterator[cst.Name]:
        """The uses of the place ``name`` (as the loop's scope sees it) after the loop, in source order."""
        index = self.index
        place = self._place(name)
        for node in index.names.get(name, []):
            if not index.names_a_variable(node):
                continue
            if index.after(node, self.loop) and index.ref_of(node, index.scope_of(node)) == place:
                yield node

    def _read_after(self, name: str) -> bool:
        """Whether the value the loop leaves in ``name`` is read after it (before being set anew)."""
        first = next(self._reads(name), None)
        return first is not None and not self._is_set(first)

    def _is_set(self, name: cst.Name) -> bool:
        """Whether ``name`` is a target being assigned (not read): ``x = ...``, ``for x in ...``."""
        node: cst.CSTNode = name
        for parent in self.index.ancestors(name):
            if isinstance(parent, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
                node = parent
                continue
            if isinstance(parent, cst.AssignTarget):
                return True
            if isinstance(parent, cst.AnnAssign):  # ``total: float = 0.0``
                return parent.target is node and parent.value is not None
            return isinstance(parent, cst.For) and parent.target is node
        return False

    def _zero_before(self, name: str) -> tuple[int, int] | None:
        """Where ``name`` is set to zero before the loop, each time before it runs (None if it is not).

        The place is the assignment's position in the source and the name's among its targets,
        so that the sums are listed in the order the script starts them.
        """
        index = self.index
        place = self._place(name)
        assignments = [a for a in self._assignments(place) if index.after(self.loop, a)]
        if not assignments:
            return None
        last = assignments[-1]
        block = index.parent(index.statement_of(last))
        if not (block is not None and (block is index.module or index.inside(self.loop, block))):
            return None
        if isinstance(last, cst.AnnAssign):  # ``total: float = 0.0``
            return (index.order[last], 0) if last.value is not None and self._is_zero(last.value) else None
        for target in last.targets:
            if isinstance(target.target, cst.Name) and target.target.value == name:
                return (index.order[last], 0) if self._is_zero(last.value) else None
            if isinstance(target.target, (cst.Tuple, cst.List)) and isinstance(last.value, (cst.Tuple, cst.List)):
                names = list(assigned(target.target))
                values = [e.value for e in last.value.elements]
                if len(names) == len(values) and not any(isinstance(e, cst.StarredElement) for e in names):
                    for position, (single, value) in enumerate(zip(names, values)):
                        if isinstance(single, cst.Name) and single.value == name:
                            return (index.order[last], position) if self._is_zero(value) else None
        return None

    def _assignments(self, place: Ref) -> Iterator[cst.Assign | cst.AnnAssign]:
        """The assignments to ``place``, also as one of several targets (``correct, total = 0, 0``), or
        annotated (``total: float = 0.0``)."""
        index = self.index
        for stmt in index.statements:
            for small in stmt.body:
                if (
                    isinstance(small, cst.Assign)
                    and any(
                        isinstance(single, cst.Name) and index.ref_of(single, index.scope_of(small)) == place
                        for target in small.targets
                        for single in assigned(target.target)
                    )
                ) or (
                    isinstance(small, cst.AnnAssign)
                    and small.value is not None
                    and isinstance(small.target, cst.Name)
                    and index.ref_of(small.target, index.scope_of(small)) == place
                ):
                    yield small

    def _is_zero(self, expr: cst.BaseExpression) -> bool:
        """``0``, ``0.0``, ``torch.zeros(...)``, ``torch.tensor(0.0)``: a sum that has not started."""
        if isinstance(expr, (cst.Integer, cst.Float)):
            return bool(ast.literal_eval(expr.value) == 0)
        if isinstance(expr, cst.Call) and self.index.is_call_to(expr, TENSOR_ZEROS):
            if self.index.is_call_to(expr, frozenset({"torch.zeros", "torch.zeros_like"})):
                return True
            return bool(expr.args) and self._is_zero(expr.args[0].value)
        return False

    def _collected_in(self, call: cst.Call) -> str | None:
        """``preds.append(p)``, ``meter.update(loss)``, ``metric(p, y)``: results kept in an object."""
        index = self.index
        func = call.func
        root = func
        depth = 0
        while isinstance(root, cst.Attribute):
            root = root.value
            depth += 1
        if not isinstance(root, cst.Name) or index.qualified_names(root):
            return None  # a module's function (``torch.save``), a builtin (``print``)
        what = index.module.code_for_node(func)
        if root.value == index.self_name(index.method_scope(self.scope)):
            if depth >= 2 and isinstance(func, cst.Attribute) and func.attr.value in COLLECTING_METHODS:
                return f"keeps its results with `{what}(...)`"
            return None
        if depth == 0 and index.resolve_callee(call, self.scope) is not None:
            return None  # the script's own function
        if not self._read_after(root.value):
            return None
        place = self._place(root.value)
        if any(a.value is not None and index.is_call_to(a.value, OUTPUT_FACTORIES) for a in self._assignments(place)):
            return None  # a progress bar, tracker or logger
        return f"keeps its results with `{what}(...)`"

    def _batch_counts(self) -> Iterator[cst.Call]:
        """``len(loader)`` next to the loop (before or after it, in its function): the number of
        batches, which now is this rank's; inside the loop it counts this rank's progress."""
        index = self.index
        for call in index.calls:
            if (
                m.matches(call.func, m.Name("len"))
                and len(call.args) == 1
                and index.scope_of(call) is self.scope
                and not index.inside(call, self.loop)
                and index.ref_of(call.args[0].value, self.scope) in self.refs
            ):
                yield call


HELPER = '''
def {helper}(*values):
    """Each value (a number or a tensor) summed over all processes, in its own type, shape and device."""
    {skip}flat = torch.cat([torch.as_tensor(v, dtype=torch.float64).flatten().cpu() for v in values])
    {dist}.all_reduce(flat)  # on the CPU, which Gloo serves under either backend
    parts = flat.split([torch.as_tensor(v).numel() for v in values])
    sums = [p.view_as(v).to(v) if torch.is_tensor(v) else type(v)(p.item()) for v, p in zip(values, parts)]
    return sums[0] if len(sums) == 1 else sums
'''


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    # The program adds up its own evaluation over the ranks: each rank must evaluate its share, or the sums
    # count the whole set once per rank (an accuracy of 160% on two ranks)
    own = [loader for loader in facts.loaders if loader.problem is None and all(lp.reduced for lp in loader.loops)]
    taken: set[str] = set()
    for loader in own:
        _add_sampler(plan, loader, taken, "the program adds up the results over the ranks itself")
    if not options.shard_eval:
        return
    refused: set[cst.CSTNode] = set()
    for loader in facts.loaders:
        if loader.problem is not None:
            plan.report(loader.problem[0], NOT_SHARDABLE, loader.problem[1])
            refused.add(loader.call)
        for loop in loader.loops:
            if loop.problem is not None and loop.loop not in refused:
                plan.report(loop.loop, NOT_SHARDABLE, loop.problem)
                refused.add(loop.loop)
    if refused:
        return
    helper = fresh("sum_over_ranks", plan.index.identifiers | taken)
    taken.add(helper)
    done: set[cst.For] = set()
    for loader in facts.loaders:
        if loader in own:
            continue
        _add_sampler(plan, loader, taken)
        for loop in loader.loops:
            if loop.loop not in done and not loop.reduced:
                done.add(loop.loop)
                _sum_after(plan, loop, helper)
    if done:
        dist = plan.names.dist
        forms = [
            cst.parse_module(HELPER.format(helper=helper, dist=dist, skip=skip)).body[0]
            for skip in (
                "",
                f"if not {dist}.is_initialized():\n        return values[0] if len(values) == 1 else values\n    ",
            )
        ]
        plan.add_setup_helper(helper, *cast(list[cst.FunctionDef], forms))
        if "torch" not in plan.index.bound[plan.index.module]:
            plan.need_import("torch")


def _add_sampler(plan: EditPlan, loader: Loader, taken: set[str], why: str = "") -> None:
    index = plan.index
    call = loader.call
    dataset_arg = argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])
    assert dataset_arg is not None  # a loader without one is refused
    dataset = dataset_arg.value
    if not isinstance(dataset, (cst.Name, cst.Attribute)):
        name = fresh("eval_dataset", index.identifiers | taken)
        taken.add(name)
        stmt = index.statement_of(call)
        line = cst.parse_statement(f"{name} = {index.module.code_for_node(dataset)}\n")
        if not plan.before.get(stmt):
            line = line.with_changes(leading_lines=statement(stmt).leading_lines)
            plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
        plan.insert_before(stmt, line)
        plan.replace(dataset, lambda _: cst.Name(name))
        dataset_code = name
    else:
        dataset_code = index.module.code_for_node(dataset)
    sampler = plan.names.sampler
    code = f"{sampler}({dataset_code}, shuffle=False)"
    if plan.without_group(call):  # another script may import it: the whole set, as before, without a group
        code = f"{code} if {plan.names.dist}.is_initialized() else None"
    value = cst.parse_expression(code)
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    shuffle = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    if shuffle is not None:  # the order of an evaluation does not change its sums
        plan.replace(shuffle, lambda n: n.with_changes(keyword=cst.Name("sampler"), equal=equal, value=value))
    else:
        arg = cst.Arg(value=value, keyword=cst.Name("sampler"), equal=equal)
        position = call.args.index(loader.spread) if loader.spread is not None else len(call.args)
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), arg, position))
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    plan.change(
        call,
        "evaluation DataLoader: each process evaluates its share (DistributedSampler(shuffle=False))"
        + (f": {why}" if why else "")
        + "; when the set does not divide by the world size, up to world size - 1 samples are evaluated twice "
        "and counted in the sums",
    )


def _sum_after(plan: EditPlan, loop: Loop, helper: str) -> None:
    names = ", ".join(loop.sums)
    plan.insert_after(loop.loop, cst.parse_statement(f"{names} = {helper}({names})\n"))
    listed = ", ".join(f"`{name}`" for name in loop.sums)
    plan.change(loop.loop, f"add up {listed} over all processes after the evaluation loop")
    world = cst.parse_expression(plan.world_size(loop.loop))
    for count in loop.batch_counts:
        parent = plan.index.parent(count)
        bracket = isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Attribute, cst.Subscript))

        def times_world(node: cst.CSTNode, bracket: bool = bracket) -> cst.CSTNode:
            product = cst.BinaryOperation(left=cast(cst.Call, node), operator=cst.Multiply(), right=world)
            return product.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if bracket else product

        plan.replace(count, times_world)
        text = plan.index.module.code_for_node(count)
        plan.change(count, f"{text} -> {text} * {plan.names.dist}.get_world_size(): the batches of all processes")
