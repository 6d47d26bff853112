"""The rewrite passes, one module per concern, applied in the order of ``PASSES``.

Every pass reads the script's :class:`~ddpify.analysis.Anatomy` and records
its edits in the shared :class:`~ddpify.edits.EditPlan`; nothing is rewritten
until all passes have run, so no pass sees another pass's output. The order
only decides the order of statements that two passes insert at the same
place, and it follows the order of the generated script:

1. ``process_group`` -- the setup block and teardown, which everything else needs;
2. ``devices``        -- hard-coded GPU indices become this rank's GPU;
3. ``data``           -- samplers, before the model is touched;
4. ``model``          -- the DistributedDataParallel wrap and ``.module`` reads;
5. ``checkpoints``    -- ``torch.save`` on global rank 0 only;
6. ``side_effects``   -- ``print`` on global rank 0 only.
"""

from ddpify.passes import checkpoints, data, devices, model, process_group, side_effects

PASSES = (process_group, devices, data, model, checkpoints, side_effects)
