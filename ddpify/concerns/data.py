"""Data: every training DataLoader draws its own shard through a DistributedSampler.

A loader feeds training when its batches flow into a backward pass (through
the script's own functions too); a validation batch drawn inside the training
loop does not. ``shuffle=`` moves into the sampler, because a DataLoader
refuses both; the sampler's ``set_epoch`` is called on the loader itself (not
on a progress bar or iterator over it) at the start of each epoch so that
every epoch shuffles differently (and identically on all ranks)::

    loader = DataLoader(ds, batch_size=64, shuffle=True)
    ->  loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds))

    for epoch in range(epochs):              for epoch in range(epochs):
        train(model, loader)          ->         loader.sampler.set_epoch(epoch)
                                                 train(model, loader)

``len(loader.dataset)`` on a training loader becomes ``len(loader.sampler)``,
the number of samples this rank trains on, so per-sample averages and progress
counts stay right. The per-process batch size stays as written, so the global
batch is now ``world size`` times larger. Evaluation loaders are left whole: every rank
evaluates the full set, so the numbers it reports are the single-process ones.

The data must be the same on every rank before it is sharded: a
``random_split`` drawn from an unseeded global RNG gets its own seeded
``generator=``. A training step that builds shapes from the loader's batch
size (``x.view(batch_size, -1)``) gets ``drop_last=True``, because a rank's last
batch can be short where the single-process one was not.

A ``sampler=`` or ``batch_sampler=`` the script already has keeps deciding
what an epoch draws: every rank draws the same from it and takes its own
share (``samplers`` builds that); a placeholder that stays ``None``
(``sampler=train_sampler`` after ``train_sampler = None``) becomes a
``DistributedSampler``. Of loaders kept in a dict, only the training entries
get a sampler (``samplers`` tells which).

An ``IterableDataset`` of the program's own has no sampler to shard: it is
wrapped so that each rank (and each DataLoader worker) takes one item in every
world size (x workers) of the stream, and a last round too short to share is
dropped, so that every rank takes as many steps. The stream must be the same on
every rank (the report says so); a class that splits its stream between
workers itself (``get_worker_info``) is split by rank only.

Limits: a sampler whose draws ddpify cannot make alike on every rank (DDP202,
the reason named), a loader built from ``*args`` (DDP205) or without a dataset
(DDP206), a state carried from batch to batch of an unshuffled loader
(DDP210: the sampler interleaves the ranks' samples) are refused, and so are
training batches that come from anything but a DataLoader the flow graph can
follow (DDP201) when the ``tensors`` concern cannot shard them; a loader that
cannot be followed to a loop (DDP204) and an epoch loop without a simple
variable or a training loop repeated in a ``while`` (DDP203) are reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst
import libcst.matchers as m

from ddpify import torch_api
from ddpify.concerns.samplers import (
    DictEntry,
    OwnSampler,
    define_wrapper,
    dict_entry,
    entry_iterations,
    keys_drawn,
    own_sampler,
    rng_draws,
    sample_entries,
    share,
)
from ddpify.diagnostics import Code, Severity
from ddpify.engine.edits import EditPlan, fresh, insert_arg, statement
from ddpify.engine.index import Flow, Ref, Scope
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, assigned, dotted
from ddpify.engine.values import dict_keys
from ddpify.result import Options

NO_TRAINING_LOADER = Code(
    "DDP201",
    Severity.ERROR,
    "data",
    "the training loop's batches do not come from a DataLoader ddpify can follow",
    "draw the training batches from a torch.utils.data.DataLoader over a map-style dataset",
)
OWN_SAMPLER = Code(
    "DDP202",
    Severity.ERROR,
    "data",
    "the training DataLoader already has a sampler= or batch_sampler=",
    "shard the data yourself (e.g. a DistributedSampler wrapping your sampler's choice)",
)
NO_EPOCH = Code(
    "DDP203",
    Severity.WARNING,
    "data",
    "no epoch to call sampler.set_epoch() with",
    "call `loader.sampler.set_epoch(n)` at the start of each pass over the data",
)
UNFOLLOWED_LOADER = Code(
    "DDP204",
    Severity.WARNING,
    "data",
    "a DataLoader that cannot be followed to a loop is left without a DistributedSampler",
    "if it feeds training, give it a DistributedSampler yourself",
)
STAR_ARGS = Code(
    "DDP205",
    Severity.ERROR,
    "data",
    "a training DataLoader built from `*args`",
    "pass the DataLoader's arguments by name",
)
NO_DATASET = Code(
    "DDP206",
    Severity.ERROR,
    "data",
    "a training DataLoader without a dataset argument",
    "pass the dataset as the first argument or as dataset=",
)
BATCH_NOT_ARGUMENT = Code(
    "DDP207",
    Severity.WARNING,
    "data",
    "--keep-global-batch, but the DataLoader's batch size is not one of its arguments",
    "pass batch_size= to the DataLoader",
)
CARRIED_STATE = Code(
    "DDP210",
    Severity.ERROR,
    "data",
    "a state carried from one batch of an unshuffled training DataLoader to the next (e.g. an RNN's hidden state)",
    "give each rank a contiguous, equally long part of the data in order (e.g. a Subset per rank) yourself",
)
CODES = (
    NO_TRAINING_LOADER,
    OWN_SAMPLER,
    NO_EPOCH,
    UNFOLLOWED_LOADER,
    STAR_ARGS,
    NO_DATASET,
    BATCH_NOT_ARGUMENT,
    CARRIED_STATE,
)


@dataclass(frozen=True)
class EpochLoop:
    loop: cst.For  # the epoch loop
    loader: str  # the loader as written in the loop's scope: ``train_loader``, ``self.train_data``
    after: cst.BaseStatement | None = None  # the loader is built inside the loop: set the epoch after this


@dataclass(frozen=True)
class Restart:
    stmt: cst.SimpleStatementLine  # ``it = iter(loader)`` after ``except StopIteration:``
    loader: str  # the loader as written there


@dataclass(frozen=True)
class Loader:
    call: cst.Call
    training: bool
    epoch_loops: tuple[EpochLoop, ...]
    # ``DataLoader(ds, **kwargs)``: the ``**kwargs`` argument and the keys it may
    # hold (None when they cannot be known from the script).
    spread: cst.Arg | None = None
    spread_keys: frozenset[str] | None = None
    # ``len(loader.dataset)``: the whole dataset, where this rank now sees its shard
    dataset_lengths: tuple[cst.Attribute, ...] = ()
    # ``it = iter(loader)`` after ``except StopIteration:``: a new pass over the data begins
    restarts: tuple[Restart, ...] = ()
    # ``x.view(batch_size, -1)`` in the training step: every batch must be full (drop_last=True)
    full_batches: cst.Call | None = None
    # where its batches are drawn for training (``for`` loops, ``next()`` calls), and the places holding it
    sites: tuple[cst.CSTNode, ...] = ()
    refs: frozenset[Ref] = frozenset()
    # ``sampler=`` / ``batch_sampler=`` the script gives it: each rank takes its share of what it draws
    own_sampler: OwnSampler | None = None
    # kept in a dict with other loaders: only the training entries get a sampler
    entry: DictEntry | None = None
    # an IterableDataset of the script's own: each rank takes its share of the stream
    stream: Stream | None = None


@dataclass(frozen=True)
class Stream:
    """``DataLoader(<dataset>)`` over an IterableDataset class of the program."""

    dataset: cst.BaseExpression
    cls: cst.ClassDef
    by_worker: bool  # the class does not split its stream between DataLoader workers itself


@dataclass(frozen=True)
class Split:
    """``random_split(ds, lengths)`` drawn from an unseeded global RNG: each rank would split differently."""

    call: cst.Call
    seed: str  # the seed its own generator gets: the script's seed, or 0


@dataclass(frozen=True)
class Facts:
    loaders: tuple[Loader, ...]
    splits: tuple[Split, ...] = ()


SHAPE_FACTORIES = frozenset(
    f"torch.{name}"
    for name in ("zeros", "ones", "full", "empty", "rand", "randn", "randint", "tensor", "arange", "eye")
)
SHAPE_METHODS = frozenset(
    {"view", "reshape", "expand", "new_zeros", "new_ones", "new_full", "new_empty", "unflatten", "resize_"}
)
RANDOM_SPLIT = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})
# Calls that seed torch's, Python's and NumPy's global RNGs at once.
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
# Calls that seed torch's global RNG identically on every rank (given the same argument).
GLOBAL_SEEDS = SEED_EVERYTHING | {"torch.manual_seed", "torch.random.manual_seed"}
# What seeds each global RNG that a sampler's indices or weights may be drawn from.
RNG_SEEDS = {
    "torch": GLOBAL_SEEDS,
    "numpy": SEED_EVERYTHING | {"numpy.random.seed"},
    "random": SEED_EVERYTHING | {"random.seed"},
}


def find(program: Program) -> Facts:
    finder = _Finder(program)
    loaders = tuple(finder.loaders())
    return Facts(loaders, tuple(finder.unseeded_splits()))


class _Finder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.index = program.index
        self._loader_refs: set[Ref] = set()  # the places holding the loader being examined

    def _origin(self, call: cst.Call) -> Ref | None:
        index = self.index
        parent = index.parent(call)
        scope = index.scope_of(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            return index.ref_of(parent.targets[0].target, scope)
        if isinstance(parent, cst.Return) and isinstance(scope, cst.FunctionDef):
            return Ref(scope, "<return>")
        if isinstance(parent, cst.Element) and isinstance(returned := index.parent(parent), cst.Tuple):
            ret = index.parent(returned)
            if isinstance(ret, cst.Return) and isinstance(scope, cst.FunctionDef):
                slot = list(returned.elements).index(parent)
                return Ref(scope, f"<return {slot}>")
        return None

    def loaders(self) -> Iterator[Loader]:
        index = self.index
        for call in index.calls:
            if not index.is_call_to(call, torch_api.DATALOADER):
                continue
            origin = self._origin(call)
            entry = dict_entry(index, call)
            if entry is not None:
                origin = entry.holder
            refs = index.downstream(origin) if origin is not None else set()
            starts: dict[cst.CSTNode, cst.CSTNode] = {}  # where to look for the epoch loop around a site
            if entry is None:
                sites = [
                    site
                    for site in self._iterations(refs)
                    if self._site_trains(site[0]) and self._batches_train(site[0])
                ]
            else:
                sites, entry = self._entry_sites(call, entry, refs, starts)
            training = bool(sites)
            epoch_loops: list[EpochLoop] = []
            own = stream = None
            self._loader_refs = self._holding_loader(origin) if origin is not None else set()
            restarts = tuple(self._restarts(refs)) if training else ()
            if training:
                for node, ref in sites:
                    loop = self._epoch_loop(starts.get(node, node), ref)
                    if loop is not None and index.inside(call, loop.loop):
                        built = next(
                            a for a in (call, *index.ancestors(call)) if index.parent(index.parent(a)) is loop.loop
                        )
                        loop = EpochLoop(loop.loop, loop.loader, statement(built))
                    found = [loop] if loop is not None else []
                    if loop is not None and entry is not None:  # set_epoch on the training entries of the dict
                        found = [EpochLoop(loop.loop, held, loop.after) for held in entry.indexed(loop.loader)]
                    epoch_loops.extend(lp for lp in found if lp not in epoch_loops)
                repeated = any(
                    isinstance(lp, cst.While)
                    for node, _ in sites
                    for lp in index.enclosing_loops(node)
                    if lp is not node
                )
                if not epoch_loops and not restarts and repeated:
                    self.program.report(
                        call,
                        NO_EPOCH,
                        "the training loop repeats inside a `while` loop: call `loader.sampler.set_epoch(n)` "
                        "at the start of each pass, or every pass shuffles the same way",
                    )
                own = self._check_sampling_arguments(call, refs)
                stream = self._stream(call)
                self._check_carried_state(call, [node for node, _ in sites], origin)
            elif origin is None or not (entry_iterations(index, refs) if entry else self._iterations(refs)):
                self.program.report(
                    call,
                    UNFOLLOWED_LOADER,
                    "cannot follow this DataLoader to a loop: left without a DistributedSampler",
                )
            spread = next((a for a in call.args if a.star == "**"), None)
            keys = dict_keys(self.index, spread.value, index.scope_of(call)) if spread is not None else None
            if training and spread is not None and keys is not None and keys & torch_api.DATALOADER_SAMPLING_KEYWORDS:
                self.program.report(
                    spread,
                    OWN_SAMPLER,
                    "the training DataLoader already has its own sampler; a DistributedSampler would replace it",
                )
            lengths = tuple(self._dataset_lengths(refs)) if training else ()
            full = self._batch_size_in_shapes(call, [node for node, _ in sites], keys) if training else None
            yield Loader(
                call,
                training,
                tuple(epoch_loops),
                spread,
                keys,
                lengths,
                restarts,
                full,
                tuple(node for node, _ in sites),
                frozenset(refs),
                own,
                entry,
                stream,
            )

    def _entry_sites(
        self, call: cst.Call, entry: DictEntry, refs: set[Ref], starts: dict[cst.CSTNode, cst.CSTNode]
    ) -> tuple[list[tuple[cst.CSTNode, Ref]], DictEntry]:
        """Where the training entries of a dict of loaders are drawn for training, and the entry with its training keys.

        A loop over the keys (``for phase in ["train", "val"]``) counts as training only for the
        keys that the backward pass is guarded by (``if phase == "train":``).
        """
        sites: list[tuple[cst.CSTNode, Ref]] = []
        training: set[str] = set()
        for site, ref, key in entry_iterations(self.index, refs):
            if not (self._site_trains(site) and self._batches_train(site)):
                continue
            drawn = keys_drawn(self.index, site, key)
            if isinstance(drawn, str):
                self.program.report(site, NO_TRAINING_LOADER, f"{drawn}; every rank would train on the same samples")
                continue
            keys, phases = drawn
            if keys & {str(k.evaluated_value) for k in entry.keys}:
                training |= keys
                sites.append((site, ref))
                if phases is not None:
                    starts[site] = phases
        chosen = tuple(k for k in entry.keys if str(k.evaluated_value) in training)
        return sites, DictEntry(entry.holder, entry.keys, entry.variable, chosen)

    def _iterable_dataset(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> cst.ClassDef | None:
        """The script's own IterableDataset class that ``expr`` is an instance of, if it is one."""
        index = self.index
        if isinstance(expr, cst.Call):
            cls = index.local_class(expr.func)
            return cls if cls is not None and self._subclasses_iterable_dataset(cls) else None
        ref = index.ref_of(expr, scope)
        if ref is None or depth > 3:
            return None
        found = (self._iterable_dataset(a.value, index.scope_of(a), depth + 1) for a in index.assignments_to(ref))
        return next(filter(None, found), None)

    def _stream(self, call: cst.Call) -> Stream | None:
        """The IterableDataset of the program's own that a training DataLoader reads, if it reads one."""
        dataset_arg = argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])
        if dataset_arg is None:
            return None
        cls = self._iterable_dataset(dataset_arg.value, self.index.scope_of(call))
        if cls is None:
            return None
        splits = any(
            isinstance(n, (cst.Name, cst.Attribute)) and dotted(n).endswith("get_worker_info")
            for n in self.index.walk(cls)
        )
        return Stream(dataset_arg.value, cls, by_worker=not splits)

    def _subclasses_iterable_dataset(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        for base in cls.bases:
            if self.index.qualified_names(base.value) & torch_api.ITERABLE_DATASET:
                return True
            parent = self.index.local_class(base.value)
            if parent is not None and depth < 5 and self._subclasses_iterable_dataset(parent, depth + 1):
                return True
        return False

    def _restarts(self, refs: set[Ref]) -> Iterator[Restart]:
        """``except StopIteration: it = iter(loader)``: the statements that start another pass."""
        index = self.index
        for stmt in index.statements:
            small = stmt.body[0]
            if len(stmt.body) != 1 or not isinstance(small, cst.Assign):
                continue
            value = small.value
            if not (isinstance(value, cst.Call) and m.matches(value.func, m.Name("iter")) and value.args):
                continue
            ref = index.ref_of(value.args[0].value, index.scope_of(stmt))
            if ref in refs and any(
                isinstance(a, cst.ExceptHandler) and a.type is not None and "StopIteration" in dotted(a.type)
                for a in index.ancestors(stmt)
            ):
                loader = self._loader_itself(ref, index.scope_of(stmt))
                if loader is None:
                    self.program.report(
                        stmt,
                        NO_EPOCH,
                        "a new pass over the data starts here, but the DataLoader is not reachable by name: call "
                        "`loader.sampler.set_epoch(n)` before it yourself",
                    )
                    continue
                yield Restart(stmt, self.index.spelled(loader, index.scope_of(stmt)))

    def _dataset_lengths(self, refs: set[Ref]) -> Iterator[cst.Attribute]:
        index = self.index
        for ref in refs:
            for scope in index.scopes_reading(ref):
                for read in index.mentions(scope, ref):
                    attribute = index.parent(read)
                    if not (
                        isinstance(attribute, cst.Attribute)
                        and attribute.attr.value == "dataset"
                        and attribute.value is read
                    ):
                        continue
                    arg = index.parent(attribute)
                    call = index.parent(arg)
                    if isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and m.matches(call.func, m.Name("len")):
                        yield attribute

    def _check_sampling_arguments(self, call: cst.Call, refs: set[Ref]) -> OwnSampler | None:
        own = None
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in torch_api.DATALOADER_SAMPLING_KEYWORDS:
                found = own_sampler(self.index, call, arg, any(True for _ in self._dataset_lengths(refs)))
                if isinstance(found, OwnSampler):
                    found = self._unseeded_draw(found) or found
                if isinstance(found, OwnSampler):
                    own = found
                else:
                    self.program.report(
                        arg, OWN_SAMPLER, f"the training DataLoader already has its own {keyword}: {found}"
                    )
            elif keyword is None and not arg.star and position >= torch_api.DATALOADER_POSITIONS["sampler"]:
                self.program.report(
                    arg,
                    OWN_SAMPLER,
                    "the training DataLoader's sampler is passed by position: pass it as sampler= or batch_sampler=",
                )
            elif arg.star == "*":
                self.program.report(arg, STAR_ARGS, "cannot add a sampler to a DataLoader built from `*args`")
        return own

    def _unseeded_draw(self, own: OwnSampler) -> str:
        """Why the samplers' own arguments would differ between ranks: drawn from an RNG no seed was set for."""
        index = self.index
        for value in own.wrapped:
            ref = index.ref_of(value, index.scope_of(value))
            built = [a.value for a in index.assignments_to(ref)] if ref is not None else [value]
            for draw, family in (d for b in built if isinstance(b, cst.Call) for d in rng_draws(index, b)):
                if not self._seeded_before(draw, 0, RNG_SEEDS[family]):
                    name = next(iter(index.qualified_names(draw.func)))
                    return (
                        f"the indices or weights it draws from come from `{name}` (line {index.position(draw)[0]}), "
                        f"unseeded: they would differ between ranks; seed {family}'s RNG the same way on every rank "
                        "before it"
                    )
        return ""

    def _iterations(self, refs: set[Ref]) -> list[tuple[cst.CSTNode, Ref]]:
        """Where batches are drawn from the loader: ``for ... in loader`` loops and ``next(it)`` calls."""
        index = self.index
        sites: list[tuple[cst.CSTNode, Ref]] = []
        for loop in index.loops:
            if isinstance(loop, cst.For):
                ref = self._iterated_ref(loop.iter, index.scope_of(loop), refs)
                if ref is not None:
                    sites.append((loop, ref))
        for comprehension in index.comprehensions:
            ref = self._iterated_ref(comprehension.iter, index.scope_of(comprehension), refs)
            if ref is not None:
                sites.append((comprehension, ref))
        for call in index.calls:
            if m.matches(call.func, m.Name("next")) and call.args:
                ref = index.carried_ref(call.args[0].value, index.scope_of(call))
                if ref in refs:
                    sites.append((call, ref))
        return sites

    def _iterated_ref(self, expr: cst.BaseExpression, scope: Scope, refs: set[Ref]) -> Ref | None:
        ref = self.index.carried_ref(expr, scope)
        if ref in refs:
            return ref
        if isinstance(expr, cst.Call) and not m.matches(expr.func, m.Name("len") | m.Name("range")):
            for arg in expr.args:
                if arg.keyword is None:
                    found = self._iterated_ref(arg.value, scope, refs)
                    if found is not None:
                        return found
        return None

    def _site_trains(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.CompFor):
            return False
        if isinstance(node, cst.For):
            return self.index.trains(node.body)
        return any(self.index.trains(loop.body) for loop in self.index.enclosing_loops(node))

    def _batches_train(self, site: cst.CSTNode) -> bool:
        """Whether the batches drawn at ``site`` flow into a backward pass.

        A loader drawn inside a loop that trains may still be evaluation data (``vx, vy =
        next(iter(val_loader))`` every few steps). The batch is followed through the
        function's assignments, with-items, loops and mutating calls (``losses.append(loss)``),
        and counts as training data when something derived from it reaches ``.backward()``
        or is handed to a function of the script that trains.
        """
        index = self.index
        scope = index.scope_of(site)
        nodes = [n for n in index.walk(scope) if index.scope_of(n) is scope and n is not scope]
        tainted: set[str] = set()

        def reads(expr: cst.CSTNode | None) -> bool:
            if expr is None:
                return False
            for node in index.walk(expr):
                if node is site:
                    return True
                if isinstance(node, cst.Name) and node.value in tainted:
                    parent = index.parent(node)
                    if not (isinstance(parent, cst.Attribute) and parent.attr is node) and not (
                        isinstance(parent, cst.Arg) and parent.keyword is node
                    ):
                        return True
            return False

        def taint(target: cst.BaseExpression) -> bool:
            grew = False
            for single in assigned(target):
                while isinstance(single, (cst.Attribute, cst.Subscript)):
                    single = single.value
                if isinstance(single, cst.StarredElement):
                    single = single.value
                if isinstance(single, cst.Name) and single.value not in tainted:
                    tainted.add(single.value)
                    grew = True
            return grew

        if isinstance(site, cst.For):
            taint(site.target)
        grew = True
        while grew:
            grew = False
            for node in nodes:
                if isinstance(node, cst.Assign) and reads(node.value):
                    for target in node.targets:
                        grew |= taint(target.target)
                elif (isinstance(node, (cst.AugAssign, cst.AnnAssign)) and reads(node.value)) or (
                    isinstance(node, cst.For) and node is not site and reads(node.iter)
                ):
                    grew |= taint(node.target)
                elif isinstance(node, cst.WithItem) and node.asname is not None and reads(node.item):
                    grew |= taint(node.asname.name)
                elif (
                    isinstance(node, cst.Call)
                    and isinstance(index.parent(node), cst.Expr)
                    and isinstance(node.func, cst.Attribute)
                    and not index.qualified_names(node.func)
                    and any(reads(arg.value) for arg in node.args)
                ):
                    grew |= taint(node.func.value)  # ``losses.append(loss)``: ``losses`` now holds it
        for node in nodes:
            if not isinstance(node, cst.Call):
                continue
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
                if reads(node.func.value) or any(reads(arg.value) for arg in node.args):
                    return True
                continue
            callee = index.resolve_callee(node, scope)
            if (
                callee is not None
                and index.trains(callee[0].body)
                and (
                    reads(node.func)
                    or any(reads(arg.value) for arg in node.args)
                    or any(  # the callee reads the batch as a global (or a closure's variable)
                        isinstance(n, cst.Name)
                        and n.value in tainted
                        and index.ref_of(n, index.scope_of(n)) == Ref(scope, n.value)
                        for n in index.walk(callee[0].body)
                    )
                )
            ):
                return True
        return False

    def _check_carried_state(self, call: cst.Call, sites: list[cst.CSTNode], origin: Ref | None) -> None:
        """``logits, hidden = model(x, hidden)`` over an unshuffled loader: batch t+1 continues batch t.

        A DistributedSampler deals the samples out to the ranks in turn, so the state a
        rank carries into its next batch belongs to other data. Re-sharding the data
        contiguously per rank depends on how the dataset is laid out, so this is refused.
        """
        shuffle = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
        if shuffle is not None and not _is_false(shuffle.value):
            return
        index = self.index
        for site in sites:
            loop = site if isinstance(site, cst.For) else next(index.enclosing_loops(site), None)
            if loop is None:
                continue
            for node in index.walk(loop.body):
                if not (isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)):
                    continue
                outputs = {
                    n.value
                    for t in node.targets
                    if isinstance(t.target, (cst.Tuple, cst.List))
                    for n in index.walk(t.target)
                    if isinstance(n, cst.Name)
                }
                inputs = {n.value for a in node.value.args for n in index.walk(a.value) if isinstance(n, cst.Name)}
                for state in sorted(outputs & inputs):
                    if self._read_before_written(state, loop.body):
                        loader = f"`{origin.path}`" if origin is not None else "this DataLoader"
                        line = index.module.code_for_node(node).strip()
                        self.program.report(
                            call,
                            CARRIED_STATE,
                            f"`{state}` is carried from one batch to the next (`{line}`), so each batch must "
                            f"continue the previous one; a DistributedSampler deals the samples of {loader} "
                            "out to the ranks in turn and breaks that: give each rank a contiguous, equally long "
                            "part of the data in order (e.g. a Subset per rank) and shard it yourself",
                        )
                        return

    def _read_before_written(self, name: str, body: cst.CSTNode) -> bool:
        """Whether an iteration of ``body`` reads ``name`` before it assigns it: the value comes from the last one."""
        index = self.index
        first = next((n for n in index.walk(body) if isinstance(n, cst.Name) and n.value == name), None)
        if first is None:
            return False
        target = next((a for a in index.ancestors(first) if isinstance(a, cst.AssignTarget)), None)
        if target is None:
            return True
        assign = index.parent(target)
        return isinstance(assign, cst.Assign) and any(
            isinstance(n, cst.Name) and n.value == name for n in index.walk(assign.value)
        )

    def _batch_size_in_shapes(
        self, call: cst.Call, sites: list[cst.CSTNode], spread_keys: frozenset[str] | None
    ) -> cst.Call | None:
        """A shape in the training step written with the loader's batch size: ``x.view(batch_size, -1)``.

        Under a DistributedSampler a rank's last batch can be short even where the
        single-process one never was, so such a step needs full batches.
        """
        index = self.index
        batch = _batch_size(call)
        if batch is None or not isinstance(batch.value, (cst.Name, cst.Attribute)) or argument(call, "drop_last"):
            return None
        if call.args and any(a.star == "**" for a in call.args) and (spread_keys is None or "drop_last" in spread_keys):
            return None
        size = dotted(batch.value)
        size_ref = index.ref_of(batch.value, index.scope_of(call))
        related = index.lineage(size_ref) if size_ref is not None else set()
        bodies: list[cst.CSTNode] = []
        for site in sites:
            if isinstance(site, cst.For):
                bodies.append(site.body)
            else:
                bodies.extend(loop.body for loop in itertools.islice(index.enclosing_loops(site), 1))
        seen: set[cst.CSTNode] = set()
        while bodies:
            body = bodies.pop()
            if body in seen or len(seen) > 20:
                continue
            seen.add(body)
            for node in index.walk(body):
                if not isinstance(node, cst.Call):
                    continue
                callee = index.resolve_callee(node, index.scope_of(node))
                if callee is not None:
                    bodies.append(callee[0].body)
                if not self._builds_shape(node):
                    continue
                for arg in node.args:
                    for part in index.walk(arg.value):
                        if not isinstance(part, (cst.Name, cst.Attribute)) or dotted(part) != size:
                            continue
                        ref = index.ref_of(part, index.scope_of(part))
                        if size_ref is None or ref is None or ref in related or ref.path == size_ref.path:
                            return node
        return None

    def _builds_shape(self, call: cst.Call) -> bool:
        """``x.view(...)``, ``x.reshape(...)``, ``torch.zeros(...)`` and the like: a call that takes a shape."""
        func = call.func
        if self.index.qualified_names(func) & SHAPE_FACTORIES:
            return True
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value in SHAPE_METHODS
            and not self.index.qualified_names(func)
        )

    def _epoch_loop(self, site: cst.CSTNode, ref: Ref, depth: int = 0) -> EpochLoop | None:
        index = self.index
        loops = [lp for lp in index.enclosing_loops(site) if lp is not site]
        if depth == 0 and isinstance(site, cst.Call):  # next(it): the loop drawing batches is the innermost one
            loops = loops[1:]
        for loop in loops:
            if isinstance(loop, cst.For):
                loader = self._loader_itself(ref, index.scope_of(loop))
                if loader is None:
                    self.program.report(
                        loop,
                        NO_EPOCH,
                        "the DataLoader is not reachable by name in this epoch loop: call "
                        "`loader.sampler.set_epoch(epoch)` at the start of each epoch yourself",
                    )
                    return None
                return EpochLoop(loop, self.index.spelled(loader, index.scope_of(loop)))
            return None  # a `while` loop counts steps, not epochs
        scope = index.scope_of(site)
        if not isinstance(scope, cst.FunctionDef) or depth > 4:
            return None
        for call in index.callers(scope):
            caller_scope = index.scope_of(call)
            caller_ref = self._ref_at_call(ref, call, caller_scope)
            if caller_ref is not None:
                found = self._epoch_loop(call, caller_ref, depth + 1)
                if found is not None:
                    return found
        return None

    def _holding_loader(self, origin: Ref) -> set[Ref]:
        """The places that hold the DataLoader itself, not an iterator or progress bar over it."""
        index = self.index
        seen = {origin}
        queue = [origin]
        while queue:
            current = queue.pop()
            for flow in index.flows_from(current):
                if flow.dst not in seen and self._passes_as_is(flow):
                    seen.add(flow.dst)
                    queue.append(flow.dst)
        return seen

    def _passes_as_is(self, flow: Flow) -> bool:
        """Whether ``flow`` hands its value on as it is (``a = loader``), not wrapped (``it = iter(loader)``)."""
        index = self.index
        reads = index.mentions(flow.stmt, flow.src)
        if not reads and isinstance(flow.src.scope, cst.FunctionDef):  # returned: as the function returns it
            returns = [n for n in index.walk(flow.src.scope.body) if isinstance(n, cst.Return) and n.value]
            reads = [read for ret in returns for read in index.mentions(ret, flow.src)]
        if not reads:
            return True
        for read in reads:
            arg = index.parent(read)
            call = index.parent(arg)
            wrapped = (
                isinstance(arg, cst.Arg)
                and isinstance(call, cst.Call)
                and call.args[0] is arg
                and (m.matches(call.func, m.Name("iter")) or index.is_call_to(call, torch_api.PROGRESS_BARS))
            )
            if not wrapped:
                return True
        return False

    def _loader_itself(self, ref: Ref, scope: Scope) -> Ref | None:
        """The place, readable in ``scope``, holding the loader that ``ref`` holds or iterates over."""
        index = self.index
        seen = {ref}
        queue = [ref]
        while queue:
            current = queue.pop(0)
            if current in self._loader_refs and (
                current.scope is scope
                or isinstance(current.scope, cst.Module)
                or (isinstance(current.scope, cst.ClassDef) and index.method_scope(scope) is not None)
            ):
                return current
            for flow in index.flows_into(current):
                if flow.src not in seen:
                    seen.add(flow.src)
                    queue.append(flow.src)
        return None

    def _ref_at_call(self, ref: Ref, call: cst.Call, caller: Scope) -> Ref | None:
        """How the caller names the value that the callee knows as ``ref``."""
        index = self.index
        if isinstance(ref.scope, cst.Module):
            return ref
        if isinstance(ref.scope, cst.ClassDef):
            owner = index.method_scope(caller)
            return ref if owner is not None and index.attribute_class(owner) is ref.scope else None
        stmt = index.statement_of(call)
        return next((flow.src for flow in index.flows_into(ref) if flow.stmt is stmt), None)

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


