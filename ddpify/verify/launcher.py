"""Run a script under ``torchrun`` with the probe and collect what every rank wrote.

The only part of ``ddpify.verify`` that starts processes. ``torchrun`` gets a
session of its own (``start_new_session``), its output goes to a file (a pipe
could fill up and stall a hanging run) and ``timeout`` bounds the whole run.
On a timeout the ranks still running are asked for their Python stacks
(``faulthandler``, see ``protocol.STACK_SIGNAL``), then torchrun is stopped
with SIGTERM (it passes it on to its workers) and, if anything is left after
a grace period, SIGKILL: torchrun's process group and every rank that is
still alive (each worker leads a session of its own, so the group of
torchrun alone would miss them). The records of the ranks still running at
the timeout are read before the stop and kept as they were: what a rank
does while it is being stopped (a collective that fails because a peer was
killed first) is the stop's doing, not the script's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpify.verify import protocol

# The folder that holds the ddpify package, put on the ranks' PYTHONPATH so
# that ``-m ddpify.verify.probe`` is found from any working directory.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_OUTPUT_TAIL_CHARS = 20_000
_STACK_WAIT_S = 2.0
_TERMINATE_GRACE_S = 5.0


@dataclass(frozen=True)
class RunOutcome:
    """The raw facts of one run, before any judgement."""

    script: str
    nproc: int
    command: tuple[str, ...]
    max_steps: int | None
    timeout: float
    returncode: int | None  # None when torchrun was killed at the timeout
    timed_out: bool
    duration_s: float
    output: str
    # rank -> last document; for a rank still running at the timeout, its document then
    records: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    stacks: Mapping[int, str] = field(default_factory=dict)  # rank -> stacks dumped at the timeout


def torchrun_command(script: Path, nproc: int, script_args: Sequence[str]) -> list[str]:
    # --standalone rendezvous on localhost:0: a free port per run, so runs can overlap.
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        protocol.PROBE_MODULE,
        str(script),
        *script_args,
    ]


def probe_environment(probe_dir: str, max_steps: int | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    python_path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(_PACKAGE_ROOT), python_path)))
    env["OMP_NUM_THREADS"] = "1"  # N ranks share the CPUs; also silences torchrun's notice
    env["PYTHONUNBUFFERED"] = "1"  # output up to a hang is in the log
    env[protocol.PROBE_DIR_ENV] = probe_dir
    if max_steps is None:
        env.pop(protocol.MAX_STEPS_ENV, None)
    else:
        env[protocol.MAX_STEPS_ENV] = str(max_steps)
    return env


def run_under_torchrun(
    script: Path,
    *,
    nproc: int,
    script_args: Sequence[str],
    timeout: float,
    max_steps: int | None,
    workdir: Path,
    env: Mapping[str, str] | None = None,
) -> RunOutcome:
    command = torchrun_command(script, nproc, script_args)
    with tempfile.TemporaryDirectory(prefix="ddpify-verify-") as probe_dir:
        log_path = Path(probe_dir) / "torchrun.log"
        stacks: dict[int, str] = {}
        at_timeout: dict[int, dict[str, Any]] = {}
        started = time.monotonic()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                cwd=workdir,
                env=probe_environment(probe_dir, max_steps, env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                returncode: int | None = process.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                returncode = None
                at_timeout = read_records(probe_dir, nproc)
                stacks = _collect_stacks(probe_dir, nproc)
                _stop(process, probe_dir, nproc)
            except BaseException:  # Ctrl-C in the parent: leave nothing behind
                _stop(process, probe_dir, nproc)
                raise
        duration = time.monotonic() - started
        records = read_records(probe_dir, nproc)
        if timed_out:
            records.update(
                (rank, record) for rank, record in at_timeout.items() if record.get("phase") != protocol.Phase.EXITED
            )
        return RunOutcome(
            script=str(script),
            nproc=nproc,
            command=tuple(command),
            max_steps=max_steps,
            timeout=timeout,
            returncode=returncode,
            timed_out=timed_out,
            duration_s=duration,
            output=_tail(log_path),
            records=records,
            stacks=stacks,
        )


def read_records(probe_dir: str, nproc: int) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    for rank in range(nproc):
        path = Path(probe_dir) / protocol.record_name(rank)
        try:
            records[rank] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # never written: the rank did not get as far as the probe
    return records


def _running_ranks(probe_dir: str, nproc: int) -> dict[int, int]:
    """rank -> pid of the ranks that started and have not finished."""
    return {
        rank: record["pid"]
        for rank, record in read_records(probe_dir, nproc).items()
        if record.get("phase") != protocol.Phase.EXITED and _is_probe(record.get("pid"))
    }


def _is_probe(pid: Any) -> bool:
    """The pid is alive and, where /proc tells, still runs the probe (pids get reused)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return False  # Linux, and the process is gone
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    except OSError:
        return False
    return protocol.PROBE_MODULE.encode() in cmdline


def _collect_stacks(probe_dir: str, nproc: int) -> dict[int, str]:
    if protocol.STACK_SIGNAL is None:
        return {}
    running = _running_ranks(probe_dir, nproc)
    for pid in running.values():
        with contextlib.suppress(OSError):
            os.kill(pid, protocol.STACK_SIGNAL)
    stacks: dict[int, str] = {}
    deadline = time.monotonic() + _STACK_WAIT_S
    while running and time.monotonic() < deadline:
        time.sleep(0.05)
        for rank in list(running):
            path = Path(probe_dir) / protocol.stack_name(rank)
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            # faulthandler writes a thread at a time; the main thread (the
            # script's, with runpy below it) comes last when it is not current.
            if "runpy" in text:
                stacks[rank] = text
                del running[rank]
    return stacks


def _stop(process: subprocess.Popen[bytes], probe_dir: str, nproc: int) -> None:
    if os.name != "posix":  # no process groups: torchrun is all that can be reached
        process.kill()
        process.wait()
        return
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=_TERMINATE_GRACE_S)
    for pid in _running_ranks(probe_dir, nproc).values():
        _signal_group(pid, signal.SIGKILL)
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-_OUTPUT_TAIL_CHARS:]
