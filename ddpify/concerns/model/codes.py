"""The diagnostic codes of the model concern (DDP301-DDP315), and ``CODES``, the tuple that registers them."""

from __future__ import annotations

from ddpify.concerns.batch_negatives import IN_BATCH_NEGATIVES
from ddpify.diagnostics import Code, Severity

UNTRACEABLE_OPTIMIZER = Code(
    "DDP301",
    Severity.ERROR,
    "model",
    "an optimizer whose model cannot be traced from its arguments",
    "pass `model.parameters()` (or a list built from it) to the optimizer",
)
MODEL_NOT_PLACED = Code(
    "DDP302",
    Severity.ERROR,
    "model",
    "the model an optimizer trains is never built or put on its device in this file",
    "build the model and move it to its device in the script",
)
OUTSIDE_FORWARD = Code(
    "DDP303",
    Severity.WARNING,
    "model",
    "a custom model method runs submodules in the training step, bypassing DDP's gradient averaging",
    "route the computation through forward()",
)
NO_OPTIMIZER = Code(
    "DDP304",
    Severity.ERROR,
    "model",
    "the script trains but builds no torch.optim optimizer over a model in this file",
    "build the optimizer over `model.parameters()` in the script",
)
MOVES_IN_TRAINING = Code(
    "DDP305",
    Severity.WARNING,
    "model",
    "the model moves between devices inside the training loop",
    "keep the model on its device; save `model.module.state_dict()` without moving it",
)
UNFROZEN_AFTER_WRAP = Code(
    "DDP306",
    Severity.ERROR,
    "model",
    "parameters of a model become trainable after it is wrapped, where the wrap cannot be renewed",
    "unfreeze in the function that wraps the model, or wrap it again after unfreezing: `model = DDP(model.module)`",
)
STORED_BEFORE_WRAP = Code(
    "DDP307",
    Severity.ERROR,
    "model",
    "the model is stored in a list, dict or attribute before it can be wrapped, and used from there afterwards",
    "store the model after it is on its device (and after any checkpoint load), or store `model` again after the wrap",
)
SMALL_BATCH_NORM = Code(
    "DDP308",
    Severity.INFO,
    "model",
    "a model with BatchNorm layers trains on small per-process batches: each rank normalises over its own batch",
    "convert the BatchNorm layers to SyncBatchNorm (`--sync-bn`) if the batch statistics matter",
)
WRAPPER_IN_CONTAINER = Code(
    "DDP309",
    Severity.WARNING,
    "model",
    "the wrapped model is kept in a list, dict or attribute: what is read through it is the wrapper's",
    "read `.module` of the models taken from it for `state_dict()` and attributes (forward calls are right as they are)",
)
PARTS_RUN_DIRECTLY = Code(
    "DDP310",
    Severity.ERROR,
    "model",
    "the training step runs parts of a model (`gan.generator(z)`) but never the model itself",
    "run the parts through the model's forward(), or build them as models of their own, each wrapped",
)
SECOND_BACKWARD = Code(
    "DDP312",
    Severity.ERROR,
    "model",
    "a second backward pass through one forward of a model (`a.backward(retain_graph=True)` then `b.backward()`): "
    "DistributedDataParallel averages gradients once per forward and raises on the second",
    "add the losses and call backward once (`(loss_a + loss_b).backward()`), or keep the first loss off the model "
    "(a GAN's discriminator step on `fake.detach()`)",
)
OWN_DATA_PARALLEL = Code(
    "DDP314",
    Severity.ERROR,
    "model",
    "the model is wrapped in the program's own subclass of nn.DataParallel: what the subclass adds (its own "
    "scatter of the inputs, patches for synchronised BatchNorm) has no counterpart under DistributedDataParallel",
    "wrap the model in nn.DataParallel there (or leave it unwrapped when one process drives one GPU), then convert",
)
RETURNED_PARAMETER = Code(
    "DDP315",
    Severity.ERROR,
    "model",
    "the model's forward returns one of its own parameters, and some steps give it no gradient: "
    "DistributedDataParallel then waits for that gradient, or with find_unused_parameters=True marks the "
    "parameter ready twice (its gradient comes from outside the graph it searches)",
    "use the parameter in the loss on every step (`+ 0 * log_vars.sum()` where it is not needed), then convert",
)
INITIALISED_FROM_A_BATCH = Code(
    "DDP316",
    Severity.ERROR,
    "model",
    "a layer of the model sets its own parameters from the batch it is given, in forward (an ActNorm's "
    "initialisation on its first batch): after the wrap, each rank would set them from its own batch, and DDP "
    "averages gradients, never weights, so the ranks would keep different weights for the whole run",
    "initialise those layers before training on one batch that every rank reads alike (then convert), or copy "
    "rank 0's parameters to every rank after the first step yourself",
)
SAVED_WITH_ITS_WRAPPER = Code(
    "DDP318",
    Severity.WARNING,
    "model",
    "an object of the program's own is saved whole (pickle, torch.save) while a field of it holds the DDP wrapper",
    "save the model's `state_dict()` (or the object with the plain module in that field): the file holds "
    "the wrapper, which loads only where a process group exists",
)
PENALTY_ONLY_STEP = Code(
    "DDP319",
    Severity.ERROR,
    "model",
    "a backward pass whose loss reaches the model only through `torch.autograd.grad` of its output (a gradient "
    "penalty stepped on its own): the parameters that the input gradient does not depend on (the last layer's "
    "bias) get no gradient, DDP waits for them, and the next forward raises",
    "add the penalty to the loss of a step that runs the model (or add `0 * <output>.sum()` to it), then convert",
)
SPARSE_PARAMETER = Code(
    "DDP320",
    Severity.ERROR,
    "model",
    "the model keeps a sparse tensor as a parameter or buffer (a graph's adjacency): DistributedDataParallel "
    "broadcasts every parameter and buffer when it wraps the model, and it cannot broadcast sparse tensors",
    "keep the sparse tensor as a plain attribute of the module (moved to its device by hand), then convert",
)
TWO_METHODS_ONE_BACKWARD = Code(
    "DDP321",
    Severity.ERROR,
    "model",
    "the training step runs the model through DistributedDataParallel twice before one backward pass (its forward "
    "and another of its methods, or two forwards given different arguments), while some parameters get no "
    "gradient (find_unused_parameters=True): DDP finds the unused parameters from the last pass alone, and raises "
    "when the others get their gradients",
    "compute the losses in one forward (a method that returns both), or give every parameter a gradient, then convert",
)
WRAPPED_INSIDE_A_MODULE = Code(
    "DDP322",
    Severity.ERROR,
    "model",
    "the model is built in a method of an nn.Module of the program (a part the module keeps, with its own "
    "optimizer): a wrapper made there is never the module the training step runs, or is moved to the device "
    "after it is made, and the ranks would train apart",
    "build the part's optimizer where the whole module is built and placed, over the module's parameters (or wrap "
    "the part yourself after the module is on its device), then convert",
)
OUTPUT_HIDDEN_IN_AN_OBJECT = Code(
    "DDP323",
    Severity.ERROR,
    "model",
    "some parameters of the model may get no gradient in a step (find_unused_parameters=True), and its forward "
    "returns an object of a plain class of the program: DistributedDataParallel looks for the output tensors "
    "only in tensors, lists, tuples, dicts and dataclasses, finds none, takes every parameter for unused, and "
    "raises when their gradients come",
    "return the outputs as a tuple, a dict or a dataclass (`@dataclass` on that class), then convert",
)
UNUSED_AND_USED_OUTSIDE = Code(
    "DDP325",
    Severity.ERROR,
    "model",
    "some parameters of the model may get no gradient in a step (find_unused_parameters=True), and the training "
    "step also uses a part of the model outside its forward (its weights handed to a loss): DDP takes that part "
    "for unused after each forward, then raises when its gradients come",
    "run that part inside forward (return what the loss needs), or make every parameter get a gradient in every "
    "step, then convert",
)
BUFFER_UPDATED_FROM_THE_BATCH = Code(
    "DDP324",
    Severity.WARNING,
    "model",
    "forward updates a buffer of the model from its batch (a moving average, a vector-quantiser's codebook "
    "statistics): DistributedDataParallel copies rank 0's buffers to every rank at each forward, so the other "
    "ranks' updates are dropped and the buffer follows rank 0's shard alone",
    "average the update over the ranks (`dist.all_reduce` of the batch statistics before the update), or wrap "
    "with `broadcast_buffers=False` and keep the buffers in step yourself",
)
CODES = (
    UNTRACEABLE_OPTIMIZER,
    MODEL_NOT_PLACED,
    OUTSIDE_FORWARD,
    NO_OPTIMIZER,
    MOVES_IN_TRAINING,
    UNFROZEN_AFTER_WRAP,
    STORED_BEFORE_WRAP,
    SMALL_BATCH_NORM,
    WRAPPER_IN_CONTAINER,
    PARTS_RUN_DIRECTLY,
    IN_BATCH_NEGATIVES,
    SECOND_BACKWARD,
    OWN_DATA_PARALLEL,
    RETURNED_PARAMETER,
    INITIALISED_FROM_A_BATCH,
    SAVED_WITH_ITS_WRAPPER,
    PENALTY_ONLY_STEP,
    SPARSE_PARAMETER,
    TWO_METHODS_ONE_BACKWARD,
    WRAPPED_INSIDE_A_MODULE,
    OUTPUT_HIDDEN_IN_AN_OBJECT,
    UNUSED_AND_USED_OUTSIDE,
    BUFFER_UPDATED_FROM_THE_BATCH,
)