PER_PROCESS_BATCH = '''
def {helper}(batch_size):
    """The share of the single-process batch that each process loads, so the global batch stays the same."""
    world_size = {dist}.get_world_size()
    if batch_size % world_size:
        raise ValueError(f"batch size {{batch_size}} cannot be split evenly over {{world_size}} processes")
    return batch_size // world_size
'''


def rewrite(facts: Facts, plan: EditPlan, options: Options) -> None:
    for split in facts.splits:
        _seed_split(plan, split)
    taken: set[str] = set()
    helper = wrapper = shard = None
    for loader in facts.loaders:
        if loader.training:
            own = loader.own_sampler
            if loader.stream is not None:
                shard = shard or _define_shard(plan, taken)
                _shard_stream(plan, loader.stream, shard)
                reshuffles = False
            elif own is not None:
                if own.wrapped:
                    wrapper = wrapper or define_wrapper(plan, taken)
                share(plan, own, wrapper or "")
                reshuffles = own.reshuffles
            else:
                reshuffles = _add_sampler(plan, loader, taken, options.keep_global_batch)
            if reshuffles:
                _set_epoch(plan, loader, taken, own.attribute if own is not None else "sampler")
            if options.keep_global_batch:
                helper = helper or fresh("per_process_batch", plan.index.identifiers | taken)
                taken.add(helper)
                _split_batch(plan, loader, helper)
            if loader.full_batches is not None:
                _drop_last(plan, loader)
            for attribute in loader.dataset_lengths if loader.stream is None else ():
                plan.replace(attribute, lambda n: n.with_changes(attr=cst.Name("sampler")))
                text = plan.index.module.code_for_node(attribute.value)
                plan.change(attribute, f"len({text}.dataset) -> len({text}.sampler): the samples this rank trains on")


