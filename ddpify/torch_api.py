"""Facts about the torch API that the converter relies on, kept as data.

``tests/test_torch_api.py`` checks each fact against the installed torch, so a
torch release that moves or renames something fails the test suite instead of
silently producing wrong scripts.
"""

from __future__ import annotations

DATALOADER = frozenset(
    {
        "torch.utils.data.DataLoader",
        "torch.utils.data.dataloader.DataLoader",
    }
)
# PyTorch Geometric's loaders of graph batches: DataLoader subclasses that take ``sampler=`` as torch's
# does (their own collate only), with ``dataset, batch_size, shuffle`` first
GRAPH_LOADERS = frozenset(
    {
        "torch_geometric.loader.DataLoader",
        "torch_geometric.loader.DenseDataLoader",
        "torch_geometric.data.DataLoader",
        "torch_geometric.data.DenseDataLoader",
    }
)

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...): positions
# of the parameters the data pass reads or moves.
DATALOADER_POSITIONS = {"dataset": 0, "batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4}

# Keywords that choose the order of samples themselves: a DistributedSampler
# cannot be added next to them without losing what they do.
DATALOADER_SAMPLING_KEYWORDS = frozenset({"sampler", "batch_sampler"})

ITERABLE_DATASET = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"})

OPTIMIZER_MODULE = "torch.optim"
# Names under torch.optim that are not optimizers.
NOT_OPTIMIZERS = frozenset({"lr_scheduler", "swa_utils", "Optimizer", "optimizer"})


def builds_optimizer(name: str) -> bool:
    """Whether a call of this qualified name builds something of torch.optim (not a scheduler)."""
    return name.startswith(OPTIMIZER_MODULE + ".") and not name.startswith("torch.optim.lr_scheduler")


SAVE = frozenset({"torch.save"})
# what writes a whole object with pickle: a wrapped model in it needs a process group to be loaded again
PICKLE_DUMPS = frozenset(
    f"{module}.{name}" for module in ("pickle", "dill", "cloudpickle", "joblib") for name in ("dump", "dumps")
)
LOAD = frozenset({"torch.load"})

NN_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
# A model compiled or exported for inference: of the module itself, never of its DDP wrapper.
EXPORT_MODEL = frozenset({"torch.jit.script", "torch.jit.trace", "torch.onnx.export"})
# What writes such an export (``torch.jit.save(scripted, path)``; ``scripted.save(path)`` on what
# ``torch.jit.script``/``trace`` made; a Hugging Face model's or tokenizer's ``save_pretrained(path)``).
EXPORT_WRITES = frozenset({"torch.onnx.export", "torch.jit.save"})
COMPILED_FOR_EXPORT = frozenset({"torch.jit.script", "torch.jit.trace"})
# ``data_parallel(module, inputs, device_ids)``: one forward of ``module`` split over the GPUs listed.
DATA_PARALLEL_FUNCTION = frozenset({"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"})

# A call to any of these means the script already runs distributed (or spawns
# its own workers, or hands training to a library that does): ddpify leaves it
# alone. Imports alone do not count: scripts import Lightning for a seed helper.
DISTRIBUTED_CALLS = (
    "torch.distributed.init_process_group",
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "accelerate.Accelerator",
    "lightning.Trainer",
    "lightning.Fabric",
    "lightning.pytorch.Trainer",
    "lightning.fabric.Fabric",
    "pytorch_lightning.Trainer",
    "deepspeed.initialize",
    "horovod.torch.init",
)

# Lightning's trainer starts its own processes and process group, and runs the backward passes of a
# ``LightningModule`` itself: a program that trains only through it is distributed already.
LIGHTNING_TRAINERS = ("lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer")
LIGHTNING_MODULES = frozenset(
    {"lightning.LightningModule", "lightning.pytorch.LightningModule", "pytorch_lightning.LightningModule"}
)

# Methods that return the module itself, so ``m2 = m.to(device)`` is still the model.
MODULE_CHAINING_METHODS = frozenset(
    {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "eval", "requires_grad_", "type", "apply"}
)

# Attributes that behave the same on a DistributedDataParallel wrapper as on the
# module it wraps. Every other attribute (state_dict, custom methods, submodules)
# must be reached through ``.module``: also the named ones (the wrapper prefixes
# every name with ``module.``, so ``n in other.state_dict()`` no longer matches)
# and ``children()`` (the wrapper's one child is the module itself).
WRAPPER_SAFE_ATTRIBUTES = frozenset(
    {
        "forward",
        "parameters",
        "buffers",
        "modules",
        "train",
        "eval",
        "training",
        "zero_grad",
        "to",
        "cuda",
        "cpu",
        "float",
        "double",
        "half",
        "bfloat16",
        "type",
        "apply",
        "requires_grad_",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "module",
        "no_sync",
    }
)

# The parameters of a module, as the optimizer sees them.
PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# ``nn.Parameter(tensor)``: a module field that its ``parameters()`` yields
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# Layers of torch.nn that hold no parameters: a forward that skips one leaves no gradient missing.
PARAMETER_FREE_LAYERS = frozenset(
    f"torch.nn.{name}"
    for name in [
        "Identity",
        "Flatten",
        "Unflatten",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "FeatureAlphaDropout",
        "ReLU",
        "ReLU6",
        "LeakyReLU",
        "ELU",
        "SELU",
        "CELU",
        "GELU",
        "SiLU",
        "Mish",
        "Sigmoid",
        "LogSigmoid",
        "Tanh",
        "Hardtanh",
        "Hardswish",
        "Hardsigmoid",
        "Hardshrink",
        "Softshrink",
        "Tanhshrink",
        "Threshold",
        "Softmax",
        "Softmax2d",
        "LogSoftmax",
        "Softmin",
        "Softplus",
        "Softsign",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "LPPool1d",
        "LPPool2d",
        "MaxUnpool1d",
        "MaxUnpool2d",
        "MaxUnpool3d",
        "Upsample",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "PixelShuffle",
        "PixelUnshuffle",
        "ChannelShuffle",
        "ZeroPad1d",
        "ZeroPad2d",
        "ZeroPad3d",
        "ConstantPad1d",
        "ConstantPad2d",
        "ConstantPad3d",
        "ReflectionPad1d",
        "ReflectionPad2d",
        "ReflectionPad3d",
        "ReplicationPad1d",
        "ReplicationPad2d",
        "ReplicationPad3d",
        "CircularPad1d",
        "CircularPad2d",
        "CircularPad3d",
        "CosineSimilarity",
        "PairwiseDistance",
    ]
)
# Methods that iterate over a module's submodules (itself included, for ``modules``).
SUBMODULE_METHODS = frozenset({"modules", "named_modules", "children", "named_children"})

NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})
# A gradient computed by hand, given back rather than accumulated in ``.grad``.
AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})

