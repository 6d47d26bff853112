"""Does a ddpify-converted script train as fast as a hand-written DDP script?

Converts ``tutorial_single.py`` with ``ddpify.convert()`` into a temporary
file, then runs it and ``reference_ddp.py`` (the same program made
data-parallel by hand) under ``torchrun --standalone --nproc_per_node=2``,
alternately, ``--runs`` times each (the order flipped every pair). Rank 0 of
each run writes the wall time of every timed training step (after the
warm-up; process start-up and set-up are not timed) to a JSON file.

Reported: the median time per step of each program (the median over runs of
each run's median step), the ratio converted/reference per pair of runs --
its median and spread -- and the number of runs. Target: the ratio within 2%
of 1. The same ratio of each run's 10th-percentile step is printed too: on a
shared machine the slowest steps are those another job disturbed, and the
fastest still contain all of a step's work (its all-reduce included).

Before any run, the timing code (the "step timing" block and
``train_one_epoch``) is checked to be identical in the three programs, so
the two sides time exactly the same statements.

``--aa`` replaces the converted script by a copy of ``reference_ddp.py``: the
spread of that A/A ratio is what this machine can resolve.

    .venv/bin/python benchmarks/step_overhead.py [--runs 5] [--steps 200] [--nproc 2] [--aa]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import PYTHON, machine, summary, table

import ddpify

HERE = Path(__file__).resolve().parent
SINGLE = HERE / "tutorial_single.py"
REFERENCE = HERE / "reference_ddp.py"
BEGIN = "# --- step timing: begin"
END = "# --- step timing: end ---"
TARGET = 0.02
RUN_TIMEOUT_S = 600


def timing_code(source: str) -> str:
    """The step-timing block and the timed loop (``train_one_epoch``), as written."""
    block = source[source.index(BEGIN) : source.index(END)]
    loop = next(
        node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "train_one_epoch"
    )
    return block + ast.get_source_segment(source, loop)


def torchrun() -> list[str]:
    script = Path(PYTHON).with_name("torchrun")
    return [str(script)] if script.exists() else [PYTHON, "-m", "torch.distributed.run"]


def run(script: Path, out: Path, args: argparse.Namespace) -> tuple[list[float], float]:
    """One torchrun job: rank 0's step times, and the job's wall time."""
    command = [
        *torchrun(),
        "--standalone",
        f"--nproc_per_node={args.nproc}",
        str(script),
        "--steps",
        str(args.steps),
        "--warmup-steps",
        str(args.warmup_steps),
        "--step-times",
        str(out),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=out.parent, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{script.name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result = json.loads(out.read_text())
    if result["world_size"] != args.nproc or len(result["step_times"]) != args.steps:
        raise SystemExit(f"{script.name}: unexpected result {result['world_size']=} {len(result['step_times'])=}")
    return result["step_times"], wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="torchrun jobs of each program")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per job")
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument(
        "--aa",
        action="store_true",
        help="an A/A run: reference_ddp.py against a copy of itself, to see this machine's noise",
    )
    args = parser.parse_args(argv)

    print(f"step_overhead: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="ddpify-step-"))
    single = SINGLE.read_text()
    conversion = ddpify.convert(single, path=str(SINGLE))
    if conversion.status is not ddpify.Status.CONVERTED:
        raise SystemExit(f"convert() returned {conversion.status.value}: {conversion.diagnostics}")
    converted = work / "tutorial_ddpify.py"
    converted.write_text(conversion.code)
    reference = work / REFERENCE.name
    reference.write_text(REFERENCE.read_text())
    expected = timing_code(single)
    for name, source in (("reference", reference.read_text()), ("converted", conversion.code)):
        if timing_code(source) != expected:
            raise SystemExit(f"the timing code of the {name} program differs from tutorial_single.py's")
    print(f"converted {SINGLE.name} -> {converted} ({len(conversion.changes)} changes); timing code identical")

    if args.aa:
        converted = work / "reference_copy.py"
        converted.write_text(REFERENCE.read_text())
        print("A/A run: the 'converted' side is a copy of reference_ddp.py")
    first = "reference copy" if args.aa else "converted"
    programs = {first: converted, "reference": reference}
    per_run: dict[str, list[float]] = {name: [] for name in programs}
    per_run_low: dict[str, list[float]] = {name: [] for name in programs}
    walls: dict[str, list[float]] = {name: [] for name in programs}
    everything: dict[str, list[float]] = {name: [] for name in programs}
    for index in range(args.runs):
        order = list(programs) if index % 2 == 0 else list(reversed(programs))
        for name in order:
            steps, wall = run(programs[name], work / f"{name}_{index}.json", args)
            per_run[name].append(statistics.median(steps))
            per_run_low[name].append(low_quantile(steps))
            everything[name].extend(steps)
            walls[name].append(wall)
            print(
                f"  run {index + 1}/{args.runs} {name}: median step {statistics.median(steps) * 1000:.2f}ms, "
                f"job {wall:.1f}s",
                file=sys.stderr,
            )

    rows = [
        [
            name,
            summary([t * 1000 for t in per_run[name]], "ms", 2),
            f"{statistics.median(everything[name]) * 1000:.2f}ms",
            summary([t * 1000 for t in per_run_low[name]], "ms", 2),
            summary(walls[name], "s", 1),
        ]
        for name in programs
    ]
    print(
        f"\n{args.runs} torchrun jobs per program, nproc={args.nproc}, {args.steps} timed steps after "
        f"{args.warmup_steps} warm-up steps; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(torchrun default)')}"
    )
    print(
        table(
            ["program", "median step per run: median [min-max]", "all steps pooled", "p10 step per run", "job wall"],
            rows,
        )
    )
    pairs = [c / r for c, r in zip(per_run[first], per_run["reference"])]
    ratio = statistics.median(pairs)
    within = abs(ratio - 1) <= TARGET
    print(
        f"{first}/reference time per step: {ratio:.3f} [{min(pairs):.3f}-{max(pairs):.3f}] over "
        f"{len(pairs)} pairs of runs -- "
        + (
            f"meets target (within {TARGET:.0%})"
            if within
            else f"MISSES target (within {TARGET:.0%}) by {(abs(ratio - 1) - TARGET) * 100:.1f} points"
        )
    )
    if len(pairs) > 1 and statistics.quantiles(pairs, n=4)[2] - statistics.quantiles(pairs, n=4)[0] > 2 * TARGET:
        print(
            f"caution: the pair ratios' interquartile range is wider than +-{TARGET:.0%}: on this machine now, "
            "the run cannot resolve the target (try more --runs, or a quieter machine; --aa shows the noise)"
        )
    low = [c / r for c, r in zip(per_run_low[first], per_run_low["reference"])]
    print(
        f"the same with each run's 10th-percentile step (the least disturbed steps; less sensitive to the "
        f"machine's other load): {statistics.median(low):.3f} [{min(low):.3f}-{max(low):.3f}]"
    )
    return 0


def low_quantile(values: list[float]) -> float:
    """The 10th percentile."""
    return statistics.quantiles(values, n=10)[0]


if __name__ == "__main__":
    raise SystemExit(main())
