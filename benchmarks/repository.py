"""A whole repository: ``ddpify REPO --check`` and ``ddpify REPO -o OUT`` against libcst's own cost.

Most files of a real repository never train: a model library, data code,
tests, tools. ddpify's first pass reads each file once with CPython's ``ast``
and hands only the programs that may train to the full analysis, so a folder
should cost a fraction of what libcst alone costs to read it.

(a) floor   ``libcst.parse_module(src).code`` for every ``*.py`` of the
            repository, in this process (no start-up, no import of libcst
            counted: a floor lower than any libcst-based tool pays);
(b) check   ``python -m ddpify REPO --check -j 2``, subprocess wall time;
(c) folder  ``python -m ddpify REPO -o OUT -j 2`` (every output written),
            subprocess wall time.

Target: b/a and c/a <= 0.5. Each round measures (a), (b) and (c) back to back,
in an order flipped every round; ratios are taken per round and summarised as
median [min-max]. The peak memory (max RSS) of each ddpify run is printed too.

The repository is ``--repo PATH`` (any checkout, for instance a git clone of a
real project; it is only read), or else a generated one of ``--files`` files
(default 300), made from the bundled examples and committed to git when git is
there: a library package whose ``__init__`` imports every module (as model
libraries do), one of its modules holding a training step nothing calls, a
training script, an evaluation script, tools and tests that import the
library.

    .venv/bin/python benchmarks/repository.py [--repo PATH] [--files 300] [--repeat 3] [--budget 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import libcst
from _inputs import _helpers, _merge_imports, examples, line_count
from _timing import PYTHON, ROOT, Budget, machine, ratio_summary, summary, table, verdict

TARGET = 0.5
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
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
        for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "generated"]):
            subprocess.run([*git, *command], cwd=root, check=True, capture_output=True)


def floor(sources: list[str]) -> float:
    start = time.perf_counter()
    printed = 0
    for source in sources:
        printed += len(libcst.parse_module(source).code)
    assert printed == sum(map(len, sources))
    return time.perf_counter() - start


def ddpify_run(repo: Path, *args: str) -> tuple[float, int, float, str]:
    """Wall seconds, exit code, peak RSS (MiB) and summary line of ``python -m ddpify REPO ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    start = time.perf_counter()
    child = subprocess.Popen(
        [PYTHON, "-m", "ddpify", str(repo), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    child.returncode = code
    if code not in (0, 1, 2):  # 2: files ddpify cannot read or programs too large; 1: --check found work
        raise SystemExit(f"ddpify {repo} {' '.join(args)}: exit {code}\n{err.decode()[-3000:]}")
    factor = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    last = err.decode(errors="replace").rstrip().rpartition("\n")[2]
    return wall, code, usage.ru_maxrss * factor / 2**20, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="a checkout to measure (only read); default: a generated one")
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run; 0: no limit")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)

    print(f"repository: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="ddpify-repository-"))
    repo = args.repo.resolve() if args.repo else work / "repo"
    if args.repo is None:
        generate(repo, args.files)
    paths = sorted(p for p in repo.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(repo).parts))
    sources = [p.read_text(encoding="utf-8", errors="surrogateescape") for p in paths]
    lines = sum(line_count(s) for s in sources)
    print(f"{'generated' if args.repo is None else 'given'}: {repo}, {len(paths)} files, {lines} lines")

    floors: list[float] = []
    walls: dict[str, list[float]] = {"check": [], "folder": []}
    memory: dict[str, list[float]] = {"check": [], "folder": []}
    codes: dict[str, set[int]] = {"check": set(), "folder": set()}
    summaries: dict[str, str] = {}
    commands = {"check": ["--check", "-j", "2"], "folder": ["-o", f"{work / 'out'}/", "-j", "2"]}
    for round_index in range(args.repeat):
        order = ["floor", "check", "folder"]
        for step in order if round_index % 2 == 0 else reversed(order):
            if step == "floor":
                floors.append(floor(sources))
                continue
            shutil.rmtree(work / "out", ignore_errors=True)
            wall, code, peak, last = ddpify_run(repo, *commands[step])
            summaries[step] = last
            walls[step].append(wall)
            memory[step].append(peak)
            codes[step].add(code)
        print(
            f"  round {round_index + 1}: floor {floors[-1]:.1f}s, check {walls['check'][-1]:.1f}s, "
            f"folder {walls['folder'][-1]:.1f}s",
            file=sys.stderr,
        )
        done = round_index + 1
        if done < args.repeat and not budget.allows((floors[-1] + walls["check"][-1] + walls["folder"][-1]) * 1.1):
            print(f"budget: stopping after {done} of {args.repeat} rounds (--budget 0 for all)")
            break

    rows = [["(a) libcst parse+code, every file", summary(floors, "s", 2), "1.00x", "", ""]]
    for step, label in (("check", "(b) ddpify REPO --check -j 2"), ("folder", "(c) ddpify REPO -o OUT -j 2")):
        per_round = [wall / base for wall, base in zip(walls[step], floors)]
        exits = ",".join(map(str, sorted(codes[step])))
        rows.append(
            [label, summary(walls[step], "s", 2), ratio_summary(per_round), f"{max(memory[step]):.0f} MiB", exits]
        )
    print(f"\n{len(paths)} files, {lines} lines; wall: median [min-max] (N=rounds); ratio to (a) per round")
    print(table(["measure", "wall", "ratio", "peak RSS", "exit"], rows))
    for step in ("check", "folder"):
        per_round = sorted(wall / base for wall, base in zip(walls[step], floors))
        print(f"{step}: {verdict(per_round[len(per_round) // 2], TARGET)}; ddpify said: {summaries[step]}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
