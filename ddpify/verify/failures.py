"""How a run ended, rank by rank: where a failure began, and where a hung rank was waiting. No I/O.

When several ranks fail, the one to name is where the failure began: a real
exception (or exit, or death by a signal) before a failure of torch's
collectives that only reacts to a peer gone (a ``DistError``, or "Connection
closed by peer" and the like raised inside torch), the earliest first. The
exception comes from the rank's record (``protocol``), else from its
``[rankR]:`` traceback in torchrun's output. A rank still running at the
timeout is located by the innermost frame of the script in its
``faulthandler`` stack dump. ``checks`` turns this into the ``launched``
check and the ranks' ``where``.
"""

from __future__ import annotations

import io
import linecache
import os
import re
import signal
import tokenize
from dataclasses import dataclass
from typing import Any, ClassVar

from ddpify.verify import protocol
from ddpify.verify.launcher import RunOutcome


def exit_of(record: dict[str, Any]) -> dict[str, Any]:
    """How the probe saw the rank's script end (``protocol``), or an empty dict."""
    return record.get("exit") or {}


def finished(record: dict[str, Any] | None) -> bool:
    """Whether the probe saw the rank's script end."""
    return record is not None and record.get("phase") == protocol.Phase.EXITED


_FRAME = re.compile(r'File "(?P<file>.+)", line (?P<line>\d+) in ')


def hang_location(stack: str, script: str) -> str | None:
    """``script.py:L `code``` of the innermost frame of ``script`` in a faulthandler dump.

    The main thread (the one that runs the script through runpy) is preferred
    over threads the script started.
    """
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack)
    threads.sort(key=lambda thread: "runpy" not in thread)
    for thread in threads:
        for match in _FRAME.finditer(thread):
            if os.path.abspath(match["file"]) == os.path.abspath(script):
                line = int(match["line"])
                code = _without_comment(linecache.getline(script, line)).strip()
                where = f"{os.path.basename(script)}:{line}"
                return f"{where} `{code}`" if code else where
    return None


def _without_comment(line: str) -> str:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return line  # a line that does not stand alone, e.g. inside a bracket
    comments = [token for token in tokens if token.type == tokenize.COMMENT]
    return line[: comments[0].start[1]] if comments else line


# What torch's collectives raise on a rank whose peer went away (exited, crashed,
# was killed): the reaction to a failure elsewhere, not its origin. Only
# counted for exceptions raised inside torch: a script's own network code may
# say "Connection reset by peer" too.
_PEER_GONE = re.compile(
    r"connection (?:closed|reset|refused)(?: by peer)?|broken pipe|remote worker|socket timeout|timed out"
    r"|communicator was aborted|process group (?:was )?(?:aborted|shut ?down)",
    re.IGNORECASE,
)
_DIST_ERROR = "DistError"  # torch.distributed.DistError and its subclasses (backend, network, store)
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+)')
_TORCHRUN_EXIT = re.compile(r"rank\s*:\s*(?P<rank>\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")
_CLIP = 200


@dataclass(frozen=True)
class RankFailure:
    """How one rank failed. ``kind`` orders candidates for the origin: a failure of
    the rank's own (0) before a collective that failed because a peer went away
    (1), before a rank stopped from outside for no reason it recorded (2)."""

    rank: int
    what: str  # "raised ValueError: ... at train.py:12 `code`"
    consequence: str  # how the rank is mentioned when it is not the origin
    kind: int
    time: float | None = None

    OWN: ClassVar[int] = 0
    REACTION: ClassVar[int] = 1
    STOPPED: ClassVar[int] = 2

    @property
    def reaction(self) -> bool:
        return self.kind != self.OWN

    @property
    def known(self) -> bool:
        return self.kind != self.STOPPED

    def order(self) -> tuple[int, bool, float, int]:
        return (self.kind, self.time is None, self.time or 0.0, self.rank)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CLIP else text[: _CLIP - 3] + "..."


def _with_code(where: str | None, script: str) -> str:
    """`` at script.py:L `code``` for a ``script.py:L`` location, or nothing."""
    if not where:
        return ""
    line = where.rpartition(":")[2]
    code = _without_comment(linecache.getline(script, int(line))).strip() if line.isdigit() else ""
    return f" at {where} `{code}`" if code else f" at {where}"


def _peer_gone(names: list[str], message: str, in_torch: bool) -> str | None:
    """What shows that an exception is a collective's reaction to a lost peer, or None."""
    if not in_torch:
        return None
    found = _PEER_GONE.search(message)
    if found:
        return found.group(0)
    if any(name.rpartition(".")[2].lstrip("_") == _DIST_ERROR for name in names):
        return names[0].rpartition(".")[2].lstrip("_")
    return None


