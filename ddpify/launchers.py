"""The commands that start a generated script on one node, on several, and on SLURM.

A generated script runs unchanged under every launcher (see docs/cluster.md):
``torchrun`` on one node, ``torchrun`` on each of several nodes meeting through
a c10d rendezvous, and ``srun torchrun`` inside a SLURM batch job. This module
writes those command lines for a given script and its arguments; it does no
I/O and prints nothing, so the CLI decides where they go::

    torchrun_commands("train_ddp.py", ["--epochs", "10"])["multi_node"]
    # 'torchrun --nnodes=NUM_NODES --nproc_per_node=gpu --rdzv-backend=c10d
    #  --rdzv-endpoint=HEAD_NODE:29500 --rdzv-id=JOB_ID train_ddp.py --epochs 10'

    sbatch_script("train_ddp.py", ["--epochs", "10"], nodes=2, gpus_per_node=8)
    # '#!/bin/bash' and '#SBATCH' lines, then 'srun torchrun ... train_ddp.py --epochs 10'

Every argument is shell-quoted, so a path or a value with spaces or ``$`` reaches
the script as one word, as given.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import PurePath

__all__ = ["HEAD_NODE", "JOB_ID", "NUM_NODES", "RDZV_PORT", "sbatch_script", "torchrun_commands"]

# Placeholders in the multi-node command, for the user to fill in.
NUM_NODES = "NUM_NODES"
HEAD_NODE = "HEAD_NODE"
JOB_ID = "JOB_ID"

# The rendezvous port of the PyTorch SLURM examples; torchrun's own c10d default is 29400.
RDZV_PORT = 29500

# CPUs that the one torchrun task of a node gets per GPU when the caller does not
# say: the worker process driving the GPU plus a few DataLoader workers.
_CPUS_PER_GPU = 4


def torchrun_commands(script: str, script_args: Sequence[str] = ()) -> dict[str, str]:
    """The ``torchrun`` command lines that start ``script`` with ``script_args``.

    ``"single_node"``: every GPU of this machine, with a private rendezvous on a
    free port (``--standalone``). ``"multi_node"``: the command to run on each
    node, the same everywhere; ``NUM_NODES``, ``HEAD_NODE`` (a host every node
    can reach, typically the first) and ``JOB_ID`` (any string shared by the
    nodes of one run) are placeholders in capitals for the user to replace.
    """
    target = [script, *script_args]
    single = ["torchrun", "--standalone", "--nproc_per_node=gpu", *target]
    multi = [
        "torchrun",
        f"--nnodes={NUM_NODES}",
        "--nproc_per_node=gpu",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={HEAD_NODE}:{RDZV_PORT}",
        f"--rdzv-id={JOB_ID}",
        *target,
    ]
    return {"single_node": shlex.join(single), "multi_node": shlex.join(multi)}


def sbatch_script(
    script: str,
    script_args: Sequence[str] = (),
    *,
    nodes: int,
    gpus_per_node: int,
    job_name: str | None = None,
    time: str | None = None,
    partition: str | None = None,
    cpus_per_task: int | None = None,
    rdzv_port: int = RDZV_PORT,
) -> str:
    """A SLURM batch script that runs ``script`` on ``nodes`` nodes of ``gpus_per_node`` GPUs.

    One ``srun`` task per node starts ``torchrun``, which starts one worker per
    GPU; the agents meet through a c10d rendezvous on the first node of the
    allocation, on ``rdzv_port``. Submit it with ``sbatch``. ``job_name``
    defaults to the script's name without its suffix (whitespace becomes
    ``_``); ``time`` (``HH:MM:SS``, ``D-HH:MM``, ...) and ``partition`` are left
    to the cluster's defaults when not given; ``cpus_per_task`` are the CPUs of
    a node's torchrun task and its workers, ``4 * gpus_per_node`` unless given.

    Raises ``ValueError`` for a count below 1, a port out of range, or a
    directive value that is empty or contains whitespace (which would end the
    ``#SBATCH`` line early or start another one).
    """
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node), ("cpus_per_task", cpus_per_task)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 0 < rdzv_port < 65536:
        raise ValueError(f"rdzv_port must be between 1 and 65535, got {rdzv_port}")
    if job_name is None:
        job_name = "".join("_" if c.isspace() else c for c in PurePath(script).stem) or "ddp"
    for name, directive in (("job_name", job_name), ("time", time), ("partition", partition)):
        if directive is not None and (not directive or any(c.isspace() for c in directive)):
            raise ValueError(f"{name} must be non-empty and without whitespace, got {directive!r}")
    cpus = _CPUS_PER_GPU * gpus_per_node if cpus_per_task is None else cpus_per_task

    directives = [
        f"--job-name={job_name}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={gpus_per_node}",
        f"--cpus-per-task={cpus}",
    ]
    if time is not None:
        directives.append(f"--time={time}")
    if partition is not None:
        directives.append(f"--partition={partition}")

    # The variables are expanded by the shell (double quotes), the script and its arguments are not.
    launch = " \\\n    ".join(
        [
            "srun torchrun",
            '--nnodes "$SLURM_NNODES"',
            f"--nproc_per_node {gpus_per_node}",
            '--rdzv-id "$SLURM_JOB_ID"',
            "--rdzv-backend c10d",
            f'--rdzv-endpoint "$head_node:{rdzv_port}"',
            shlex.join([script, *script_args]),
        ]
    )

    lines = [
        "#!/bin/bash",
        f"# {nodes} node(s) x {gpus_per_node} GPU(s), one torchrun per node. Submit with: sbatch FILE",
        *(f"#SBATCH {directive}" for directive in directives),
        "",
        "set -euo pipefail",
        "",
        "# One task per node: torchrun, which starts one worker per GPU of its node.",
        "# Since Slurm 22.05, srun does not inherit --cpus-per-task from sbatch.",
        'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
        "",
        "# The first node of the allocation hosts the rendezvous (c10d) of the torchrun agents.",
        'nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )',
        "head_node=${nodes[0]}",
        "",
        launch,
    ]
    return "\n".join(lines) + "\n"
