"""What ``verify()`` returns: one row per rank, one result per check, and how to show them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One property of a data-parallel run, and why it holds or not."""

    name: str
    passed: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "message": self.message}


@dataclass(frozen=True)
class RankReport:
    """What one rank reported (``None`` where it reported nothing)."""

    rank: int
    # ok | max-steps | exit <code> | error | stuck | killed | missing
    status: str
    steps: int | None
    params: str | None  # first hex digits of the parameters' sha256 at the end
    first_batch: str | None  # first hex digits of the first training batch's hash
    saves: tuple[str, ...]  # torch.save targets, as the script gave them
    destroyed: bool | None  # destroy_process_group() was called
    where: str | None  # where an error was raised or a hang was found
    probe_errors: tuple[str, ...] = ()  # hooks that failed (the script was not disturbed)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "status": self.status,
            "steps": self.steps,
            "params": self.params,
            "first_batch": self.first_batch,
            "saves": list(self.saves),
            "destroyed": self.destroyed,
            "where": self.where,
            "probe_errors": list(self.probe_errors),
        }


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of running one script under torchrun with the probe."""

    script: str
    nproc: int
    command: tuple[str, ...]
    max_steps: int | None
    returncode: int | None  # None when torchrun was killed at the timeout
    timed_out: bool
    duration_s: float
    ranks: tuple[RankReport, ...]
    checks: tuple[Check, ...]
    output: str  # the end of torchrun's stdout and stderr, for a person to read

    @property
    def ok(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def check(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def format_table(self) -> str:
        """A plain-text table of the ranks, then one line per failed check (or a summary)."""
        header = ("rank", "status", "steps", "params", "first batch", "destroyed", "saves", "where")
        rows: list[tuple[str, ...]] = [header]
        for rank in self.ranks:
            rows.append(
                (
                    str(rank.rank),
                    rank.status,
                    _cell(rank.steps),
                    _cell(rank.params),
                    _cell(rank.first_batch),
                    _cell(None if rank.destroyed is None else ("yes" if rank.destroyed else "no")),
                    ", ".join(rank.saves) or "-",
                    _cell(rank.where),
                )
            )
        if all(rank.where is None for rank in self.ranks):
            rows = [row[:-1] for row in rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        lines.extend(f"probe error on rank {rank.rank}: {error}" for rank in self.ranks for error in rank.probe_errors)
        if self.ok:
            lines.append(f"ok: all {len(self.checks)} checks passed ({', '.join(c.name for c in self.checks)})")
        else:
            lines.extend(f"FAILED {check.name}: {check.message}" for check in self.failed)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "nproc": self.nproc,
            "command": list(self.command),
            "max_steps": self.max_steps,
            "ok": self.ok,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "checks": [check.to_json() for check in self.checks],
            "ranks": [rank.to_json() for rank in self.ranks],
            "output": self.output,
        }


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
