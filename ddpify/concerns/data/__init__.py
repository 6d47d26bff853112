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
(DDP206), a state carried from batch to batch of an unshuffled loader that
is not a plain one (DDP210: a plain one gives each rank a contiguous run of
its batches) are refused, and so are
training batches that come from anything but a DataLoader the flow graph can
follow (DDP201) when the ``tensors`` concern cannot shard them; a loader that
cannot be followed to a loop (DDP204) and an epoch loop without a simple
variable or a training loop repeated in a ``while`` (DDP203) are reported.

The concern's codes (:mod:`.codes`) and facts (:mod:`.facts`); the finder
(:mod:`.finder`), which follows each loader to where its batches are drawn
and whether they train (:mod:`.reads`), checks what a training loader's
arguments and step demand or forbid (:mod:`.checks`), and finds unseeded
draws (:mod:`.seeds`) and IterableDatasets (:mod:`.streams`); and the
rewrite (:mod:`.rewrite`). A sampler the script already has is shared by
``samplers``.
"""

from __future__ import annotations

from ddpify.concerns.data.codes import (
    BATCH_NOT_ARGUMENT,
    CARRIED_STATE,
    CODES,
    NO_DATASET,
    NO_EPOCH,
    NO_TRAINING_LOADER,
    OWN_SAMPLER,
    STAR_ARGS,
    UNFOLLOWED_LOADER,
    UNSHARDED_DATA,
)
from ddpify.concerns.data.facts import (
    RANDOM_SPLIT,
    SHAPE_FACTORIES,
    SHAPE_METHODS,
    EpochLoop,
    Facts,
    Loader,
    Restart,
    Split,
    Stream,
)
from ddpify.concerns.data.finder import find
from ddpify.concerns.data.rewrite import PER_PROCESS_BATCH, rewrite

__all__ = [
    "BATCH_NOT_ARGUMENT",
    "CARRIED_STATE",
    "CODES",
    "NO_DATASET",
    "NO_EPOCH",
    "NO_TRAINING_LOADER",
    "OWN_SAMPLER",
    "PER_PROCESS_BATCH",
    "RANDOM_SPLIT",
    "SHAPE_FACTORIES",
    "SHAPE_METHODS",
    "STAR_ARGS",
    "UNFOLLOWED_LOADER",
    "UNSHARDED_DATA",
    "EpochLoop",
    "Facts",
    "Loader",
    "Restart",
    "Split",
    "Stream",
    "find",
    "rewrite",
]
