"""Run a training script and note the weights of every module that ran, rank by rank.

``python record_weights.py OUT_DIR SCRIPT [ARGS...]`` runs SCRIPT as ``python
SCRIPT ARGS...`` would, after seeding torch's RNG with the rank, so that weights
drawn without a seed surely differ between ranks. Each module that runs a
forward is noted in the order of its first forward; at exit a digest of each
one's parameters goes to ``OUT_DIR/weights-<RANK>.json``. Every model of a
data-parallel run, trained by an optimizer or following one (a momentum
encoder, an EMA copy), must end with the same parameters on every rank.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook
from torch.nn.parallel import DistributedDataParallel

out_dir, script, *arguments = sys.argv[1:]
ran: dict[int, torch.nn.Module] = {}  # by id, in the order of first forward


def _note(module: torch.nn.Module, inputs: Any, output: Any) -> None:
    if not isinstance(module, DistributedDataParallel) and list(module.parameters(recurse=False)):
        ran.setdefault(id(module), module)


def _write() -> None:
    digests = []
    for module in ran.values():
        data = b"".join(p.detach().cpu().numpy().tobytes() for p in module.parameters(recurse=False))
        digests.append(hashlib.sha1(data).hexdigest())
    Path(out_dir, f"weights-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(digests))


torch.manual_seed(int(os.environ.get("RANK", "0")))
register_module_forward_hook(_note)
atexit.register(_write)
sys.argv = [script, *arguments]
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
