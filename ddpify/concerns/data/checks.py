"""What a training DataLoader's arguments and training step demand or forbid.

A ``sampler=`` or ``batch_sampler=`` of its own (shared by ``samplers``, or
refused as DDP202), ``*args`` (DDP205), a state carried from batch to batch
of an unshuffled loader (split into runs of batches, or DDP210), and a shape
built from the batch size in the training step (``drop_last=True``).
"""

from __future__ import annotations

import itertools

import libcst as cst

from ddpify import torch_api
from ddpify.concerns.data.codes import CARRIED_STATE, OWN_SAMPLER, STAR_ARGS
from ddpify.concerns.data.facts import SHAPE_FACTORIES, SHAPE_METHODS, batch_size, is_false, is_none
from ddpify.concerns.data.reads import Reads
from ddpify.concerns.data.seeds import Seeds
from ddpify.concerns.samplers import OwnSampler, own_sampler
from ddpify.engine.index import Ref
from ddpify.engine.program import Program
from ddpify.engine.syntax import argument, dotted
from ddpify.engine.values import loader_argument


class Checks:
    def __init__(self, program: Program, reads: Reads, seeds: Seeds) -> None:
        self.program = program
        self.index = program.index
        self.reads = reads
        self.seeds = seeds

    def check_sampling_arguments(self, call: cst.Call, refs: set[Ref]) -> OwnSampler | None:
        own = None
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in torch_api.DATALOADER_SAMPLING_KEYWORDS and is_none(arg.value):
                continue  # ``sampler=None`` written out: the default, no sampler of its own
            if keyword in torch_api.DATALOADER_SAMPLING_KEYWORDS:
                counted = any(True for _ in self.reads.counted_lengths(refs, keyword))
                found = own_sampler(self.index, call, arg, counted)
                if isinstance(found, OwnSampler):
                    found = self.seeds.unseeded_draw(found) or found
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

    def carried_state(self, call: cst.Call, sites: list[cst.CSTNode]) -> str | None:
        """``logits, hidden = model(x, hidden)`` over an unshuffled loader: batch t+1 continues batch t.

        A DistributedSampler deals the samples out to the ranks in turn, so the state a rank would
        carry into its next batch belongs to other data; each rank takes a contiguous run of the
        loader's batches instead (:func:`.rewrite._contiguous_batches`). The description of the
        carried state (``hidden``, in ``logits, hidden = model(x, hidden)``), or None.
        """
        index = self.index
        shuffle = loader_argument(index, call, "shuffle")
        if shuffle is not None and not is_false(shuffle):
            return None
        for site in sites:
            loop = site if isinstance(site, cst.For) else next(index.enclosing_loops(site), None)
            if loop is None:
                continue
            # ``for i, inputs in enumerate(loader): inputs, targets = parse(inputs)``: the loop binds it anew
            fresh = (
                {n.value for n in index.walk(loop.target) if isinstance(n, cst.Name)}
                if isinstance(loop, cst.For)
                else set()
            )
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
                for state in sorted((outputs & inputs) - fresh):
                    if self._read_before_written(state, loop.body):
                        return f"`{state}` is carried from one batch to the next (`{index.module.code_for_node(node).strip()}`)"
        return None

    def refuse_carried_state(self, call: cst.Call, state: str, origin: Ref | None, why: str) -> None:
        loader = f"`{origin.path}`" if origin is not None else "this DataLoader"
        self.program.report(call, CARRIED_STATE, carried_state_refused(state, loader, why))

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

    def batch_size_in_shapes(
        self, call: cst.Call, sites: list[cst.CSTNode], spread_keys: frozenset[str] | None
    ) -> cst.Call | None:
        """A shape in the training step written with the loader's batch size: ``x.view(batch_size, -1)``.

        Under a DistributedSampler a rank's last batch can be short even where the
        single-process one never was, so such a step needs full batches.
        """
        index = self.index
        batch = batch_size(index, call)
        if batch is None or not isinstance(batch, (cst.Name, cst.Attribute)) or argument(call, "drop_last"):
            return None
        if call.args and any(a.star == "**" for a in call.args) and (spread_keys is None or "drop_last" in spread_keys):
            return None
        size = dotted(batch)
        size_ref = index.ref_of(batch, index.scope_of(batch))
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


def carried_state_refused(state: str, loader: str, why: str) -> str:
    """DDP210's message: ``state`` carried from batch to batch of ``loader``, which ``why`` keeps from a run of
    batches per rank."""
    return (
        f"{state}, so each batch must continue the previous one, and {loader} {why}: give each rank a "
        "contiguous, equally long part of the data in order (e.g. a Subset per rank) and shard it yourself"
    )
