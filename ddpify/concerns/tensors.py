"""Tensors: training data that does not come from a DataLoader, sharded by rank.

A script that trains on whole tensors (``model(x)`` on all the samples every
step, with ``x`` and its targets made once before the loop) gets one equal
shard of the samples per rank: every ``world_size``-th sample, the last
``len(x) % world_size`` left out so that every shard has the same size. Only
the reads in the training step take the shard, so evaluation and plots on the
same tensors still see all of them::

    x = torch.randn(1000, 8)                 x = torch.randn(1000, 8)
    y = x.sum(dim=1, keepdim=True)           y = x.sum(dim=1, keepdim=True)
                                       ->    shard = slice(dist.get_rank(), len(x) - len(x) % dist.get_world_size(),
                                                           dist.get_world_size())
    for step in range(500):                  for step in range(500):
        loss = mse(model(x), y)                  loss = mse(model(x[shard]), y[shard])

DDP averages the ranks' gradients. With equal shards and a loss that is a
mean over the samples, that average is the gradient of the mean loss over all
the samples in the shards: the full-batch gradient. With a summed loss
(``reduction="sum"``) it is the full-batch gradient divided by the world size.

The step may run in a function of its own: ``def train(): ...`` called in the
loop, or a closure handed to ``optimizer.step(closure)``. LBFGS decides its
inner iterations and line search from the loss the closure returns, and each
rank's shard gives another loss: the closure then returns the mean over all
ranks (``dist.all_reduce``), so every rank decides the same and calls the
closure, with its gradient all-reduce, as many times.

A script that makes mini-batches of such tensors itself -- ``x[i:i + bs]``
over ``range(0, len(x), bs)``, ``x[perm[i:i + bs]]`` after ``perm =
torch.randperm(len(x))``, ``x[torch.randint(0, len(x), (bs,))]`` -- gets the
same shard, read everywhere in the training loop: the batch loop and the random
choices follow ``len(x[shard])``, so every rank takes as many steps, each over
its own samples, with the script's batch size per process (the global batch is
``world_size`` times larger, as with a DistributedSampler). The permutation is
each rank's own: it only orders that rank's shard, so it needs no common seed.

A script that draws its data anew in every step (``x = torch.randn(64, 9)``,
``np.random.rand(...)``, or a ``get_batch()`` of its own that does) would
draw the same samples on every rank once seeded. Each rank seeds the
generators it draws from with the script's seed plus its rank, right before the
training loop, after the model is wrapped (DDP has broadcast rank 0's weights
by then)::

    for step in range(1000):         ->  torch.manual_seed(torch.initial_seed() + dist.get_rank())
        x = torch.randn(64, 9)            for step in range(1000):
                                              x = torch.randn(64, 9)

numpy's and ``random``'s generators are reseeded the same way when the script
seeds them (``np.random.seed(SEED)`` -> ``np.random.seed(SEED + dist.get_rank())``);
unseeded, they already differ between processes. A random value that decides
the step's control flow, a ``generator=`` of the script's own and a draw on
top of tensors that are sharded are refused.

A language model's text batchified by the script's own function
(``data.view(bsz, -1).t()``: ``bsz`` streams of contiguous text, read in
windows by ``get_batch(source, i)``) is batchified for all ranks at once, and
each rank keeps its own ``bsz`` streams, so that a hidden state carried from
window to window still follows one run of text, the number of steps is the
same on every rank, and ``init_hidden(bsz)`` still fits::

    train_data = batchify(corpus.train, args.batch_size)
    ->  train_data = batchify(corpus.train, args.batch_size * dist.get_world_size())
        train_data = train_data.narrow(1, dist.get_rank() * args.batch_size, args.batch_size).contiguous()

The tensors are recognised by what they are, never by their names: the
tensor the model is called on (directly, or through ``xb = x[idx]``), made by
torch (``torch.tensor(array)``, ``torch.randn``, arithmetic, ``.to(device)``,
column slices) before the training loop, and the tensors the loss compares the
output with, which must come from the same samples (computed from the input,
cut from the same array, or made with the same number of rows). Samples chosen
at random while the data is made (``randperm``, ``np.random.permutation``,
``train_test_split``) must be chosen the same on every rank: a seed must be set
before.

The data concern reports DDP201 when no DataLoader feeds training; this concern
decides it: when the training data is not such a set of tensors -- a batch loop
or random range not computed from the data's length (``range(n_batches)``),
data made from the loop variable alone, a loss that differentiates with
respect to the data (``torch.autograd.grad``), a model called on several tensors
(a graph and its features), a target of unknown making, data handed to the
training step through parameters, a closure that does not end by returning its
loss -- the script is refused, with the reason and the line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

import libcst as cst

from ddpify.concerns import data, model, process_group
from ddpify.diagnostics import Code
from ddpify.engine.edits import EditPlan, fresh, statement
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, assigned, parameter_names
from ddpify.result import Options

# DDP201 is the data concern's code: the batches come from no DataLoader it can follow. This concern
# decides whether tensors can be sharded instead, and reports it when they cannot.
NO_TRAINING_LOADER = data.NO_TRAINING_LOADER
CODES: tuple[Code, ...] = ()

# torch calls that do not make a data tensor.
NOT_TENSORS = ("torch.nn.", "torch.optim.", "torch.utils.", "torch.cuda.", "torch.distributed.", "torch.backends.")
NOT_TENSOR_CALLS = frozenset({"torch.device", "torch.Generator", "torch.manual_seed", "torch.load", "torch.no_grad"})
# Factories whose first argument is the number of rows: ``torch.randn(n, 8)``, ``torch.zeros((n, 1))``.
SIZED_FACTORIES = frozenset(
    f"torch.{name}" for name in ("randn", "rand", "zeros", "ones", "empty", "full", "normal", "Tensor", "FloatTensor")
)
# Optimizers that decide their steps from the loss their closure returns.
LOSS_DRIVEN = frozenset({"torch.optim.LBFGS", "torch.optim.lbfgs.LBFGS"})
# Gradients with respect to the inputs (physics-informed losses): the data is a variable, not samples.
DIFFERENTIATES = frozenset({"torch.autograd.grad", "torch.autograd.functional.jacobian"})
# Random choices of samples: each rank would choose differently without a seed.
RANDOM_CHOICES = frozenset(
    {
        "torch.randperm",
        "torch.randint",
        "torch.multinomial",
        "numpy.random.permutation",
        "numpy.random.shuffle",
        "numpy.random.choice",
        "numpy.random.randint",
        "random.shuffle",
        "random.sample",
        "random.choices",
        "sklearn.model_selection.train_test_split",
    }
)
# Seeds that make every rank draw the same: torch's, and those that seed every library at once.
TORCH_SEEDS = data.GLOBAL_SEEDS
ALL_SEEDS = frozenset(name for name in data.GLOBAL_SEEDS if name.endswith(("seed_everything", "set_seed")))


@dataclass(frozen=True)
class Closure:
    """The function that runs the training step: ``def closure(): ...; return loss`` handed to
    ``optimizer.step(closure)``, or ``def train(): ...`` called in the training loop."""

    function: cst.FunctionDef
    ret: cst.SimpleStatementLine | None  # ``return loss``, its last statement (a closure for optimizer.step)
    averaged: bool  # the optimizer decides from the loss (LBFGS): every rank must get the same value back


@dataclass(frozen=True)
class FullBatch:
    """Whole tensors the training step reads every step: each rank reads its shard instead."""

    reads: tuple[cst.Name, ...]  # the reads in the training step that become ``x[shard]``
    after: cst.BaseStatement  # the shard is defined right after this statement (the tensors exist then)
    length: str  # the tensor whose number of rows is the number of samples
    names: tuple[str, ...]  # the tensors, for the report
    batched: bool = False  # the script makes mini-batches of them itself (every read in the loop is sharded)
    closure: Closure | None = None  # the reads are in an optimizer closure


@dataclass(frozen=True)
class Reseed:
    """Data drawn from a random generator in every step: each rank seeds it differently before the loop."""

    loop: cst.BaseStatement  # the training loop: the seeds go right before it
    seeds: tuple[str, ...]  # the statements that reseed, one per library drawn from
    draws: tuple[str, ...]  # the calls that draw, for the report


@dataclass(frozen=True)
class Streams:
    """``data = batchify(tokens, bsz)``: columns (or rows) of contiguous text; each rank keeps ``bsz`` of them."""

    stmt: cst.SimpleStatementLine  # ``data = batchify(tokens, bsz)``
    name: str  # ``data``
    size: cst.BaseExpression  # ``bsz`` as the call passes it
    dim: int  # the dimension that holds the streams


@dataclass(frozen=True)
class Facts:
    full_batches: tuple[FullBatch, ...] = ()
    reseeds: tuple[Reseed, ...] = ()
    streams: tuple[Streams, ...] = ()


class Refused(Exception):
    """The training data cannot be sharded safely: why, and where."""

    def __init__(self, node: cst.CSTNode, reason: str) -> None:
        super().__init__(reason)
        self.node = node
        self.reason = reason


def find(program: Program, loaders: data.Facts, models: model.Facts, setup: process_group.Facts) -> Facts:
    if any(loader.training for loader in loaders.loaders) or any(
        code is NO_TRAINING_LOADER for _, code, _ in program.findings
    ):
        return Facts()  # a DataLoader feeds training, or the data concern has refused how it is drawn
    index = program.index
    training_loop = next((lp for lp in index.loops if index.trains(lp.body)), None)
    try:
        found = _Finder(index, models, setup, program.names.dist).shard()
    except Refused as refused:
        program.report(
            refused.node,
            NO_TRAINING_LOADER,
            f"the training batches come from no DataLoader, and ddpify cannot shard them by rank: {refused.reason}",
        )
        return Facts()
    if found is None:
        program.report(
            training_loop or index.module,
            NO_TRAINING_LOADER,
            "the training loop does not draw its batches from a torch DataLoader that ddpify can follow; "
            "every rank would train on the same samples",
        )
        return Facts()
    if isinstance(found, Reseed):
        return Facts(reseeds=(found,))
    if isinstance(found, Streams):
        return Facts(streams=(found,))
    return Facts((found,))


@dataclass
class _Lineage:
    """What the loss is computed from, within the training step."""

    leaves: list[cst.Name] = field(default_factory=list)  # reads of values made before the step
    step_variables: list[cst.Name] = field(default_factory=list)  # reads of a loop variable of the step
    subscripts: list[cst.Subscript] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)


class _Finder:
    def __init__(self, index: Index, models: model.Facts, setup: process_group.Facts, dist: str) -> None:
        self.index = index
        self.model_refs = models.refs
        self.setup = setup
        self.dist = dist

    def shard(self) -> FullBatch | Reseed | Streams | None:
        index = self.index
        backwards = [c for c in index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"]
        if len(backwards) != 1:
            return None
        (backward,) = backwards
        scope = index.scope_of(backward)
        loops = list(index.enclosing_loops(backward))
        closure: Closure | None = None
        if loops:
            step: cst.For | cst.While | cst.FunctionDef = loops[-1]  # the outermost loop: all of it runs each step
            runs = step
        else:  # ``optimizer.step(closure)``: the closure runs in a loop of the function around it
            closure, runs = self._closure(backward, scope)
            step = closure.function
        func = cast(cst.Attribute, backward.func)
        lineage = self._lineage([func.value, *(a.value for a in backward.args)], scope, step)
        streams = self._streams(lineage) if closure is None else None
        if streams is not None:
            return streams
        for call in lineage.calls:
            if index.qualified_names(call.func) & DIFFERENTIATES:
                raise Refused(
                    call,
                    f"the loss differentiates with respect to the data (`{_code(index, call.func)}`), which "
                    "ddpify does not shard",
                )
        choices = [call for call in lineage.calls if index.qualified_names(call.func) & RANDOM_CHOICES]
        draws = [call for call in lineage.calls if call not in choices and self._draws(call)]
        tensors, first = self._tensors(lineage, scope)
        if draws and (first is not None or choices):
            raise Refused(
                draws[0],
                f"the training step draws `{_code(index, draws[0].func)}` on top of data it shards: ddpify "
                "cannot tell which of them must differ between the ranks",
            )
        if draws and closure is not None:
            raise Refused(
                draws[0], f"the function of the training step draws its data with `{_code(index, draws[0].func)}`"
            )
        if draws:
            return self._reseed(draws, cast(cst.For | cst.While, step))
        if first is None and tensors:
            names = ", ".join(f"`{ref.path}`" for ref in tensors)
            raise Refused(
                next(iter(tensors.values()))[0],
                f"the model's input is made from {names} in a way ddpify does not follow",
            )
        if first is None and lineage.step_variables:
            name = lineage.step_variables[0]
            raise Refused(
                name,
                f"the training step makes its data from the loop variable `{name.value}` alone, the same on every rank",
            )
        if first is None:
            return None
        batched = bool(lineage.step_variables or choices)
        if batched and closure is not None:
            raise Refused(step, "the function of the training step picks part of the samples in each call")
        if batched:
            self._check_batches(lineage, choices, cast(cst.For | cst.While, step), set(tensors))
        else:
            for subscript in lineage.subscripts:
                if not _whole_rows(subscript):
                    raise Refused(
                        subscript, f"the training step uses part of the samples (`{_code(index, subscript)}`)"
                    )
        assignments = [a for ref in tensors for a in self._assignments(ref)]
        last = max(assignments, key=lambda a: index.order[a])
        after = self._top_statement(last, first.scope)
        if not index.after(runs, after):
            raise Refused(runs, f"`{first.path}` is changed after the training loop starts")
        if self.setup.runs_before_setup(index, after):
            raise Refused(after, "the tensors are made before the process group is set up (at import time)")
        made = sorted(tensors, key=lambda ref: min(index.order[a] for a in self._assignments(ref)))
        if batched:  # every read in the loop, so that the batch loop's bounds follow the shard too
            reads = [
                node
                for node in index.walk(step)
                if isinstance(node, cst.Name)
                and _is_read(index, node)
                and index.ref_of(node, index.scope_of(node)) in tensors
            ]
        else:
            reads = [read for ref in made for read in tensors[ref]]
        return FullBatch(tuple(reads), after, first.path, tuple(ref.path for ref in made), batched, closure)

    def _closure(self, backward: cst.Call, scope: Scope) -> tuple[Closure, cst.For | cst.While]:
        """The optimizer closure that runs ``backward`` (``optimizer.step(closure)`` in a loop), and that loop."""
        index = self.index
        unfollowed = Refused(
            backward,
            "the backward pass runs in a function of its own (a training step called in the loop), whose data "
            "ddpify does not follow",
        )
        if not isinstance(scope, cst.FunctionDef):
            raise unfollowed
        name = Ref(index.scope_of(scope), scope.name.value)
        uses = [
            n
            for n in index.names.get(name.path, [])
            if n is not scope.name and _is_read(index, n) and index.ref_of(n, index.scope_of(n)) == name
        ]
        steps: list[cst.Call] = []  # optimizer.step(closure)
        calls: list[cst.Call] = []  # train_step(): a step of its own
        for use in uses:
            arg, call = index.parent(use), index.parent(index.parent(use))
            if isinstance(arg, cst.Call) and arg.func is use:
                calls.append(arg)
            elif (
                isinstance(arg, cst.Arg)
                and isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "step"
            ):
                steps.append(call)
            else:
                raise unfollowed
        loops = [list(index.enclosing_loops(call)) for call in (*steps, *calls)]
        if not loops or not all(loops) or (steps and calls):
            raise unfollowed
        if calls:
            return Closure(scope, None, averaged=False), loops[0][-1]
        returns = [n for n in index.walk(scope.body) if isinstance(n, cst.Return) and index.scope_of(n) is scope]
        last = scope.body.body[-1] if isinstance(scope.body, cst.IndentedBlock) else None
        if (
            len(returns) != 1
            or returns[0].value is None
            or not isinstance(last, cst.SimpleStatementLine)
            or last.body[0] is not returns[0]
        ):
            raise Refused(scope, "the optimizer closure does not end by returning its loss")
        optimizers = {index.root_ref(cast(cst.Attribute, call.func).value, index.scope_of(call)) for call in steps}
        lbfgs = any(
            a.value is not None and index.is_call_to(a.value, LOSS_DRIVEN)
            for ref in optimizers
            if ref is not None
            for a in self._assignments(ref)
        )
        return Closure(scope, last, lbfgs), loops[0][-1]

    def _streams(self, lineage: _Lineage) -> Streams | None:
        """A tensor the training step reads that the script's own ``batchify(data, bsz)`` made."""
        index = self.index
        found: dict[Ref, tuple[cst.Assign | cst.AugAssign | cst.AnnAssign, cst.Arg, int]] = {}
        for leaf in lineage.leaves:
            ref = index.ref_of(leaf, index.scope_of(leaf))
            assignments = [a for a in self._assignments(ref) if index.after(leaf, a)] if ref is not None else []
            if ref is None or not assignments:
                continue
            last = max(assignments, key=lambda a: index.order[a])
            value = _value_of(last, ref)
            shape = self._batchified(value) if isinstance(value, cst.Call) else None
            if shape is not None:
                found[ref] = (last, *shape)
        if not found:
            return None
        if len(found) > 1:
            names = ", ".join(f"`{ref.path}`" for ref in found)
            raise Refused(index.module, f"the training step reads several batchified tensors ({names})")
        ((ref, (assignment, size, dim)),) = found.items()
        stmt = index.statement_of(assignment)
        if (
            len(self._assignments(ref)) != 1
            or not isinstance(stmt, cst.SimpleStatementLine)
            or len(stmt.body) != 1
            or not isinstance(assignment, cst.Assign)
            or len(assignment.targets) != 1
            or not isinstance(assignment.targets[0].target, cst.Name)
        ):
            raise Refused(assignment, f"`{ref.path}` is batchified in a way ddpify cannot extend to every rank")
        if not isinstance(size.value, (cst.Name, cst.Attribute, cst.Integer)):
            raise Refused(size, f"the batch size `{_code(index, size.value)}` is not a plain name or number")
        if self.setup.runs_before_setup(index, stmt):
            raise Refused(stmt, "the data is batchified before the process group is set up (at import time)")
        for leaf in lineage.leaves:
            if index.ref_of(leaf, index.scope_of(leaf)) != ref and self._data_ref(leaf) is not None:
                raise Refused(leaf, f"the training step reads `{leaf.value}` beside the batchified `{ref.path}`")
        return Streams(stmt, ref.path, size.value, dim)

    def _batchified(self, call: cst.Call) -> tuple[cst.Arg, int] | None:
        """For a call to the script's ``batchify(data, bsz)`` -- ``data.view(bsz, -1)``, then ``.t()`` or not --
        the argument that gives the number of streams, and the dimension they end up in."""
        index = self.index
        callee = index.resolve_callee(call, index.scope_of(call))
        if callee is None or callee[1]:
            return None
        function = callee[0]
        names = parameter_names(function)
        found: list[tuple[int, int]] = []
        for node in index.walk(function.body):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("view", "reshape")
                and len(node.args) == 2
                and isinstance(node.args[0].value, cst.Name)
                and node.args[0].value.value in names
                and isinstance(node.args[1].value, cst.UnaryOperation)
            ):
                continue
            after = index.parent(node)
            outer = index.parent(after)
            transposed = (isinstance(after, cst.Attribute) and after.attr.value == "T") or (
                isinstance(after, cst.Attribute)
                and isinstance(outer, cst.Call)
                and (
                    (after.attr.value == "t" and not outer.args)
                    or (after.attr.value == "transpose" and [_code(index, a.value) for a in outer.args] == ["0", "1"])
                )
            )
            found.append((names.index(node.args[0].value.value), 1 if transposed else 0))
        if len(found) != 1:
            return None
        position, dim = found[0]
        size = argument(call, names[position], position)
        return (size, dim) if size is not None else None

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
        already). A random value that decides the control flow of the step would then differ between the
        ranks, so that is refused.
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
                if self._depends(test, step, lambda n: isinstance(n, cst.Call) and self._draws(n)):
                    raise Refused(
                        test,
                        f"a random value decides the control flow of the training step (`{_code(index, test)}`): "
                        "drawn differently on each rank, it would make them take different paths",
                    )
        rank = f"{self.dist}.get_rank()"
        seeds: list[str] = []
        if "torch" in libraries:
            torch_name = self._imported_as("torch")
            seeds.append(f"{torch_name}.manual_seed({torch_name}.initial_seed() + {rank})")
        for library, seed_call in (("numpy", "numpy.random.seed"), ("random", "random.seed")):
            if library not in libraries:
                continue
            seeded = [c for c in index.calls if index.is_call_to(c, frozenset({seed_call})) and index.after(step, c)]
            if not seeded:
                continue  # never seeded: each process draws differently already
            value = seeded[-1].args[0].value if seeded[-1].args else None
            if not isinstance(value, (cst.Integer, cst.Name)) or (
                isinstance(value, cst.Name) and index.ref_of(value, index.scope_of(step)) is None
            ):
                raise Refused(seeded[-1], f"ddpify cannot seed `{_code(index, seeded[-1])}` differently per rank")
            seeds.append(f"{_code(index, seeded[-1].func)}({_code(index, value)} + {rank})")
        return Reseed(step, tuple(seeds), tuple(sorted({_code(index, c.func) for c in draws})))

    def _imported_as(self, module: str) -> str:
        """The name the script imports ``module`` as."""
        for local, full in self.index.imports[self.index.module].items():
            if module in full and local in self.index.bound[self.index.module]:
                return local
        return module

    def _tensors(self, lineage: _Lineage, scope: Scope) -> tuple[dict[Ref, list[cst.Name]], Ref | None]:
        """The data tensors the loss is computed from, with their reads, and the one the model is called on."""
        index = self.index
        tensors: dict[Ref, list[cst.Name]] = {}
        inputs: set[Ref] = set()
        for leaf in lineage.leaves:
            ref = self._data_ref(leaf)
            if ref is None:
                continue
            if ref.scope is not scope and not isinstance(ref.scope, cst.Module) and not index.inside(scope, ref.scope):
                raise Refused(leaf, f"`{leaf.value}` comes from another function")
            tensors.setdefault(ref, []).append(leaf)
            if self._model_input(leaf):
                inputs.add(ref)
        if not inputs:
            return tensors, None
        if len(inputs) > 1:
            names = ", ".join(f"`{ref.path}`" for ref in sorted(inputs, key=lambda r: r.path))
            raise Refused(
                tensors[max(inputs, key=lambda r: r.path)][0],
                f"the model is called on several tensors ({names}): ddpify cannot tell which "
                "of them hold one row per sample",
            )
        (first,) = inputs
        roots = self._roots(first)
        for ref, reads in tensors.items():
            if ref.scope is not first.scope:
                raise Refused(reads[0], f"`{ref.path}` and `{first.path}` are made in different functions")
            if ref != first and not (self._roots(ref) & roots):
                raise Refused(
                    reads[0],
                    f"`{ref.path}` cannot be shown to hold one row per sample of "
                    f"`{first.path}`, so it cannot be sharded with it",
                )
            roots |= self._roots(ref)
        for root in roots:
            if isinstance(root, Ref):
                for assignment in self._assignments(root):
                    self._check_seeded(assignment)
        return tensors, first

    def _check_batches(
        self, lineage: _Lineage, choices: list[cst.Call], step: cst.For | cst.While, data: set[Ref]
    ) -> None:
        """Hand-made batches: each rank may batch its shard as the script batches the whole data, as long as
        the number of batches and the random choices follow the data's length (so they follow the shard's)."""
        index = self.index
        for loop in {self._binding_loop(name, step) for name in lineage.step_variables}:
            if loop is None or not self._sized_by_data(loop.iter, step, data):
                header = _code(index, loop.iter) if loop is not None else "?"
                raise Refused(
                    loop or step,
                    f"the batch loop runs over `{header}`, which is not computed from the length of the data "
                    "it slices, so it would not follow each rank's shard",
                )
        for call in choices:
            if not any(self._sized_by_data(arg.value, step, data) for arg in call.args if arg.keyword is None):
                raise Refused(
                    call,
                    f"the samples are chosen with `{_code(index, call)}`, whose range is not computed from the "
                    "length of the data, so it would not follow each rank's shard",
                )
        for subscript in lineage.subscripts:
            if not _whole_rows(subscript) and not self._picks_batch(subscript, step):
                raise Refused(subscript, f"the training step uses part of the samples (`{_code(index, subscript)}`)")

    def _binding_loop(self, name: cst.Name, step: cst.For | cst.While) -> cst.For | None:
        """The loop of the training step whose target ``name`` reads."""
        index = self.index
        ref = index.ref_of(name, index.scope_of(name))
        for node in (step, *index.walk(step)):
            if isinstance(node, cst.For) and ref is not None and _binds(node.target, ref):
                return node
        return None

    def _depends(
        self, expr: cst.CSTNode, step: cst.For | cst.While, wanted: Callable[[cst.CSTNode], bool], depth: int = 0
    ) -> bool:
        """Whether ``expr``, or a name it reads that the training step assigns, satisfies ``wanted``."""
        index = self.index
        for node in index.walk(expr):
            if wanted(node):
                return True
            if not isinstance(node, cst.Name) or not _is_read(index, node) or depth > 5:
                continue
            ref = index.ref_of(node, index.scope_of(node))
            if ref is None:
                continue
            for binding in self._bindings(ref, index.scope_of(node)):
                if (
                    isinstance(binding, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                    and index.inside(binding, step)
                    and binding.value is not None
                    and self._depends(binding.value, step, wanted, depth + 1)
                ):
                    return True
        return False

    def _sized_by_data(self, expr: cst.CSTNode, step: cst.For | cst.While, data: set[Ref]) -> bool:
        """Whether ``expr`` is computed from a data tensor (``len(x)``, ``x.size(0)``, ``len(perm)``)."""
        index = self.index
        return self._depends(
            expr,
            step,
            lambda node: isinstance(node, cst.Name) and index.ref_of(node, index.scope_of(node)) in data,
        )

    def _picks_batch(self, subscript: cst.Subscript, step: cst.For | cst.While) -> bool:
        """Whether the rows ``subscript`` picks change from step to step: ``x[i:i + bs]``, ``x[perm[i:j]]``."""
        index = self.index
        loops = {n for n in (step, *index.walk(step)) if isinstance(n, cst.For)}

        def varies(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Call) and index.qualified_names(node.func) & RANDOM_CHOICES:
                return True
            if isinstance(node, cst.Name) and _is_read(index, node):
                ref = index.ref_of(node, index.scope_of(node))
                return ref is not None and any(_binds(loop.target, ref) for loop in loops)
            return False

        return any(self._depends(element.slice, step, varies) for element in subscript.slice[:1])

    # -- the loss's lineage in the training step --------------------------
    def _lineage(
        self, roots: list[cst.BaseExpression], scope: Scope, step: cst.For | cst.While | cst.FunctionDef
    ) -> _Lineage:
        index = self.index
        found = _Lineage()
        seen: set[cst.CSTNode] = set()
        queue: list[cst.CSTNode] = list(roots)
        while queue:
            expr = queue.pop()
            if expr in seen:
                continue
            seen.add(expr)
            for node in index.walk(expr):
                if isinstance(node, cst.Subscript):
                    found.subscripts.append(node)
                elif isinstance(node, cst.Call):
                    found.calls.append(node)
                if not isinstance(node, cst.Name) or not _is_read(index, node):
                    continue
                ref = index.ref_of(node, index.scope_of(node))
                if ref is None:
                    continue
                bound_in_step = [
                    binding for binding in self._bindings(ref, scope) if binding is step or index.inside(binding, step)
                ]
                if not bound_in_step:
                    found.leaves.append(node)
                for binding in bound_in_step:
                    if isinstance(binding, cst.For) and binding.target is not None and _binds(binding.target, ref):
                        found.step_variables.append(node)
                        queue.append(binding.iter)  # ``for xb in x.split(bs)``: the batches come from ``x``
                    elif isinstance(binding, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and binding.value:
                        queue.append(binding.value)
                        if isinstance(binding, cst.AugAssign):
                            queue.append(binding.target)
                    else:
                        found.step_variables.append(node)
        return found

    def _bindings(self, ref: Ref, scope: Scope) -> Iterator[cst.CSTNode]:
        """The statements in ``scope`` that bind ``ref``: assignments, loop targets, with-items."""
        if ref.scope is not scope:
            return
        index = self.index
        for node in index.walk(scope):
            if index.scope_of(node) is not scope:
                continue
            if isinstance(node, cst.Assign):
                if any(_binds(t.target, ref) for t in node.targets):
                    yield node
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
                if _binds(node.target, ref):
                    yield node
            elif (isinstance(node, cst.WithItem) and node.asname is not None and _binds(node.asname.name, ref)) or (
                isinstance(node, cst.CompFor) and _binds(node.target, ref)
            ):
                yield node

    # -- what the leaves hold ---------------------------------------------
    def _data_ref(self, leaf: cst.Name) -> Ref | None:
        """The place ``leaf`` reads, when it holds a data tensor; None for models, functions, scalars."""
        index = self.index
        parent = index.parent(leaf)
        if isinstance(parent, cst.Call) and parent.func is leaf:
            return None  # a function, a model or a loss module
        if index.qualified_names(leaf):
            return None  # an import or a builtin
        ref = index.ref_of(leaf, index.scope_of(leaf))
        if ref is None or ref in self.model_refs:
            return None
        assignments = list(self._assignments(ref))
        if not assignments:
            if self._is_parameter(ref) and not self._in_bounds(leaf):
                raise Refused(leaf, f"`{leaf.value}` reaches the training step as a parameter of its function")
            return None  # a slice bound or batch size, or a global of another module
        if self._is_tensor(leaf, index.scope_of(leaf), 0):
            return ref
        if all(self._model_state(a.value) for a in assignments):
            return None  # ``hidden = model.init_hidden(bsz)``: the model's state, not data
        if self._in_bounds(leaf):
            return None  # a number of batches, a batch size
        if self._model_input(leaf):
            raise Refused(leaf, f"ddpify cannot tell what the model's input `{leaf.value}` holds")
        parent = index.parent(leaf)
        if (
            (isinstance(parent, cst.Attribute) and parent.value is leaf)
            or (isinstance(parent, cst.Arg) and parent.keyword is not None)
            or all(_is_constant(a.value) or self._is_other_object(a.value) for a in assignments)
        ):
            return None  # a configuration object (``args.alpha``), a keyword argument, a constant, a device
        raise Refused(
            leaf, f"ddpify cannot tell whether `{leaf.value}`, which the loss reads, holds one row per sample"
        )

    def _model_state(self, expr: cst.BaseExpression | None) -> bool:
        """A method of a model called: ``model.init_hidden(bsz)``."""
        index = self.index
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and index.root_ref(expr.func.value, index.scope_of(expr)) in self.model_refs
        )

    def _in_bounds(self, leaf: cst.Name) -> bool:
        """Whether ``leaf`` is read in a slice or a ``range(...)``: a bound or a step, not data."""
        for ancestor in self.index.ancestors(leaf):
            if isinstance(ancestor, cst.SubscriptElement) or (
                isinstance(ancestor, cst.Call) and self.index.qualified_names(ancestor.func) == {"builtins.range"}
            ):
                return True
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _is_other_object(self, expr: cst.BaseExpression | None) -> bool:
        """A call to an imported function that makes no tensor: ``torch.device(...)``, ``nn.MSELoss()``."""
        if not isinstance(expr, cst.Call):
            return False
        names = self.index.qualified_names(expr.func)
        return (
            bool(names)
            and not any(
                n.startswith("torch.") and not n.startswith(NOT_TENSORS) and n not in NOT_TENSOR_CALLS for n in names
            )
            and not any(n.startswith("numpy.") for n in names)
        )

    def _assignments(self, ref: Ref) -> list[cst.Assign | cst.AugAssign | cst.AnnAssign]:
        index = self.index
        found: list[cst.Assign | cst.AugAssign | cst.AnnAssign] = []
        for stmt in index.statements:
            for small in stmt.body:
                if index.scope_of(small) is not ref.scope and not (
                    isinstance(ref.scope, cst.Module) and index.scope_of(small) is index.module
                ):
                    continue
                if (isinstance(small, cst.Assign) and any(_binds(t.target, ref) for t in small.targets)) or (
                    isinstance(small, (cst.AugAssign, cst.AnnAssign))
                    and small.value is not None
                    and _binds(small.target, ref)
                ):
                    found.append(small)
        return found

    def _is_parameter(self, ref: Ref) -> bool:
        scope = ref.scope
        if not isinstance(scope, cst.FunctionDef):
            return False
        params = scope.params
        every = (*params.posonly_params, *params.params, *params.kwonly_params)
        return any(p.name.value == ref.path for p in every)

    def _is_tensor(self, expr: cst.BaseExpression, scope: Scope, depth: int) -> bool:
        """Whether ``expr`` makes a tensor with torch (through names assigned such a tensor too)."""
        index = self.index
        if depth > 6:
            return False
        if isinstance(expr, cst.Call):
            names = index.qualified_names(expr.func)
            if names:
                return any(
                    n.startswith("torch.") and not n.startswith(NOT_TENSORS) and n not in NOT_TENSOR_CALLS
                    for n in names
                )
            if isinstance(expr.func, cst.Attribute):  # x.float(), x.to(device), x.unsqueeze(1)
                return self._is_tensor(expr.func.value, scope, depth + 1)
            return False
        if isinstance(expr, cst.BinaryOperation):
            return self._is_tensor(expr.left, scope, depth + 1) or self._is_tensor(expr.right, scope, depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self._is_tensor(expr.expression, scope, depth + 1)
        if isinstance(expr, cst.Comparison):  # (x.sum(1) > 0).long()
            return self._is_tensor(expr.left, scope, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self._is_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
            return self._is_tensor(expr.value, scope, depth + 1)
        if isinstance(expr, cst.Name):
            ref = index.ref_of(expr, scope)
            if ref is None:
                return False
            # the value it holds where it is read: the last assignment before (``x = x.to(device)`` reads the one before)
            assignments = [a for a in self._assignments(ref) if index.after(expr, a)]
            if not assignments:
                return False
            last = max(assignments, key=lambda a: index.order[a])
            value = _value_of(last, ref)
            return value is not None and self._is_tensor(value, index.scope_of(last), depth + 1)
        return False

    def _model_input(self, leaf: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``leaf`` is what a model is called on: ``model(x)``, ``model(x.to(device)[:, :3])``, or
        ``xb = x[idx]`` before ``model(xb)``."""
        index = self.index
        child: cst.CSTNode = leaf
        for parent in index.ancestors(leaf):
            if isinstance(parent, cst.Assign) and parent.value is child and depth < 4:
                return any(
                    self._model_input(read, depth + 1)
                    for target in self._targets_of(parent, leaf)
                    for read in index.mentions(index.scope_of(parent), target)
                    if index.after(read, parent)
                )
            if isinstance(parent, cst.Element) and isinstance(index.parent(parent), (cst.Tuple, cst.List)):
                child = parent
                continue
            if isinstance(parent, (cst.Tuple, cst.List)) and isinstance(index.parent(parent), cst.Assign):
                child = parent
                continue
            if isinstance(parent, cst.Arg) and parent.value is child:
                call = index.parent(parent)
                if not isinstance(call, cst.Call):
                    return False
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                    func = func.value
                ref = index.ref_of(func, index.scope_of(call))
                return ref is not None and ref in self.model_refs
            along = (
                (isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is child)
                or (isinstance(parent, cst.Call) and parent.func is child)
                or isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation))
            )
            if not along:
                return False
            child = parent
        return False

    def _targets_of(self, assign: cst.Assign, node: cst.CSTNode) -> list[Ref]:
        """The places ``assign`` gives ``node`` (inside its value) to: ``xb`` for ``x[i]`` in ``xb, yb = x[i], y[i]``."""
        index = self.index
        value = assign.value
        scope = index.scope_of(assign)
        found: list[Ref] = []
        for target in assign.targets:
            single: cst.BaseExpression = target.target
            if isinstance(value, (cst.Tuple, cst.List)) and isinstance(single, (cst.Tuple, cst.List)):
                pairs = list(zip(single.elements, value.elements))
                matched = [t.value for t, v in pairs if v.value is node or index.inside(node, v.value)]
                if len(single.elements) == len(value.elements) and matched:
                    single = matched[0]
            for name in assigned(single):
                ref = index.ref_of(name, scope)
                if ref is not None:
                    found.append(ref)
        return found

    def _roots(self, ref: Ref) -> set[object]:
        """What the rows of the tensor at ``ref`` come from: the places and row counts it is made of."""
        roots: set[object] = {ref}
        for assignment in self._assignments(ref):
            value = _value_of(assignment, ref)
            if value is not None:
                self._expression_roots(value, self.index.scope_of(assignment), roots, 0)
        return roots

    def _expression_roots(self, expr: cst.BaseExpression, scope: Scope, roots: set[object], depth: int) -> None:
        index = self.index
        if depth > 6:
            return
        if isinstance(expr, cst.Name):
            ref = index.ref_of(expr, scope)
            if ref is None or ref in roots or index.qualified_names(expr):
                return
            roots.add(ref)
            for assignment in self._assignments(ref):
                value = _value_of(assignment, ref)
                if value is not None:
                    self._expression_roots(value, index.scope_of(assignment), roots, depth + 1)
        elif isinstance(expr, cst.Call):
            names = index.qualified_names(expr.func)
            positional = [a.value for a in expr.args if a.keyword is None and not a.star]
            if names & SIZED_FACTORIES and positional:
                size = positional[0]
                if isinstance(size, (cst.Tuple, cst.List)) and size.elements:
                    size = size.elements[0].value
                roots.add(("rows", _code(index, size)))
                self._expression_roots(size, scope, roots, depth + 1)
            elif names:
                for arg in positional:
                    self._expression_roots(arg, scope, roots, depth + 1)
            elif isinstance(expr.func, cst.Attribute):
                self._expression_roots(expr.func.value, scope, roots, depth + 1)
        elif isinstance(expr, (cst.List, cst.Tuple)):
            roots.add(("rows", str(len(expr.elements))))
        elif isinstance(expr, cst.BinaryOperation):
            self._expression_roots(expr.left, scope, roots, depth + 1)
            self._expression_roots(expr.right, scope, roots, depth + 1)
        elif isinstance(expr, cst.UnaryOperation):
            self._expression_roots(expr.expression, scope, roots, depth + 1)
        elif isinstance(expr, cst.Comparison):
            self._expression_roots(expr.left, scope, roots, depth + 1)
        elif isinstance(expr, cst.Subscript):
            self._expression_roots(expr.value, scope, roots, depth + 1)
            first = expr.slice[0].slice if expr.slice else None
            if isinstance(first, cst.Index) and isinstance(first.value, cst.Name):  # data[perm]: chosen rows
                self._expression_roots(first.value, scope, roots, depth + 1)
        elif isinstance(expr, cst.Attribute):
            self._expression_roots(expr.value, scope, roots, depth + 1)

    # -- the same data on every rank ------------------------------------------
    def _check_seeded(self, assignment: cst.CSTNode) -> None:
        """A random choice of samples in the making of the data needs a seed set before it."""
        index = self.index
        for node in index.walk(assignment):
            if not (isinstance(node, cst.Call) and (index.qualified_names(node.func) & RANDOM_CHOICES)):
                continue
            if any(a.keyword is not None and a.keyword.value in ("generator", "random_state") for a in node.args):
                continue
            seeds, hint = _seeds_for(index.qualified_names(node.func))
            if not any(index.is_call_to(call, seeds) and index.after(node, call) for call in index.calls):
                raise Refused(
                    node,
                    f"the samples are chosen at random (`{_code(index, node.func)}`) before any seed is set, so "
                    f"each rank would choose differently: seed it first (`{hint}`)",
                )

    def _top_statement(self, node: cst.CSTNode, scope: Scope) -> cst.BaseStatement:
        """The statement directly in ``scope``'s body that holds ``node``."""
        index = self.index
        current = index.statement_of(node)
        while True:
            parent = index.parent(current)
            if parent is None or parent is scope or index.parent(parent) is scope:
                return current
            current = index.statement_of(parent)


def _seeds_for(names: set[str]) -> tuple[frozenset[str], str]:
    """The calls that seed the generator a random choice by ``names`` draws from, and the one to suggest."""
    if any(n.startswith(("numpy.", "sklearn.")) for n in names):
        return ALL_SEEDS | {"numpy.random.seed"}, "np.random.seed(0)"
    if any(n.startswith("random.") for n in names):
        return ALL_SEEDS | {"random.seed"}, "random.seed(0)"
    return TORCH_SEEDS, "torch.manual_seed(0)"


def _is_constant(expr: cst.BaseExpression | None) -> bool:
    """A number, string or boolean, or arithmetic on them."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.UnaryOperation):
        return _is_constant(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _is_constant(expr.left) and _is_constant(expr.right)
    if isinstance(expr, cst.IfExp):  # "cuda" if torch.cuda.is_available() else "cpu"
        return _is_constant(expr.body) and _is_constant(expr.orelse)
    return False


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


def _whole_rows(subscript: cst.Subscript) -> bool:
    """``x[:, :3]``, ``out[..., 0]``: every row kept (only columns chosen); ``x.shape[0]`` picks no rows."""
    value = subscript.value
    if (isinstance(value, cst.Attribute) and value.attr.value == "shape") or (
        isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "size"
    ):
        return True
    first = subscript.slice[0].slice if subscript.slice else None
    if isinstance(first, cst.Slice):
        return first.lower is None and first.upper is None and first.step is None
    return isinstance(first, cst.Index) and isinstance(first.value, cst.Ellipsis)


def _is_read(index: Index, name: cst.Name) -> bool:
    parent = index.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    return not (isinstance(parent, cst.Arg) and parent.keyword is name)


def _value_of(assignment: cst.Assign | cst.AugAssign | cst.AnnAssign, ref: Ref) -> cst.BaseExpression | None:
    """What ``assignment`` gives ``ref``: ``b`` in ``x, y = a, b`` for ``y``, else its whole value."""
    value = assignment.value
    if isinstance(assignment, cst.Assign) and isinstance(value, (cst.Tuple, cst.List)):
        for target in assignment.targets:
            elements = target.target.elements if isinstance(target.target, (cst.Tuple, cst.List)) else None
            if elements is not None and len(elements) == len(value.elements):
                for element, item in zip(elements, value.elements):
                    if _binds(element.value, ref):
                        return item.value
    return value


def _binds(target: cst.BaseExpression, ref: Ref) -> bool:
    for single in assigned(target):
        if isinstance(single, cst.StarredElement):
            single = single.value
        if isinstance(single, cst.Name) and single.value == ref.path:
            return True
    return False


def _replaced_by(code: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement by the expression ``code``."""
    return lambda _: cst.parse_expression(code)


def _without_leading(count: int) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A statement without the first ``count`` of its leading lines."""
    return lambda node: statement(node).with_changes(leading_lines=statement(node).leading_lines[count:])


def _indexed(index: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement of ``x`` by ``x[index]``."""
    return lambda node: cst.Subscript(
        value=cast(cst.BaseExpression, node), slice=[cst.SubscriptElement(cst.Index(cst.Name(index)))]
    )


def _code(index: Index, node: cst.CSTNode) -> str:
    return index.module.code_for_node(node).strip()


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    dist = plan.names.dist
    for streams in facts.streams:
        size = plan.index.module.code_for_node(streams.size)
        rank = f"{dist}.get_rank()"
        plan.replace(streams.size, _replaced_by(f"{size} * {dist}.get_world_size()"))
        own = f"{streams.name}.narrow({streams.dim}, {rank} * {size}, {size})"
        if streams.dim == 1:  # columns of a contiguous tensor are not contiguous
            own += ".contiguous()"
        line = statement(cst.parse_statement(f"{streams.name} = {own}\n"))
        keep = f"# Each rank keeps {size} of the streams, each a contiguous run of the data as before."
        plan.insert_after(streams.stmt, line.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(keep))]))
        plan.change(
            streams.stmt,
            f"batchified `{streams.name}`: made for all ranks at once ({size} x world_size streams), each rank keeps "
            f"its own {size}, so every rank takes the same steps over contiguous text; the global batch is "
            "world_size times larger",
        )
    for reseed in facts.reseeds:
        lines = [statement(cst.parse_statement(f"{seed}\n")) for seed in reseed.seeds]
        if not lines:  # generators never seeded differ per process already
            plan.change(
                reseed.loop, f"data drawn in each step ({', '.join(reseed.draws)}): unseeded, it differs per rank"
            )
            continue
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
    for full in facts.full_batches:
        shard = fresh("shard", plan.index.identifiers)
        world = f"{dist}.get_world_size()"
        line = cst.parse_statement(
            f"{shard} = slice({dist}.get_rank(), len({full.length}) - len({full.length}) % {world}, {world})\n"
        )
        if full.batched:
            comment = "# This rank's equal share of the samples, batched as before: as many steps on every rank."
        else:
            comment = (
                "# This rank's equal share of the samples: DDP averages the shards' gradients into the full-batch one."
            )
        line = statement(line).with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment))])
        plan.insert_after(full.after, line)
        for read in full.reads:
            plan.replace(read, _indexed(shard))
        names = ", ".join(f"`{name}`" for name in full.names)
        equal = f"equal shards, the last len({full.length}) % world_size samples left out"
        if full.batched:
            summary = (
                f"hand-made batches of {names}: each rank batches its own every world_size-th sample ({equal}) "
                "with the script's batch size, so the global batch is world_size times larger (and a pass over "
                "the data takes 1/world_size of the steps)"
            )
        else:
            summary = (
                f"full-batch training on {names}: each rank trains on every world_size-th sample ({equal}); with "
                "a mean loss DDP's averaged gradient is the full-batch one, with a summed loss it is 1/world_size of it"
            )
        plan.change(full.after, summary)
        if full.closure is not None and full.closure.ret is not None and full.closure.averaged:
            _average_returned_loss(plan, full.closure)


