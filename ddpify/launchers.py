"""The commands that start a generated script on one node, on several, on SLURM and on Kubernetes.

A generated script runs unchanged under every launcher (see docs/cluster.md):
``torchrun`` on one node, ``torchrun`` on each of several nodes meeting through
a c10d rendezvous, ``srun torchrun`` inside a SLURM batch job, and ``torchrun``
in the pods of a Kubeflow ``PyTorchJob``. This module writes those command
lines, batch scripts and manifests for a given script and its arguments; it
does no I/O and prints nothing, so the CLI decides where they go::

    torchrun_commands("train_ddp.py", ["--epochs", "10"])["multi_node"]
    # 'torchrun --nnodes=NUM_NODES --nproc_per_node=gpu --rdzv-backend=c10d
    #  --rdzv-endpoint=HEAD_NODE:29500 --rdzv-id=JOB_ID train_ddp.py --epochs 10'

    sbatch_script("train_ddp.py", ["--epochs", "10"], nodes=2, gpus_per_node=8)
    # '#!/bin/bash' and '#SBATCH' lines, then 'srun torchrun ... train_ddp.py --epochs 10'

    pytorchjob_manifest("train_ddp.py", ["--epochs", "10"], nodes=2, gpus_per_node=8)
    # 'apiVersion: kubeflow.org/v1', 'kind: PyTorchJob', a Master and a Worker running
    # 'torchrun train_ddp.py --epochs 10', IMAGE and NAMESPACE left for the user

Every argument is shell-quoted (a YAML string in a manifest, each ``$`` doubled
there, since Kubernetes expands ``$(VAR)`` in a container's command), so a path
or a value with spaces or ``$`` reaches the script as one word, as given.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePath

__all__ = [
    "HEAD_NODE",
    "IMAGE",
    "JOB_ID",
    "NAMESPACE",
    "NUM_NODES",
    "PYTORCHJOB_PORT",
    "RDZV_PORT",
    "pytorchjob_manifest",
    "sbatch_script",
    "torchrun_commands",
]

# Placeholders for the user to fill in: in the multi-node command, and in the
# PyTorchJob manifest (where capitals are no valid image or namespace, so one
# left unfilled is refused rather than pulled or created).
NUM_NODES = "NUM_NODES"
HEAD_NODE = "HEAD_NODE"
JOB_ID = "JOB_ID"
IMAGE = "IMAGE"
NAMESPACE = "NAMESPACE"

# The training operator's default port of the master's process group store (PyTorchJobDefaultPort).
PYTORCHJOB_PORT = 23456

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
    python_path: str | None = None,
) -> str:
    """A SLURM batch script that runs ``script`` on ``nodes`` nodes of ``gpus_per_node`` GPUs.

    One ``srun`` task per node starts ``torchrun``, which starts one worker per
    GPU; the agents meet through a c10d rendezvous on the first node of the
    allocation, on ``rdzv_port``. Submit it with ``sbatch``. ``job_name``
    defaults to the script's name without its suffix (whitespace becomes
    ``_``); ``time`` (``HH:MM:SS``, ``D-HH:MM``, ...) and ``partition`` are left
    to the cluster's defaults when not given; ``cpus_per_task`` are the CPUs of
    a node's torchrun task and its workers, ``4 * gpus_per_node`` unless given;
    ``python_path`` is a folder put first on ``PYTHONPATH`` (where the program's
    modules are when some lie above the script's folder).

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
        *_python_path_lines(python_path),
        launch,
    ]
    return "\n".join(lines) + "\n"


def _python_path_lines(folder: str | None) -> list[str]:
    if folder is None:
        return []
    return [
        "# The program's modules: some lie above the script's folder, where Python does not look by itself.",
        f'export PYTHONPATH={shlex.quote(folder)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        "",
    ]


