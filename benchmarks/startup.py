"""How long ``ddpify --version`` and ``ddpify --help`` take to start, and what they import.

Runs ``python -X importtime -m ddpify --version`` and ``... --help``,
alternately, ``--repeat`` times each, and parses the import-time report
(stderr): the total import time (the sum of every module's self time), the
process's wall time, whether libcst, torch or rich were imported (none of
them is needed to print a version or the help), and the ten modules with the
largest self time (median over the runs). For scale, two more commands are
measured alongside: ``python -c pass`` (the interpreter alone) and a
conversion, ``ddpify examples/mnist_cnn.py -o OUT`` (what the CLI figures of
``conversion_speed.py`` pay in imports).

Two bytecode settings are measured, interleaved:

* ``as configured`` -- the environment as it is. Where PYTHONDONTWRITEBYTECODE
  is set and ddpify has no ``__pycache__`` (an editable install run that
  way), every start compiles ddpify's modules from source;
* ``bytecode cached`` -- PYTHONPYCACHEPREFIX points to a temporary folder that
  a first, untimed run fills, as ``pip install`` would have compiled the
  package; nothing is written into the source tree.

    .venv/bin/python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import PYTHON, ROOT, machine, summary, table

LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")
WATCHED = ("libcst", "torch", "rich")
# label -> arguments after `python -X importtime`
COMMANDS = {
    "ddpify --version": ["-m", "ddpify", "--version"],
    "ddpify --help": ["-m", "ddpify", "--help"],
    # For scale: what a conversion imports (the CLI figures of conversion_speed.py include it).
    "ddpify mnist_cnn.py -o OUT": ["-m", "ddpify", "examples/mnist_cnn.py", "-o", "{out}"],
    # For scale: the interpreter's own start-up.
    "python -c pass": ["-c", "pass"],
}
WITHOUT_LIBCST = ("ddpify --version", "ddpify --help")


@dataclass(frozen=True)
class Run:
    wall: float
    total_us: int
    self_us: dict[str, int]

    def imported(self, package: str) -> bool:
        return any(name == package or name.startswith(package + ".") for name in self.self_us)


def parse_importtime(stderr: str) -> dict[str, int]:
    """module -> self time in microseconds, from ``-X importtime`` output."""
    result: dict[str, int] = {}
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match:
            result[match.group(4)] = result.get(match.group(4), 0) + int(match.group(1))
    return result


def run_once(label: str, env: dict[str, str], out: str) -> Run:
    command = [arg.format(out=out) for arg in COMMANDS[label]]
    start = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-X", "importtime", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    modules = parse_importtime(done.stderr)
    return Run(wall, sum(modules.values()), modules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    print(f"startup: {machine()}")
    as_configured = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="ddpify-pycache-")
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = cache
    settings = {"as configured": as_configured, "bytecode cached": cached}
    print(
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}; "
        f"ddpify/__pycache__ present: {(ROOT / 'ddpify' / '__pycache__').is_dir()}"
    )
    out = str(Path(cache) / "mnist_cnn_ddp.py")
    for label in COMMANDS:  # fill the cache, untimed
        run_once(label, cached, out)

    runs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    keys = [(setting, label) for setting in settings for label in COMMANDS]
    for index in range(args.repeat):
        for setting, label in keys if index % 2 == 0 else reversed(keys):
            runs[setting, label].append(run_once(label, settings[setting], out))

    rows = []
    for setting, label in keys:
        measured = runs[setting, label]
        rows.append(
            [
                label,
                setting,
                summary([r.total_us / 1000 for r in measured], "ms", 1),
                summary([r.wall * 1000 for r in measured], "ms", 0),
                str(statistics.median(len(r.self_us) for r in measured)),
                *("yes" if any(r.imported(p) for r in measured) else "no" for p in WATCHED),
            ]
        )
    print("\nimport time (sum of self times) and process wall time: median [min-max]")
    print(f"(target: {' and '.join(WITHOUT_LIBCST)} import none of {', '.join(WATCHED)})")
    print(table(["command", "bytecode", "import time", "wall", "modules", *WATCHED], rows))

    for setting, label in keys:
        if label == "python -c pass":
            continue
        measured = runs[setting, label]
        names = set().union(*(r.self_us for r in measured))
        medians = {n: statistics.median(r.self_us.get(n, 0) for r in measured) for n in names}
        top = sorted(medians.items(), key=lambda item: -item[1])[:10]
        total = statistics.median(r.total_us for r in measured)
        print(f"\ntop 10 self-time modules, {label}, {setting} (median over {len(measured)} runs):")
        print(
            table(
                ["module", "self", "share"],
                [[name, f"{us / 1000:.1f}ms", f"{100 * us / total:.0f}%"] for name, us in top],
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
