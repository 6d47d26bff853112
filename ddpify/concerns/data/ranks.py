"""Which values differ between ranks because of the data: the uniformity analysis
(:class:`~ddpify.engine.uniformity.batches.RankLocal`) of a program, seeded with where its
training loaders draw their batches and with the evaluation loaders that still differ per rank.
Every concern that asks whether a test may differ between ranks (loop control, checkpoints) asks
this one."""

from __future__ import annotations

import libcst as cst

import ddpify.engine.match as m
from ddpify.concerns.data.facts import Facts, Loader, shuffle_chosen
from ddpify.concerns.data.reads import Reads
from ddpify.engine.index import Index, Ref
from ddpify.engine.uniformity.batches import RankLocal
from ddpify.engine.values import loader_argument


def rank_local(index: Index, facts: Facts) -> RankLocal:
    """The values of the program computed from what each rank draws for itself."""
    training = [loader for loader in facts.loaders if loader.training]
    varying = [loader for loader in facts.loaders if draws_its_own_share(index, loader)]
    sites = [site for loader in training for site in loader.sites]
    reads = Reads(index)
    sites += [site for loader in varying for site, _ in reads.iterations(set(loader.refs))]
    refs = frozenset(ref for loader in training for ref in trained_refs(index, loader))
    refs |= frozenset(ref for loader in varying for ref in loader.refs)
    calls = frozenset(loader.call for loader in (*training, *varying))
    return RankLocal(index, sites, refs, calls)


def draws_its_own_share(index: Index, loader: Loader) -> bool:
    """An evaluation loader left whole that still differs between ranks: it shuffles with each process's own
    random state and drops the last, short batch (``shuffle=True, drop_last=True``): each rank leaves out
    other samples, so what it computes over them (a validation loss deciding early stopping) differs."""
    if loader.training or loader_argument(index, loader.call, "generator") is not None:
        return False
    flags = [loader_argument(index, loader.call, name) for name in ("shuffle", "drop_last")]
    return all(flag is not None and m.matches(flag, m.Name("True")) for flag in flags)


def trained_refs(index: Index, loader: Loader) -> frozenset[Ref]:
    """The places holding the loader that its training loops draw from: where one factory also builds
    the validation loader (which keeps the whole set), the places only that one reaches are left out."""
    if not loader.evaluated or (loader.trains_when is None and shuffle_chosen(loader) is not None):
        # (where the sampler follows ``shuffle=shuffle_flag``, an evaluation loader that shuffles is sharded too)
        return loader.refs
    found: set[Ref] = set()
    for site in loader.sites:
        iterated = site.iter if isinstance(site, cst.For) else None
        while isinstance(iterated, cst.Call) and m.matches(iterated.func, m.Name("enumerate")) and iterated.args:
            iterated = iterated.args[0].value  # ``for i, (x, y) in enumerate(loader)``
        ref = index.carried_ref(iterated, index.scope_of(site)) if iterated is not None else None
        if ref is None:
            return loader.refs
        found |= {ref, *(place for place in index.upstream(ref) if place in loader.refs)}
    return frozenset(found)