_SHARD = '''
class {name}(torch.utils.data.IterableDataset):
    """This process's share of a stream: one item in every (ranks x DataLoader workers). A last
    round too short to give every share an item is dropped, so that every rank takes as many steps."""

    def __init__(self, dataset, by_worker=True):
        self.dataset = dataset
        self.by_worker = by_worker  # False: the dataset splits its stream between workers itself
        self.rank, self.world_size = {dist}.get_rank(), {dist}.get_world_size()

    def __iter__(self):
        worker = torch.utils.data.get_worker_info() if self.by_worker else None
        workers, worker_id = (worker.num_workers, worker.id) if worker is not None else (1, 0)
        shards, shard = self.world_size * workers, self.rank * workers + worker_id
        for items in zip(*[iter(self.dataset)] * shards):  # `shards` items at a time
            yield items[shard]

    def __len__(self):
        return len(self.dataset) // self.world_size
'''


def _define_shard(plan: EditPlan, taken: set[str]) -> str:
    """Define the stream-sharding class once, after the setup function; its name."""
    name = fresh("RankShard", plan.index.identifiers | taken)
    taken.add(name)
    definition = cst.parse_module(_SHARD.format(name=name, dist=plan.names.dist)).body[0]
    plan.add_setup_helper(name, cast(cst.ClassDef, definition))
    if "torch" not in plan.index.bound[plan.index.module]:
        plan.need_import("torch")
    return name