SET_DEVICE = frozenset({"torch.cuda.set_device"})

# Progress bars: disabled on every rank but 0 with ``disable=``.
PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.trange", "tqdm.auto.tqdm", "tqdm.auto.trange", "tqdm.notebook.tqdm"})

# Calls that write output once per call: run on global rank 0 only.
LOGGING_FUNCTIONS = frozenset(
    f"logging.{level}" for level in ("debug", "info", "warning", "warn", "error", "critical", "exception", "log")
)
LOGGER_FACTORIES = frozenset({"logging.getLogger"})
LOGGER_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})
OUTPUT_FUNCTIONS = frozenset(
    {
        "matplotlib.pyplot.savefig",
        "matplotlib.pyplot.show",
        # IPython's display (a notebook made a script, or a script that imports it): prints outside a kernel.
        "IPython.display.display",
        "IPython.core.display_functions.display",
        "torchvision.utils.save_image",
        "numpy.save",
        "numpy.savetxt",
        "numpy.savez",
        "numpy.savez_compressed",
        # images, video and sound written by their libraries
        "imageio.imwrite",
        "imageio.imsave",
        "imageio.mimwrite",
        "imageio.mimsave",
        "imageio.v2.imwrite",
        "imageio.v2.mimwrite",
        "imageio.v3.imwrite",
        "cv2.imwrite",
        "skimage.io.imsave",
        "soundfile.write",
        "scipy.io.wavfile.write",
        "scipy.io.savemat",
        "torchaudio.save",
        "librosa.output.write_wav",
        "json.dump",
        "pickle.dump",
        "tqdm.tqdm.write",
        "tqdm.auto.tqdm.write",
    }
)
# Progress lines written to the terminal by hand.
TERMINAL_OUTPUT = frozenset({"sys.stdout.write", "sys.stdout.flush", "sys.stderr.write", "sys.stderr.flush"})
# fig.savefig(...) on any figure, df.to_csv(path), Path(...).write_text(...)
OUTPUT_METHODS = frozenset({"savefig", "to_csv", "to_pickle", "to_parquet", "write_text", "write_bytes"})
# What makes an object whose ``.save(path)`` writes a file: a PIL image (``Image.fromarray(grid).save("samples.png")``),
# a matplotlib animation (``FuncAnimation(fig, draw, frames=n).save("chain.gif")``).
PIL_IMAGES = frozenset(
    {
        "PIL.Image.fromarray",
        "PIL.Image.open",
        "PIL.Image.new",
        "torchvision.transforms.functional.to_pil_image",
        "matplotlib.animation.FuncAnimation",
        "matplotlib.animation.ArtistAnimation",
    }
)
# Transform objects whose call makes a PIL image (``ToPILImage()(grid).save("samples.png")``).
PIL_TRANSFORMS = frozenset({"torchvision.transforms.ToPILImage", "torchvision.transforms.transforms.ToPILImage"})
# Experiment trackers: created on rank 0 only (None elsewhere), every use on rank 0 only.
TRACKER_FACTORIES = frozenset(
    {
        "torch.utils.tensorboard.SummaryWriter",
        "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter",
        "wandb.init",
        "visdom.Visdom",
        "tensorboard_logger.Logger",
        "tensorflow.summary.FileWriter",  # TensorFlow 1's event files
        "tensorflow.summary.create_file_writer",
    }
)
# module-level calls such as wandb.log(...), or tensorboard_logger's configure(...) and log_value(...)
TRACKER_MODULES = ("wandb.", "tensorboard_logger.")

MAKEDIRS = frozenset({"os.makedirs", "os.mkdir"})
# Logging handlers that open a file when built: only rank 0 may write it.
LOG_FILE_HANDLERS = frozenset(
    {
        "logging.FileHandler",
        "logging.handlers.RotatingFileHandler",
        "logging.handlers.TimedRotatingFileHandler",
        "logging.handlers.WatchedFileHandler",
    }
)
