"""The diagnostic codes of the data concern (DDP201-DDP212), and ``CODES``, the tuple that registers them."""

from __future__ import annotations

from ddpify.diagnostics import Code, Severity

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
UNSHARDED_DATA = Code(
    "DDP211",
    Severity.WARNING,
    "data",
    "the training data is not split between the ranks: every rank trains on the whole of it, correctly but "
    "no faster than one process",
    "give each rank its own share of the data (a DataLoader, or x[dist.get_rank()::dist.get_world_size()]); "
    "--strict refuses such a script instead",
)
SHARD_EVALUATED = Code(
    "DDP212",
    Severity.WARNING,
    "data",
    "the training DataLoader is also drawn where nothing trains: there each rank sees only its share of the data",
    "iterate a loader over the whole data set there (DataLoader(loader.dataset, ...)) if it should see all of it",
)
CARRIED_STATE = Code(
    "DDP210",
    Severity.ERROR,
    "data",
    "a state carried from one batch of an unshuffled training DataLoader to the next (e.g. an RNN's hidden "
    "state), where the loader has a sampler of its own or is built in a way ddpify cannot split into runs",
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
    UNSHARDED_DATA,
    SHARD_EVALUATED,
    CARRIED_STATE,
)