def pytorchjob_manifest(
    script: str,
    script_args: Sequence[str] = (),
    *,
    nodes: int,
    gpus_per_node: int,
    name: str | None = None,
    image: str = IMAGE,
    namespace: str = NAMESPACE,
    python_path: str | None = None,
) -> str:
    """A Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``) that runs ``script`` on ``nodes`` pods of ``gpus_per_node`` GPUs.

    One ``Master`` pod and ``nodes - 1`` ``Worker`` pods each run ``torchrun
    script script_args...``; ``nprocPerNode`` makes the training operator set
    the ``PET_*`` variables (``PET_NNODES``, ``PET_NPROC_PER_NODE``,
    ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``) from which
    torchrun takes its options, so the command needs none. Each pod asks for
    ``gpus_per_node`` GPUs and gets a memory-backed ``/dev/shm`` for DataLoader
    workers. ``name`` defaults to the script's name made a DNS label
    (``train_ddp.py``: ``train-ddp``); ``image`` and ``namespace`` default to
    the placeholders :data:`IMAGE` and :data:`NAMESPACE`, marked in the text.
    ``python_path`` is a folder (in the image) set as the containers' ``PYTHONPATH``.

    Raises ``ValueError`` for a count below 1 or a name that is no DNS label
    (lower-case letters, digits and ``-``, starting with a letter, at most 63).
    """
    for label, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if value < 1:
            raise ValueError(f"{label} must be at least 1, got {value}")
    if name is None:
        name = _dns_label(PurePath(script).stem)
    if not _DNS_LABEL.fullmatch(name):
        raise ValueError(f"name must be a DNS label (a-z, 0-9 and '-', starting with a letter), got {name!r}")
    command = "".join(
        f"\n                - {_yaml_string(_kubernetes_literal(word))}" for word in ["torchrun", script, *script_args]
    )

    environment = (
        f"\n              env:\n                - name: PYTHONPATH\n                  value: {_yaml_string(_kubernetes_literal(python_path))}"
        if python_path is not None
        else ""
    )

    def replica(role: str, replicas: int) -> str:
        return f"""\
    {role}:
      replicas: {replicas}
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            sidecar.istio.io/inject: "false"  # a sidecar would keep the pod, and the job, from ending
        spec:
          containers:
            - name: pytorch  # the operator looks for the container of this name
              image: {_yaml_string(image)}{"  # placeholder: an image with torch and the script" if image == IMAGE else ""}
              command:{command}{environment}
              ports:
                - name: pytorchjob-port
                  containerPort: {PYTORCHJOB_PORT}
              resources:
                limits:
                  nvidia.com/gpu: {gpus_per_node}
              volumeMounts:
                - name: dshm
                  mountPath: /dev/shm
          volumes:
            - name: dshm  # DataLoader workers share batches through /dev/shm, 64 MiB in a container by default
              emptyDir:
                medium: Memory
"""

    unfilled = [placeholder for placeholder, value in ((IMAGE, image), (NAMESPACE, namespace)) if value == placeholder]
    todo = f"fill in {' and '.join(unfilled)} (marked below), then" if unfilled else "submit it with"
    header = [
        f"# {nodes} node(s) x {gpus_per_node} GPU(s): a PyTorchJob for the Kubeflow training operator.",
        f"# To run it, {todo}: kubectl apply -f FILE",
        f"# The image must hold {_yaml_string(script)} (and the local modules it imports) under its working folder.",
        "# Each pod runs torchrun, which takes --nnodes, --nproc-per-node, --node-rank, --master-addr",
        "# and --master-port from the PET_* variables that the operator sets from this manifest.",
    ]
    namespace_line = f"  namespace: {_yaml_string(namespace)}" + ("  # placeholder" if namespace == NAMESPACE else "")
    body = [
        "apiVersion: kubeflow.org/v1",
        "kind: PyTorchJob",
        "metadata:",
        f"  name: {name}",
        namespace_line,
        "spec:",
        f"  nprocPerNode: {_yaml_string(str(gpus_per_node))}",
        "  pytorchReplicaSpecs:",
    ]
    replicas = replica("Master", 1) + (replica("Worker", nodes - 1) if nodes > 1 else "")
    return "\n".join([*header, *body]) + "\n" + replicas


_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def _dns_label(stem: str) -> str:
    """``stem`` made a DNS-1035 label, as Kubernetes names objects: ``train_DDP v2`` -> ``train-ddp-v2``."""
    label = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    label = re.sub(r"^[^a-z]+", "", label)[:63].rstrip("-")
    return label or "ddp"


def _kubernetes_literal(word: str) -> str:
    """``word`` as a container's command keeps it: Kubernetes replaces ``$(VAR)`` there with the
    variable's value and ``$$`` with ``$``, so each ``$`` is written twice."""
    return word.replace("$", "$$")


def _yaml_string(text: str) -> str:
    """``text`` as a double-quoted YAML scalar: always a string (never a number, ``yes`` or ``null``),
    with quotes, backslashes and the characters YAML does not keep as they are written as escapes."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif _needs_escape(ord(char)):
            out.append(f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# Line breaks a YAML reader folds (NEL, LS, PS), a BOM it drops, and the non-characters it refuses.
_SPECIAL = frozenset({0x85, 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF})


def _needs_escape(code: int) -> bool:
    """Control characters, C1 controls, lone surrogates and :data:`_SPECIAL`."""
    return code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF or code in _SPECIAL
