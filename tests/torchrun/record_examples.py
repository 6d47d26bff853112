"""Run a training script and note which examples it trains on, rank by rank.

``python record_examples.py OUT_DIR POSITION SCRIPT [ARGS...]`` runs SCRIPT as
``python SCRIPT ARGS...`` would, with the forward of ``DistributedDataParallel``
hooked: every call made with gradients on (a training step, not an evaluation
under ``no_grad``) to the first wrapped model adds a digest of each row of its
positional argument POSITION to a list, in order. At exit the list goes to
``OUT_DIR/rows-<RANK>.json``. The examples are told apart by their bytes, so
the scripts it serves draw distinct random rows; every generator is seeded
with 0 first, so that the rows a script draws are the same in every run and on
every rank. POSITION ``0/tokens`` notes each element of the argument instead of
each row: the token ids of a language model's windows, one id per position
of a text whose every token is distinct.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy
import torch
from torch.nn.parallel import DistributedDataParallel

out_dir, position, script, *arguments = sys.argv[1:]
rows: list[str] = []
first: list[int] = []  # id of the first wrapped model that trains
_forward = DistributedDataParallel.forward


def _recording_forward(self: DistributedDataParallel, *inputs: Any, **kwargs: Any) -> Any:
    if torch.is_grad_enabled() and (not first or first[0] == id(self)):
        first[:] = [id(self)]
        index, _, unit = position.partition("/")
        batch = inputs[int(index)].detach().cpu()
        if unit == "tokens":
            rows.extend(str(token) for token in batch.flatten().tolist())
        else:
            rows.extend(hashlib.sha1(row.numpy().tobytes()).hexdigest() for row in batch)
    return _forward(self, *inputs, **kwargs)


def _write() -> None:
    Path(out_dir, f"rows-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(rows))


random.seed(0)
numpy.random.seed(0)
torch.manual_seed(0)
DistributedDataParallel.forward = _recording_forward  # type: ignore[method-assign]
atexit.register(_write)
sys.argv = [script, *arguments]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
