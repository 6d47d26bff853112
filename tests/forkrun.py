"""A stand-in for ``torchrun`` in the exhaustive matrix: torch imported once, every rank forked.

Each of the matrix's runs under ``torchrun`` costs three imports of torch (the
launcher and two ranks), most of its time on two cores. Here one server per
test process imports torch and the probe's modules once; for each run it forks
an agent, which forks the ranks with the environment ``torchrun --standalone``
gives them (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``,
the ``TORCHELASTIC_*`` variables) and then, like torchrun's agent, stops the
others when one fails and exits 1 with torchrun's failure summary.

Every rank runs ``ddpify.verify.probe`` as under ``torchrun``, so the checks
and their report are the same. README's test command keeps real ``torchrun``
runs of each kind (``QUICK_TORCHRUN`` in conftest.py); this harness serves the
rest of the matrix, through ``run_forked``, a drop-in for
``ddpify.verify.launcher.run_under_torchrun``.

The server is this file run as a script; its command line names the probe
module, so that the launcher's stop, which only signals processes that run
the probe, reaches the ranks.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

_RC_FILE = "agent.rc"
_LOG_FILE = "torchrun.log"
_STDOUT_FILE, _STDERR_FILE = "stdout", "stderr"  # of a script run as under plain ``python``
_TERMINATE_GRACE_S = 5.0


# --- the server side: runs in the forked processes --------------------------------------------------


def _serve() -> dict[str, Any]:
    """Answer requests, one JSON line each, until stdin closes; returns only in a forked agent."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # agents are reaped by the kernel
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return request
        print(pid, flush=True)
    raise SystemExit(0)


# Rendezvous ports come from below the kernel's range for outgoing connections (32768 and up on
# Linux), a block of its own for each test worker: a port the kernel handed out (to a client
# socket of another run, or to another worker's pick) is then never the one a run's store binds.
_PORT_BASE = 20000
_PORTS_PER_WORKER = 500


def _free_port(slot: int) -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = _PORT_BASE + _PORTS_PER_WORKER * (int(worker) % 16 if worker.isdigit() else 0)
    for step in range(_PORTS_PER_WORKER):
        port = first + (slot + step) % _PORTS_PER_WORKER
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # the block is taken: any port the kernel gives
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_environment(request: Mapping[str, Any], rank: int, port: int) -> dict[str, str]:
    nproc = int(request["nproc"])
    env = dict(request["env"])
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        ROLE_RANK=str(rank),
        ROLE_NAME="default",
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_WORLD_SIZE="1",
        ROLE_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_RESTART_COUNT="0",
        TORCHELASTIC_MAX_RESTARTS="0",
        TORCHELASTIC_RUN_ID="none",
        TORCHELASTIC_USE_AGENT_STORE="False",
        TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
    )
    return env