def _average_returned_loss(plan: EditPlan, closure: Closure) -> None:
    """``return loss`` -> the mean of every rank's loss, so that LBFGS decides the same on every rank."""
    dist = plan.names.dist
    assert closure.ret is not None
    ret = cast(cst.Return, closure.ret.body[0])
    assert ret.value is not None
    loss = plan.index.module.code_for_node(ret.value)
    name = fresh("global_loss", plan.index.identifiers)
    if not isinstance(ret.value, (cst.Name, cst.Attribute)):
        loss = f"({loss})"
    lines = [
        statement(cst.parse_statement(f"{name} = {loss}.detach().clone()\n")),
        statement(cst.parse_statement(f"{dist}.all_reduce({name})\n")),
        statement(cst.parse_statement(f"return {name} / {dist}.get_world_size()\n")),
    ]
    note = "# LBFGS decides its steps from this loss: return the mean over all ranks, the same on each."
    lines[0] = lines[0].with_changes(
        leading_lines=[*closure.ret.leading_lines, cst.EmptyLine(comment=cst.Comment(note))]
    )
    plan.insert_before(closure.ret, *lines)
    plan.remove(closure.ret)
    plan.change(
        closure.ret, "the closure returns the loss averaged over the ranks: LBFGS decides the same on every rank"
    )
