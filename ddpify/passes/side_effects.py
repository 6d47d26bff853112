"""Side effects: progress printed once, by global rank 0.

A ``print`` statement runs on rank 0 only when its arguments only format
values; a print that itself runs the model or the script's own functions would
then skip work (and collectives) on the other ranks, so it is left alone and
reported instead::

    if batch_idx % log_interval == 0:           if batch_idx % log_interval == 0 and dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}")   ->       print(f"loss {loss.item():.4f}")
"""

from __future__ import annotations

from ddpify.analysis import Anatomy
from ddpify.edits import EditPlan
from ddpify.result import Options


def run(anatomy: Anatomy, plan: EditPlan, options: Options) -> None:
    for stmt in anatomy.prints:
        plan.on_rank_zero(stmt)
    if anatomy.prints:
        count = len(anatomy.prints)
        plan.change(anatomy.prints[0], f"print on global rank 0 only ({count} statement{'s' * (count != 1)})")
