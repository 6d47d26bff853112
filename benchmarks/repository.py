"""A whole repository: ``ddpify . --check``, ``ddpify . -o OUT`` and one entry script, against libcst's own cost.

Most files of a real repository never train: a model library, data code,
tests, tools. ddpify's first pass reads each file once with CPython's ``ast``
and hands only the programs that may train to the full analysis, so a folder
should cost a fraction of what libcst alone costs to read it.

Everything is measured as a user runs it: a fresh process, in the repository
(its working folder), by CPU time (user + system, the command with its worker
processes, from ``getrusage(RUSAGE_CHILDREN)``), so that neither the number of
free CPUs nor the machine's load changes the ratio much:

(a) floor   ``libcst.parse_module(src).code`` for every ``*.py`` of the
            repository, in one fresh process;
(b) check   ``python -m ddpify . --check -j 2 -q``;
(c) folder  ``python -m ddpify . -o OUT/ -j 2 -q`` (every output written);
(d) entry   ``python -m ddpify ENTRY --diff`` for ``--entry`` (default
            ``train.py`` when the repository has one): one program, with
            every module of the repository it imports.

Targets: b/a and c/a <= 0.5, d/a <= 0.1. Each round measures every step back
to back, in an order flipped every round; ratios are taken per round and
summarised as median [min-max]. Wall time and the peak memory (max RSS) of the
command's own process are printed too.

The repository is one of:

* ``--clone-from GITDIR --commit SHA``: the ``*.py`` files of that commit of a
  git repository (``git archive``), committed to a fresh git repository, as a
  user's clone would be. The benchmark's public reference is the model
  library ``huggingface/pytorch-image-models`` at
  ``aa4b5850c1543fa488abf260f18390eda46cf85d`` (315 files); nothing of it is
  kept here, and the run stops with a message when GITDIR is missing;
* ``--repo PATH``: any checkout (only read);
* else a generated one of ``--files`` files (default 300), made from the
  bundled examples and committed to git when git is there: a library package
  whose ``__init__`` imports every module (as model libraries do), one of its
  modules holding a training step nothing calls, a training script, an
  evaluation script, tools and tests that import the library.

    .venv/bin/python benchmarks/repository.py [--clone-from GITDIR --commit SHA | --repo PATH]
        [--entry train.py] [--files 300] [--repeat 3] [--budget 300] [--skip folder]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _inputs import _helpers, _merge_imports, examples, line_count
from _timing import PYTHON, ROOT, Budget, Run, machine, ratio_summary, run_cpu, summary, table, verdict

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
TARGETS = {"check": 0.5, "folder": 0.5, "entry": 0.1}
LIBRARY_LINES = 420  # about the size of a module of a real model library

SCALER = '''"""A helper that runs the backward pass and the step; nothing in the library calls it."""


class ScaledStep:
    def __init__(self, scale=1.0):
        self.scale = scale

    def __call__(self, loss, optimizer):
        (loss * self.scale).backward()
        optimizer.step()
        optimizer.zero_grad()
'''

EVALUATE = '''"""Evaluate a model of the library on random data."""
import torch

import lib


def evaluate(model, batches):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            total += float((model(x) - y).pow(2).mean())
    return total / len(batches)


if __name__ == "__main__":
    print(lib.__name__, evaluate(torch.nn.Linear(4, 1), [(torch.randn(8, 4), torch.randn(8, 1))]))
'''

TEST = '''"""Tests of the library."""
import pytest
import torch

import lib


@pytest.mark.parametrize("size", [1, 2])
def test_gradients_flow(size):
    model = torch.nn.Linear(size, 1)
    model(torch.randn(4, size)).sum().backward()
    assert model.weight.grad is not None


def test_library_imports():
    assert lib.__name__ == "lib"
'''

TOOL = '''"""A tool of the repository: prints what a module of the library holds."""
import sys

from lib.{package} import {module}

if __name__ == "__main__":
    print(sorted(vars({module}))[: int(sys.argv[1]) if len(sys.argv) > 1 else 5])
'''


def generate(root: Path, files: int) -> None:
    """A repository of about ``files`` Python files; see the module docstring."""
    names = list(examples())
    scripts = {
        "train.py": "import lib\n" + examples()["mnist_cnn"],
        "evaluate.py": EVALUATE,
        # Scripts of their own, beside the library: the programs the full analysis converts.
        **{f"scripts/{name}.py": examples()[name] for name in ("regression", "gan", "lstm_lm")},
    }
    tests = {f"tests/test_{i:02d}.py": TEST for i in range(max(1, files // 30))}
    tools = {f"tools/tool_{i:02d}.py": "" for i in range(max(1, files // 30))}
    packages = {"models": 0.6, "layers": 0.2, "data": 0.1, "utils": 0.1}
    library = files - len(scripts) - len(tests) - len(tools) - len(packages) - 2
    counts = {package: max(1, round(library * share)) for package, share in packages.items()}
    counts["utils"] -= 1  # the scaler
    copy = 0
    written: dict[str, str] = {}
    for package, count in counts.items():
        modules = []
        for index in range(count):
            imports: list[list[str]] = []
            body: list[str] = []
            while sum(line_count(b) + 2 for b in body) < LIBRARY_LINES:
                helper_imports, definitions = _helpers(names[copy % len(names)], f"_{package}{copy}")
                imports.append(helper_imports)
                body += definitions
                copy += 1
            module = f"m_{index:03d}"
            modules.append(module)
            written[f"lib/{package}/{module}.py"] = "\n".join(_merge_imports(imports)) + "\n\n\n" + "\n\n".join(body)
        if package == "utils":
            modules.append("scaler")
            written["lib/utils/scaler.py"] = SCALER
        written[f"lib/{package}/__init__.py"] = "".join(f"from . import {m}\n" for m in modules)
    written["lib/__init__.py"] = "".join(f"from . import {p}\n" for p in packages)
    for index, name in enumerate(tools):
        package = list(packages)[index % len(packages)]
        tools[name] = TOOL.format(package=package, module="m_000")
    for name, text in {**written, **scripts, **tests, **tools}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "pyproject.toml").write_text('[project]\nname = "lib"\n')
    if shutil.which("git"):
        for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "generated"]):
            subprocess.run([*GIT, *command], cwd=root, check=True, capture_output=True)


FLOOR = """
import sys
import libcst
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(path, "rb") as file:
        source = file.read()
    assert libcst.parse_module(source).bytes == source, path
