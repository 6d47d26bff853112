"""Throughput on a folder of scripts: files per second with 1 and 2 worker processes.

The folder holds ``--files`` (200) scripts: renamed variants of the bundled
examples, round-robin (see ``_inputs.variant``), no two byte-identical.

Two ways to convert them (``--mode``; ``auto`` picks ``cli`` when
``ddpify --help`` lists ``-j/--jobs``, else ``pool``):

* ``cli``  -- ``python -m ddpify -j N IN_FOLDER -o OUT_FOLDER``, the whole
  command timed (start-up included), exit status 0 and one output per input
  checked;
* ``pool`` -- a ``concurrent.futures.ProcessPoolExecutor`` of N workers, each
  reading a script, calling ``ddpify.convert()`` and writing the result (for
  a CLI without ``--jobs``); the pool's start is timed too.

Passes alternate between 1 and 2 workers (``--repeat`` of each, order flipped
every round). A pure-Python busy loop run with 1 and 2 processes before and
after the passes shows how much parallelism the (shared) machine offered.

Bounded by ``--budget`` seconds (0: none): a serial sample of one variant per
example predicts the run's length, and when 200 files would not fit the
folder is cut to what does (files/s does not depend on the count); the cut is
printed. ``--budget 0`` always converts all of them.

    .venv/bin/python benchmarks/many_files.py [--files 200] [--repeat 1] [--budget 300] [--mode auto|cli|pool]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _inputs import examples, variant
from _timing import PYTHON, ROOT, Budget, machine, summary, table, timed

import ddpify

WORKERS = (1, 2)


def convert_file(path: str) -> str:
    source = Path(path).read_bytes()
    result = ddpify.convert(source, path=path)
    out = Path(path).parent.parent / "pool_out" / Path(path).name
    out.write_bytes(result.code)
    return result.status.value


def convert_in_pool(paths: list[str], workers: int, out: Path) -> float:
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        statuses = list(pool.map(convert_file, paths))
    wall = time.perf_counter() - start
    if statuses.count("converted") != len(paths):
        raise SystemExit(f"only {statuses.count('converted')} of {len(paths)} converted: {sorted(set(statuses))}")
    return wall


def convert_with_cli(paths: list[str], workers: int, out: Path) -> float:
    source_folder = Path(paths[0]).parent
    out.mkdir(exist_ok=True)
    for old in out.rglob("*.py"):
        old.unlink()
    command = [PYTHON, "-m", "ddpify", "-j", str(workers), str(source_folder), "-o", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    written = len(list(out.rglob("*.py")))
    if done.returncode != 0 or written != len(paths):
        raise SystemExit(
            f"{' '.join(command)}: exit {done.returncode}, {written} of {len(paths)} written\n{done.stderr[-3000:]}"
        )
    return wall


def spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def parallelism(tasks: int = 4, n: int = 3_000_000) -> float:
    """Speed-up of 2 worker processes over 1 on pure-Python busy loops: what the machine offers now."""
    walls = {}
    for workers in (1, 2):
        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=workers) as pool:
            list(pool.map(spin, [n] * tasks))
        walls[workers] = time.perf_counter() - start
    return walls[1] / walls[2]


def cli_has_jobs() -> bool:
    done = subprocess.run([PYTHON, "-m", "ddpify", "--help"], cwd=ROOT, capture_output=True, text=True)
    return "--jobs" in done.stdout or " -j" in done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="passes with each worker count")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run; 0: no limit")
    parser.add_argument("--mode", choices=("auto", "cli", "pool"), default="auto")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)

    print(f"many_files: {machine()}")
    mode = args.mode if args.mode != "auto" else ("cli" if cli_has_jobs() else "pool")
    convert_folder = convert_with_cli if mode == "cli" else convert_in_pool
    print(
        "mode: "
        + ("`python -m ddpify -j N IN -o OUT`" if mode == "cli" else "ProcessPoolExecutor(N) calling ddpify.convert()")
    )
    root = Path(tempfile.mkdtemp(prefix="ddpify-many-"))
    folder = root / "scripts"
    folder.mkdir()
    (root / "pool_out").mkdir()
    names = list(examples())
    paths = []
    for index in range(args.files):
        name = names[index % len(names)]
        path = folder / f"{name}_{index:03d}.py"
        path.write_text(variant(name, index // len(names)))
        paths.append(str(path))
    print(f"{len(paths)} scripts ({', '.join(names)}, round-robin) in {folder}")

    # Warm the parent (its imports are inherited by forked workers), then predict the run's length.
    sample = paths[: len(names)]
    per_file = statistics.fmean(timed(lambda p=p: convert_file(p)) for p in sample)
    passes = args.repeat * len(WORKERS)
    predicted = per_file * len(paths) * args.repeat * sum(1 / w for w in WORKERS) * 1.1
    if not budget.allows(predicted):
        keep = max(len(names), int(len(paths) * budget.left() / predicted))
        print(
            f"budget: {len(paths)} files would take ~{predicted:.0f}s ({per_file:.2f}s per file serially); "
            f"converting the first {keep} (--budget 0 for all)"
        )
        for dropped in paths[keep:]:
            Path(dropped).unlink()
        paths = paths[:keep]

    calibration = [parallelism()]
    walls: dict[int, list[float]] = {w: [] for w in WORKERS}
    for round_index in range(args.repeat):
        for workers in WORKERS if round_index % 2 == 0 else reversed(WORKERS):
            wall = convert_folder(paths, workers, root / "cli_out")
            walls[workers].append(wall)
            print(f"  {workers} worker(s): {wall:.1f}s", file=sys.stderr)

    calibration.append(parallelism())
    rows = []
    for workers in WORKERS:
        rates = [len(paths) / w for w in walls[workers]]
        rows.append([str(workers), summary(walls[workers], "s", 1), summary(rates, " files/s", 2)])
    print(f"\n{len(paths)} files, {passes} passes; wall and files/s: median [min-max]")
    print(table(["workers", "wall", "throughput"], rows))
    speedups = [one / two for one, two in zip(walls[1], walls[2])]
    print(
        f"speed-up 2 workers / 1 worker: {statistics.median(speedups):.2f}x "
        f"[{min(speedups):.2f}-{max(speedups):.2f}] on {os.cpu_count()} CPUs (ideal {min(2, os.cpu_count() or 1)}x)"
    )
    print(
        f"what the machine offered: 2 processes of a pure-Python busy loop ran "
        f"{' and '.join(f'{c:.2f}x' for c in calibration)} as fast as 1 (before and after the passes)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
