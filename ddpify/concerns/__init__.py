"""The concerns of a DDP conversion, one module each, rewritten in the order of ``CONCERNS``.

Each concern module owns everything about its part of the script: its
diagnostic codes (``CODES``), its facts (small frozen dataclasses, ``Facts``
among them), the finder that reads them off the script and reports what it
cannot convert (``find(program, *needs) -> Facts``), and the rewrite that
turns them into edits (``rewrite(facts, plan, options)``). A finder that needs
another concern's facts takes them as arguments, named in ``NEEDS``;
:func:`find` runs each finder once, after the finders it needs.

Rewrites only record edits in the shared :class:`~ddpify.engine.edits.EditPlan`;
nothing is rewritten until all of them have run, so no rewrite sees another's
output. The order only decides the order of statements that two concerns
insert at the same place, and it follows the order of the generated script:

1. ``process_group`` -- the setup block and teardown, which everything else needs;
2. ``devices``       -- hard-coded GPU indices become this rank's GPU;
3. ``downloads``     -- data sets downloaded by one process at a time, before they are loaded;
4. ``data``          -- samplers, before the model is touched;
5. ``evaluation``    -- with ``--shard-eval``, evaluation samplers and the sums added up after their loops;
6. ``tensors``       -- training data kept in tensors, not a DataLoader: each rank's equal shard;
7. ``model``         -- the DistributedDataParallel wrap and ``.module`` reads;
8. ``accumulation``  -- gradient sync only on the updating micro-step, before the forward pass;
9. ``closures``     -- the loss an optimizer steers by (LBFGS) is averaged over the ranks;
10. ``gradients``    -- gradients computed by hand (``torch.autograd.grad``) are averaged before they are stored;
11. ``run_names``    -- a file or folder named by the clock or at random gets rank 0's name everywhere;
12. ``checkpoints``  -- ``torch.save`` on global rank 0 only (its barrier after the rank-0 block);
13. ``side_effects`` -- ``print`` and other output on global rank 0 only;
14. ``loop_control`` -- rank-local exits from the training loop (reported only).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ddpify.concerns import (
    accumulation,
    checkpoints,
    closures,
    data,
    devices,
    downloads,
    evaluation,
    gradients,
    loop_control,
    model,
    process_group,
    run_names,
    side_effects,
    tensors,
)
from ddpify.engine.edits import EditPlan
from ddpify.engine.program import Program
from ddpify.result import Options

CONCERNS: tuple[ModuleType, ...] = (
    process_group,
    devices,
    downloads,
    data,
    evaluation,
    tensors,
    model,
    accumulation,
    closures,
    gradients,
    run_names,
    checkpoints,
    side_effects,
    loop_control,
)

# The concerns whose facts each finder takes, in the order of its parameters.
NEEDS: dict[ModuleType, tuple[ModuleType, ...]] = {
    process_group: (model, data),
    downloads: (process_group, model),
    run_names: (process_group, downloads),
    evaluation: (data,),
    tensors: (data, model, process_group),
    accumulation: (model,),
    gradients: (model,),
    checkpoints: (downloads, loop_control),
    side_effects: (model, process_group, downloads),
    loop_control: (model, data),
}


def name(concern: ModuleType) -> str:
    """``data`` for ``ddpify.concerns.data``: the name used in fixtures, codes and docs."""
    return concern.__name__.rsplit(".", 1)[-1]


def find(program: Program) -> dict[ModuleType, Any]:
    """Every concern's facts, each finder run once, after the finders whose facts it needs."""
    found: dict[ModuleType, Any] = {}

    def facts(concern: ModuleType) -> Any:
        if concern not in found:
            needs = [facts(need) for need in NEEDS.get(concern, ())]
            found[concern] = concern.find(program, *needs)
        return found[concern]

    for concern in CONCERNS:
        facts(concern)
    return found


def rewrite(found: dict[ModuleType, Any], plan: EditPlan, options: Options) -> None:
    """Record every concern's edits in ``plan``, in the order of ``CONCERNS``."""
    for concern in CONCERNS:
        concern.rewrite(found[concern], plan, options)
