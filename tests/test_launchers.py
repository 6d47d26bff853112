"""ddpify.launchers: the commands it writes, and a generated script run under each launcher.

The fast tests read the text of the commands. The ``torchrun``-marked ones
convert a small single-GPU script with ``ddpify.convert`` and launch the
result the ways a cluster would, on CPU (Gloo), each rank under the
verification probe (``ddpify.verify.probe``); the probe's records are judged by
``ddpify.verify.checks.evaluate``, as ``ddpify.verify.verify()`` judges a
``torchrun --standalone`` run:

* the multi-node command of ``torchrun_commands``, run twice on this machine as
  two "nodes" that meet through a c10d rendezvous;
* ``srun`` without torchrun: two plain processes numbered by SLURM variables only;
* the emitted sbatch script under ``bash``, with stand-ins for ``srun`` and
  ``scontrol`` (``tests/launch_stubs``) that run each node's task on this machine;
* the container command of the emitted PyTorchJob manifest, run as two "pods" with
  the environment the Kubeflow training operator gives them.

Each launch costs about ten seconds of torch start-up, so there are four, and
each asserts everything it shows. Every process gets a session of its own and
a deadline; whatever is left at the deadline, or after a failure, is killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ddpify import Status, convert
from ddpify.launchers import (
    IMAGE,
    NAMESPACE,
    PYTORCHJOB_PORT,
    RDZV_PORT,
    pytorchjob_manifest,
    sbatch_script,
    torchrun_commands,
)
from ddpify.verify import CHECK_NAMES, VerifyReport
from ddpify.verify.checks import evaluate
from ddpify.verify.launcher import RunOutcome, probe_environment, read_records

STUBS = Path(__file__).parent / "launch_stubs"
PROBED = STUBS / "probed.py"  # runs a script under the probe, for launchers that take a script path
TORCHRUN = Path(sys.executable).parent / "torchrun"
NPROC = 2  # every launch runs two ranks
TIMEOUT_S = 180.0
GRACE_S = 5.0

TRAIN = """\
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--out", default="model.pt")
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(32, 4)
y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(32, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.MSELoss()

for epoch in range(args.epochs):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

torch.save(model.state_dict(), args.out)
"""

# Variables of an enclosing launcher (a CI job inside SLURM, a shell that ran
# torchrun) that would tell the launched processes who they are.
_LAUNCHER_PREFIXES = ("SLURM_", "SRUN_", "PET_", "TORCHELASTIC_")
_LAUNCHER_VARIABLES = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"}
)


# -- the text of the commands ---------------------------------------------------


def test_torchrun_commands_quote_the_script_and_its_arguments() -> None:
    commands = torchrun_commands("my jobs/train_ddp.py", ["--name", "run 1", "--lr=1e-3", "$HOME", "it's"])

    assert set(commands) == {"single_node", "multi_node"}
    target = ["my jobs/train_ddp.py", "--name", "run 1", "--lr=1e-3", "$HOME", "it's"]
    assert shlex.split(commands["single_node"]) == ["torchrun", "--standalone", "--nproc_per_node=gpu", *target]
    assert shlex.split(commands["multi_node"]) == [
        "torchrun",
        "--nnodes=NUM_NODES",
        "--nproc_per_node=gpu",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=HEAD_NODE:{RDZV_PORT}",
        "--rdzv-id=JOB_ID",
        *target,
    ]
    assert torchrun_commands("train.py", [])["single_node"] == "torchrun --standalone --nproc_per_node=gpu train.py"


def test_sbatch_script_runs_one_torchrun_per_node() -> None:
    text = sbatch_script("train_ddp.py", ["--epochs", "10"], nodes=4, gpus_per_node=8, time="02:00:00", partition="gpu")

    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=train_ddp",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --time=02:00:00",
        "#SBATCH --partition=gpu",
    ]
    assert "set -euo pipefail" in lines
    assert 'nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )' in lines
    assert "head_node=${nodes[0]}" in lines
    launch = shlex.split(text[text.index("srun torchrun") :].replace("\\\n", " "))  # line continuations
    assert launch == [
        "srun",
        "torchrun",
        "--nnodes",
        "$SLURM_NNODES",
        "--nproc_per_node",
        "8",
        "--rdzv-id",
        "$SLURM_JOB_ID",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"$head_node:{RDZV_PORT}",
        "train_ddp.py",
        "--epochs",
        "10",
    ]
    assert text.endswith("--epochs 10\n")


def test_sbatch_script_leaves_optional_directives_out_and_names_the_job_after_the_script() -> None:
    text = sbatch_script("runs/my train.py", [], nodes=1, gpus_per_node=2, cpus_per_task=6, rdzv_port=6000)

    assert "#SBATCH --job-name=my_train" in text
    assert "#SBATCH --cpus-per-task=6" in text
    assert "--time" not in text and "--partition" not in text
    assert '--rdzv-endpoint "$head_node:6000"' in text
    assert text.rstrip().endswith("'runs/my train.py'")
    assert "#SBATCH --job-name=exp-7" in sbatch_script("t.py", [], nodes=1, gpus_per_node=1, job_name="exp-7")


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"nodes": 0}, "nodes must be at least 1, got 0"),
        ({"gpus_per_node": 0}, "gpus_per_node must be at least 1, got 0"),
        ({"cpus_per_task": 0}, "cpus_per_task must be at least 1, got 0"),
        ({"rdzv_port": 70000}, "rdzv_port must be between 1 and 65535, got 70000"),
        ({"job_name": "two words"}, "job_name must be non-empty and without whitespace, got 'two words'"),
        ({"time": ""}, "time must be non-empty and without whitespace, got ''"),
        ({"partition": "gpu\n#SBATCH --qos=high"}, "partition must be non-empty and without whitespace"),
    ],
)
def test_sbatch_script_refuses_what_cannot_describe_a_job(keywords: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"nodes": 2, "gpus_per_node": 4, **keywords}
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        sbatch_script("train.py", [], **arguments)  # type: ignore[arg-type]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_script_is_valid_bash() -> None:
    text = sbatch_script("my dir/train.py", ["--tag", "a b", "$(rm -rf /)", "'"], nodes=2, gpus_per_node=4)
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


# -- the PyTorchJob manifest -----------------------------------------------------

# What the Kubeflow training operator (kubeflow.org/v1) requires of a PyTorchJob, as
# its documentation and definitions state: the CRD (manifests/base/crds/
# kubeflow.org_pytorchjobs.yaml) requires spec.pytorchReplicaSpecs and, in each
# replica's pod template, spec.containers, each container with a name; its
# validating webhook (pkg/webhooks/pytorch/pytorchjob_webhook.go) wants a
# DNS-1035 name, replica types Master and Worker only, exactly one Master, at least
# one Worker when given, and in each replica a container named "pytorch" with an
# image. nprocPerNode is a string ("auto", "cpu", "gpu" or a number); the master's
# store port is the container port named "pytorchjob-port".
_STRING = {"type": "string"}
_CONTAINER = {
    "type": "object",
    "required": ["name", "image"],
    "properties": {
        "name": _STRING,
        "image": {"type": "string", "pattern": r".+"},
        "command": {"type": "array", "items": _STRING},
        "args": {"type": "array", "items": _STRING},
        "ports": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["containerPort"],
                "properties": {"name": _STRING, "containerPort": {"type": "integer", "minimum": 1, "maximum": 65535}},
            },
        },
        "resources": {
            "type": "object",
            "properties": {"limits": {"type": "object", "additionalProperties": {"type": ["integer", "string"]}}},
        },
    },
}


def _replica(minimum: int, maximum: int | None = None) -> dict[str, object]:
    replicas: dict[str, object] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        replicas["maximum"] = maximum
    return {
        "type": "object",
        "required": ["replicas", "template"],
        "properties": {
            "replicas": replicas,
            "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
            "template": {
                "type": "object",
                "required": ["spec"],
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["containers"],
                        "properties": {
                            "containers": {
                                "type": "array",
                                "items": _CONTAINER,
                                "contains": {"type": "object", "properties": {"name": {"const": "pytorch"}}},
                            }
                        },
                    }
                },
            },
        },
    }


PYTORCHJOB_SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"},
                "namespace": _STRING,
            },
        },
        "spec": {
            "type": "object",
            "required": ["pytorchReplicaSpecs"],
            "properties": {
                "nprocPerNode": {"type": "string", "pattern": r"auto|cpu|gpu|[1-9][0-9]*"},
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "required": ["Master"],
                    "properties": {"Master": _replica(1, 1), "Worker": _replica(1)},
                    "additionalProperties": False,
                },
            },
        },
    },
}

_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}


def schema_errors(value: object, schema: dict[str, object], where: str = "") -> list[str]:
    """Where ``value`` breaks ``schema``: the subset of JSON Schema that PYTORCHJOB_SCHEMA uses."""
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(isinstance(value, _TYPES[n]) and not (n == "integer" and isinstance(value, bool)) for n in names):
            return [f"{where or '/'}: {value!r} is not of type {kinds}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:  # type: ignore[operator]
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and not re.fullmatch(str(schema["pattern"]), str(value)):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if "minimum" in schema and value < schema["minimum"]:  # type: ignore[operator]
        errors.append(f"{where}: {value!r} is below {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:  # type: ignore[operator]
        errors.append(f"{where}: {value!r} is above {schema['maximum']}")
    if isinstance(value, dict):
        properties: dict[str, dict[str, object]] = schema.get("properties", {})  # type: ignore[assignment]
        errors += [f"{where}/{key}: missing" for key in schema.get("required", []) if key not in value]  # type: ignore[attr-defined]
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], f"{where}/{key}")
            elif extra is False:
                errors.append(f"{where}/{key}: not allowed")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, f"{where}/{key}")
    if isinstance(value, list):
        for index, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{where}/{index}")  # type: ignore[arg-type]
        contains = schema.get("contains")
        if contains is not None and all(schema_errors(item, contains) for item in value):  # type: ignore[arg-type]
            errors.append(f"{where}: no item matches {contains}")
    return errors


def replicas_of(job: dict[str, object]) -> dict[str, dict[str, object]]:
    return job["spec"]["pytorchReplicaSpecs"]  # type: ignore[index,no-any-return]


def container_of(replica: dict[str, object]) -> dict[str, object]:
    (container,) = replica["template"]["spec"]["containers"]  # type: ignore[index]
    return container  # type: ignore[no-any-return]


def kubernetes_expanded(word: str, variables: dict[str, str]) -> str:
    """``word`` of a container's command as Kubernetes passes it to the process: ``$(NAME)`` replaced
    by a defined variable's value, ``$$`` by ``$``; any other ``$`` kept (the rules of
    ``third_party/forked/golang/expansion`` in Kubernetes)."""
    out, index = [], 0
    while index < len(word):
        char = word[index]
        following = word[index + 1 : index + 2]
        if char == "$" and following == "$":
            out.append("$")
            index += 2
        elif char == "$" and following == "(" and (end := word.find(")", index)) != -1:
            name = word[index + 2 : end]
            out.append(variables.get(name, word[index : end + 1]))
            index = end + 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def command_run(container: dict[str, object], variables: dict[str, str] | None = None) -> list[str]:
    """The argv a pod's process gets from the container's command."""
    return [kubernetes_expanded(word, variables or {}) for word in container["command"]]  # type: ignore[attr-defined]


def test_pytorchjob_manifest_is_a_pytorchjob_of_one_master_and_the_other_nodes_as_workers() -> None:
    text = pytorchjob_manifest("jobs/train_ddp.py", ["--epochs", "10"], nodes=4, gpus_per_node=8)
    job = yaml.safe_load(text)

    assert schema_errors(job, PYTORCHJOB_SCHEMA) == []
    assert job["metadata"] == {"name": "train-ddp", "namespace": NAMESPACE}
    assert job["spec"]["nprocPerNode"] == "8"
    replicas = replicas_of(job)
    assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Master": 1, "Worker": 3}
    for spec in replicas.values():
        assert spec["restartPolicy"] == "OnFailure"
        container = container_of(spec)
        assert container["image"] == IMAGE
        # torchrun takes every option from the PET_* variables the operator sets.
        assert container["command"] == ["torchrun", "jobs/train_ddp.py", "--epochs", "10"]
        assert "args" not in container
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": PYTORCHJOB_PORT}]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}


def test_pytorchjob_manifest_of_one_node_has_a_master_alone() -> None:
    job = yaml.safe_load(pytorchjob_manifest("train_ddp.py", nodes=1, gpus_per_node=2))

    assert schema_errors(job, PYTORCHJOB_SCHEMA) == []
    assert list(replicas_of(job)) == ["Master"]
    assert container_of(replicas_of(job)["Master"])["command"] == ["torchrun", "train_ddp.py"]


def test_the_schema_finds_what_the_operator_would_refuse() -> None:
    job = yaml.safe_load(pytorchjob_manifest("train_ddp.py", nodes=2, gpus_per_node=2))
    replicas = replicas_of(job)
    replicas["Master"]["replicas"] = 2
    container_of(replicas["Worker"])["name"] = "trainer"
    del container_of(replicas["Worker"])["image"]
    replicas["Chief"] = replicas["Worker"]
    job["spec"]["nprocPerNode"] = 2
    del job["apiVersion"]

    assert sorted(schema_errors(job, PYTORCHJOB_SCHEMA)) == [
        "/apiVersion: missing",
        "/spec/nprocPerNode: 2 is not of type string",
        "/spec/pytorchReplicaSpecs/Chief: not allowed",
        "/spec/pytorchReplicaSpecs/Master/replicas: 2 is above 1",
        "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/image: missing",
        "/spec/pytorchReplicaSpecs/Worker/template/spec/containers: no item matches "
        "{'type': 'object', 'properties': {'name': {'const': 'pytorch'}}}",
    ]


def test_pytorchjob_manifest_marks_its_placeholders_and_fills_what_it_is_given() -> None:
    text = pytorchjob_manifest("train_ddp.py", nodes=2, gpus_per_node=8)
    marked = [line.strip() for line in text.splitlines() if "# placeholder" in line]
    assert marked == [
        'namespace: "NAMESPACE"  # placeholder',
        'image: "IMAGE"  # placeholder: an image with torch and the script',
        'image: "IMAGE"  # placeholder: an image with torch and the script',
    ]
    assert "fill in IMAGE and NAMESPACE (marked below), then: kubectl apply -f FILE" in text

    filled = pytorchjob_manifest(
        "train_ddp.py", nodes=1, gpus_per_node=8, name="bert-pretrain", image="registry.local/bert:1", namespace="ml"
    )
    job = yaml.safe_load(filled)
    assert "placeholder" not in filled and "fill in" not in filled
    assert job["metadata"] == {"name": "bert-pretrain", "namespace": "ml"}
    assert container_of(replicas_of(job)["Master"])["image"] == "registry.local/bert:1"


@pytest.mark.parametrize(
    ("script", "name"),
    [
        ("train_ddp.py", "train-ddp"),
        ("runs/2024 BERT_v2.py", "bert-v2"),
        ("__.py", "ddp"),
        (f"{'x' * 80}.py", "x" * 63),
    ],
)
def test_pytorchjob_is_named_after_the_script_as_a_dns_label(script: str, name: str) -> None:
    job = yaml.safe_load(pytorchjob_manifest(script, nodes=1, gpus_per_node=1))

    assert job["metadata"]["name"] == name
    assert schema_errors(job, PYTORCHJOB_SCHEMA) == []


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"nodes": 0}, "nodes must be at least 1, got 0"),
        ({"gpus_per_node": 0}, "gpus_per_node must be at least 1, got 0"),
        ({"name": "Train_DDP"}, "name must be a DNS label"),
    ],
)
def test_pytorchjob_manifest_refuses_what_cannot_describe_a_job(keywords: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"nodes": 1, "gpus_per_node": 1, **keywords}
    with pytest.raises(ValueError, match=re.escape(message)):
        pytorchjob_manifest("train_ddp.py", **arguments)  # type: ignore[arg-type]


TRICKY_ARGUMENTS = [
    "--name",
    "$HOME",
    "$(HOME)",
    "$$(X)",
    "cost$",
    "run 1",
    "10",
    "3.0",
    "yes",
    "off",
    "null",
    "~",
    "- x",
    "#no",
    "a: b",
    'say "hi"',
    "C:\\dir",
]


def test_pytorchjob_command_keeps_every_argument_a_string_as_given() -> None:
    text = pytorchjob_manifest(
        "my jobs/train_ddp.py", [*TRICKY_ARGUMENTS, "tab\there", "line\nbreak", "é😀"], nodes=2, gpus_per_node=1
    )

    for spec in replicas_of(yaml.safe_load(text)).values():
        assert command_run(container_of(spec), {"HOME": "/root", "X": "x"}) == [
            "torchrun",
            "my jobs/train_ddp.py",
            *TRICKY_ARGUMENTS,
            "tab\there",
            "line\nbreak",
            "é😀",
        ]


@given(script=st.text(min_size=1), arguments=st.lists(st.text(), max_size=4))
def test_pytorchjob_command_survives_any_text(script: str, arguments: list[str]) -> None:
    text = pytorchjob_manifest(script, arguments, nodes=2, gpus_per_node=1, name="job")
    job = yaml.safe_load(text.encode("utf-8", "surrogatepass"))

    assert [command_run(container_of(spec), {"HOME": "/root"}) for spec in replicas_of(job).values()] == [
        ["torchrun", script, *arguments]
    ] * 2


# -- launches -------------------------------------------------------------------


def generated_script(folder: Path) -> Path:
    """The inline training script converted by ddpify, in a folder whose name needs quoting."""
    conversion = convert(TRAIN, path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    script = folder / "my jobs" / "train_ddp.py"
    script.parent.mkdir()
    script.write_text(str(conversion.code), encoding="utf-8")
    return script


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environment(probe_dir: Path, **extra: str) -> dict[str, str]:
    """The probe's environment, without what an enclosing launcher set, on CPU (Gloo)."""
    env = probe_environment(str(probe_dir), None)
    for name in list(env):
        if name in _LAUNCHER_VARIABLES or name.startswith(_LAUNCHER_PREFIXES):
            del env[name]
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(extra)
    return env


