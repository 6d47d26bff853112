"""The first pass (``ddpify.cli.screening``): what it reads of a file, and that it never passes over
a program the full analysis would change.

The comparison runs every Python file of the project's fixture trees as an entry script: golden
programs, golden single scripts, the trial scripts and the examples. Where the first pass says a
program cannot train, the full analysis (``convert()`` with the program's modules, as the command
line finds them) must leave it unchanged.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.cli.program import local_modules, sketch
from ddpify.cli.project import Project
from ddpify.cli.screening import Facts, may_train, screen
from ddpify.diagnostics import nothing_to_do

ROOT = Path(__file__).resolve().parents[1]
TREES = [
    *sorted((ROOT / "tests" / "fixtures" / "projects").glob("*/input")),
    *sorted(p.parent for p in (ROOT / "tests" / "fixtures").glob("*/*/input.py")),
    ROOT / "tests" / "trial",
    ROOT / "examples",
]


def facts(source: str) -> Facts:
    found = screen(textwrap.dedent(source).encode())
    assert found is not None
    return found


def first_pass_and_full_analysis(tree: Path) -> list[tuple[str, bool, Status | None]]:
    """Each file of ``tree`` as an entry: whether the first pass says it may train, and, where it
    says it cannot, the full analysis's status."""
    cwd = Path.cwd()
    os.chdir(tree)
    try:
        projects: dict[Path, Project] = {}
        found: list[tuple[str, bool, Status | None]] = []
        for path in sorted(tree.rglob("*.py")):
            entry = str(path.relative_to(tree))
            trains = sketch(entry, max_size=1 << 20, projects=projects, root=tree).may_train()
            status = None
            if not trains:
                source = path.read_bytes()
                program = local_modules(entry, source, max_size=1 << 20, root=tree)
                status = convert(source, path=entry, modules=program.modules).status
            found.append((entry, trains, status))
        return found
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("tree", TREES, ids=[str(t.relative_to(ROOT)) for t in TREES])
def test_the_first_pass_never_passes_over_a_program_the_full_analysis_changes(tree: Path) -> None:
    for entry, trains, status in first_pass_and_full_analysis(tree):
        assert trains or status in (Status.UNCHANGED, Status.INVALID), f"{entry}: passed over, but {status}"


def test_the_first_pass_passes_over_modules_and_scripts_that_do_not_train() -> None:
    decided = {
        entry: trains
        for tree in (ROOT / "tests" / "fixtures" / "projects" / "solver" / "input", ROOT / "examples")
        for entry, trains, _ in first_pass_and_full_analysis(tree)
    }
    assert decided["train.py"] and decided["mnist_cnn.py"]
    assert not decided["models.py"] and not decided["data_loader.py"]


def test_its_nothing_to_do_is_the_full_analysis_own() -> None:
    assert convert(b"x = 1\n", path="a.py").diagnostics == (nothing_to_do("a.py"),)


# ----------------------------------------------------------------------------
# What counts as running (names mentioned by running code), module by module

TRAINING_LOOP = textwrap.dedent(
    """
    def fit(model, loader, optimizer):
        for x, y in loader:
            loss = model(x).sub(y).pow(2).mean()
            loss.backward()
            optimizer.step()
    """
)


def test_a_loop_a_script_calls_in_a_module_trains() -> None:
    entry = facts("import engine\nengine.fit(model, loader, optimizer)\n")
    assert may_train(entry, {"engine": facts(TRAINING_LOOP)})


def test_a_loop_nothing_mentions_does_not_train() -> None:
    entry = facts("import engine\nprint(engine.VERSION)\n")
    assert not may_train(entry, {"engine": facts(TRAINING_LOOP + "VERSION = 1\n")})


def test_an_alias_is_followed_to_the_name_it_stands_for() -> None:
    entry = facts("from engine import fit as run\nrun(model, loader, optimizer)\n")
    assert may_train(entry, {"engine": facts(TRAINING_LOOP)})


def test_a_module_main_block_never_runs_but_the_entry_main_block_does() -> None:
    module = facts(TRAINING_LOOP + "\nif __name__ == '__main__':\n    fit(None, [], None)\n")
    assert not may_train(facts("import engine\n"), {"engine": module})
    entry = facts("import engine\n\nif __name__ == '__main__':\n    engine.fit(1, 2, 3)\n")
    assert may_train(entry, {"engine": facts(TRAINING_LOOP)})


def test_a_decorated_definition_may_run_through_its_registry() -> None:
    module = facts("@register\n" + TRAINING_LOOP.lstrip())
    assert may_train(facts("import engine\n"), {"engine": module})


def test_a_test_of_pytest_or_a_no_grad_function_is_not_registered() -> None:
    for decorator in ("import pytest\n@pytest.mark.parametrize('x', [1])", "import torch\n@torch.no_grad()"):
        assert not may_train(facts(decorator + "\n" + TRAINING_LOOP.lstrip()), {})
        assert may_train(facts(decorator + "\n@register\n" + TRAINING_LOOP.lstrip()), {})


def test_a_class_that_runs_keeps_its_methods() -> None:
    module = facts(
        """
        class Trainer:
            def step(self, loss):
                loss.backward()
        """
    )
    assert may_train(facts("from engine import Trainer\nt = Trainer()\n"), {"engine": module})
    assert not may_train(facts("import engine\n"), {"engine": module})


