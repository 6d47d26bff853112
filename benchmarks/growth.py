"""How the cost of one program grows with its modules, and what the files around it cost.

A user runs ``ddpify train.py --diff`` in the program's folder; this measures
that command, in a fresh process, by its CPU time (user + system, from
``getrusage(RUSAGE_CHILDREN)``), on generated programs:

(a) growth  an entry script and ``n`` modules; every module holds a
            DataLoader factory, a checkpoint save and a print, and the entry
            uses all three of every module in its training loop, so that every
            module is analysed and rewritten. ``--modules`` (default 100, 200,
            400) are measured in every round; the growth exponent is the
            log-log least-squares slope of CPU time against ``n``, per round.
            **Target: at most linear (exponent <= 1.0).**
(b) noise   a program of five files (the entry and four of its modules)
            alone in its folder, and the same program in a folder that also
            holds ``--unrelated`` (default 5,000) ``*.py`` files it never
            imports. **Target: about the same cost (ratio near 1).**

Both folders carry a ``pyproject.toml``, so the folder is the project's root,
as in a real checkout. Rounds alternate the order of the measurements; ratios
and exponents are taken per round and summarised as median [min-max].

    .venv/bin/python benchmarks/growth.py [--modules 100,200,400] [--unrelated 5000] [--repeat 3] [--budget 600]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import PYTHON, ROOT, Budget, loglog_slope, machine, ratio_summary, run_cpu, summary, table

MODULE = '''"""Part {i} of the program: its data, its checkpoint, its report."""
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader_{i}(batch_size):
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    return DataLoader(data, batch_size=batch_size, shuffle=True)


def save_{i}(model, path):
    torch.save(model.state_dict(), path)


def report_{i}(epoch, loss):
    print(f"part {i} epoch {{epoch}}: {{loss:.4f}}")
'''

ENTRY = '''"""Train one model on the data of every part of the program."""
import torch

{imports}


def train_on(model, optimizer, loader):
    loss = torch.zeros(())
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
{uses}


if __name__ == "__main__":
    main()
'''

USE = """        loader_{i} = part_{i}.make_loader_{i}(8)
        loss = train_on(model, optimizer, loader_{i})
        part_{i}.report_{i}(epoch, loss)
        part_{i}.save_{i}(model, "part_{i}.pt")
"""

UNRELATED = '''"""A module nothing imports."""
import os


def helper_{i}(path):
    return sorted(os.listdir(path))[:{i}]
'''


def program(folder: Path, modules: int) -> None:
    """An entry script ``train.py`` and ``modules`` modules ``part_<i>.py`` beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "program"\n')
    names = [f"{i:04d}" for i in range(modules)]
    for i in names:
        (folder / f"part_{i}.py").write_text(MODULE.format(i=i))
    imports = "\n".join(f"import part_{i}" for i in names)
    uses = "".join(USE.format(i=i) for i in names)
    (folder / "train.py").write_text(ENTRY.format(imports=imports, uses=uses.rstrip("\n")))


def with_unrelated(folder: Path, modules: int, unrelated: int) -> None:
    program(folder, modules)
    for i in range(unrelated):
        (folder / f"other_{i:05d}.py").write_text(UNRELATED.format(i=i))


def ddpify_cpu(folder: Path) -> tuple[float, float]:
    """CPU and wall seconds of ``ddpify train.py --diff`` run in ``folder``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    run = run_cpu([PYTHON, "-m", "ddpify", "train.py", "--diff", "-q"], cwd=folder, env=env)
    if "already distributed" in run.stderr or "nothing to do" in run.stderr:
        raise SystemExit(f"{folder}: the program was not converted:\n{run.stderr[-2000:]}")
    return run.cpu, run.wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", default="100,200,400", help="module counts of (a)")
    parser.add_argument("--unrelated", type=int, default=5000, help="files beside the program in (b)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run; 0: no limit")
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--skip-noise", action="store_true")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    sizes = [int(n) for n in args.modules.split(",")]

    print(f"growth: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="ddpify-growth-"))
    try:
        if not args.skip_growth:
            for n in sizes:
                program(work / f"modules_{n}", n)
            cpu: dict[int, list[float]] = {n: [] for n in sizes}
            exponents: list[float] = []
            for round_index in range(args.repeat):
                order = sizes if round_index % 2 == 0 else list(reversed(sizes))
                for n in order:
                    cpu[n].append(ddpify_cpu(work / f"modules_{n}")[0])
                exponents.append(loglog_slope(sizes, [cpu[n][-1] for n in sizes]))
                print(
                    f"  round {round_index + 1}: "
                    + ", ".join(f"{n} modules {cpu[n][-1]:.1f}s" for n in sizes)
                    + f"; exponent {exponents[-1]:.2f}",
                    file=sys.stderr,
                )
                if round_index + 1 < args.repeat and not budget.allows(sum(cpu[n][-1] for n in sizes) * 1.2):
                    print(f"budget: stopping after {round_index + 1} of {args.repeat} rounds (--budget 0 for all)")
                    break
            rows = [[str(n), summary(cpu[n], "s", 2), f"{1000 * min(cpu[n]) / n:.1f} ms"] for n in sizes]
            print("\n(a) `ddpify train.py --diff`, CPU (user+sys) of the command, median [min-max] (N=rounds)")
            print(table(["modules", "CPU", "min CPU per module"], rows))
            print(f"growth exponent per round: {ratio_summary(exponents).replace('x', '')} (target <= 1.0)")

        if not args.skip_noise:
            alone, crowded = work / "alone", work / "crowded"
            program(alone, 4)
            with_unrelated(crowded, 4, args.unrelated)
            costs: dict[str, list[float]] = {"alone": [], "crowded": []}
            for round_index in range(args.repeat):
                order = ["alone", "crowded"] if round_index % 2 == 0 else ["crowded", "alone"]
                for label in order:
                    costs[label].append(ddpify_cpu(alone if label == "alone" else crowded)[0])
                if round_index + 1 < args.repeat and not budget.allows(costs["crowded"][-1] * 2.5):
                    print(f"budget: stopping after {round_index + 1} of {args.repeat} rounds (--budget 0 for all)")
                    break
            per_round = [c / a for c, a in zip(costs["crowded"], costs["alone"])]
            print(
                f"\n(b) a 5-file program, `ddpify train.py --diff`, CPU, alone and among {args.unrelated} other files"
            )
            print(
                table(
                    ["folder", "CPU", "ratio to alone"],
                    [
                        ["alone", summary(costs["alone"], "s", 2), "1.00x"],
                        [f"+{args.unrelated} files", summary(costs["crowded"], "s", 2), ratio_summary(per_round)],
                    ],
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
