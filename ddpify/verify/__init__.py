"""Prove that a training script really trains in data-parallel under torchrun.

A script can run to completion under ``torchrun`` and still be wrong: ranks
that drift apart, every rank reading the whole dataset, N copies of a
checkpoint, a hang at exit. ``verify()`` runs the script unchanged under
``torchrun --standalone --nproc_per_node=N`` with an in-rank probe
(``ddpify.verify.probe``: optimizer-step, DataLoader, ``torch.save``,
process-group and ``DistributedDataParallel`` hooks installed from outside
the script), collects one JSON
record per rank and judges the run (``ddpify.verify.checks``)::

    report = verify(Path("train_ddp.py"), nproc=2, max_steps=5)
    print(report.format_table())
    assert report.ok

Layout: ``launcher`` starts processes and enforces the timeout, ``probe``
runs inside each rank (with ``fingerprints``, digests of batches and
parameters, and ``ownership``, which parameters DDP averages), ``protocol``
is what the two sides agree on, ``checks`` turns records into ``Check``
results (with ``failures``, how each rank ended) and ``report`` holds what
is returned. Only the probe's modules import torch; ``verify()`` needs torch
installed in the interpreter it runs in, which is the one the ranks use.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpify.verify.checks import CHECK_NAMES
    from ddpify.verify.report import Check, RankReport, VerifyReport

__all__ = ["CHECK_NAMES", "Check", "RankReport", "VerifyReport", "verify"]

# Imported when first asked for: every rank imports this package on its way to
# the probe, which needs none of the parent's side (checks, launcher, report).
_EXPORTS = {
    "CHECK_NAMES": "ddpify.verify.checks",
    "Check": "ddpify.verify.report",
    "RankReport": "ddpify.verify.report",
    "VerifyReport": "ddpify.verify.report",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def verify(
    script: Path,
    *,
    nproc: int = 2,
    script_args: Sequence[str] = (),
    timeout: float = 120.0,
    max_steps: int | None = None,
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> VerifyReport:
    """Run ``script`` on ``nproc`` ranks and check that it trains in data-parallel.

    ``script_args`` go to the script as its command line; ``max_steps`` stops
    every rank cleanly right after that many steps of any one optimizer;
    ``timeout`` (seconds) bounds the whole run, after which the ranks still
    running are reported as hung and killed. The script runs in ``workdir``
    (default: its own folder), so relative checkpoint paths land there.
    ``env`` adds environment variables for the ranks, e.g.
    ``{"CUDA_VISIBLE_DEVICES": ""}`` to verify on CPU (Gloo) on a GPU machine.

    Whatever the script does is reported, never raised. Raises ``ValueError``
    for arguments that cannot describe a data-parallel run,
    ``FileNotFoundError`` for a missing script and ``ModuleNotFoundError``
    when torch is not installed.
    """
    if nproc < 2:
        raise ValueError(f"nproc must be at least 2 to verify data parallelism, got {nproc}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    script = Path(script).resolve()
    if not script.is_file():
        raise FileNotFoundError(f"no such script: {script}")
    if importlib.util.find_spec("torch") is None:
        raise ModuleNotFoundError(f"verifying needs torch in {sys.executable}: pip install 'ddpify[run]'", name="torch")
    from ddpify.verify.checks import evaluate
    from ddpify.verify.launcher import run_under_torchrun

    outcome = run_under_torchrun(
        script,
        nproc=nproc,
        script_args=tuple(map(str, script_args)),
        timeout=timeout,
        max_steps=max_steps,
        workdir=Path(workdir).resolve() if workdir is not None else script.parent,
        env=env,
    )
    return evaluate(outcome)
