"""Where convert() spends its time: cProfile on a generated script.

Profiles one ``ddpify.convert()`` of the generated ``--lines`` (5,000) line
input that ``conversion_speed.py`` uses (after an untimed warm-up on a small
example) and prints:

* the functions of ddpify itself by cumulative time -- the hot spots;
* every function by self time (mostly libcst's visitors and metadata);
* how often the whole tree is walked (libcst ``Module.visit``), how often the
  libcst parser runs, and how many nodes ddpify's own ``walk()`` yields.

cProfile slows pure-Python code several times over; the shares, not the
seconds, are what to read.

    .venv/bin/python benchmarks/profile_convert.py [--lines 5000] [--top 25] [--save FILE.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _inputs import examples, generated_script, line_count
from _timing import ROOT, machine, table

import ddpify

DDPIFY_DIR = str(ROOT / "ddpify")


def short(key: tuple[str, int, str]) -> str:
    filename, line, function = key
    for prefix in (str(ROOT) + "/", "site-packages/"):
        if prefix in filename:
            filename = filename.split(prefix, 1)[1]
    return f"{filename}:{line}({function})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", help="also write the raw profile here (for snakeviz, pstats)")
    args = parser.parse_args(argv)

    print(f"profile_convert: {machine()}")
    source = generated_script(args.lines)
    ddpify.convert(examples()["mnist_cnn"])  # warm-up: imports, libcst's lazily built tables
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    result = ddpify.convert(source, path=f"generated_{args.lines}.py")
    profiler.disable()
    wall = time.perf_counter() - start
    print(
        f"convert() of a generated {line_count(source)}-line script under cProfile: {wall:.1f}s, "
        f"status {result.status.value}"
    )
    if args.save:
        profiler.dump_stats(args.save)

    stats = pstats.Stats(profiler).stats  # key -> (primitive calls, calls, self, cumulative, callers)
    total = max(cumulative for _, _, _, cumulative, _ in stats.values())

    ours = sorted(
        ((key, value) for key, value in stats.items() if key[0].startswith(DDPIFY_DIR)),
        key=lambda item: -item[1][3],
    )[: args.top]
    print("\nddpify functions by cumulative time (share of convert()):")
    print(
        table(
            ["cumulative", "share", "self", "calls", "function"],
            [[f"{v[3]:.2f}s", f"{100 * v[3] / total:.0f}%", f"{v[2]:.2f}s", str(v[1]), short(k)] for k, v in ours],
        )
    )

    by_self = sorted(stats.items(), key=lambda item: -item[1][2])[:15]
    print("\nall functions by self time:")
    print(
        table(
            ["self", "share", "calls", "function"],
            [[f"{v[2]:.2f}s", f"{100 * v[2] / total:.0f}%", str(v[1]), short(k)] for k, v in by_self],
        )
    )

    def calls(predicate) -> int:
        return sum(v[1] for k, v in stats.items() if predicate(k))

    module_visits = calls(lambda k: k[0].endswith("libcst/_nodes/module.py") and k[2] == "visit")
    walked = calls(lambda k: k[0].startswith(DDPIFY_DIR) and k[2] in ("walk", "_walk"))
    parses = calls(lambda k: k[0].endswith("libcst/_parser/entrypoints.py") and k[2] == "_parse")
    print(
        f"\nwhole-module libcst traversals (Module.visit): {module_visits}; libcst parser runs: {parses}; "
        f"nodes yielded by ddpify's walk(): {walked}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