def launch(
    commands: Sequence[Sequence[str]],
    envs: Sequence[Mapping[str, str]],
    *,
    cwd: Path,
    script: Path,
) -> tuple[int | None, bool, float, str]:
    """Run the commands concurrently until all end or the deadline passes.

    Returns the highest exit code (``None`` on a timeout), whether it timed out,
    the seconds it took and the processes' output. On a timeout or any
    failure here, every process started and every process still running
    ``script`` is stopped.
    """
    logs = [cwd / f"launch-{i}.log" for i in range(len(commands))]
    processes: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    timed_out = False
    try:
        for command, env, log in zip(commands, envs, logs):
            with open(log, "wb") as stream:
                processes.append(
                    subprocess.Popen(
                        list(command),
                        cwd=cwd,
                        env=dict(env),
                        stdin=subprocess.DEVNULL,
                        stdout=stream,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = started + TIMEOUT_S
        for process in processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        if timed_out or any(process.poll() is None for process in processes):
            stop(processes, script)
    duration = time.monotonic() - started
    output = "\n".join(
        f"--- {shlex.join(command)}\n{log.read_text(errors='replace')}" for command, log in zip(commands, logs)
    )
    codes = [process.returncode for process in processes]
    return (None if timed_out else max(codes)), timed_out, duration, output


def stop(processes: Sequence[subprocess.Popen[bytes]], script: Path) -> None:
    """SIGTERM each session (torchrun passes it on to its workers), then SIGKILL what is left.

    What is left: the sessions, and any process that still runs ``script``
    (torchrun's workers lead sessions of their own).
    """
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and (_group_alive(processes) or _running(script)):
        time.sleep(0.1)
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
    for pid in _running(script):
        _signal_group(pid, signal.SIGKILL)
    for process in processes:
        process.wait()


def _group_alive(processes: Sequence[subprocess.Popen[bytes]]) -> bool:
    alive = False
    for process in processes:
        process.poll()  # reaped, a finished leader no longer counts as a member of its group
        try:
            os.killpg(process.pid, 0)
            alive = True
        except OSError:
            pass
    return alive


def _running(script: Path) -> list[int]:
    """The processes whose command line names ``script`` (a path unique to the test)."""
    needle = os.fsencode(script)
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "cmdline").read_bytes() and int(entry.name) != os.getpid():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def judge(
    script: Path,
    command: Sequence[str],
    result: tuple[int | None, bool, float, str],
    records: Mapping[int, dict[str, object]],
) -> VerifyReport:
    """The verdict of ``ddpify.verify`` on what the ranks recorded during a launch."""
    returncode, timed_out, duration, output = result
    outcome = RunOutcome(
        script=str(script),
        nproc=NPROC,
        command=tuple(command),
        max_steps=None,
        timeout=TIMEOUT_S,
        returncode=returncode,
        timed_out=timed_out,
        duration_s=duration,
        output=output,
        records=records,
    )
    return evaluate(outcome)


def assert_trains_data_parallel(report: VerifyReport) -> None:
    explanation = f"{report.format_table()}\n--- output ---\n{report.output[-6000:]}"
    assert report.ok, explanation
    assert [check.name for check in report.checks] == list(CHECK_NAMES)
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps == 4, explanation  # 32 samples / 2 ranks / batch 8, 2 epochs
    assert rank0.params == rank1.params, explanation
    assert rank0.first_batch != rank1.first_batch, explanation


@pytest.mark.torchrun
def test_multi_node_torchrun_command_joins_two_nodes_through_c10d(tmp_path: Path) -> None:
    """Two "nodes" on this machine run the same multi-node command and form one world of 2 ranks."""
    script = generated_script(tmp_path)
    template = torchrun_commands(str(PROBED), [str(script)])["multi_node"]
    filled = (
        template.replace("--nproc_per_node=gpu", "--nproc_per_node=1")
        .replace("NUM_NODES", "2")
        .replace(f"HEAD_NODE:{RDZV_PORT}", f"127.0.0.1:{free_port()}")
        .replace("JOB_ID", f"ddpify-test-{os.getpid()}")
    )
    command = [str(TORCHRUN), *shlex.split(filled)[1:]]
    env = clean_environment(tmp_path)

    result = launch([command, command], [env, env], cwd=tmp_path, script=script)
    report = judge(script, command, result, read_records(str(tmp_path), NPROC))

    assert_trains_data_parallel(report)
    assert (report.ranks[0].saves, report.ranks[1].saves) == (("model.pt",), ())
    assert (tmp_path / "model.pt").is_file()


@pytest.mark.torchrun
def test_srun_without_torchrun_numbers_the_ranks_from_slurm_variables(tmp_path: Path) -> None:
    """Two plain processes that know only SLURM_PROCID/LOCALID/NTASKS and MASTER_ADDR/PORT form one world."""
    script = generated_script(tmp_path)
    port = str(free_port())
    # Without RANK, the probe names each process's record after its SLURM_PROCID.
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    envs = [
        clean_environment(
            probe_dir,
            SLURM_PROCID=str(procid),
            SLURM_LOCALID=str(procid),
            SLURM_NTASKS="2",
            SLURM_NODEID="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        for procid in (0, 1)
    ]
    command = [sys.executable, "-m", "ddpify.verify.probe", str(script)]

    result = launch([command, command], envs, cwd=tmp_path, script=script)
    records = read_records(str(probe_dir), 2)
    report = judge(script, command, result, records)

    assert_trains_data_parallel(report)
    assert [records[procid]["process_group"]["rank"] for procid in (0, 1)] == [0, 1]  # type: ignore[index]
    assert (report.ranks[0].saves, report.ranks[1].saves) == (("model.pt",), ())


@pytest.mark.torchrun
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sbatch_script_runs_srun_torchrun_across_two_nodes(tmp_path: Path) -> None:
    """The emitted batch script, with srun/scontrol stand-ins, trains on 2 nodes x 1 process; one checkpoint."""
    script = generated_script(tmp_path)
    checkpoint = "final model.pt"  # an argument with a space goes through bash, srun and torchrun intact
    batch = tmp_path / "job.sbatch"
    batch.write_text(
        sbatch_script(str(PROBED), [str(script), "--out", checkpoint], nodes=2, gpus_per_node=1, rdzv_port=free_port()),
        encoding="utf-8",
    )
    stubs = tmp_path / "bin"  # copied, so that they are executable whatever the checkout did to their mode
    stubs.mkdir()
    for name in ("srun", "scontrol"):
        shutil.copy(STUBS / name, stubs / name)
        (stubs / name).chmod(0o755)
    env = clean_environment(
        tmp_path,
        PATH=os.pathsep.join([str(stubs), str(TORCHRUN.parent), os.environ.get("PATH", "")]),
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_NNODES="2",
        SLURM_JOB_ID=str(os.getpid()),
        SLURM_CPUS_PER_TASK="4",
    )
    command = ["bash", str(batch)]

    result = launch([command], [env], cwd=tmp_path, script=script)
    report = judge(script, command, result, read_records(str(tmp_path), NPROC))

    assert_trains_data_parallel(report)
    assert (report.ranks[0].saves, report.ranks[1].saves) == ((checkpoint,), ())
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == [checkpoint]


@pytest.mark.torchrun
def test_pytorchjob_pods_train_with_the_environment_the_operator_gives_them(tmp_path: Path) -> None:
    """The manifest's container command, run as a master and a worker "pod" on this machine, each with
    the variables the training operator (v1.9, pkg/controller.v1/pytorch/envvar.go and master.go) sets:
    the pod's own RANK and WORLD_SIZE, which torchrun replaces for its workers, and the PET_* variables
    torchrun takes its options from. They form one world of 2 ranks; one checkpoint."""
    script = generated_script(tmp_path)
    checkpoint = "final model.pt"
    job = yaml.safe_load(pytorchjob_manifest(str(PROBED), [str(script), "--out", checkpoint], nodes=2, gpus_per_node=1))
    replicas = replicas_of(job)
    port = str(free_port())
    pods = [container_of(replicas["Master"])] + [container_of(replicas["Worker"])] * replicas["Worker"]["replicas"]
    nproc = job["spec"]["nprocPerNode"]
    commands = [[str(TORCHRUN), *command_run(pod)[1:]] for pod in pods]
    envs = [
        clean_environment(
            tmp_path,
            PYTHONUNBUFFERED="1",
            MASTER_ADDR="127.0.0.1",  # the operator's value is the master's service, <job>-master-0
            PET_MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            PET_MASTER_PORT=port,
            WORLD_SIZE=str(len(pods) * int(nproc)),
            RANK=str(index),
            PET_NODE_RANK=str(index),
            PET_NPROC_PER_NODE=nproc,
            PET_NNODES=str(len(pods)),
        )
        for index in range(len(pods))
    ]

    result = launch(commands, envs, cwd=tmp_path, script=script)
    report = judge(script, commands[0], result, read_records(str(tmp_path), NPROC))

    assert [pod["command"][0] for pod in pods] == ["torchrun", "torchrun"]  # type: ignore[index]
    assert_trains_data_parallel(report)
    assert (report.ranks[0].saves, report.ranks[1].saves) == ((checkpoint,), ())
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == [checkpoint]


@pytest.mark.parametrize("before", [None, "/opt/lib"], ids=["unset", "set"])
def test_sbatch_script_puts_a_folder_first_on_the_python_path(before: str | None, tmp_path: Path) -> None:
    text = sbatch_script("out dir/scripts/train.py", nodes=1, gpus_per_node=1, python_path="out dir")
    (export,) = [line for line in text.splitlines() if line.startswith("export PYTHONPATH=")]
    env = {"PATH": os.environ["PATH"], **({"PYTHONPATH": before} if before is not None else {})}

    shown = subprocess.run(
        ["bash", "-c", f'set -u; {export}; printf %s "$PYTHONPATH"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert shown.stdout == ("out dir" if before is None else "out dir:/opt/lib")
    assert "PYTHONPATH" not in sbatch_script("train.py", nodes=1, gpus_per_node=1)


def test_pytorchjob_sets_the_python_path_of_every_pod_as_given() -> None:
    job = yaml.safe_load(
        pytorchjob_manifest("out/scripts/train.py", nodes=2, gpus_per_node=1, python_path="out $(HOME)")
    )

    for spec in replicas_of(job).values():
        (variable,) = container_of(spec)["env"]  # type: ignore[misc]
        assert variable["name"] == "PYTHONPATH"
        assert kubernetes_expanded(variable["value"], {"HOME": "/root"}) == "out $(HOME)"
    plain = yaml.safe_load(pytorchjob_manifest("train.py", nodes=1, gpus_per_node=1))
    assert "env" not in container_of(replicas_of(plain)["Master"])
