"""The data concern's facts: what its finder hands to its rewrite, and the torch names both read."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify import torch_api
from ddpify.concerns.samplers import DictEntry, OwnSampler
from ddpify.engine.index import Ref
from ddpify.engine.syntax import argument
from ddpify.engine.values import loader_batch_size as batch_size

__all__ = ["batch_size"]


@dataclass(frozen=True)
class EpochLoop:
    loop: cst.For | cst.While  # the epoch loop
    loader: str  # the loader as written in the loop's scope: ``train_loader``, ``self.train_data``
    after: cst.BaseStatement | None = None  # the loader is built inside the loop: set the epoch after this
    counter: str = ""  # ``while epoch < n: ...; epoch += 1``: the name that counts the passes


@dataclass(frozen=True)
class Restart:
    stmt: cst.SimpleStatementLine  # ``it = iter(loader)`` after ``except StopIteration:``
    loader: str  # the loader as written there


@dataclass(frozen=True)
class Inline:
    """``for x, y in DataLoader(ds, shuffle=True):`` inside an epoch loop: a loader built where its batches
    are drawn, which no name holds; its sampler is named just before that loop."""

    loop: cst.For  # the loop that draws the batches
    epoch: str  # the variable of the epoch loop around it


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
    # also iterated where nothing trains (one factory builds the training and the validation loaders)
    evaluated: bool = False
    # one pass over it is the whole training (no epoch loop): its length is the run's number of steps
    whole_run: bool = False
    # ``loader.sampler.indices``: reads of its own sampler through the loader
    sampler_reads: tuple[cst.Attribute, ...] = ()
    # ``split == "train"``: where the factory's callers that train pass other values than those that evaluate,
    # the test under which it gets its sampler (else its ``shuffle`` test)
    trains_when: str | None = None
    # built in the ``for`` that draws its batches
    inline: Inline | None = None
    # ``logits, hidden = model(x, hidden)`` over it, unshuffled: each rank takes a contiguous run of its batches
    carried: str | None = None
    # ``it = iter(DataLoader(...))`` built again alike for each new pass (``except StopIteration:``): the first
    # construction of them, whose sampler every pass shares, with its epoch moved on at each new one
    first_pass: cst.Call | None = None


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
class Order:
    """A draw from an unseeded global RNG that orders or picks the rows of a training data set
    (``random.shuffle(files)``, ``frame.sample(frac=1)``, ``train_test_split(...)``): each rank would build
    its data set differently, and the shards, disjoint as indices, would overlap as rows."""

    call: cst.Call
    family: str  # the global RNG it draws from: torch, numpy or random
    seed: str  # the seed its own generator gets: the script's seed, or 0
    how: str  # "generator" (``generator=``), "random_state" (``random_state=``) or "rng" (a seeded generator's method)
    once: bool = True  # it runs once in a run: its generator is made where it draws, else once in its module


@dataclass(frozen=True)
class Facts:
    loaders: tuple[Loader, ...]
    splits: tuple[Split, ...] = ()
    orders: tuple[Order, ...] = ()


SHAPE_FACTORIES = frozenset(
    f"torch.{name}"
    for name in ("zeros", "ones", "full", "empty", "rand", "randn", "randint", "tensor", "arange", "eye")
)
SHAPE_METHODS = frozenset(
    {"view", "reshape", "expand", "new_zeros", "new_ones", "new_full", "new_empty", "unflatten", "resize_"}
)
RANDOM_SPLIT = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})


def batch_size_arg(call: cst.Call) -> cst.Arg | None:
    """The DataLoader's ``batch_size`` argument, by keyword or position."""
    return argument(call, "batch_size", torch_api.DATALOADER_POSITIONS["batch_size"])


def is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def shuffle_chosen(loader: Loader) -> cst.BaseExpression | None:
    """The ``shuffle=`` of a loader that also serves evaluation, where it is decided at run time
    (``shuffle=split == "train"``): the sampler follows it, unless the calls of its factory tell the training
    one apart (``trains_when``); None where it is written True or False, or not at all."""
    shuffle = argument(loader.call, "shuffle", torch_api.DATALOADER_POSITIONS["shuffle"])
    if not loader.evaluated or shuffle is None or is_true(shuffle.value) or is_false(shuffle.value):
        return None
    return shuffle.value


def is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