def _shard_stream(plan: EditPlan, stream: Stream, shard: str) -> None:
    """``DataLoader(stream)`` -> ``DataLoader(RankShard(stream))``."""
    code = plan.index.module.code_for_node(stream.dataset)
    arguments = code if stream.by_worker else f"{code}, by_worker=False"
    plan.replace(stream.dataset, lambda n: cst.parse_expression(f"{shard}({arguments})"))
    plan.change(
        stream.dataset,
        f"`{stream.cls.name.value}` is an IterableDataset: each rank (and DataLoader worker) takes one item in "
        "every world size (x workers) of its stream, and drops a last round too short to share, so that every "
        "rank takes as many steps; the stream must be the same on every rank (seed its randomness)",
    )


def _add_sampler(plan: EditPlan, loader: Loader, taken: set[str], keep_global_batch: bool) -> bool:
    """Give the loader its DistributedSampler; whether that sampler shuffles (and so needs ``set_epoch``)."""
    index = plan.index
    call = loader.call
    sampler = plan.names.sampler
    dataset_arg = argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])
    if dataset_arg is None:
        if any(a.star == "*" for a in call.args):
            return False  # already refused: DDP205
        plan.report(call, NO_DATASET, "cannot find the dataset this DataLoader reads")
        return False
    dataset = dataset_arg.value
    if loader.entry is not None and loader.entry.variable is not None:
        if any(isinstance(node, cst.Call) for node in index.walk(dataset)):
            plan.report(
                dataset,
                NO_DATASET,
                "the dataset of a DataLoader built in a dict comprehension is made in place: build the datasets "
                "first and index them here (`datasets[x]`)",
            )
            return False
        return sample_entries(plan, call, loader.entry, dataset)
    stmt = index.statement_of(call)
    if not isinstance(dataset, (cst.Name, cst.Attribute)):
        name = fresh("train_dataset", index.identifiers | taken)
        taken.add(name)
        _hoist(plan, stmt, f"{name} = {index.module.code_for_node(dataset)}")
        plan.replace(dataset, _name(name))
        dataset_code = name
    else:
        dataset_code = index.module.code_for_node(dataset)

    shuffle = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    arguments = dataset_code
    spread = loader.spread
    shuffles = True
    if shuffle is None and spread is not None and (loader.spread_keys is None or "shuffle" in loader.spread_keys):
        # DataLoader(ds, **kwargs) where kwargs may hold "shuffle": it moves into the sampler.
        name = fresh("shuffle", index.identifiers | taken)
        taken.add(name)
        _hoist(plan, stmt, f'{name} = {index.module.code_for_node(spread.value)}.pop("shuffle", False)')
        arguments += f", shuffle={name}"
    elif shuffle is None or _is_false(shuffle.value):
        arguments += ", shuffle=False"
        shuffles = False
    elif not _is_true(shuffle.value):
        arguments += f", shuffle={index.module.code_for_node(shuffle.value)}"
    value = cst.parse_expression(f"{sampler}({arguments})")
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name("sampler"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if index.module_of(call) in plan.shared:
        _add_sampler_where_distributed(plan, loader, new_arg, shuffle, taken)
        summary = "training DataLoader: a DistributedSampler once a process group exists (other scripts use it too)"
    elif shuffle is not None:
        plan.replace(shuffle, lambda n: n.with_changes(keyword=new_arg.keyword, equal=new_arg.equal, value=value))
        summary = "training DataLoader: shuffle moves into a DistributedSampler"
    else:
        position = call.args.index(spread) if spread is not None else len(call.args)
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))
        summary = "training DataLoader: add a DistributedSampler"
    batch = _batch_size(call)
    if batch is not None and not keep_global_batch:
        size = index.module.code_for_node(batch.value)
        summary += f"; each process loads batches of {size}, so the global batch is {size} x world size"
    plan.change(call, summary)
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    return shuffles


