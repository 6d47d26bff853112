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
"""

from __future__ import annotations

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    for stmt in anatomy.saves:
        plan.on_rank_zero(stmt)
        plan.change(stmt, "torch.save on global rank 0 only")
