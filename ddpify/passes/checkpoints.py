"""Checkpoints: ``torch.save`` runs on global rank 0 only.

Every rank holds the same weights after each step, so one copy is enough, and
N processes writing one file corrupt it. The model pass has already made the
saved object the unwrapped module (``model.module.state_dict()``), so the
checkpoint loads into the single-GPU model as before::

    torch.save(model.state_dict(), "model.pt")
    ->  if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "model.pt")

The global rank (not the local one) decides, so a multi-node job writes one
checkpoint, not one per node.

When the script reads a saved file back later (``torch.load`` of the same
path), a ``dist.barrier()`` follows the save, on every rank, so that nobody
reads a file rank 0 is still writing.

``torch.load`` of a state dict gets ``map_location="cpu"``: without it every
rank would load the tensors onto the GPU they were saved from (GPU 0), and
``load_state_dict`` copies them to the model's own device anyway::

    model.load_state_dict(torch.load(path))
    ->  model.load_state_dict(torch.load(path, map_location="cpu"))
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan
from ddpify.edits import with_comma as _with_comma
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    for stmt in anatomy.saves:
        plan.on_rank_zero(stmt)
        plan.change(stmt, "torch.save on global rank 0 only")
    for stmt in anatomy.reloaded_saves:
        barrier = cst.parse_statement(f"{anatomy.names.dist}.barrier()  # the others read what rank 0 just wrote\n")
        plan.insert_after(_rank_zero_unit(anatomy, plan, stmt), barrier)
        plan.change(stmt, "dist.barrier() after the save: the file is read back later")
    for call in anatomy.state_loads:
        plan.replace(call, lambda n: n.with_changes(args=[*_with_comma(n.args), _MAP_TO_CPU]))
        plan.change(call, 'torch.load(..., map_location="cpu"): not onto the GPU the checkpoint came from')


def _rank_zero_unit(anatomy: Anatomy, plan: EditPlan, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """The statement that will hold the rank-0 test: the save, or an ``if`` whose test takes the rank test."""
    block = anatomy.index.parent(stmt)
    owner = anatomy.index.parent(block)
    if (
        isinstance(owner, cst.If)
        and owner.orelse is None
        and owner is not anatomy.index.main_guard
        and all(s in plan.rank_zero_only for s in block.body)
    ):
        return owner
    return stmt


_MAP_TO_CPU = cst.Arg(
    keyword=cst.Name("map_location"),
    value=cst.SimpleString('"cpu"'),
    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
)
