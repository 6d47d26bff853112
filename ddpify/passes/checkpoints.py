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

``torch.load`` of a state dict gets ``map_location="cpu"``: without it every
rank would load the tensors onto the GPU they were saved from (GPU 0), and
``load_state_dict`` copies them to the model's own device anyway::

    model.load_state_dict(torch.load(path))
    ->  model.load_state_dict(torch.load(path, map_location="cpu"))
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan, with_comma as _with_comma
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    for stmt in anatomy.saves:
        plan.on_rank_zero(stmt)
        plan.change(stmt, "torch.save on global rank 0 only")
    for call in anatomy.state_loads:
        plan.replace(call, lambda n: n.with_changes(args=[*_with_comma(n.args), _MAP_TO_CPU]))
        plan.change(call, 'torch.load(..., map_location="cpu"): not onto the GPU the checkpoint came from')


_MAP_TO_CPU = cst.Arg(
    keyword=cst.Name("map_location"),
    value=cst.SimpleString('"cpu"'),
    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
)
