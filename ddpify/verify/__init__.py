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
runs inside each rank, ``protocol`` is what the two agree on, ``checks``
turns records into ``Check`` results and ``report`` holds what is returned.
Only ``probe`` imports torch; ``verify()`` needs torch installed in the
interpreter it runs in, which is the one the ranks use.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddpify.verify.checks import CHECK_NAMES, evaluate
from ddpify.verify.launcher import run_under_torchrun
from ddpify.verify.report import Check, RankReport, VerifyReport

__all__ = ["CHECK_NAMES", "Check", "RankReport", "VerifyReport", "verify"]


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
