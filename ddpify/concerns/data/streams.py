"""An IterableDataset of the script's own: found behind a training DataLoader, and sharded between ranks.

Such a dataset has no sampler to shard: it is wrapped in a class defined
once in the generated script, so that each rank (and each DataLoader worker)
takes one item in every world size (x workers) of the stream; a class that
splits its stream between workers itself (``get_worker_info``) is split by
rank only.
"""

from __future__ import annotations

from typing import cast

import libcst as cst

from ddpify import torch_api
from ddpify.concerns.data.facts import Stream
from ddpify.engine.edits import EditPlan, fresh
from ddpify.engine.index import Index, Scope
from ddpify.engine.syntax import argument, dotted


def _iterable_dataset(index: Index, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> cst.ClassDef | None:
    """The script's own IterableDataset class that ``expr`` is an instance of, if it is one."""
    if isinstance(expr, cst.Call):
        cls = index.local_class(expr.func)
        return cls if cls is not None and index.derives_from(cls, torch_api.ITERABLE_DATASET) else None
    ref = index.ref_of(expr, scope)
    if ref is None or depth > 3:
        return None
    found = (_iterable_dataset(index, value, index.scope_of(a), depth + 1) for a, value in index.values_assigned(ref))
    return next(filter(None, found), None)


def find_stream(index: Index, call: cst.Call) -> Stream | None:
    """The IterableDataset of the program's own that a training DataLoader reads, if it reads one."""
    dataset_arg = argument(call, "dataset", torch_api.DATALOADER_POSITIONS["dataset"])
    if dataset_arg is None:
        return None
    cls = _iterable_dataset(index, dataset_arg.value, index.scope_of(call))
    if cls is None:
        return None
    splits = any(
        isinstance(n, (cst.Name, cst.Attribute)) and dotted(n).endswith("get_worker_info") for n in index.walk(cls)
    )
    return Stream(dataset_arg.value, cls, by_worker=not splits)


_SHARD = '''
class {name}(torch.utils.data.IterableDataset):
    """This process's share of a stream: one item in every (ranks x DataLoader workers). A last
    round too short to give every share an item is dropped, so that every rank takes as many steps."""

    def __init__(self, dataset, by_worker=True):
        self.dataset = dataset
        self.by_worker = by_worker  # False: the dataset splits its stream between workers itself
        self.rank, self.world_size = {rank}, {world_size}

    def __iter__(self):
        worker = torch.utils.data.get_worker_info() if self.by_worker else None
        workers, worker_id = (worker.num_workers, worker.id) if worker is not None else (1, 0)
        shards, shard = self.world_size * workers, self.rank * workers + worker_id
        for items in zip(*[iter(self.dataset)] * shards):  # `shards` items at a time
            yield items[shard]

    def __len__(self):
        return len(self.dataset) // self.world_size
'''


def define_shard(plan: EditPlan, taken: set[str]) -> str:
    """Define the stream-sharding class once, after the setup function; its name."""
    name = fresh("RankShard", plan.index.identifiers | taken)
    taken.add(name)
    dist = plan.names.dist
    plain, without_group = (
        cst.parse_module(_SHARD.format(name=name, rank=rank, world_size=world_size)).body[0]
        for rank, world_size in (
            (f"{dist}.get_rank()", f"{dist}.get_world_size()"),
            (
                f"({dist}.get_rank() if {dist}.is_initialized() else 0)",
                f"{dist}.get_world_size() if {dist}.is_initialized() else 1",
            ),
        )
    )
    plan.add_setup_helper(name, cast(cst.ClassDef, plain), cast(cst.ClassDef, without_group))
    if "torch" not in plan.index.bound[plan.index.module]:
        plan.need_import("torch")
    return name


def shard_stream(plan: EditPlan, stream: Stream, shard: str) -> None:
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