def _add_sampler_where_distributed(
    plan: EditPlan, loader: Loader, sampler: cst.Arg, shuffle: cst.Arg | None, taken: set[str]
) -> None:
    """In a module that other scripts import too, the sampler exists only where a process group does,
    and the loader shuffles by itself elsewhere, as the script did."""
    index = plan.index
    name = fresh("sampler", index.identifiers | taken)
    taken.add(name)
    code = index.module.code_for_node(sampler.value)
    _hoist(plan, index.statement_of(loader.call), f"{name} = {code} if {plan.names.dist}.is_initialized() else None")
    if shuffle is not None and not _is_false(shuffle.value):
        own = index.module.code_for_node(shuffle.value)
        test = f"{name} is None" if _is_true(shuffle.value) else f"({own}) and {name} is None"
        if isinstance(shuffle.value, (cst.Name, cst.Attribute)):
            test = f"{own} and {name} is None"
        plan.replace(shuffle.value, lambda n: cst.parse_expression(test))
    spread = loader.spread
    position = loader.call.args.index(spread) if spread is not None else len(loader.call.args)
    new_arg = sampler.with_changes(value=cst.Name(name))
    plan.replace(loader.call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))


def _seed_split(plan: EditPlan, split: Split) -> None:
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


def _drop_last(plan: EditPlan, loader: Loader) -> None:
    """``drop_last=True``: the training step builds shapes from the batch size, so every batch must be full."""
    flag = cst.Arg(
        value=cst.Name("True"),
        keyword=cst.Name("drop_last"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )

    def add(node: cst.CSTNode) -> cst.CSTNode:
        call = cast(cst.Call, node)
        spread = next((i for i, a in enumerate(call.args) if a.star == "**"), len(call.args))
        return insert_arg(call, flag, spread)

    plan.replace(loader.call, add)
    assert loader.full_batches is not None
    shape = plan.index.module.code_for_node(loader.full_batches.func)
    plan.change(
        loader.call,
        f"drop_last=True: the training step builds shapes from the batch size (`{shape}(...)`), and a rank's "
        "last batch can be smaller once the data is split",
    )


def _hoist(plan: EditPlan, stmt: cst.BaseStatement, code: str) -> None:
    """Compute ``code`` on its own line just before ``stmt`` (which hands over its blank lines and comments)."""
    line = cst.parse_statement(f"{code}\n")
    if not plan.before.get(stmt):
        line = line.with_changes(leading_lines=statement(stmt).leading_lines)
        plan.replace(stmt, lambda n: statement(n).with_changes(leading_lines=()))
    plan.insert_before(stmt, line)


def _split_batch(plan: EditPlan, loader: Loader, helper: str) -> None:
    call = loader.call
    batch = _batch_size(call)
    if batch is None:
        plan.report(
            call,
            BATCH_NOT_ARGUMENT,
            "--keep-global-batch: the batch size of this DataLoader is not one of its arguments; "
            "each process loads the full batch",
        )
        return
    if not plan.has_setup_helper(helper):
        definition = cst.parse_module(PER_PROCESS_BATCH.format(helper=helper, dist=plan.names.dist)).body[0]
        assert isinstance(definition, cst.FunctionDef)
        plan.add_setup_helper(helper, definition)
    plan.replace(batch.value, lambda n: cst.Call(func=cst.Name(helper), args=[cst.Arg(cast(cst.BaseExpression, n))]))
    plan.change(batch, "per-process batch = batch size / world size (the global batch stays as before)")


def _batch_size(call: cst.Call) -> cst.Arg | None:
    return argument(call, "batch_size", torch_api.DATALOADER_POSITIONS["batch_size"])


def _set_epoch(plan: EditPlan, loader: Loader, taken: set[str], attribute: str) -> None:
    for restart in loader.restarts:
        sampler = f"{restart.loader}.{attribute}"
        plan.insert_before(restart.stmt, cst.parse_statement(f"{sampler}.set_epoch({sampler}.epoch + 1)\n"))
        plan.change(restart.stmt, f"a new pass over the data: `{sampler}.set_epoch(...)` reshuffles it")
    for epoch_loop in loader.epoch_loops:
        loop = epoch_loop.loop
        target = loop.target
        if not isinstance(target, cst.Name) or not isinstance(loop.body, cst.IndentedBlock):
            plan.report(
                loop,
                NO_EPOCH,
                "the epoch loop has no simple loop variable: call "
                f"`{epoch_loop.loader}.{attribute}.set_epoch(epoch)` at the start of each epoch yourself",
            )
            continue
        epoch = target.value
        if epoch == "_":
            epoch = fresh("epoch", plan.index.identifiers | taken)
            taken.add(epoch)
            plan.replace(target, _renamed(epoch))
        stmt = cst.parse_statement(f"{epoch_loop.loader}.{attribute}.set_epoch({epoch})\n")
        if epoch_loop.after is not None:  # the loader is built anew each epoch
            plan.insert_after(epoch_loop.after, stmt)
        else:
            plan.insert_before(loop.body.body[0], stmt)
        plan.change(loop, f"call `{epoch_loop.loader}.{attribute}.set_epoch({epoch})` at the start of each epoch")


def _name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A replacement by the name ``name``."""
    return lambda _: cst.Name(name)


def _renamed(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The same name node, now spelled ``name``."""
    return lambda node: cast(cst.Name, node).with_changes(value=name)


def _is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"