def _agent(request: dict[str, Any]) -> dict[str, Any]:
    """Fork the ranks and wait for them; returns only in a forked rank, with its request."""
    os.setsid()
    probe_dir = Path(request["probe_dir"])
    log = os.open(probe_dir / _LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    port = _free_port(int(request.get("slot", 0)))
    ranks: dict[int, int] = {}
    for rank in range(int(request["nproc"])):
        pid = os.fork()
        if pid == 0:
            if request.get("plain"):  # ``python script.py``: the environment as given, the agent's group
                return {**request, "rank": rank}
            os.setsid()  # as torchrun's workers: each leads a session of its own
            return {**request, "rank": rank, "env": _rank_environment(request, rank, port)}
        ranks[pid] = rank
    codes: dict[int, int] = {}
    stopping = False
    while len(codes) < len(ranks):
        pid, status = os.wait()
        codes[ranks[pid]] = os.waitstatus_to_exitcode(status)
        if codes[ranks[pid]] != 0 and not stopping:  # torchrun stops the whole group at the first failure
            stopping = True
            _stop_ranks([p for p, r in ranks.items() if r not in codes])
    failed = {rank: code for rank, code in sorted(codes.items()) if code != 0}
    if failed:
        print(f"{request['argv'][0]} FAILED (forkrun)")
        for rank, code in failed.items():
            print(f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code}")
    sys.stdout.flush()
    rc = failed[0] if failed and request.get("plain") else 1 if failed else 0
    tmp = probe_dir / f".{_RC_FILE}.tmp"
    tmp.write_text(str(rc))
    tmp.replace(probe_dir / _RC_FILE)
    os._exit(rc)


def _stop_ranks(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)

    def kill_late() -> None:
        time.sleep(_TERMINATE_GRACE_S)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    threading.Thread(target=kill_late, daemon=True).start()


def _become_rank(request: Mapping[str, Any]) -> None:
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra
    sys.argv = ["-m", *request["argv"]]
    _seed_anew(int(request.get("rank", 0)))


def _seed_anew(rank: int) -> None:
    """Each random generator seeded apart on each rank, as fresh interpreters are: a fork starts with the
    server's state, and ranks that draw the same unseeded weights would hide a wrap placed too early. The
    seeds are fixed, so that a run's outcome does not change from one test run to the next."""
    seed = 2026 + 7919 * rank
    random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)


# What every rank imports: torch, the parts of it a training step loads on first use (the
# optimizers' first step imports torch._dynamo: a second of each run), the probe's modules.
_PRELOADED = (
    "torch",
    "torch._dynamo",
    "torch.distributed",
    "torch.nn.parallel",
    "torch.utils.data",
    "ddpify.verify.fingerprints",
    "ddpify.verify.ownership",
)


def _run_plain(request: Mapping[str, Any]) -> dict[str, Any]:
    """``python script.py args...`` in this forked process: its output into the run's folder."""
    import runpy

    folder = Path(request["probe_dir"])
    for fd, name in ((1, _STDOUT_FILE), (2, _STDERR_FILE)):
        opened = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return runpy.run_path(script, run_name="__main__")


_FILES = frozenset((io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom))
_kept_to_the_end: list[object] = []