def _raised(rank: int, error: str, where: str | None, script: str, sign: str | None, when: float | None) -> RankFailure:
    what = f"raised {_clip(error)}{_with_code(where, script)}"
    if sign is not None:
        return RankFailure(rank, what, f"failed in turn: {sign}", RankFailure.REACTION, when)
    return RankFailure(rank, what, f"also {what}", RankFailure.OWN, when)


def rank_failures(run: RunOutcome) -> list[RankFailure]:
    """Every rank that did not end cleanly, as far as its record and torchrun's output tell."""
    exit_codes = {int(m["rank"]): int(m["code"]) for m in _TORCHRUN_EXIT.finditer(run.output)}
    found = []
    for rank, record in sorted(run.records.items()):
        script = record.get("script", run.script)
        exit_ = exit_of(record)
        kind = exit_.get("kind")
        if kind == protocol.ExitKind.EXCEPTION:
            names = [exit_.get("type") or "", *exit_.get("bases", [])]
            sign = _peer_gone(names, exit_.get("message") or exit_.get("error") or "", bool(exit_.get("in_torch")))
            found.append(_raised(rank, exit_.get("error") or "", exit_.get("where"), script, sign, exit_.get("time")))
        elif kind == protocol.ExitKind.EXIT:
            what = f"called sys.exit({exit_.get('code')})"
            found.append(RankFailure(rank, what, f"also {what}", RankFailure.OWN, exit_.get("time")))
        elif not finished(record) and not (run.timed_out and rank in _running(run)):
            found.append(_unrecorded(run, rank, script, exit_codes.get(rank)))
    return found


def _unrecorded(run: RunOutcome, rank: int, script: str, code: int | None) -> RankFailure:
    """A rank that ended without the probe seeing the script end: its traceback in the output, or its exit code."""
    error = stderr_exception(run.output, rank, script)
    if error is not None:
        sign = _peer_gone([error["type"]], error["message"], error["in_torch"])
        return _raised(rank, error["error"], error["where"], script, sign, None)
    if code is not None and code < 0 and -code != signal.SIGTERM:
        what = f"was killed by {_signal_name(-code)} before the script ended"
        return RankFailure(rank, what, what, RankFailure.OWN)
    if code is not None and code > 0:
        what = f"exited with code {code} before the script ended (a crash, or os._exit)"
        return RankFailure(rank, what, what, RankFailure.OWN)
    return RankFailure(rank, "ended before the script did", "was stopped by torchrun", RankFailure.STOPPED)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stderr_exception(output: str, rank: int, script: str) -> dict[str, Any] | None:
    """The last uncaught exception of ``rank`` in torchrun's output, from the ``[rankR]:`` lines torch prints.

    Returns ``error`` ("Type: message"), ``type``, ``message``, ``where``
    (``script.py:L``, the last frame in ``script``) and ``in_torch`` (the
    innermost frame is in torch), or None.
    """
    prefix = f"[rank{rank}]: "
    lines = [line[len(prefix) :] for line in output.splitlines() if line.startswith(prefix)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    block = lines[starts[-1] + 1 :]
    frames = [m for m in map(_TRACEBACK_FRAME.match, block) if m]
    error = next((line for line in reversed(block) if line and not line[0].isspace()), None)
    if error is None:
        return None
    ours = [m for m in frames if os.path.abspath(m["file"]) == os.path.abspath(script)]
    type_name, _, message = error.partition(": ")
    return {
        "error": error,
        "type": type_name,
        "message": message,
        "where": f"{os.path.basename(script)}:{ours[-1]['line']}" if ours else None,
        "in_torch": bool(frames) and f"{os.sep}torch{os.sep}" in frames[-1]["file"],
    }


def _running(run: RunOutcome) -> list[int]:
    """Ranks that had started and not finished (at the timeout, for a run stopped then)."""
    return [rank for rank, record in sorted(run.records.items()) if not finished(record)]


def hang_parts(run: RunOutcome, verb: str) -> list[str]:
    parts = []
    for rank in range(run.nproc):
        record = run.records.get(rank)
        if record is None:
            parts.append(f"rank {rank} never started the script")
        elif not finished(record):
            stack = run.stacks.get(rank)
            where = hang_location(stack, record.get("script", run.script)) if stack else None
            parts.append(f"rank {rank} {verb}" + (f" at {where}" if where else ""))
    return parts or ["every rank had finished but torchrun did not exit"]