"""


def clone(git_dir: Path, commit: str, root: Path) -> None:
    """The ``*.py`` files of ``commit`` of the repository at ``git_dir``, committed to a new repository at ``root``."""
    if not git_dir.exists() or shutil.which("git") is None:
        raise SystemExit(f"{git_dir}: no such git repository (or no git): cannot build the clone; skipped")
    listed = subprocess.run(
        ["git", "-C", str(git_dir), "ls-tree", "-r", "-z", "--name-only", commit],
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    paths = [p.decode() for p in listed if p.endswith(b".py")]
    root.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(git_dir), "archive", "--format=tar", commit, "--", *paths], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", f"*.py of {commit}"]):
        subprocess.run([*GIT, *command], cwd=root, check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="a checkout to measure (only read); default: a generated one")
    parser.add_argument(
        "--clone-from", type=Path, metavar="GITDIR", help="build the repository from this git directory"
    )
    parser.add_argument("--commit", help="the commit of --clone-from (default HEAD)", default="HEAD")
    parser.add_argument("--entry", help="the entry script of (d), relative to the repository (default: train.py)")
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run; 0: no limit")
    parser.add_argument("--skip", action="append", default=[], choices=["check", "folder", "entry"])
    args = parser.parse_args(argv)
    budget = Budget(args.budget)

    print(f"repository: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="ddpify-repository-"))
    try:
        if args.clone_from is not None:
            repo = work / "repo"
            clone(args.clone_from.resolve(), args.commit, repo)
            kind = f"clone of {args.clone_from} at {args.commit}"
        elif args.repo is not None:
            repo, kind = args.repo.resolve(), "given"
        else:
            repo, kind = work / "repo", "generated"
            generate(repo, args.files)
        return measure(repo, kind, work, args, budget)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(repo: Path, kind: str, work: Path, args: argparse.Namespace, budget: Budget) -> int:
    paths = sorted(p for p in repo.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(repo).parts))
    sources = [p.read_text(encoding="utf-8", errors="surrogateescape") for p in paths]
    lines = sum(line_count(s) for s in sources)
    print(f"{kind}: {repo}, {len(paths)} files, {lines} lines")
    listing = work / "files.txt"
    listing.write_text("".join(f"{p}\n" for p in paths))
    entry = args.entry or ("train.py" if (repo / "train.py").is_file() else None)

    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    out = f"{work / 'out'}{os.sep}"
    commands = {
        "floor": [PYTHON, "-c", FLOOR, str(listing)],
        "check": [PYTHON, "-m", "ddpify", ".", "--check", "-j", "2", "-q"],
        "folder": [PYTHON, "-m", "ddpify", ".", "-o", out, "-j", "2", "-q"],
        "entry": [PYTHON, "-m", "ddpify", entry or "", "--diff", "-q"],
    }
    steps = ["floor", *(s for s in ("check", "folder", "entry") if s not in args.skip and (s != "entry" or entry))]
    runs: dict[str, list[Run]] = {step: [] for step in steps}
    for round_index in range(args.repeat):
        for step in steps if round_index % 2 == 0 else reversed(steps):
            shutil.rmtree(work / "out", ignore_errors=True)
            # 1: --check found work; 2: unreadable files or programs too large; 3: programs refused
            ok = (0,) if step == "floor" else (0, 1, 2, 3)
            runs[step].append(run_cpu(commands[step], ok=ok, cwd=repo, env=env))
        print(
            f"  round {round_index + 1}: " + ", ".join(f"{step} {runs[step][-1].cpu:.1f} CPU s" for step in steps),
            file=sys.stderr,
        )
        done = round_index + 1
        if done < args.repeat and not budget.allows(sum(runs[step][-1].wall for step in steps) * 1.1):
            print(f"budget: stopping after {done} of {args.repeat} rounds (--budget 0 for all)")
            break

    labels = {
        "floor": "(a) libcst parse+code, every file, one process",
        "check": "(b) ddpify . --check -j 2 -q",
        "folder": "(c) ddpify . -o OUT/ -j 2 -q",
        "entry": f"(d) ddpify {entry} --diff -q",
    }
    floors = [run.cpu for run in runs["floor"]]
    rows = []
    for step in steps:
        cpu = [run.cpu for run in runs[step]]
        per_round = [value / base for value, base in zip(cpu, floors)]
        exits = ",".join(map(str, sorted({run.code for run in runs[step]})))
        peak = max(run.peak_mib for run in runs[step])
        wall = summary([run.wall for run in runs[step]], "s", 1)
        rows.append([labels[step], summary(cpu, "s", 1), wall, ratio_summary(per_round), f"{peak:.0f} MiB", exits])
    print(
        f"\n{len(paths)} files, {lines} lines; CPU (user+sys) and wall: median [min-max] (N=rounds); ratio of CPU to (a) per round"
    )
    print(table(["measure", "CPU", "wall", "ratio", "peak RSS", "exit"], rows))
    for step in steps[1:]:
        per_round = sorted(run.cpu / base for run, base in zip(runs[step], floors))
        last = runs[step][-1].stderr.rstrip().rpartition("\n")[2]
        target = TARGETS[step]
        print(f"{step}: {verdict(per_round[len(per_round) // 2], target)}; ddpify said: {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