def _exit_as_python(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` and end this forked process as the interpreter would, but without its
    finalisation: tearing down the modules of torch costs about a second per process, the most of
    a run. What the script can observe of an exit still happens, in the interpreter's order: the
    exit code, the traceback, non-daemon threads joined, ``atexit`` handlers, files flushed."""
    # What the script leaves (its globals, or the exception that holds its frames) stays alive
    # to the end, as under ``python``: see ``_kept_to_the_end`` in ddpify.verify.probe.
    try:
        _kept_to_the_end.append(main())
        code = 0
    except SystemExit as stop:
        _kept_to_the_end.append(stop)
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as error:
        _kept_to_the_end.append(error)
        sys.excepthook(type(error), error, error.__traceback__)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx waits for first
    atexit._run_exitfuncs()
    for stream in gc.get_objects():  # the files a script left open, flushed as closing them would
        if type(stream) in _FILES:
            with contextlib.suppress(Exception):
                stream.flush()
    os._exit(code)


def _serve_forever() -> None:
    for name in _PRELOADED:
        importlib.import_module(name)
    request = _agent(_serve())
    _become_rank(request)
    if request.get("plain"):
        _exit_as_python(lambda: _run_plain(request))
    from ddpify.verify import probe

    _exit_as_python(lambda: sys.exit(probe.main(request["argv"])))


# --- the client side: in the test process ---------------------------------------------------------------


class _Server:
    def __init__(self) -> None:
        from ddpify.verify import protocol

        repository = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (repository, env.get("PYTHONPATH"))))
        env["OMP_NUM_THREADS"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, __file__, protocol.PROBE_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lock = threading.Lock()
        self.started = 0  # runs started: each takes the next rendezvous port of the worker's block

    def start(self, request: Mapping[str, Any]) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        with self.lock:
            self.started += 1
            self.process.stdin.write(json.dumps({**request, "slot": self.started}) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the forkrun server ended (exit code {self.process.poll()})")
        return int(answer)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()


_servers: list[_Server] = []  # the test process's one server, once started


def close_server() -> None:
    while _servers:
        _servers.pop().close()


def _server() -> _Server:
    if _servers and _servers[0].process.poll() is not None:
        close_server()
    if not _servers:
        _servers.append(_Server())
    return _servers[0]


def run_forked(
    script: Path,
    *,
    nproc: int,
    script_args: Sequence[str],
    timeout: float,
    max_steps: int | None,
    workdir: Path,
    env: Mapping[str, str] | None = None,
) -> Any:
    """``run_under_torchrun``, with ranks forked from a server that has imported torch already."""
    from ddpify.verify import launcher

    argv = [str(script), *script_args]
    with tempfile.TemporaryDirectory(prefix="ddpify-forkrun-") as probe_dir:
        rc_path = Path(probe_dir) / _RC_FILE
        environment = launcher.probe_environment(probe_dir, max_steps, env)
        stacks: dict[int, str] = {}
        at_timeout: dict[int, dict[str, Any]] = {}
        started = time.monotonic()
        agent = _server().start(
            {"argv": argv, "cwd": str(workdir), "env": environment, "nproc": nproc, "probe_dir": probe_dir}
        )
        returncode: int | None = None
        while not rc_path.exists() and time.monotonic() - started < timeout:
            time.sleep(0.02)
        timed_out = not rc_path.exists()
        if timed_out:
            at_timeout = launcher.read_records(probe_dir, nproc)
            stacks = launcher._collect_stacks(probe_dir, nproc)
            _stop_run(agent, probe_dir, nproc)
        else:
            returncode = int(rc_path.read_text())
        duration = time.monotonic() - started
        records = launcher.read_records(probe_dir, nproc)
        if timed_out:
            records.update((rank, record) for rank, record in at_timeout.items() if record.get("phase") != "exited")
        return launcher.RunOutcome(
            script=str(script),
            nproc=nproc,
            command=("forkrun", *argv),
            max_steps=max_steps,
            timeout=timeout,
            returncode=returncode,
            timed_out=timed_out,
            duration_s=duration,
            output=launcher._tail(Path(probe_dir) / _LOG_FILE),
            records=records,
            stacks=stacks,
        )


def run_plain_forked(cwd: Path, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Any:
    """``python *argv`` in ``cwd``, forked from the server that has imported torch already: the
    ``subprocess.CompletedProcess`` that ``subprocess.run`` would give (``subprocess.TimeoutExpired`` past
    ``timeout``)."""
    with tempfile.TemporaryDirectory(prefix="ddpify-forkrun-") as probe_dir:
        folder = Path(probe_dir)
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "nproc": 1, "probe_dir": probe_dir}
        agent = _server().start({**request, "plain": True})
        started = time.monotonic()
        while not (folder / _RC_FILE).exists():
            if time.monotonic() - started > timeout:
                from ddpify.verify import launcher

                launcher._signal_group(agent, signal.SIGKILL)
                raise subprocess.TimeoutExpired(["python", *argv], timeout)
            time.sleep(0.02)
        code = int((folder / _RC_FILE).read_text())
        stdout, stderr = ((folder / name).read_text(errors="replace") for name in (_STDOUT_FILE, _STDERR_FILE))
        return subprocess.CompletedProcess(["python", *argv], code, stdout, stderr)


def _stop_run(agent: int, probe_dir: str, nproc: int) -> None:
    from ddpify.verify import launcher

    ranks = list(launcher._running_ranks(probe_dir, nproc).values())
    for pid in (agent, *ranks):
        launcher._signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + _TERMINATE_GRACE_S
    while time.monotonic() < deadline and launcher._running_ranks(probe_dir, nproc):
        time.sleep(0.05)
    for pid in (agent, *launcher._running_ranks(probe_dir, nproc).values()):
        launcher._signal_group(pid, signal.SIGKILL)


if __name__ == "__main__":
    _serve_forever()
