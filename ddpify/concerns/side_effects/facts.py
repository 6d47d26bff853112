"""The side_effects concern's codes and facts."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.diagnostics import Code, Severity

TRACKER_BEFORE_SETUP = Code(
    "DDP502",
    Severity.ERROR,
    "side_effects",
    "an experiment tracker is created before the process group exists (at import time): every rank would log",
    "create it inside the function that trains (after the process group is set up)",
)
OUTPUT_RUNS_WORK = Code(
    "DDP501",
    Severity.WARNING,
    "side_effects",
    "an output statement that also runs the model or the script's own functions stays on every rank",
    "compute the value into a variable first, then output it",
)
FILE_USE_NOT_GATED = Code(
    "DDP503",
    Severity.ERROR,
    "side_effects",
    "a file opened for writing without `with` is used where it cannot be put on rank 0: every rank would write it",
    "write it inside `with open(...) as f:`, or use the file object only in statements of their own",
)
TRACKER_USED_ELSEWHERE = Code(
    "DDP504",
    Severity.ERROR,
    "side_effects",
    "an experiment tracker made on rank 0 only is used where every rank runs: it is None on the others",
    "use it only in statements of their own (`writer.add_scalar(...)`), or under `if writer is not None:`",
)
MODULE_OUTPUT_KEPT = Code(
    "DDP505",
    Severity.WARNING,
    "side_effects",
    "terminal output in another module of the program stays on every rank: one output file cannot hold that module",
    "convert with --in-place or -o DIR/ to put it on rank 0 too",
)
CODES = (OUTPUT_RUNS_WORK, TRACKER_BEFORE_SETUP, FILE_USE_NOT_GATED, TRACKER_USED_ELSEWHERE, MODULE_OUTPUT_KEPT)

# Output to the terminal: where the program's other modules cannot be written, it may stay on every rank.
_TERMINAL = frozenset({"print", "logging call", "terminal output"})


@dataclass(frozen=True)
class Facts:
    outputs: tuple[tuple[cst.BaseStatement, str], ...]  # (statement, what it is) safe to run on rank 0 only
    # calls inside an output statement that must still run on every rank: they are
    # computed into a variable first, e.g. the ``evaluate(...)`` in ``print(evaluate(...))``
    hoisted: tuple[cst.Call, ...]
    trackers: tuple[cst.Call, ...]  # SummaryWriter(...) / wandb.init(...) assigned to a name
    progress_bars: tuple[cst.Call, ...]  # tqdm(...) calls without ``disable=``
    makedirs: tuple[cst.Call, ...]  # os.makedirs(...) / os.mkdir(...) without ``exist_ok=``
    # ``with open(path, "w")`` around training (which must run on every rank): the others write to os.devnull
    devnull_opens: tuple[cst.Call, ...] = ()
    # output in a function that runs both before the process group exists and after: rank 0 once it exists
    ungrouped: tuple[tuple[cst.BaseStatement, str], ...] = ()
    log_files: tuple[cst.Arg, ...] = ()  # logging.FileHandler(path): the other ranks log to os.devnull
    # ``writer.log_dir`` read where every rank runs: a plain value of the tracker, rank 0's on every rank
    tracker_values: tuple[cst.Attribute, ...] = ()
    # outputs whose file the program reads again later (``to_csv(path)``, then ``read_csv(path)``)
    read_back: tuple[cst.BaseStatement, ...] = ()
    # ``os.makedirs(run_dir, exist_ok=False)``: made on rank 0 (which fails where it exists), the others wait
    fresh_folders: tuple[cst.SimpleStatementLine, ...] = ()
    # ``input(prompt)`` where the process group exists: asked on rank 0, its answer given to every rank
    prompts: tuple[cst.Call, ...] = ()
    # ``wandb.init(...)`` (rank 0's) where every rank reads ``wandb.config``: the others get a run that logs
    # nothing, with rank 0's settings (a sweep's among them)
    shared_configs: tuple[cst.Call, ...] = ()
    # ``if os.path.isdir(d): shutil.rmtree(d)``: removed on rank 0, the others wait (a second removal fails, or
    # takes what rank 0 has made since)
    removals: tuple[cst.SimpleStatementLine, ...] = ()
