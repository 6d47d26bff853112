"""How fast ddpify converts, measured against the cost of libcst itself.

Inputs: every single-GPU example, a ~1,000-line multi-task script built from
the examples, and generated 1,000-, 5,000- and 20,000-line scripts (many
helper classes and functions, then one training program); see ``_inputs.py``.

(a) floor   ``libcst.parse_module(src).code``: parsing and printing, the least
            any libcst-based converter pays;
(b) convert ``ddpify.convert(src, path=...)``; ratio b/a, target <= 1.5;
    growth exponent of (b) against lines (log-log least squares), target
    <= 1.05, fitted twice: on the realistic 1k script with the generated
    5k/20k ones, and on the generated 1k/5k/20k ones alone (one family of
    code, so the fit sees only growth, not a change of style);
(c) CLI     ``python -m ddpify FILE -o OUT`` against
            ``python -c "import libcst, sys; libcst.parse_module(open(sys.argv[1]).read()).code" FILE``,
            each a fresh process, by its CPU time (user + system, from
            ``getrusage(RUSAGE_CHILDREN)``: what a user waits for on an idle
            machine, and less disturbed by a busy one than wall time);
            ratio target <= 3.

Measurements are interleaved: each round measures every input once, (a) and
(b) -- and the two commands of (c) -- back to back, in an order flipped every
round. Ratios are taken per round, then summarised as median [min-max].

The run is bounded by ``--budget`` seconds (0: none): rounds stop early, and
the large scaling inputs are skipped, when the time left would not cover
them; what was cut is printed. ``--budget 0`` measures everything.

    .venv/bin/python benchmarks/conversion_speed.py [--repeat 5] [--budget 300]
        [--sizes 1000,5000,20000] [--size-repeat 3] [--no-cli]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import libcst
from _inputs import examples, generated_script, line_count, realistic_script
from _timing import (
    PYTHON,
    ROOT,
    Budget,
    loglog_slope,
    machine,
    ratio_summary,
    ratios,
    run_cpu,
    summary,
    table,
    timed,
    verdict,
)

import ddpify

FLOOR_COMMAND = "import libcst, sys; libcst.parse_module(open(sys.argv[1]).read()).code"
RATIO_TARGET = 1.5
EXPONENT_TARGET = 1.05
CLI_TARGET = 3.0
# Assumed growth when predicting whether a larger input fits in the budget.
PREDICTION_EXPONENT = 1.15


@dataclass
class Input:
    label: str
    path: Path
    source: str
    floor: list[float] = field(default_factory=list)
    convert: list[float] = field(default_factory=list)
    cli_floor: list[float] = field(default_factory=list)
    cli: list[float] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return line_count(self.source)

    def round_cost(self, with_cli: bool) -> float:
        cost = self.floor[-1] + self.convert[-1]
        if with_cli and self.cli:
            cost += self.cli_floor[-1] + self.cli[-1]
        return cost


def measure_in_process(item: Input, flip: bool) -> None:
    def floor() -> None:
        item.floor.append(timed(lambda: libcst.parse_module(item.source).code))

    def convert() -> None:
        results = []
        item.convert.append(timed(lambda: results.append(ddpify.convert(item.source, path=str(item.path)))))
        check_converted(item, results[0])

    for step in (convert, floor) if flip else (floor, convert):
        step()


def measure_cli(item: Input, out_dir: Path, flip: bool) -> None:
    out = out_dir / f"{item.path.stem}_ddp.py"

    def floor() -> None:
        item.cli_floor.append(run_cpu([PYTHON, "-c", FLOOR_COMMAND, str(item.path)], cwd=ROOT).cpu)

    def cli() -> None:
        item.cli.append(run_cpu([PYTHON, "-m", "ddpify", str(item.path), "-o", str(out)], cwd=ROOT).cpu)

    for step in (cli, floor) if flip else (floor, cli):
        step()


def check_converted(item: Input, result: ddpify.Conversion) -> None:
    """A benchmark input that does not convert would make its timing meaningless."""
    if result.status is not ddpify.Status.CONVERTED:
        raise SystemExit(f"{item.label}: convert() returned {result.status.value}: {result.diagnostics}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds over the examples and the 1k script")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run; 0: no limit")
    parser.add_argument("--sizes", default="1000,5000,20000", help="line counts of the generated scaling inputs")
    parser.add_argument("--size-repeat", type=int, default=3, help="rounds for each generated scaling input")
    parser.add_argument("--realistic-lines", type=int, default=1000)
    parser.add_argument("--no-cli", action="store_true", help="skip (c), the subprocess comparison")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    print(f"conversion_speed: {machine()}")
    print(f"ddpify {ddpify.__version__}, libcst from {Path(libcst.__file__).parent}")
    work = Path(tempfile.mkdtemp(prefix="ddpify-bench-"))
    items: list[Input] = []
    for name, source in examples().items():
        path = work / f"{name}.py"
        path.write_text(source)
        items.append(Input(name, path, source))
    realistic = realistic_script(args.realistic_lines)
    path = work / "realistic_1k.py"
    path.write_text(realistic)
    items.append(Input(f"realistic ({line_count(realistic)} lines)", path, realistic))

    # Warm-up: imports and libcst's lazily built tables.
    _ = libcst.parse_module(items[0].source).code
    ddpify.convert(items[0].source)

    with_cli = not args.no_cli
    for round_index in range(args.repeat):
        if round_index and not budget.allows(sum(i.round_cost(with_cli) for i in items)):
            print(f"budget: stopping after {round_index} of {args.repeat} rounds (--budget 0 for all)")
            break
        flip = round_index % 2 == 1
        for item in items:
            measure_in_process(item, flip)
            if with_cli:
                measure_cli(item, work, flip)
        print(f"  round {round_index + 1}/{args.repeat} done ({budget.left():.0f}s of budget left)", file=sys.stderr)

    rows = []
    for item in items:
        rows.append(
            [
                item.label,
                str(item.lines),
                summary(item.floor),
                summary(item.convert),
                ratio_summary(ratios(item.convert, item.floor)),
            ]
        )
    print("\n(a) libcst floor vs (b) convert(), in process, seconds: median [min-max]; ratio per round")
    print(table(["input", "lines", "(a) parse+code", "(b) convert()", "b/a"], rows))
    example_ratios = [statistics.median(ratios(i.convert, i.floor)) for i in items[:-1]]
    realistic_ratio = statistics.median(ratios(items[-1].convert, items[-1].floor))
    print(
        f"b/a, median over the examples: {statistics.median(example_ratios):.2f}x -- "
        f"{verdict(statistics.median(example_ratios), RATIO_TARGET)}"
    )
    print(f"b/a, realistic script: {realistic_ratio:.2f}x -- {verdict(realistic_ratio, RATIO_TARGET)}")

    if with_cli:
        rows = []
        for item in items:
            rows.append(
                [
                    item.label,
                    summary(item.cli_floor),
                    summary(item.cli),
                    ratio_summary(ratios(item.cli, item.cli_floor)),
                ]
            )
        print("\n(c) CLI end to end vs `python -c <parse+code>`, subprocess CPU seconds (user+sys)")
        print(table(["input", "python -c parse", "python -m ddpify -o", "ratio"], rows))
        cli_examples = statistics.median(statistics.median(ratios(i.cli, i.cli_floor)) for i in items[:-1])
        cli_realistic = statistics.median(ratios(items[-1].cli, items[-1].cli_floor))
        print(f"CLI ratio, median over the examples: {cli_examples:.2f}x -- {verdict(cli_examples, CLI_TARGET)}")
        print(f"CLI ratio, realistic script: {cli_realistic:.2f}x -- {verdict(cli_realistic, CLI_TARGET)}")

    scaling(items[-1], sizes, args.size_repeat, budget, work)
    return 0


def scaling(realistic: Input, sizes: list[int], repeat: int, budget: Budget, work: Path) -> None:
    """Convert time against lines: the realistic script and the generated ones, interleaved per round.

    Every round measures every size, so a change in the machine's load over
    the (long) run falls on all sizes alike; the exponent is fitted to the
    medians, and per round too (its spread shows how much the noise moves it).
    """
    print("\nscaling: convert() against lines (generated inputs: helper library + one training program)")
    base = Input(realistic.label, realistic.path, realistic.source)
    base_cost = statistics.median(realistic.convert) + statistics.median(realistic.floor)
    points = [base]
    for size in sizes:
        source = generated_script(size)
        path = work / f"generated_{size}.py"
        path.write_text(source)
        points.append(Input(f"generated ({line_count(source)} lines)", path, source))

    def predicted(point: Input) -> float:
        return base_cost * (point.lines / base.lines) ** PREDICTION_EXPONENT

    fitting = 1
    while fitting < len(points) and budget.allows(sum(predicted(p) for p in points[: fitting + 1])):
        fitting += 1
    for skipped in points[fitting:]:
        print(
            f"  {skipped.label}: skipped, a round up to this size is predicted to take "
            f"{sum(predicted(p) for p in points[: points.index(skipped) + 1]):.0f}s > "
            f"{max(0.0, budget.left()):.0f}s of budget left; run with --budget 0 to measure it"
        )
    points = points[:fitting]
    round_cost = sum(predicted(p) for p in points)
    rounds = repeat if budget.left() == float("inf") else max(1, min(repeat, int(budget.left() // round_cost)))
    for round_index in range(rounds):
        for point in points:
            measure_in_process(point, flip=round_index % 2 == 1)
            print(f"  scaling round {round_index + 1}/{rounds}: {point.label} done", file=sys.stderr)

    rows = [
        [
            p.label,
            str(p.lines),
            summary(p.floor),
            summary(p.convert),
            ratio_summary(ratios(p.convert, p.floor)),
            f"{statistics.median(p.convert) / p.lines * 1000:.2f}",
        ]
        for p in points
    ]
    print(table(["input", "lines", "(a) parse+code", "(b) convert()", "b/a", "ms/line"], rows))
    generated = points[1:]
    fits = {
        f"realistic {base.lines} lines + generated": [base, *(p for p in generated if p.lines > 1.5 * base.lines)],
        "generated only": generated,
    }
    for name, fitted in fits.items():
        if len(fitted) < 2:
            print(f"growth exponent ({name}): needs at least two sizes (run with --budget 0)")
            continue
        lines = [p.lines for p in fitted]
        exponent = loglog_slope(lines, [statistics.median(p.convert) for p in fitted])
        per_round = [loglog_slope(lines, [p.convert[r] for p in fitted]) for r in range(rounds)]
        floor_exponent = loglog_slope(lines, [statistics.median(p.floor) for p in fitted])
        print(
            f"growth exponent of convert(), {name}, {'/'.join(str(n) for n in lines)} lines: {exponent:.3f} "
            f"(per round {min(per_round):.3f}-{max(per_round):.3f}, {rounds} rounds; libcst floor "
            f"{floor_exponent:.3f}) -- {verdict(exponent, EXPONENT_TARGET, relative=False)}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
