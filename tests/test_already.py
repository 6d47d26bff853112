"""The early answers "already distributed" and "nothing to do" (``ddpify.engine.already``) against
the full analysis.

The early answers are only a shortcut: wherever one answers, the full analysis on libcst's trees
must give the same outcome, byte for byte, and wherever the full analysis says "already distributed"
on the project's own programs, the early pass must have said so first.
"""

from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

import pytest

from ddpify import Status, convert, core
from ddpify.cli.program import local_modules
from ddpify.engine import already, reach
from ddpify.result import LocalModule

ROOT = Path(__file__).resolve().parents[1]
TREES = [
    *sorted((ROOT / "tests" / "fixtures" / "projects").glob("*/input")),
    *sorted(p.parent for p in (ROOT / "tests" / "fixtures").glob("*/*/input.py")),
    ROOT / "tests" / "trial",
    ROOT / "examples",
]


def _entries(tree: Path):
    cwd = Path.cwd()
    os.chdir(tree)
    try:
        for path in sorted(tree.rglob("*.py")):
            entry = str(path.relative_to(tree))
            source = path.read_bytes()
            yield entry, source, local_modules(entry, source, max_size=1 << 20, root=tree).modules
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("tree", TREES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_early_answer_is_the_full_analysiss(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answered: list[bool] = []
    early_answer = core._early_answer

    def spied(*args):
        found = early_answer(*args)
        answered.append(found is not None)
        return found

    monkeypatch.setattr(core, "_early_answer", spied)
    for entry, source, modules in _entries(tree):
        answered.clear()
        golden = tree / "diagnostics.txt" if entry == "input.py" else None
        if golden is not None and golden.exists():
            # the full analysis of a golden input is its diagnostics file (tests/test_fixtures.py): the early
            # pass alone is asked here, and the conversion stops where it would go on to the full analysis
            monkeypatch.setattr(core, "_early_answer", _stopped_after(early_answer, answered))
            try:
                early = convert(source, path=entry, modules=modules)
            except _FullAnalysis:
                assert " DDP010 " not in golden.read_text(), f"{entry}: the early pass missed it"
                continue
            finally:
                monkeypatch.setattr(core, "_early_answer", spied)
        else:
            early = convert(source, path=entry, modules=modules)
        said = [d.format() for d in early.diagnostics]
        if not any(answered):
            assert not any(" DDP010 " in line for line in said), f"{entry}: the early pass missed it"
            continue
        monkeypatch.setattr(core, "_early_answer", lambda *args: None)
        full = convert(source, path=entry, modules=modules)
        monkeypatch.setattr(core, "_early_answer", spied)
        assert (early.status, said) == (full.status, [d.format() for d in full.diagnostics]), entry


class _FullAnalysis(BaseException):  # past ``convert``'s ``except Exception``
    """The early pass gave no answer: the conversion would go on to the full analysis."""


def _stopped_after(early_answer, answered: list[bool]):
    def stopped(*args):
        found = early_answer(*args)
        answered.append(found is not None)
        if found is None:
            raise _FullAnalysis
        return found

    return stopped


def _use(entry: str, **others: str) -> tuple[str, str, int] | None:
    """What the early pass finds in the program of ``entry`` and ``others`` (name -> text): the
    qualified name, the module and the line."""
    trees = [already.TreeModule("__main__", "", ast.parse(textwrap.dedent(entry)))]
    trees += [already.TreeModule(n, n.rpartition(".")[0], ast.parse(textwrap.dedent(t))) for n, t in others.items()]
    sources = [reach.ModuleSource(t.name, t.package, t.tree) for t in trees]
    runs = reach.reach(sources[0], sources[1:])
    running = [t for t in trees if t.name == "__main__" or runs.runs(t.name)]
    use = already.distributed_use(running, runs)
    return None if use is None else (use.name, running[use.module].name, use.call.lineno)


HELPERS = """
import torch.distributed as dist

def init_distributed_mode(args):
    dist.init_process_group("nccl")

if __name__ == "__main__":
    init_distributed_mode(None)
"""


def test_a_helper_that_is_called_makes_the_program_distributed() -> None:
    entry = """
        from helpers import init_distributed_mode

        def main():
            init_distributed_mode(args)

        if __name__ == "__main__":
            main()
        """
    assert _use(entry, helpers=HELPERS) == ("torch.distributed.init_process_group", "helpers", 5)


def test_an_import_a_reexport_or_the_helpers_own_main_block_is_not_a_call() -> None:
    entry = """
        import utils
        from utils import init_distributed_mode

        def main():
            train(init_distributed_mode)  # handed on: it may be called
        """
    assert _use(entry, utils="from helpers import *\n", helpers=HELPERS) is None
    assert _use(entry + "main()\n", utils="from helpers import *\n", helpers=HELPERS) is not None


def test_python_calls_forward_where_its_class_is_and_a_spawn_is_a_launch() -> None:
    entry = """
        import torch.multiprocessing as mp
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Wrapped(nn.Module):
            def forward(self, x):
                return DDP(self.inner)(x)

        def worker(rank):
            pass

        if __name__ == "__main__":
            model = Wrapped()
            mp.spawn(worker, nprocs=2)
        """
    assert _use(entry) == ("torch.nn.parallel.DistributedDataParallel", "__main__", 8)
    assert _use(entry.replace("def forward", "def predict")) == ("torch.multiprocessing.spawn", "__main__", 15)


def test_the_column_is_counted_in_characters_as_libcst_counts_it() -> None:
    text = 'x = "é"; dist.init_process_group()\n'
    offset = ast.parse(text).body[1].value.col_offset  # bytes of UTF-8
    assert (offset, already.column(text, 1, offset), already.column(text.encode(), 1, offset)) == (10, 10, 10)


def test_a_module_python_cannot_read_is_told_before_already_distributed() -> None:
    entry = "import torch.distributed as dist\nimport models\n\ndist.init_process_group('gloo')\nmodels.build()\n"
    broken = LocalModule(path="models.py", name="models", source="def build():\n    print 'old'\n")
    conversion = convert(entry, path="train.py", modules=[broken])
    assert (conversion.status, [d.format() for d in conversion.diagnostics]) == (
        Status.INVALID,
        ["models.py:2:5: DDP002 invalid Python 3: Missing parentheses in call to 'print'. Did you mean print(...)?"],
    )
    fixed = LocalModule(path="models.py", name="models", source="def build():\n    print('new')\n")
    assert convert(entry, path="train.py", modules=[fixed]).status is Status.UNCHANGED


# ----------------------------------------------------------------------------
# "Nothing to do" before libcst reads the program: only where no training can be reached


def _may_train(entry: str, **others: str) -> bool:
    trees = [already.TreeModule("__main__", "", ast.parse(textwrap.dedent(entry)))]
    trees += [already.TreeModule(n, n.rpartition(".")[0], ast.parse(textwrap.dedent(t))) for n, t in others.items()]
    sources = [reach.ModuleSource(t.name, t.package, t.tree) for t in trees]
    runs = reach.reach(sources[0], sources[1:])
    return already.Trees([t for t in trees if t.name == "__main__" or runs.runs(t.name)], runs).may_train()


LIBRARY = """
import torch
from torch import optim

REGISTRY = {"sgd": optim.SGD}  # named, not built


class Scaler:
    def __call__(self, loss, optimizer):
        loss.backward()
        optimizer.step()


def build_optimizer(model):
    return optim.SGD(model.parameters(), lr=0.1)


def accuracy(model, x, y):
    return (model(x).argmax(1) == y).float().mean()
"""


def test_a_library_whose_training_helpers_nothing_reaches_gives_nothing_to_do_early() -> None:
    evaluate = "import lib\nprint(lib.accuracy(model, x, y))\n"
    assert not _may_train(evaluate, lib=LIBRARY)
    converted = convert(evaluate, path="evaluate.py", modules=[LocalModule("lib.py", "lib", textwrap.dedent(LIBRARY))])
    assert [d.format() for d in converted.diagnostics] == [
        "evaluate.py:1:1: DDP011 no training step (`.backward()`) found: nothing to do"
    ]


@pytest.mark.parametrize(
    "entry",
    [
        "import lib\nscaler = lib.Scaler()\n",  # the class is named: its __call__ may run
        "from lib import Scaler as S\nS()(loss, opt)\n",  # through an alias
        "import lib\nopt = lib.build_optimizer(model)\n",  # named, and built where it is called
        "import lib\ndef unused():\n    loss.backward()\nunused()\n",  # the entry's own code trains
        "import lib, importlib\nimportlib.import_module(name)\n",  # a computed import: DDP014 may follow
        "from torch.optim import SGD as Opt\nimport lib\nopt = Opt(params)\n",  # an optimizer built
    ],
)
def test_anything_that_may_reach_training_leaves_the_answer_to_the_full_analysis(entry: str) -> None:
    assert _may_train(entry, lib=LIBRARY)


def test_a_computed_import_with_training_nothing_reaches_is_refused_early_as_the_full_analysis_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = "import importlib\nimport lib\n\nplugin = importlib.import_module(NAME)\nprint(lib.accuracy(m, x, y))\n"
    modules = [LocalModule("lib.py", "lib", textwrap.dedent(LIBRARY))]
    answered = core._early_answer("", "", ast.parse(entry), modules, _runs(entry, lib=LIBRARY))
    assert answered is not None
    early = convert(entry, path="evaluate.py", modules=modules)
    monkeypatch.setattr(core, "_early_answer", lambda *args: None)
    full = convert(entry, path="evaluate.py", modules=modules)
    assert (
        [d.format() for d in early.diagnostics]
        == [d.format() for d in full.diagnostics]
        == [
            "evaluate.py:1:1: DDP014 no training step that ddpify can follow: the program loads code by a computed "
            "name (`importlib.import_module()` in __main__, line 4), and lib.py line 10 trains; import that module "
            "by name so that ddpify can follow it"
        ]
    )
    assert early.status is full.status is Status.REFUSED


def _runs(entry: str, **others: str) -> reach.Reach:
    sources = [reach.ModuleSource(n, n.rpartition(".")[0], ast.parse(textwrap.dedent(t))) for n, t in others.items()]
    return reach.reach(reach.ModuleSource("__main__", "", ast.parse(entry)), sources)
