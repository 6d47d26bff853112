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
ranks (the ``closures`` concern), so every rank decides the same and calls the
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

Batches that a generator of the program's own makes from a sequence of examples
(``for x, y in batch_iter(train_data, bs)``) come from this rank's equal share of
the sequence, ``train_data[shard]`` (:mod:`.generated`).

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

Its parts: ``lineage`` follows the loss back through the training step,
``samples`` tells which tensors hold the samples, and one module per shape of
data finds it and rewrites it -- ``shards`` (whole tensors and hand-made
batches), ``draws`` (data drawn in each step), ``streams`` (batchified text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns import data, model, process_group
from ddpify.concerns.tensors.draws import Reseed, _DrawFinder, rewrite_reseed
from ddpify.concerns.tensors.generated import GeneratedBatches, _GeneratedFinder, rewrite_generated
from ddpify.concerns.tensors.lineage import Refused, _code
from ddpify.concerns.tensors.samples import RANDOM_CHOICES
from ddpify.concerns.tensors.shards import Closure, FullBatch, _ShardFinder, rewrite_full_batch
from ddpify.concerns.tensors.streams import Streams, _StreamFinder, rewrite_streams
from ddpify.diagnostics import Code
from ddpify.engine.edits import EditPlan
from ddpify.engine.program import Program
from ddpify.result import Options

# DDP201 is the data concern's code: the batches come from no DataLoader it can follow. This concern
# decides whether tensors can be sharded instead, and reports it when they cannot.
NO_TRAINING_LOADER = data.NO_TRAINING_LOADER
UNSHARDED_DATA = data.UNSHARDED_DATA
CODES: tuple[Code, ...] = ()

# Gradients with respect to the inputs (physics-informed losses): the data is a variable, not samples.
DIFFERENTIATES = torch_api.AUTOGRAD_GRAD | {"torch.autograd.functional.jacobian"}


@dataclass(frozen=True)
class Facts:
    full_batches: tuple[FullBatch, ...] = ()
    reseeds: tuple[Reseed, ...] = ()
    streams: tuple[Streams, ...] = ()
    generated: tuple[GeneratedBatches, ...] = ()
    # training data that cannot be sharded, and why: left whole on every rank (refused with --strict)
    unsharded: tuple[tuple[cst.CSTNode, str], ...] = ()


def find(program: Program, loaders: data.Facts, models: model.Facts, setup: process_group.Facts) -> Facts:
    if any(loader.training for loader in loaders.loaders) or any(
        code is NO_TRAINING_LOADER for _, code, _ in program.findings
    ):
        return Facts()  # a DataLoader feeds training, or the data concern has refused how it is drawn
    index = program.index
    training_loop = next((lp for lp in index.loops if index.trains(lp.body)), None)
    try:
        # the draws the data concern gives a seeded generator of their own are the same on every rank
        seeded = frozenset(order.call for order in loaders.orders)
        found = _Finder(index, models, setup, program.names.dist, seeded).shard()
    except Refused as refused:
        if refused.whole or refused.hazard:
            program.report(
                refused.node,
                NO_TRAINING_LOADER,
                refused.reason
                if refused.whole
                else f"the training batches come from no DataLoader, and ddpify cannot shard them by rank: "
                f"{refused.reason}",
            )
            return Facts()
        return Facts(unsharded=((refused.node, f"the training batches come from no DataLoader: {refused.reason}"),))
    if found is None:
        reason = "the training loop does not draw its batches from a torch DataLoader that ddpify can follow"
        return Facts(unsharded=((training_loop or index.module, reason),))
    if isinstance(found, Reseed):
        return Facts(reseeds=(found,))
    if isinstance(found, Streams):
        return Facts(streams=(found,))
    if isinstance(found, GeneratedBatches):
        return Facts(generated=(found,))
    return Facts((found,))


class _Finder(_ShardFinder, _DrawFinder, _StreamFinder, _GeneratedFinder):
    """Where the training step's data comes from: whole tensors, draws in the step, batchified text, or a
    generator of the program's own over a sequence of examples."""

    def _loader_subclass(self, loop: cst.For | cst.While) -> cst.ClassDef | None:
        """The program's own DataLoader subclass whose instance ``loop`` iterates, if it is one."""
        index = self.index
        if not isinstance(loop, cst.For):
            return None
        ref = index.carried_ref(loop.iter, index.scope_of(loop))
        classes = index.constructed_classes(ref) if ref is not None else iter(())
        return next(
            (c for c in classes if index.derives_from(c, torch_api.DATALOADER) and not index.loader_as_built(c)), None
        )

    def shard(self) -> FullBatch | Reseed | Streams | GeneratedBatches | None:
        index = self.index
        backwards = [c for c in index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"]
        if not backwards:
            return None
        backward = backwards[0]
        scope = index.scope_of(backward)
        loops = list(index.enclosing_loops(backward))
        if (
            len(backwards) > 1
            and not (
                loops  # several models trained side by side: one step, the same outermost loop, the same data
                and all(
                    index.scope_of(b) is scope and list(index.enclosing_loops(b))[-1:] == loops[-1:] for b in backwards
                )
            )
        ):
            return None
        closure: Closure | None = None
        if loops:
            step: cst.For | cst.While | cst.FunctionDef = loops[-1]  # the outermost loop: all of it runs each step
            runs = step
        else:  # ``optimizer.step(closure)``: the closure runs in a loop of the function around it
            closure, runs = self._closure(backward, scope)
            step = closure.function
        for loop in loops:
            subclass = self._loader_subclass(loop)
            if subclass is not None:
                raise Refused(
                    loop,
                    f"the training batches come from `{subclass.name.value}`, a DataLoader subclass of the "
                    "program, which ddpify does not convert: give the DataLoader it builds a DistributedSampler "
                    "yourself, or build a plain DataLoader",
                    whole=True,
                )
        generated = self._generated(loops) if closure is None else None
        if generated is not None:
            return generated
        losses = [value for b in backwards for value in (cast(cst.Attribute, b.func).value, *(a.value for a in b.args))]
        lineage = self._lineage(losses, scope, step)
        streams = self._streams(lineage) if closure is None else None
        if streams is not None:
            return streams
        for call in lineage.calls:
            if index.qualified_names(call.func) & DIFFERENTIATES:
                if len(backwards) > 1:
                    return None  # several steps (a GAN's penalty on one of them): the data stays whole, as before
                raise Refused(
                    call,
                    f"the loss differentiates with respect to the data (`{_code(index, call.func)}`), which "
                    "DistributedDataParallel does not support (its gradients must reach the parameters' .grad "
                    "through backward())",
                    hazard=True,
                )
        choices = [call for call in lineage.calls if index.qualified_names(call.func) & RANDOM_CHOICES]
        draws = [call for call in lineage.calls if call not in choices and self._draws(call)]
        try:
            tensors, first = self._tensors(lineage, scope)
        except Refused as unshardable:
            if not (choices and not draws and closure is None and all(index.inside(c, step) for c in choices)):
                raise
            # Samples chosen at random in every step (``permutation(len(graphs))[:batch]``) from data ddpify
            # cannot shard where it is made: each rank chooses its own, with its own seed; where that cannot
            # be (a choice that also decides when the step stops), the data stays whole, as it was
            try:
                return self._reseed(choices, cast(cst.For | cst.While, step))
            except Refused:
                raise unshardable from None
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
        return self._full_batch(lineage, tensors, first, choices, closure, step, runs)


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for node, reason in facts.unsharded:
        if options.strict:
            plan.report(node, NO_TRAINING_LOADER, f"{reason}; every rank would train on the same samples")
        else:
            plan.report(
                node,
                UNSHARDED_DATA,
                f"{reason}: converted with the data whole on every rank, not split between the ranks (correct, "
                "but no faster than one process); shard it by rank yourself, or pass --strict to refuse",
            )
    for streams in facts.streams:
        rewrite_streams(streams, plan)
    for generated in facts.generated:
        rewrite_generated(generated, plan)
    for reseed in facts.reseeds:
        rewrite_reseed(reseed, plan)
    for full in facts.full_batches:
        rewrite_full_batch(full, plan)
