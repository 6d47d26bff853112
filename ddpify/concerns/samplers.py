"""Samplers a training DataLoader already has: each rank takes its share of what they draw.

Part of the data concern (its codes and reports stay in ``data``). A
``sampler=`` or ``batch_sampler=`` decides which samples an epoch sees and in
what order (``WeightedRandomSampler`` oversamples a rare class,
``SubsetRandomSampler`` draws from the training indices, a bucketing batch
sampler groups similar lengths); a ``DistributedSampler`` in its place would
lose that. So the sampler is wrapped: every rank draws the same sequence from
it (torch's RNG forked and seeded by the epoch), pads it like a
``DistributedSampler`` so that every rank gets as many, and deals the draws
out in whole batches of the loader's ``batch_size``, to the ranks in turn::

    loader = DataLoader(ds, batch_size=50, sampler=WeightedRandomSampler(w, len(ds)))
    ->  loader = DataLoader(ds, batch_size=50, sampler=DistributedSamplerWrapper(WeightedRandomSampler(w, len(ds)), 50))

Whole batches, because a sampler may shape its batches: one that draws P
identities and K samples of each in a run (metric learning's P x K batches)
or groups similar lengths would lose that if every N-th draw went to each
rank. A batch size that the call does not spell as a plain name or number
(passed through ``**kwargs``, computed by a call) leaves the wrapper dealing
single draws.

The wrapper is a ``DistributedSampler`` subclass defined once in the
generated script, so ``loader.sampler.set_epoch(epoch)`` works as usual.
Where one pass of the loader is the whole training (no epoch loop), the
sampler's length is the run's number of steps, a budget that schedules and a
last checkpoint count on; each rank keeps it (``DistributedWholeRunSampler``
draws the sampler once for every rank and deals the draws out; a sampler with
replacement keeps its ``num_samples``). A
placeholder that stays ``None`` on one GPU (``train_sampler = None`` ...
``DataLoader(ds, shuffle=(train_sampler is None), sampler=train_sampler)``)
becomes ``train_sampler = DistributedSampler(ds)``, the idiom of the PyTorch
examples.

Limits (refused by ``data`` as DDP202, with the reason found here): a sampler
whose class is not torch's nor defined in the script, one that draws without
end (``while True:`` in its ``__iter__``), one that draws from
Python's or NumPy's ``random`` outside its ``__iter__`` or from an RNG object
of its own (ddpify cannot seed those alike on every rank; draws from the
global ``random`` or ``numpy.random`` in ``__iter__`` the wrapper seeds too),
one without ``__len__``, a sampler variable set anywhere but by a plain
assignment, a placeholder set before its dataset exists or next to
``shuffle=True``, a ``batch_sampler`` that may be ``None``, and
``len(loader.dataset)`` next to a batch sampler (this rank's number of samples
is not known before drawing), unless only a progress line shows it (``print``,
a logger: the total stays the whole data set's).

Loaders kept in a dict get a sampler on their training entries only: the
keys a training loop draws with a string (``loaders["train"]``), or, in a
loop over the keys, the keys that the backward pass is guarded by
(``if phase == "train":``); ``set_epoch`` goes on ``loaders["train"]``::

    loaders = {x: DataLoader(sets[x], batch_size=4, shuffle=True) for x in ["train", "val"]}
    ->  loaders = {x: DataLoader(sets[x], batch_size=4, sampler=DistributedSampler(sets[x]) if x == "train" else None) ...}

A loop over the keys whose backward pass is guarded some other way is refused
(DDP201): which entry trains cannot be told.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import libcst as cst

import ddpify.engine.match as m
from ddpify import torch_api
from ddpify.engine.edits import EditPlan, fresh, insert_arg, with_comma, without_keyword
from ddpify.engine.index import Index, Ref, Scope
from ddpify.engine.program import imports_module
from ddpify.engine.syntax import argument, dotted, parameter_names
from ddpify.engine.uniformity.sources import rng_family
from ddpify.engine.values import built_by, dict_entries, passed_values, spread_values, written_otherwise

# The samplers of torch.utils.data that the wrapper can deal out: each has a length and
# draws from torch's RNG (or its own generator), never from ``random`` or NumPy.
TORCH_SAMPLERS = frozenset(
    f"torch.utils.data{module}.{name}"
    for module in ("", ".sampler")
    for name in ("RandomSampler", "SequentialSampler", "SubsetRandomSampler", "WeightedRandomSampler")
)
SIZED_ONLY_SAMPLERS = frozenset(
    f"torch.utils.data{module}.{name}" for module in ("", ".sampler") for name in ("RandomSampler", "SequentialSampler")
)
TORCH_BATCH_SAMPLERS = frozenset({"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"})
# RNGs that forking and seeding torch's RNG does not reach.
OTHER_RNGS = ("random.", "numpy.random.")

WRAPPER = '''
class {wrapper}({sampler}):
    """This rank's share of what `sampler` draws: whole batches, dealt to the ranks in turn, so that each batch is
    one the sampler made; all ranks draw alike ({rngs} seeded by the epoch)."""

    def __init__(self, sampler, batch_size=1):
        super().__init__(range(len(sampler)), shuffle=False)
        self.sampler = sampler
        self.batch_size = batch_size
        per_round = batch_size * self.num_replicas
        self.total_size = -(-len(sampler) // per_round) * per_round
        self.num_samples = self.total_size // self.num_replicas

    def __iter__(self):
{seeded}        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self.seed + self.epoch)
            drawn = list(self.sampler)
{resumed}        if drawn:  # padded like a DistributedSampler's, from the start
            drawn = (drawn * -(-self.total_size // len(drawn)))[: self.total_size]
        size = self.batch_size
        starts = range(self.rank * size, self.total_size, self.num_replicas * size)
        return (i for start in starts for i in drawn[start : start + size])
'''

# One pass of the loader is the whole training: the sampler's length is the run's number of steps (a
# budget of ``iterations * batch_size`` draws), which the schedule and the last checkpoint count on.
WHOLE_RUN_WRAPPER = '''
class {wrapper}({sampler}):
    """This rank's share of what `sampler` draws once for every rank, all ranks alike ({rngs} seeded by the
    epoch), in whole batches dealt to the ranks in turn: one pass is the whole training, so each rank keeps
    len(sampler) steps."""

    def __init__(self, sampler, batch_size=1):
        super().__init__(range(len(sampler)), shuffle=False)
        self.sampler = sampler
        self.batch_size = batch_size
        self.num_samples = len(sampler)
        self.total_size = len(sampler) * self.num_replicas

    def __iter__(self):
{seeded}        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self.seed + self.epoch)
            drawn = [i for _ in range(self.num_replicas) for i in self.sampler]
{resumed}        size, per_round = self.batch_size, self.batch_size * self.num_replicas
        total = -(-len(drawn) // per_round) * per_round
        if drawn:
            drawn = (drawn * -(-total // len(drawn)))[:total]
        mine = [i for start in range(self.rank * size, total, per_round) for i in drawn[start : start + size]]
        return iter(mine[: self.num_samples])
'''


@dataclass(frozen=True)
class OwnSampler:
    """The ``sampler=`` or ``batch_sampler=`` of a training DataLoader, and how the ranks share it."""

    arg: cst.Arg
    attribute: str  # where the loader keeps it: ``sampler`` or ``batch_sampler`` (set_epoch goes there)
    wrapped: tuple[cst.BaseExpression, ...] = ()  # samplers each rank takes its share of
    placeholders: tuple[cst.Assign | cst.AnnAssign, ...] = ()  # ``sampler = None``: a DistributedSampler
    dataset: str = ""  # the dataset as written where the placeholders are
    shuffle: bool = False  # whether a placeholder's DistributedSampler shuffles
    # ``RandomSampler(ds, replacement=True, ...)``: draws with replacement, which each rank makes with its own
    # generator (an "infinite" sampler of 10**10 draws cannot be dealt out)
    per_rank: tuple[cst.Call, ...] = ()
    # ``kwargs["sampler"] = ...`` on request: where the dict holds none, a DistributedSampler goes into it
    by_default: bool = False
    # ``def train(ds, ..., sampler=None)`` that no call gives a sampler: where it is None, a DistributedSampler
    unset_parameter: bool = False

    @property
    def reshuffles(self) -> bool:
        """Whether the order changes with the epoch, so that ``set_epoch`` is needed."""
        return bool(self.wrapped) or self.shuffle or self.by_default


def own_sampler(index: Index, call: cst.Call, arg: cst.Arg, reads_dataset_length: bool) -> OwnSampler | str:
    """How each rank takes its share of the sampler ``arg`` of the DataLoader ``call``; or why it cannot."""
    assert arg.keyword is not None
    attribute = arg.keyword.value
    batches = attribute == "batch_sampler"
    if batches and reads_dataset_length:
        return (
            "`len(loader.dataset)` is read next to a batch_sampler: how many samples this rank trains on "
            "is only known once its batches are drawn"
        )
    value = arg.value
    scope = index.scope_of(call)
    ref = index.ref_of(value, scope)
    spelled = index.module.code_for_node(value)
    if ref is None:
        if _with_replacement(index, value):
            return OwnSampler(arg, attribute, per_rank=(cast(cst.Call, value),))
        built = built_by(index, value)
        if built is None or any(m.matches(b, m.Name("None")) for b in built):
            return f"cannot see every sampler `{spelled}` returns"
        why = next(filter(None, (_why_not_wrappable(index, b, batches) for b in built)), "")
        return why if why else OwnSampler(arg, attribute, wrapped=(value,))
    assigned = list(index.values_assigned(ref))  # (``sampler: Sampler = ...`` binds as a plain assignment)
    unpacked = index.unpacked_values(ref)  # ``train_sampler, val_sampler = make_samplers(...)``
    if any(m.matches(v, m.Name("None")) for _, v in unpacked):
        return f"the sampler `{spelled}` may be None where a helper returns it: there is no placeholder to replace"
    assigned += unpacked
    passed = passed_values(index, ref) if not assigned else None  # a loader factory handed the sampler
    if (not assigned and not passed) or written_otherwise(index, ref, [a for a, _ in assigned]):
        return f"cannot see every value `{spelled}` takes (it is set by something other than a plain assignment)"
    literal_none = passed is not None and any(m.matches(v, m.Name("None")) for v in passed)
    handed = _handed_placeholders(index, call, arg, ref, passed) if passed is not None and not literal_none else None
    if handed is not None:  # ``sampler = None`` where a factory is handed it: replaced there
        return handed
    placeholders_only = bool(assigned) and all(m.matches(v, m.Name("None")) for _, v in assigned)
    if not batches and not placeholders_only and _always_none(index, ref):  # (placeholders: below)
        return _unset_parameter(index, call, arg, ref)
    if literal_none:
        return f"the sampler `{spelled}` may be None where a call passes it: there is no placeholder to replace"
    samplers = [v for _, v in assigned if not m.matches(v, m.Name("None"))] + list(passed or ())
    why = _why_not_dealt_out(index, samplers, batches)
    if why:
        return why
    placeholders = tuple(a for a, v in assigned if m.matches(v, m.Name("None")))
    if not placeholders and samplers and all(_with_replacement(index, v) for v in samplers):
        return OwnSampler(arg, attribute, per_rank=tuple(cast(cst.Call, v) for v in samplers))
    if not placeholders:
        return OwnSampler(arg, attribute, wrapped=(value,))
    if batches:
        return f"the batch_sampler `{spelled}` may be None: there is no sampler to give each rank its share of"
    return _placeholder(index, call, arg, placeholders, tuple(samplers))


def stored_sampler(index: Index, call: cst.Call, spread: cst.Arg) -> OwnSampler | str:
    """The samplers stored under ``"sampler"`` in the ``**kwargs`` dict of the DataLoader ``call``
    (``kwargs["sampler"] = WeightedRandomSampler(...)``), each one for the ranks to share; or why not."""
    scope = index.scope_of(call)
    ref = index.ref_of(spread.value, scope)
    entries = dict_entries(index, spread.value, scope)
    if ref is None or entries is None:
        return ""
    holders = [ref]  # the dict, and where it is a parameter the dicts every call passes for it
    holders += [r for v in passed_values(index, ref) or () if (r := index.ref_of(v, index.scope_of(v))) is not None]
    stored = [
        value
        for holder in holders
        for read in index.mentions(holder.scope, holder)
        if isinstance(subscript := index.parent(read), cst.Subscript)
        and isinstance(target := index.parent(subscript), cst.AssignTarget)
        and isinstance(assign := index.parent(target), cst.Assign)
        and (value := assign.value) in entries.get("sampler", ())
    ]
    if not stored or len(stored) != len(entries["sampler"]) or any(m.matches(v, m.Name("None")) for v in stored):
        return ""  # a sampler in the dict's own literal, or one that may be None
    if any(
        isinstance(arg := index.parent(read), cst.Arg) and arg.star == "**" and arg is not spread
        for holder in holders
        for scope in index.scopes_reading(holder)
        for read in index.mentions(scope, holder)
    ):
        return (
            f"`{index.module.code_for_node(spread.value)}` is handed to another call too, which would get the sampler"
        )
    why = _why_not_dealt_out(index, stored, batches=False)
    if why:
        return why
    always = any(index.parent(index.statement_of(v)) is index.parent(index.statement_of(call)) for v in stored)
    return OwnSampler(spread, "sampler", wrapped=tuple(stored), by_default=not always)


def _handed_placeholders(
    index: Index, call: cst.Call, arg: cst.Arg, ref: Ref, passed: list[cst.BaseExpression]
) -> OwnSampler | str | None:
    """``sampler = None`` (set to a sampler on some paths) in the function that hands it and the data set to a
    loader factory, ``make_loader(train_set, sampler)``: where it stays None, a DistributedSampler over the data
    set the same call hands over. None where no value handed is such a placeholder."""
    spelled = index.module.code_for_node(arg.value)
    holders: list[tuple[cst.Call, Ref, list[tuple[cst.Assign | cst.AnnAssign, cst.BaseExpression]]]] = []
    for value in passed:
        given = index.parent(value)
        site = index.parent(given) if isinstance(given, cst.Arg) else None
        held = index.ref_of(value, index.scope_of(value)) if isinstance(value, cst.Name) else None
        if not isinstance(site, cst.Call) or held is None:
            return None
        assigned = list(index.values_assigned(held))
        if not assigned or written_otherwise(index, held, [a for a, _ in assigned]) or index.unpacked_values(held):
            return None
        holders.append((site, held, assigned))
    placeholders = tuple(a for _, _, assigned in holders for a, v in assigned if m.matches(v, m.Name("None")))
    if not placeholders:
        return None
    if arg.keyword is None or arg.keyword.value != "sampler":
        return f"the batch_sampler `{spelled}` may be None: there is no sampler to give each rank its share of"
    samplers = tuple(v for _, _, assigned in holders for _, v in assigned if not m.matches(v, m.Name("None")))
    why = _why_not_dealt_out(index, samplers, False)
    if why:
        return why
    dataset_arg = argument(call, "dataset", 0)
    dataset_ref = index.ref_of(dataset_arg.value, index.scope_of(call)) if dataset_arg is not None else None
    if dataset_ref is None or dataset_ref.scope is not ref.scope:
        return f"the sampler `{spelled}` may be None, and the loader's dataset is not handed over with it"
    datasets: set[str] = set()
    for site, held, assigned in holders:
        dataset = next((a.value for a in site.args if index.parameter_of(a) == dataset_ref), None)
        source = index.ref_of(dataset, held.scope) if dataset is not None else None
        if dataset is None or source is None:
            return f"the sampler `{spelled}` may be None, and the data set handed with it has no name"
        datasets.add(index.module_of(site).code_for_node(dataset))
        made = [*index.assignments_to(source), *(a for a, _ in index.unpacked_values(source))]
        for placeholder, value in assigned:
            ready = [a for a in made if index.after(placeholder, a)]
            if m.matches(value, m.Name("None")) and (index.scope_of(placeholder) is not held.scope or not ready):
                return (
                    f"`{index.module_of(site).code_for_node(site.args[0].value)}`'s sampler is set to None where "
                    "its data set does not exist yet: set it to a DistributedSampler after the data set is made"
                )
    shuffle = _shuffle_value(index, call)
    shuffles = _shuffles_where_none(shuffle, dotted(arg.value)) if shuffle is not None else None
    if len(datasets) != 1 or shuffles is None:
        return f"cannot tell over which data set, or whether shuffled, `{spelled}` stands where it is None"
    return OwnSampler(arg, "sampler", samplers, placeholders, datasets.pop(), shuffles)


def _why_not_dealt_out(index: Index, samplers: Sequence[cst.BaseExpression], batches: bool) -> str:
    """Why one of ``samplers`` (the values a loader's sampler takes besides a placeholder) cannot be dealt out
    to the ranks ('' when each can)."""
    for sampler in samplers:
        built = built_by(index, sampler)
        if built is None or any(m.matches(b, m.Name("None")) for b in built):
            return f"cannot see every sampler `{index.module.code_for_node(sampler)}` returns"
        why = next(filter(None, (_why_not_wrappable(index, b, batches) for b in built)), "")
        if why:
            return why
    return ""


def _with_replacement(index: Index, value: cst.BaseExpression) -> bool:
    """``RandomSampler(ds, replacement=True, ...)`` of torch's, drawing from its own stream (no ``generator=``)."""
    if not isinstance(value, cst.Call) or not index.qualified_names(value.func) & SIZED_ONLY_SAMPLERS:
        return False
    if any(a.star for a in value.args) or argument(value, "generator", 3) is not None:
        return False
    replacement = argument(value, "replacement", 1)
    return replacement is not None and m.matches(replacement.value, m.Name("True"))


def _placeholder(
    index: Index,
    call: cst.Call,
    arg: cst.Arg,
    placeholders: tuple[cst.Assign | cst.AnnAssign, ...],
    wrapped: tuple[cst.BaseExpression, ...],
) -> OwnSampler | str:
    """``sampler = None``: where it stays None, a DistributedSampler over the loader's dataset takes its place."""
    spelled = index.module.code_for_node(arg.value)
    shuffle = _shuffle_value(index, call)
    if shuffle is None:
        return f"cannot tell whether the loader shuffles where `{spelled}` is None (its `**` arguments)"
    shuffles = _shuffles_where_none(shuffle, dotted(arg.value))
    if shuffles is None:
        return (
            f"`shuffle={index.module.code_for_node(shuffle)}` next to the sampler `{spelled}`, which may be None: "
            f"write `shuffle=({spelled} is None)`"
        )
    dataset_arg = argument(call, "dataset", 0)
    scope = index.scope_of(call)
    dataset_ref = index.ref_of(dataset_arg.value, scope) if dataset_arg is not None else None
    if dataset_arg is None or dataset_ref is None:
        return f"the sampler `{spelled}` may be None, and the loader's dataset has no name to build a sampler from"
    dataset = index.module.code_for_node(dataset_arg.value)
    for placeholder in placeholders:
        ready = [a for a in index.assignments_to(dataset_ref) if index.after(placeholder, a)]
        later = [a for a in index.assignments_to(dataset_ref) if not index.after(placeholder, a)]
        is_parameter = isinstance(dataset_ref.scope, cst.FunctionDef) and dataset_ref.path in parameter_names(
            dataset_ref.scope
        )
        if index.scope_of(placeholder) is not scope or later or not (ready or is_parameter):
            return (
                f"`{spelled}` is set to None where `{dataset}` does not exist yet: "
                f"set it to `DistributedSampler({dataset})` after the dataset is made"
            )
    return OwnSampler(arg, "sampler", wrapped, placeholders, dataset, shuffles)


def _unset_parameter(index: Index, call: cst.Call, arg: cst.Arg, ref: Ref) -> OwnSampler | str:
    """``def train(ds, ..., sampler=None)``, and no call gives it a sampler: where it is None, a DistributedSampler
    over the loader's dataset, set in the function before the loader is built."""
    spelled = index.module.code_for_node(arg.value)
    shuffle = _shuffle_value(index, call)
    shuffles = _shuffles_where_none(shuffle, dotted(arg.value)) if shuffle is not None else None
    dataset_arg = argument(call, "dataset", 0)
    if (
        shuffles is None
        or not (index.scope_of(call) is ref.scope or ref.path.startswith("self."))
        or dataset_arg is None
        or not isinstance(dataset_arg.value, cst.Name | cst.Attribute)
    ):
        return f"the sampler `{spelled}` is None in every call, and ddpify cannot tell where to build one in its place"
    return OwnSampler(
        arg, "sampler", dataset=index.module.code_for_node(dataset_arg.value), shuffle=shuffles, unset_parameter=True
    )


def _always_none(index: Index, ref: Ref, depth: int = 0) -> bool:
    """Whether every value the place ``ref`` takes is None: ``sampler=None`` that no call gives a value, also
    handed on through parameters and ``self`` fields (``self.sampler = sampler``)."""
    assignments = list(index.values_assigned(ref))
    if index.unpacked_values(ref) or written_otherwise(index, ref, [a for a, _ in assignments]):
        return False
    values = [value for _, value in assignments] or passed_values(index, ref) or []
    if not values or depth > 3:
        return False
    for value in values:
        if m.matches(value, m.Name("None")):
            continue
        held = index.ref_of(value, index.scope_of(value)) if isinstance(value, cst.Name | cst.Attribute) else None
        if held is None or held == ref or not _always_none(index, held, depth + 1):
            return False
    return True


def _shuffle_value(index: Index, call: cst.Call) -> cst.BaseExpression | None:
    """What the loader ``call`` is given as ``shuffle``, also through its ``**`` dict (``False`` where it is
    given nothing); None where the dict may or may not hold it."""
    shuffle_arg = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    if shuffle_arg is not None:
        return shuffle_arg.value
    spread = spread_values(index, call, "shuffle")
    if spread is None or len(spread) > 1:
        return None
    return spread[0] if spread else cst.Name("False")


def _shuffles_where_none(shuffle: cst.BaseExpression, sampler: str | None) -> bool | None:
    """Whether the loader shuffles where its sampler placeholder is None, from its ``shuffle=``: ``(sampler is
    None)``, ``True if sampler is None else False``, ``False``; None where that cannot be told. (Where the sampler
    is set, ``shuffle`` must be false: DataLoader refuses both.)"""
    if m.matches(shuffle, m.Name("True") | m.Name("False")):
        return cast(cst.Name, shuffle).value == "True"
    if isinstance(shuffle, cst.Comparison) and len(shuffle.comparisons) == 1 and dotted(shuffle.left) == sampler:
        target = shuffle.comparisons[0]
        if m.matches(target.comparator, m.Name("None")) and isinstance(target.operator, cst.Is):
            return True
        return None
    if isinstance(shuffle, cst.IfExp) and isinstance(shuffle.test, cst.Comparison):
        test = shuffle.test
        if len(test.comparisons) != 1 or dotted(test.left) != sampler:
            return None
        target = test.comparisons[0]
        if not m.matches(target.comparator, m.Name("None")):
            return None
        if isinstance(target.operator, cst.Is):
            return _shuffles_where_none(shuffle.body, sampler)
        if isinstance(target.operator, cst.IsNot):
            return _shuffles_where_none(shuffle.orelse, sampler)
    return None


def _why_not_wrappable(index: Index, value: cst.BaseExpression, batches: bool) -> str:
    """Why ``value`` is not a sampler every rank can draw the same sequence from ('' when it is)."""
    text = index.module.code_for_node(value)
    if not isinstance(value, cst.Call):
        return f"cannot tell what `{text}` draws"
    known = TORCH_BATCH_SAMPLERS if batches else TORCH_SAMPLERS
    if index.qualified_names(value.func) & known:
        inner = [n for n in index.walk(value) if isinstance(n, cst.Call) and n is not value]
        return next(filter(None, (_why_not_seedable(index, c) for c in inner)), "")
    cls = index.local_class(value.func)
    if cls is None:
        return f"cannot see how `{dotted(value.func) or text}` draws its samples (it is not defined in this script)"
    if not _has_length(index, cls):
        return f"`{cls.name.value}` has no `__len__`: a rank's share of it cannot be sized"
    endless = _endless_loop(index, cls)
    if endless is not None:
        owner = index.scope_of(endless)
        where = (
            f"`{owner.name.value}()`, which `__iter__` runs"
            if isinstance(owner, cst.FunctionDef) and index.method(cls, "__iter__") is not owner
            else "`__iter__`"
        )
        return (
            f"`{cls.name.value}` draws without end (`while {index.module_of(endless).code_for_node(endless.test)}:` "
            f"in {where}): its draws cannot be dealt out to the ranks ahead; let one pass of it end (the loop "
            "around the loader repeats it) or give each rank its own stream"
        )
    return _why_not_seedable(index, value)


def rng_draws(index: Index, value: cst.BaseExpression) -> list[tuple[cst.Call, str]]:
    """Calls to a global RNG that the arguments of ``value`` come from, each with its RNG: torch, numpy or random.

    ``SubsetRandomSampler(train_idx)`` after ``np.random.shuffle(indices)`` and
    ``train_idx = indices[split:]``: the names read are followed back through the
    assignments (and in-place shuffles) before ``value`` in its own scope.
    """
    scope = index.scope_of(value)
    earlier = [
        small
        for stmt in index.statements
        if index.scope_of(stmt) is scope and index.after(value, stmt)
        for small in stmt.body
    ]
    found: list[tuple[cst.Call, str]] = []
    wanted: list[cst.BaseExpression] = [value]
    names: set[str] = set()
    # ``RandomSampler(dataset)`` and ``SequentialSampler(dataset)`` take only the length of their
    # data source: how its samples were made (random tensors in a toy script) draws no index.
    sized_only: set[cst.CSTNode] = set()
    while wanted:
        expr = wanted.pop()
        for node in index.walk(expr):
            if node in sized_only:
                continue
            if isinstance(node, cst.Call) and any(
                name in SIZED_ONLY_SAMPLERS for name in index.qualified_names(node.func)
            ):
                source = argument(node, "data_source", 0)
                if source is not None:
                    sized_only.update(index.walk(source.value))
            if isinstance(node, cst.Call) and m.matches(node.func, m.Name("len")) and len(node.args) == 1:
                sized_only.update(index.walk(node.args[0].value))  # ``permutation(len(data))``: its length only
            if isinstance(node, cst.Call) and node is not value:
                family = rng_family(index, node)
                if family and (node, family) not in found:
                    found.append((node, family))
            elif (
                isinstance(node, cst.Name)
                and node.value not in names
                and index.parent(node) is not value
                and index.names_a_variable(node)
            ):
                names.add(node.value)
                for small in earlier:
                    if (
                        isinstance(small, cst.Assign)
                        and any(
                            m.matches(t, m.Name(node.value))
                            for target in small.targets
                            for t in index.walk(target.target)
                        )
                    ) or (
                        isinstance(small, cst.Expr)
                        and isinstance(small.value, cst.Call)
                        and small.value.args
                        and m.matches(small.value.args[0].value, m.Name(node.value))
                        and rng_family(index, small.value)
                    ):
                        wanted.append(small.value)
    return found


def _why_not_seedable(index: Index, call: cst.Call) -> str:
    """Why the script's own class ``call`` builds would draw differently on each rank ('' when it would not)."""
    cls = index.local_class(call.func)
    return _global_draws(index, cls)[1] if cls is not None else ""


# What the wrapper cannot seed: an RNG object of the sampler's own, or the global state set by hand.
_UNSEEDABLE = frozenset({"random.setstate", "numpy.random.set_state"})


def _global_draws(index: Index, cls: cst.ClassDef) -> tuple[tuple[str, ...], str]:
    """The global RNGs besides torch's (``random``, ``numpy``) that the sampler class ``cls`` draws from when it
    is iterated, which the wrapper seeds alike on every rank; and why it cannot be seeded so ('' when it can):
    a draw made elsewhere (in ``__init__``, once per rank) or from an RNG object of its own (``random.Random()``,
    ``np.random.default_rng()``, seeded differently on each rank)."""
    iterating = _iteration_methods(index, cls)
    helpers = _helpers_called(index, iterating, cls)
    families: list[str] = []
    for node in [n for root in (cls, *helpers) for n in index.walk(root)]:
        if not isinstance(node, (cst.Name, cst.Attribute)):
            continue
        for name in sorted(index.qualified_names(node)):
            if not name.startswith(OTHER_RNGS):
                continue
            module = name.rsplit(".", 1)[0]
            call = index.parent(node)
            family = rng_family(index, call) if isinstance(call, cst.Call) and call.func is node else ""
            inside = any(index.inside(node, method) for method in (*iterating, *helpers))
            if not family or name in _UNSEEDABLE or not inside:
                where = "" if inside or not family else " outside `__iter__` (once on each rank)"
                return (), (
                    f"`{cls.name.value}` draws from `{module}`{where}, which ddpify cannot seed the same way on every "
                    "rank: draw from torch's RNG (or a torch.Generator) instead"
                )
            if family not in families:
                families.append(family)
    return tuple(sorted(families)), ""


def _helpers_called(index: Index, methods: list[cst.FunctionDef], cls: cst.ClassDef) -> list[cst.FunctionDef]:
    """The program's functions outside ``cls`` that ``methods`` call, and those these call, two calls deep
    (``perm = shuffled(self.n)`` in ``__iter__``): their draws happen while the sampler is iterated too."""
    found: list[cst.FunctionDef] = []
    frontier = list(methods)
    for _ in range(2):
        called: list[cst.FunctionDef] = []
        for function in frontier:
            for node in index.walk(function.body):
                if isinstance(node, cst.Call) and (resolved := index.resolve_callee(node, function)) is not None:
                    callee = resolved[0]
                    if callee not in found and callee not in methods and not index.inside(callee, cls):
                        found.append(callee)
                        called.append(callee)
        frontier = called
    return found


def _iteration_methods(index: Index, cls: cst.ClassDef) -> list[cst.FunctionDef]:
    """``__iter__`` and the methods of the class that only it runs, through ``self`` (``return
    iter(self._order())``, ``_order`` a generator): their draws happen while the sampler is iterated."""
    iterate = index.method(cls, "__iter__")
    if iterate is None:
        return []
    found = [iterate]
    for method in found:
        self_name = index.self_name(method)
        for node in index.walk(method.body):
            if (
                isinstance(node, cst.Attribute)
                and m.matches(node.value, m.Name(self_name or "self"))
                and (called := index.method(cls, node.attr.value)) is not None
                and called not in found
            ):
                found.append(called)
    # a method that other methods run too (``__init__`` calling ``self._order()``) draws outside iteration
    elsewhere = {
        node.attr.value
        for method in cls.body.body
        if isinstance(method, cst.FunctionDef) and method not in found
        for node in index.walk(method.body)
        if isinstance(node, cst.Attribute) and m.matches(node.value, m.Name(index.self_name(method) or "self"))
    }
    return [method for method in found if method is iterate or method.name.value not in elsewhere]


def sampler_rngs(index: Index, own: OwnSampler) -> tuple[str, ...]:
    """The global RNGs besides torch's that the wrapped samplers of ``own`` draw from when iterated."""
    found: set[str] = set()
    for value in own.wrapped:
        for built in built_by(index, value) or ():
            if isinstance(built, cst.Call) and (cls := index.local_class(built.func)) is not None:
                found.update(_global_draws(index, cls)[0])
    return tuple(sorted(found))


def _endless_loop(index: Index, cls: cst.ClassDef) -> cst.While | None:
    """The ``while True:`` loop of the sampler's ``__iter__`` that no ``break`` or ``return`` ends (an
    "infinite sampler", whose length is only a large number)."""
    method = index.method(cls, "__iter__")
    if method is None:
        return None
    return _endless_in(index, method, 0)


def _endless_in(index: Index, function: cst.FunctionDef, depth: int) -> cst.While | None:
    """The endless ``while True:`` of ``function``, or of a function of the program it calls (``return
    iter(endless(n))`` over a generator of its own), two calls deep at most."""
    calls: list[cst.Call] = []
    for node in index.walk(function.body):
        if index.scope_of(node) is not function:
            continue
        if (
            isinstance(node, cst.While)
            and _always_true(node.test)
            and not any(isinstance(inner, (cst.Break, cst.Return)) for inner in index.walk(node.body))
        ):
            return node
        if isinstance(node, cst.Call):
            calls.append(node)
    for call in calls if depth < 2 else ():
        found = _endless_call(index, call, function, depth)
        if found is not None and not _ended_by_zip(index, call, function, depth):
            return found
    return None


def _endless_call(index: Index, call: cst.Call, function: cst.FunctionDef, depth: int) -> cst.While | None:
    """The endless ``while True:`` of the program's function that ``call`` (in ``function``) runs."""
    resolved = index.resolve_callee(call, function)
    callee = resolved[0] if resolved is not None else None
    if isinstance(callee, cst.FunctionDef) and callee is not function:
        return _endless_in(index, callee, depth + 1)
    return None


_ENDLESS_ITERATORS = frozenset({"itertools.count", "itertools.cycle", "itertools.repeat"})


def _ended_by_zip(index: Index, call: cst.Call, function: cst.FunctionDef, depth: int) -> bool:
    """Whether ``call`` is inside an argument of ``zip(...)`` another of whose arguments ends: ``zip(once(a),
    forever(b))`` stops with ``once``, so one pass of such a sampler is finite."""
    for ancestor in index.ancestors(call):
        if ancestor is function:
            return False
        if not (isinstance(ancestor, cst.Call) and m.matches(ancestor.func, m.Name("zip"))):
            continue
        for arg in ancestor.args:
            if arg.star or index.inside(call, arg):
                continue
            inner = [n for n in index.walk(arg.value) if isinstance(n, cst.Call)]
            if not any(index.qualified_names(c.func) & _ENDLESS_ITERATORS for c in inner) and not any(
                _endless_call(index, c, function, depth) is not None for c in inner
            ):
                return True
    return False


def _always_true(test: cst.BaseExpression) -> bool:
    return (isinstance(test, cst.Name) and test.value == "True") or (
        isinstance(test, cst.Integer) and test.evaluated_value != 0
    )


def _has_length(index: Index, cls: cst.ClassDef) -> bool:
    """Whether the sampler class defines ``__len__``, itself, through a base of the program, or as a torch sampler."""
    return index.method(cls, "__len__") is not None or index.derives_from(cls, TORCH_SAMPLERS | TORCH_BATCH_SAMPLERS)


def share(plan: EditPlan, own: OwnSampler, wrapper: str, whole_run: bool = False) -> None:
    """Wrap each of the samplers in ``wrapper``; each placeholder becomes a DistributedSampler. Where one pass
    is the whole training (``whole_run``), each rank keeps the sampler's length: ``wrapper`` draws it once
    for every rank, and a sampler drawing with replacement keeps its number of draws."""
    sampler = plan.names.sampler
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    dist = plan.names.dist
    index = plan.index
    size = _batch_size(index, own)
    for value in own.wrapped:
        equivalent = distributed_equivalent(plan, own, value, whole_run)
        if equivalent is not None:
            built = _built_here(index, value) or value  # ``sampler = RandomSampler(ds)``: replaced where it is built
            if plan.without_group(built):  # another script may import it: the sampler as it was, without a group
                original = index.module_of(built).code_for_node(built)
                equivalent = f"{equivalent} if {dist}.is_initialized() else {original}"
            plan.replace(built, _replaced_by(cst.parse_expression(equivalent)))
            continue
        if not plan.without_group(value):
            plan.replace(value, _wrapped_in(wrapper, None, size if value is own.arg.value else None))
            continue
        # another script may import it: the sampler as it was, without a group
        assign = index.parent(value)
        if isinstance(assign, cst.Assign) and assign.value is value and len(assign.targets) == 1:
            name = index.module_of(value).code_for_node(assign.targets[0].target)
            wrap = cst.parse_statement(f"{name} = {wrapper}({name})\n")
            plan.insert_after(index.statement_of(value), plan.where_distributed(value, wrap))
        else:
            plan.replace(
                value, _wrapped_in(wrapper, f"{dist}.is_initialized()", size if value is own.arg.value else None)
            )
    shuffle = "" if own.shuffle else ", shuffle=False"
    for placeholder in own.placeholders:
        code = f"{sampler}({own.dataset}{shuffle})"
        if plan.without_group(placeholder):  # another script may import it: None, as before, without a group
            code = f"{code} if {dist}.is_initialized() else None"
        plan.replace(cast(cst.BaseExpression, placeholder.value), _replaced_by(cst.parse_expression(code)))
    if own.unset_parameter:
        stmt = index.statement_of(own.arg)
        spelled = index.module_of(stmt).code_for_node(own.arg.value)
        test = plan.with_group(stmt, f"{spelled} is None")
        plan.insert_before(
            stmt, cst.parse_statement(f"if {test}:\n    {spelled} = {sampler}({own.dataset}{shuffle})\n")
        )
        plan.change(own.arg, f"`{spelled}` is None in every call: a {sampler} over `{own.dataset}` takes its place")
    if own.placeholders or own.unset_parameter:
        _shuffle_left_to_the_sampler(plan, own)
    drawn = "the batches" if own.attribute == "batch_sampler" else "what"
    rngs = sampler_rngs(index, own)
    times = " once for every rank, so that each rank keeps its number of steps (one pass is the whole training)"
    for value in own.wrapped:
        equivalent = distributed_equivalent(plan, own, value, whole_run)
        if equivalent is not None:
            built = _built_here(index, value) or value
            plan.change(built, f"`{plan.index.module_of(built).code_for_node(built)}` -> `{equivalent}`")
            continue
        plan.change(
            value,
            f"each rank takes its share of {drawn} `{plan.index.module.code_for_node(value)}` draws"
            f"{times if whole_run else ''}; all ranks draw alike ({rngs_named(rngs)} seeded by the epoch)",
        )
    for placeholder in own.placeholders:
        plan.change(placeholder, f"the sampler that stayed None is a {sampler} over `{own.dataset}`")
    for call in own.per_rank:
        _draw_per_rank(plan, call, whole_run)


def _shuffle_left_to_the_sampler(plan: EditPlan, own: OwnSampler) -> None:
    """``DataLoader(ds, sampler=sampler, shuffle=True)`` where ``sampler = None`` was the placeholder: the
    placeholder is a sampler now, which DataLoader refuses beside ``shuffle=True``; the DistributedSampler
    shuffles instead. (Where another script may import the loader and the sampler stays None without a
    group, ``shuffle=<sampler> is None``.)"""
    index = plan.index
    call = index.parent(own.arg)
    if not isinstance(call, cst.Call):
        return
    shuffle = argument(call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    if shuffle is None:
        _shuffle_off_in_the_dict(plan, own, call)
        return
    if not m.matches(shuffle.value, m.Name("True")):
        return
    spelled = index.module_of(call).code_for_node(own.arg.value)
    if plan.without_group(call) or shuffle.keyword is None:
        code = f"{spelled} is None" if plan.without_group(call) else "False"
        plan.replace(shuffle.value, _replaced_by(cst.parse_expression(code)))
    else:
        plan.replace(call, lambda node: without_keyword(cast(cst.Call, node), "shuffle", "True"))
    plan.change(
        shuffle, "no `shuffle=True` beside the sampler: the DistributedSampler in the placeholder's place shuffles"
    )


def _shuffle_off_in_the_dict(plan: EditPlan, own: OwnSampler, call: cst.Call) -> None:
    """``DataLoader(ds, sampler=sampler, **settings)`` where ``settings`` holds ``"shuffle": True``: the loader
    takes the dict with its shuffle turned off, ``**{**settings, "shuffle": False}`` (the dict itself may serve
    other loaders, whose shuffle stays)."""
    index = plan.index
    code = index.module_of(call).code_for_node
    for arg in call.args:
        if arg.star != "**":
            continue
        held = (dict_entries(index, arg.value, index.scope_of(call)) or {}).get("shuffle", ())
        if not any(m.matches(value, m.Name("True")) for value in held):
            continue
        off = f"{code(own.arg.value)} is None" if plan.without_group(call) else "False"
        plan.replace(arg.value, _replaced_by(cst.parse_expression(f'{{**{code(arg.value)}, "shuffle": {off}}}')))
        plan.change(
            arg, "no `shuffle=True` beside the sampler: the DistributedSampler in the placeholder's place shuffles"
        )


def needs_wrapper(plan: EditPlan, own: OwnSampler, whole_run: bool) -> bool:
    """Whether some sampler of ``own`` is dealt out by the wrapper class, not replaced by a DistributedSampler."""
    return any(distributed_equivalent(plan, own, value, whole_run) is None for value in own.wrapped)


def distributed_equivalent(plan: EditPlan, own: OwnSampler, value: cst.BaseExpression, whole_run: bool) -> str | None:
    """``RandomSampler(ds)`` -> ``DistributedSampler(ds)``, ``SequentialSampler(ds)`` -> ``DistributedSampler(ds,
    shuffle=False)``: the same order of the same data set, shared out, without a wrapper class."""
    value = _built_here(plan.index, value) or value
    if own.attribute != "sampler" or whole_run or not isinstance(value, cst.Call):
        return None
    names = plan.index.qualified_names(value.func)
    if not names & SIZED_ONLY_SAMPLERS or len(value.args) != 1 or value.args[0].star:
        return None
    source = value.args[0]
    if source.keyword is not None and source.keyword.value != "data_source":
        return None
    shuffle = "" if any(name.endswith(".RandomSampler") for name in names) else ", shuffle=False"
    return f"{plan.names.sampler}({plan.index.module_of(value).code_for_node(source.value)}{shuffle})"


def _built_here(index: Index, value: cst.BaseExpression) -> cst.Call | None:
    """The call that builds the sampler a plain name holds, where the function (or module) that reads the
    name assigns it once, from a call (``sampler = RandomSampler(ds)`` before ``DataLoader(ds, sampler=sampler)``)."""
    if not isinstance(value, cst.Name):
        return None
    scope = index.scope_of(value)
    ref = index.ref_of(value, scope)
    if ref is None or ref.scope is not scope:
        return None
    assigned = list(index.values_assigned(ref))
    if len(assigned) != 1 or not isinstance(built := assigned[0][1], cst.Call):
        return None
    return built


def _draw_per_rank(plan: EditPlan, call: cst.Call, whole_run: bool) -> None:
    """``RandomSampler(ds, replacement=True, num_samples=n)`` -> the same with ``num_samples=n //
    world_size`` (the epoch's draws shared out), or ``n`` where one pass is the whole training, and a
    generator seeded apart on each rank."""
    code = plan.index.module.code_for_node
    generator = cst.parse_expression(f"torch.Generator().manual_seed(torch.initial_seed() + {plan.rank(call)})")
    source = argument(call, "data_source", 0)
    count = argument(call, "num_samples", 2)
    length = code(count.value) if count is not None else f"len({code(source.value)})" if source is not None else None
    share = cst.parse_expression(f"{length} // {plan.world_size(call)}") if length is not None else None
    if whole_run:
        share = None
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        new = cast(cst.Call, node)
        args = list(new.args)
        if share is not None and count is not None:
            position = list(call.args).index(count)
            args[position] = args[position].with_changes(value=share)
        elif share is not None:
            args = [*with_comma(args), cst.Arg(share, keyword=cst.Name("num_samples"), equal=equal)]
        args = [*with_comma(args), cst.Arg(generator, keyword=cst.Name("generator"), equal=equal)]
        return new.with_changes(args=args)

    plan.replace(call, rewrite)
    if "torch" not in plan.index.bound[plan.index.module]:
        plan.need_import("torch")
    draws = "as many samples (one pass is the whole training)" if whole_run else "its share of the epoch's samples"
    plan.change(
        call,
        f"a sampler that draws with replacement: each rank draws {draws} from a "
        "generator seeded apart (torch.initial_seed() + rank), so that the ranks' draws differ",
    )


def _batch_size(index: Index, own: OwnSampler) -> cst.BaseExpression | None:
    """The ``batch_size`` of the DataLoader that ``own`` is the sampler of, where the wrapper can be handed it
    as written (None: the wrapper deals single draws)."""
    call = index.parent(own.arg)
    if own.attribute != "sampler" or not isinstance(call, cst.Call):
        return None
    arg = argument(call, "batch_size", 1)
    if arg is None or arg.star:
        return None
    value = arg.value
    return value if _read_again_at_no_cost(value) and not m.matches(value, m.Integer("1")) else None


def _read_again_at_no_cost(expr: cst.BaseExpression) -> bool:
    """A number, a dotted name, or arithmetic of them (``P * K``, ``args.batch_size // 2``)."""
    if isinstance(expr, cst.BinaryOperation):
        return _read_again_at_no_cost(expr.left) and _read_again_at_no_cost(expr.right)
    return isinstance(expr, cst.Integer) or bool(dotted(expr))


def _wrapped_in(
    wrapper: str, test: str | None, size: cst.BaseExpression | None = None
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """``Wrapper(sampler)`` (``Wrapper(sampler, size)`` where the loader's batch size is known); with ``test``,
    ``Wrapper(sampler) if test else sampler``."""

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        value = cast(cst.BaseExpression, node)
        args = [cst.Arg(value)] if size is None else [*with_comma([cst.Arg(value)]), cst.Arg(size)]
        call = cst.Call(func=cst.Name(wrapper), args=args)
        if test is None:
            return call
        return cst.IfExp(test=cst.parse_expression(test), body=call, orelse=value)

    return wrap


def _replaced_by(new: cst.CSTNode) -> Callable[[cst.CSTNode], cst.CSTNode]:
    return lambda _: new


def define_wrapper(plan: EditPlan, taken: set[str], whole_run: bool = False, rngs: Sequence[str] = ()) -> str:
    """Define the wrapper class once, right after the setup function; its name. ``rngs``: the global RNGs
    besides torch's (``random``, ``numpy``) that a sampler it wraps draws from, which it seeds alike too."""
    name = fresh(
        "DistributedWholeRunSampler" if whole_run else "DistributedSamplerWrapper", plan.index.identifiers | taken
    )
    taken.add(name)
    template = WHOLE_RUN_WRAPPER if whole_run else WRAPPER
    seeded, resumed = _seeding(plan, rngs)
    text = template.format(
        wrapper=name, sampler=plan.names.sampler, rngs=rngs_named(rngs), seeded=seeded, resumed=resumed
    )
    definition = cst.parse_module(text).body[0]
    plan.add_setup_helper(name, cast(cst.ClassDef, definition))
    return name


def rngs_named(rngs: Sequence[str]) -> str:
    """How the wrapper's docstring and the change summary name the RNGs it seeds."""
    if not rngs:
        return "torch's RNG"
    named = ["torch's", *({"numpy": "NumPy's", "random": "Python's"}[r] for r in rngs)]
    return f"{', '.join(named[:-1])} and {named[-1]} RNGs"


def _seeding(plan: EditPlan, rngs: Sequence[str]) -> tuple[str, str]:
    """The wrapper's lines that seed the global RNGs ``rngs`` alike on every rank before the sampler draws,
    and those that give this rank its own state back after."""
    seeded = resumed = ""
    for family in rngs:
        if family == "random":
            module = plan.names.random
            get, seed, put, state = f"{module}.getstate", f"{module}.seed", f"{module}.setstate", "random_state"
        else:
            module = plan.names.numpy
            get, seed, put = f"{module}.random.get_state", f"{module}.random.seed", f"{module}.random.set_state"
            state = "numpy_state"
        if not imports_module(plan.index.module, module, family):
            plan.need_import(family, asname=None if module == family else module)
        seeded += f"        {state} = {get}()\n        {seed}(self.seed + self.epoch)\n"
        resumed += f"        {put}({state})\n"
    if seeded:
        named = " and ".join({"numpy": "NumPy's RNG", "random": "Python's random"}[r] for r in rngs)
        why = f"# the sampler draws from {named} too: seeded alike on every rank, then this rank's state again"
        seeded = f"        {why}\n{seeded}"
    return seeded, resumed


@dataclass(frozen=True)
class DictEntry:
    """A DataLoader kept in a dict: ``{"train": DataLoader(...), ...}`` or ``{x: DataLoader(...) for x in keys}``.

    Only the entries that train get a sampler; the others stay whole on every rank.
    """

    holder: Ref  # where the dict is kept
    keys: tuple[cst.SimpleString, ...]  # its own key, or every key of the comprehension
    variable: str | None = None  # a comprehension's variable, which holds the key
    training: tuple[cst.SimpleString, ...] = ()  # the keys among ``keys`` whose loader trains

    def indexed(self, holder: str) -> list[str]:
        """How each training loader is written: ``dataloaders["train"]``."""
        return [f"{holder}[{key.value}]" for key in self.training]


def dict_entry(index: Index, call: cst.Call) -> DictEntry | None:
    """The dict ``call`` is an entry of, when it is one with string keys kept in a plain name or ``self`` field."""
    parent = index.parent(call)
    if isinstance(parent, cst.DictComp) and parent.value is call:
        comp = parent.for_in
        names = _string_display(index, comp.iter, index.scope_of(parent))
        if not (isinstance(comp.target, cst.Name) and names is not None and comp.inner_for_in is None and not comp.ifs):
            return None
        keys = tuple(cast(cst.SimpleString, e.value) for e in names.elements)
        holder = _assigned_to(index, parent)
        variable = comp.target.value
        return DictEntry(holder, keys, variable) if holder is not None else None
    if isinstance(parent, cst.DictElement) and parent.value is call and isinstance(parent.key, cst.SimpleString):
        holder = _assigned_to(index, index.parent(parent))
        return DictEntry(holder, (parent.key,)) if holder is not None else None
    return None


def _string_display(index: Index, expr: cst.BaseExpression, scope: Scope) -> cst.List | cst.Tuple | None:
    """``["train", "test"]``, or the name it is bound to, once (``splits = ["train", "test"]``)."""
    if not isinstance(expr, cst.List | cst.Tuple):
        ref = index.ref_of(expr, scope) if isinstance(expr, cst.Name) else None
        values = [value for _, value in index.values_assigned(ref)] if ref is not None else []
        if len(values) != 1 or not isinstance(values[0], cst.List | cst.Tuple):
            return None
        expr = values[0]
    if all(isinstance(e.value, cst.SimpleString) for e in expr.elements):
        return expr
    return None


def _assigned_to(index: Index, value: cst.CSTNode | None) -> Ref | None:
    """Where the dict ``value`` is kept: the name or field it is assigned to, or the return value of the
    function that returns it (``return {"train": DataLoader(...), ...}``)."""
    assign = index.parent(value)
    if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and value is not None:
        return index.ref_of(assign.targets[0].target, index.scope_of(value))
    if (
        isinstance(assign, cst.Return)
        and value is not None
        and isinstance(scope := index.scope_of(value), cst.FunctionDef)
    ):
        return Ref(scope, "<return>")
    return None


def entry_iterations(index: Index, refs: set[Ref]) -> list[tuple[cst.For, Ref, cst.BaseExpression]]:
    """``for batch in loaders[key]`` (also through ``enumerate``/``tqdm``): the loop, the dict and the key."""
    found = []
    for loop in index.loops:
        if not isinstance(loop, cst.For):
            continue
        expr = loop.iter
        while isinstance(expr, cst.Call) and expr.args and expr.args[0].keyword is None:
            expr = expr.args[0].value
        if not (isinstance(expr, cst.Subscript) and len(expr.slice) == 1):
            continue
        ref = index.carried_ref(expr.value, index.scope_of(loop))
        key = expr.slice[0].slice
        if ref in refs and isinstance(key, cst.Index):
            found.append((loop, ref, key.value))
    return found


def keys_drawn(index: Index, site: cst.For, key: cst.BaseExpression) -> tuple[set[str], cst.For | None] | str:
    """The keys whose loaders train at ``site``, and the loop over the keys; or why they cannot be told."""
    if isinstance(key, cst.SimpleString):
        return {str(key.evaluated_value)}, None
    text = index.module.code_for_node(key)
    phases = next(
        (
            lp
            for lp in index.enclosing_loops(site)
            if isinstance(lp, cst.For)
            and m.matches(lp.target, m.Name(text))
            and isinstance(lp.iter, (cst.List, cst.Tuple))
            and all(isinstance(e.value, cst.SimpleString) for e in lp.iter.elements)
        ),
        None,
    )
    if not isinstance(key, cst.Name) or phases is None:
        return f"cannot tell which loader `{index.module.code_for_node(site.iter)}` draws from"
    keys: set[str] = set()
    for node in index.walk(site.body):
        if not isinstance(node, cst.Call):
            continue
        backward = isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward"
        callee = index.resolve_callee(node, index.scope_of(node))
        # a function of the program's own that runs a backward pass but steps nothing (an adversarial example
        # from the input's gradient, in both phases) trains on neither
        if not backward and not (callee is not None and index.trains(callee[0].body) and _steps(index, callee[0])):
            continue
        guards = [
            str(test.comparisons[0].comparator.evaluated_value)
            for a in index.ancestors(node)
            if isinstance(a, cst.If) and index.inside(a, site)
            for test in (a.test,)
            if isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)
            and m.matches(test.left, m.Name(text))
            and isinstance(test.comparisons[0].comparator, cst.SimpleString)
        ]
        if not guards:
            return (
                f"cannot tell for which `{text}` the loop over `{index.module.code_for_node(site.iter)}` trains: "
                f'run the backward pass under `if {text} == "train":`'
            )
        keys.update(guards)
    return keys, phases


def _steps(index: Index, function: cst.FunctionDef, seen: frozenset[cst.FunctionDef] = frozenset()) -> bool:
    """Whether running ``function`` calls a ``.step()`` (an optimizer's, a scaler's, a scheduler's), directly or
    through the program's own functions."""
    for node in index.walk(function.body):
        if not isinstance(node, cst.Call):
            continue
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "step":
            return True
        callee = index.runs(node, index.scope_of(node))
        if callee is not None and callee[0] not in seen and _steps(index, callee[0], seen | {function}):
            return True
    return False


def sample_entries(plan: EditPlan, call: cst.Call, entry: DictEntry, dataset: cst.BaseExpression) -> bool:
    """``{x: DataLoader(ds[x], ...) for x in keys}``: a DistributedSampler for the training keys only.

    Whether that sampler shuffles (and so needs ``set_epoch``).
    """
    code = plan.index.module.code_for_node
    sampler = plan.names.sampler
    variable = entry.variable
    keys = [key.value for key in entry.training]
    test = f"{variable} == {keys[0]}" if len(keys) == 1 else f"{variable} in ({', '.join(keys)})"
    shuffle = argument(call, "shuffle", 2)
    shuffles = shuffle is not None and not m.matches(shuffle.value, m.Name("False"))
    if shuffle is None or not shuffles or m.matches(shuffle.value, m.Name("True")):
        option = "" if shuffles else ", shuffle=False"
    else:
        written = code(shuffle.value.with_changes(lpar=[], rpar=[]))
        option = "" if written == test else f", shuffle={written}"
    shared = plan.without_group(call)
    if shared:  # another script may import it: without a group, every entry loads as before
        test = f"{test} and {plan.names.dist}.is_initialized()"
    value = cst.parse_expression(f"{sampler}({code(dataset)}{option}) if {test} else None")
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name("sampler"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if shuffle is not None and shuffles and shared:
        kept = "" if m.matches(shuffle.value, m.Name("True")) else f"{code(shuffle.value)} and "
        plan.replace(shuffle.value, _replaced_by(cst.parse_expression(f"{kept}not ({test})")))
        position = list(call.args).index(shuffle) + 1
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), new_arg, position))
    elif shuffle is not None and shuffles:
        plan.replace(shuffle, lambda n: n.with_changes(keyword=new_arg.keyword, equal=new_arg.equal, value=value))
    else:
        spread = next((i for i, a in enumerate(call.args) if a.star == "**"), len(call.args))
        plan.replace(call, lambda n: insert_arg(cast(cst.Call, n), new_arg, spread))
    plan.need_import(
        "torch.utils.data.distributed", "DistributedSampler", None if sampler == "DistributedSampler" else sampler
    )
    plan.change(
        call,
        f"a {sampler} for the dict's training {'entries' if len(keys) > 1 else 'entry'} {', '.join(keys)}; "
        "the other entries are read whole, in order, on every rank",
    )
    return shuffles
