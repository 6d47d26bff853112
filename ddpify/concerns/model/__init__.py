"""Model: each trained model is wrapped in DistributedDataParallel once it is on its device.

A model is whatever a ``torch.optim`` optimizer's ``.parameters()`` come from
(found through the value-flow graph, never by its name). The wrap goes right
after the statement that puts the model on its device (after a checkpoint load
that follows it, if any), and is written back to the same name, so the
training step -- ``model(x)``, ``loss.backward()``, ``optimizer.step()`` -- is
unchanged and DDP synchronises gradients::

    model = Net().to(device)       ->   model = Net().to(device)
                                        model = DDP(model)

``device_ids`` is passed only when the model is put on the GPU with ``.cuda()``;
for ``.to(device)`` DDP takes the device from the module itself, which works
on GPU and CPU alike. Everything that is not a forward call -- ``state_dict``,
``load_state_dict``, custom methods and submodules -- goes to the wrapped
module, so checkpoints keep their keys (no ``module.`` prefix)::

    torch.save(model.state_dict(), path)  ->  torch.save(model.module.state_dict(), path)

``nn.DataParallel(model)`` is where a model is ready: DDP takes its place, and
the ``if torch.cuda.device_count() > 1:`` around it goes.

Models kept in a list, each with its own optimizer, are wrapped together
(:mod:`ddpify.concerns.model_collections`): ``nets = [DDP(net) for net in nets]``.
Optimizers over parts of one model (``model.backbone``, ``model.head``) wrap the
model once: its forward runs the parts, so DDP averages all their gradients.

Limits: an optimizer whose parameters cannot be traced to a model (DDP301), a
model never built or placed in this file (DDP302, DDP304), a training step
that runs parts of a model but never the model itself (DDP310), and a second
backward pass through one forward of a model (DDP312) are refused; a
custom method that runs submodules in the training step (DDP303), a model moved
between devices inside the training loop (DDP305) and a contrastive loss over
the batch, which now sees only the local batch
(:mod:`ddpify.concerns.batch_negatives`, DDP311), are reported.

The concern's parts: its codes (:mod:`.codes`) and facts (:mod:`.facts`); the finder
(:mod:`.finder`), which traces what each optimizer trains (:mod:`.optimizers`) and checks the
reads through the wrapper (:mod:`.reads`), freezing (:mod:`.freezing`) and the training step
(:mod:`.forward`); and the rewrite (:mod:`.rewrite`).
"""

from __future__ import annotations

from ddpify.concerns.batch_negatives import IN_BATCH_NEGATIVES
from ddpify.concerns.model.codes import (
    CODES,
    MODEL_NOT_PLACED,
    MOVES_IN_TRAINING,
    NO_OPTIMIZER,
    OUTSIDE_FORWARD,
    PARTS_RUN_DIRECTLY,
    SMALL_BATCH_NORM,
    STORED_BEFORE_WRAP,
    UNFROZEN_AFTER_WRAP,
    UNTRACEABLE_OPTIMIZER,
    WRAPPER_IN_CONTAINER,
)
from ddpify.concerns.model.facts import Facts, Model
from ddpify.concerns.model.finder import find
from ddpify.concerns.model.rewrite import rewrite

__all__ = [
    "CODES",
    "IN_BATCH_NEGATIVES",
    "MODEL_NOT_PLACED",
    "MOVES_IN_TRAINING",
    "NO_OPTIMIZER",
    "OUTSIDE_FORWARD",
    "PARTS_RUN_DIRECTLY",
    "SMALL_BATCH_NORM",
    "STORED_BEFORE_WRAP",
    "UNFROZEN_AFTER_WRAP",
    "UNTRACEABLE_OPTIMIZER",
    "WRAPPER_IN_CONTAINER",
    "Facts",
    "Model",
    "find",
    "rewrite",
]