def test_computed_names_make_a_whole_file_or_program_run() -> None:
    module = facts(TRAINING_LOOP)
    assert may_train(facts("import engine\nglobals()[name]()\ndef fit(): loss.backward()\n"), {})
    assert may_train(facts("import engine\ngetattr(engine, name)()\n"), {"engine": module})
    assert not may_train(facts("import engine, torch\ngetattr(torch, name)()\n"), {"engine": module})


def test_a_script_alone_trains_where_its_running_code_calls_backward() -> None:
    assert may_train(facts("loss.backward()\n"), {})
    assert not may_train(facts("def unused():\n    loss.backward()\n"), {})


# ----------------------------------------------------------------------------
# What a file imports, and how it loads code ddpify cannot follow


def test_imports_anywhere_in_a_file_are_kept_packages_first() -> None:
    found = facts(
        """
        import a.b
        def f():
            from .c import d
        try:
            from e import *
        except ImportError:
            pass
        """
    )
    assert found.imported_modules("pkg") == ["a", "a.b", "pkg", "pkg.c", "pkg.c.d", "e"]


@pytest.mark.parametrize(
    ("source", "construct", "kind", "module"),
    [
        ("import importlib\nimportlib.import_module(name)\n", "importlib.import_module()", "call", None),
        ("from importlib import import_module as load\nload('utils')\n", "importlib.import_module()", "call", "utils"),
        ("__import__('utils')\n", "__import__()", "call", "utils"),
        ("import runpy\nrunpy.run_path('x.py')\n", "runpy.run_path()", "path", None),
        ("import sys\nsys.path.append('..')\n", "sys.path.append()", "search", None),
        ("from sys import path\npath.insert(0, '..')\n", "sys.path.insert()", "search", None),
        ("import sys\nsys.path += ['..']\n", "sys.path assignment", "search", None),
    ],
)
def test_code_loaded_by_a_call_or_a_changed_search_path_is_named(
    source: str, construct: str, kind: str, module: str | None
) -> None:
    (load,) = facts(source).loads
    assert (load.construct, load.kind, load.module) == (construct, kind, module)


def test_the_own_folder_added_to_the_search_path_is_recognised() -> None:
    (own,) = facts("import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n").loads
    (up,) = facts("import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))\n").loads
    assert own.own_folder and not up.own_folder


@pytest.mark.parametrize(
    ("change", "added"),
    [
        ('sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))', [("../lib", True)]),
        (
            'here = os.path.dirname(os.path.abspath(__file__))\nsys.path.append(os.path.join(here, "src"))',
            [("src", True)],
        ),
        ('sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "third_party"))', [("../third_party", True)]),
        ('sys.path.append("core")', [("core", False)]),
        ('sys.path.append("../common")', [("../common", False)]),
        (
            "def add_path(p):\n    sys.path.insert(0, p)\nhere = os.path.dirname(__file__)\n"
            'add_path(os.path.join(here, "..", "lib"))\nadd_path(os.path.join(here, "..", "data", "api"))',
            [("../lib", True), ("../data/api", True)],
        ),
        ("sys.path.append(os.environ['LIB'])", []),
        ('sys.path.append("/opt/lib")', []),
        ('folder = "a"\nfolder = "b"\nsys.path.append(folder)', []),
        ('def add_path(p):\n    sys.path.insert(0, p)\nadd_path("lib")\nadd_path(os.environ["X"])', []),
    ],
)
def test_the_folders_a_change_of_the_search_path_adds(change: str, added: list[tuple[str, bool]]) -> None:
    (load,) = facts(f"import os, sys\nfrom pathlib import Path\n{change}\n").loads
    assert (load.kind, list(load.added)) == ("search", added)


def test_a_file_cpython_cannot_parse_has_no_facts() -> None:
    assert screen(b"def (:\n") is None
    assert screen(b"\x00") is None


# ----------------------------------------------------------------------------
# In a folder, only the programs that may train reach the full analysis


def test_a_folder_hands_only_the_programs_that_may_train_to_the_full_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpify.cli import backend, main, workers

    project = tmp_path / "project"
    shutil.copytree(ROOT / "tests" / "fixtures" / "projects" / "solver" / "input", project)
    (project / "evaluate.py").write_text(
        "import torch\nfrom models import Net\n\nmodel = Net()\nprint(model(torch.randn(2, 10)).shape)\n"
    )
    (project / "notes.py").write_text("TITLE = 'experiments'\n")
    converted: list[str] = []
    real = backend.convert

    def spy(source: bytes, *, path: str, **kwargs: object) -> object:
        converted.append(path)
        return real(source, path=path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "convert", spy)
    monkeypatch.setattr(workers, "cpu_count", lambda: 1)
    monkeypatch.chdir(project)

    assert main([".", "--diff"]) == 0

    assert converted == ["./train.py"]
    err = capsys.readouterr().err.splitlines()
    assert "./evaluate.py:1:1: DDP011 no training step (`.backward()`) found: nothing to do" in err
    assert "./evaluate.py: nothing to do" in err
