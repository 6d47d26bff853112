"""Timing helpers shared by the benchmarks: a time budget, summaries, a table printer.

The benchmarks run on shared, noisy machines, so every comparison is made
within one run, the two sides are measured alternately (their order flipped
every round), and what is reported is the median with its spread. A ratio is
taken per round -- between measurements made seconds apart -- and then
summarised, which cancels most of the drift in the machine's load.
"""

from __future__ import annotations

import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def run_wall(argv: Sequence[str], **kwargs: object) -> float:
    """Wall time of a subprocess; it must succeed."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - start


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process that has ended and been waited for:
    with their own children (a worker pool), as far as each waited for them."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Run:
    """One subprocess: its CPU seconds (user + system, with the worker processes it waited for),
    wall seconds, exit code, peak memory of the command's own process (MiB) and error output."""

    cpu: float
    wall: float
    code: int
    peak_mib: float
    stderr: str


def run_cpu(
    argv: Sequence[str], *, ok: Sequence[int] = (0,), cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> Run:
    """Run ``argv`` to its end; an exit code outside ``ok`` stops the benchmark with its error output."""
    before = children_cpu()
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env)
    assert child.stderr is not None
    err = child.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"{' '.join(map(str, argv))}: exit {code}\n{err[-3000:]}")
    factor = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return Run(children_cpu() - before, wall, code, usage.ru_maxrss * factor / 2**20, err)


def summary(values: Sequence[float], unit: str = "s", digits: int = 3) -> str:
    """``median [min-max] (N=n)``."""
    if not values:
        return "n/a"
    med = statistics.median(values)
    return f"{med:.{digits}f}{unit} [{min(values):.{digits}f}-{max(values):.{digits}f}] (N={len(values)})"


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    return [a / b for a, b in zip(numerators, denominators)]


def ratio_summary(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


def verdict(value: float, target: float, relative: bool = True) -> str:
    if value <= target:
        return f"meets target <= {target}"
    by = f"{value / target:.1f}x ({value - target:+.2f})" if relative else f"{value - target:+.3f}"
    return f"MISSES target <= {target} by {by}"


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): the growth exponent."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine() -> str:
    try:
        load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "load average n/a"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{stamp}; {platform.machine()}, {os.cpu_count()} CPUs, {load}; Python {platform.python_version()}"


class Budget:
    """Seconds left for a benchmark; 0 means no limit."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds if seconds > 0 else math.inf

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def allows(self, seconds: float) -> bool:
        return seconds <= self.left()
