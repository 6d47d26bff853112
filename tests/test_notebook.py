"""Notebooks in, torchrun scripts out (:mod:`ddpify.notebook`, and the command line on a ``.ipynb``).

Golden cases live in ``tests/fixtures/notebooks/<case>/``: ``input.ipynb``,
``diagnostics.txt`` (the status, then every diagnostic and change as the CLI
prints them, or ``unreadable:`` and the message for a notebook that cannot be
read) and, when the script is rewritten, ``expected.py``: the script written.
Regenerate with ``DDPIFY_REGENERATE=1 pytest
tests/test_notebook.py`` and review with ``git diff``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpify import Conversion, Status, convert, notebook
from ddpify.cli import main
from ddpify.notebook import NotebookError
from ddpify.verify import verify

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
CASES = sorted(p.parent for p in FIXTURES.glob("*/input.ipynb"))
REGENERATE = os.environ.get("DDPIFY_REGENERATE") == "1"


def report(conversion: Conversion) -> str:
    lines = [f"status: {conversion.status.value}"]
    lines += [f"{d.severity.value}: {d.format()}" for d in conversion.diagnostics]
    lines += [f"change: {c.path}:{c.line}: {c.summary}" for c in conversion.changes]
    return "\n".join(lines) + "\n"


def converted(case: Path) -> tuple[str, bytes | None]:
    """What the case's notebook becomes: the report, and the converted script (None: not converted;
    the script as it is, for a notebook that needs no change, is its code cells and nothing else)."""
    try:
        script = notebook.read((case / "input.ipynb").read_bytes(), "input.ipynb")
    except NotebookError as exc:
        return f"unreadable: {exc}\n", None
    conversion = script.report(convert(script.source, path="input.ipynb"))
    assert conversion.status is not Status.INTERNAL_ERROR, report(conversion)
    assert conversion.source == script.source
    if conversion.status is not Status.CONVERTED:
        assert conversion.code == script.source
        return report(conversion), None
    assert isinstance(conversion.code, bytes)
    return report(conversion), conversion.code


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_notebook_fixture(case: Path) -> None:
    text, code = converted(case)
    expected_path = case / "expected.py"
    diagnostics_path = case / "diagnostics.txt"
    if REGENERATE:
        diagnostics_path.write_text(text)
        if code is not None:
            expected_path.write_bytes(code)
        elif expected_path.exists():
            expected_path.unlink()
    assert text == diagnostics_path.read_text()
    if code is None:
        assert not expected_path.exists()
        return
    expected = expected_path.read_bytes()
    assert code == expected
    ast.parse(expected)
    again = convert(expected, path="expected.py")
    assert again.status is Status.UNCHANGED and again.code == expected, "the output must be a fixed point"


def test_the_golden_cases_cover_each_kind_of_notebook() -> None:
    reports = {case.name: (case / "diagnostics.txt").read_text() for case in CASES}
    firsts = {text.splitlines()[0] for text in reports.values()}
    assert {"status: converted", "status: unchanged", "status: invalid"} <= firsts
    assert sum(text.startswith("unreadable:") for text in reports.values()) >= 3
    every = "".join(reports.values())
    for code in ("DDP010", "DDP011", "DDP020", "DDP021", "DDP022"):
        assert code in every, code


def test_cells_become_one_script_each_under_its_cell_line() -> None:
    cells = [notebook.Cell(2, "import torch\n\nx = 1\n"), notebook.Cell(4, "y = x + 1")]

    script = notebook.script(cells, "n.ipynb")

    assert script.text == "# %% cell 2\nimport torch\n\nx = 1\n\n# %% cell 4\ny = x + 1\n"
    assert [script.place(line) for line in (1, 2, 4, 5, 6, 7)] == [
        notebook.Place(2, 1),
        notebook.Place(2, 1),
        notebook.Place(2, 3),
        notebook.Place(4, 1),
        notebook.Place(4, 1),
        notebook.Place(4, 1),
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = (1,\n%2)", "x = (1,\n%2)"),  # inside brackets: Python's modulo, not a magic
        ('s = """\n!not a command\n"""', 's = """\n!not a command\n"""'),
        ("if True:\n    %time y = 1", "if True:\n    y = 1"),
        ("if True:\n    !ls", "if True:\n    pass  # !ls"),
        ("!pip install a \\\n    b\nz = 1", "# !pip install a \\\n    # b\nz = 1"),
        ("%timeit -n 3 f()", "# %timeit -n 3 f()"),
        ("x = 1\nx;", "x = 1\nx;"),
        ("x = 1\nx  # shown", "x = 1\nprint(x)  # shown"),
        ("x = [1]\nx[0] + len(x)", "x = [1]\nx[0] + len(x)"),
        ("x = 1\nx ?", "x = 1\n# x ?"),
    ],
    ids=[
        "modulo",
        "string",
        "time-in-block",
        "shell-in-block",
        "continued",
        "timeit-options",
        "semicolon",
        "comment",
        "call",
        "help",
    ],
)
def test_ipython_lines_and_shown_values(source: str, expected: str) -> None:
    script = notebook.script([notebook.Cell(1, source)], "n.ipynb")

    assert script.text == f"# %% cell 1\n{expected}\n"


def test_each_ipython_line_is_reported_where_it_was() -> None:
    cells = [notebook.Cell(3, "x = 1\n%cd data\ndisplay(x, clear=True)\ndisplay(x)")]

    script = notebook.script(cells, "n.ipynb")

    assert script.text == "# %% cell 3\nx = 1\n# %cd data\ndisplay(x, clear=True)\nprint(x)\n"
    assert [(d.line, d.column, d.code) for d in script.diagnostics] == [
        (3, 1, "DDP021"),
        (4, 1, "DDP021"),
        (5, 1, "DDP022"),
    ]
    assert [script.at(d.line) for d in script.diagnostics] == [("n.ipynb:cell 3", n) for n in (2, 3, 4)]


def test_display_of_the_notebooks_own_is_left_alone() -> None:
    cells = [notebook.Cell(1, "def display(x):\n    return x"), notebook.Cell(2, "display(3)")]

    assert "display(3)" in notebook.script(cells, "n.ipynb").text


# The command line.

TRAINING = FIXTURES / "training" / "input.ipynb"


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: list[str]


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    def run(*argv: str) -> Run:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err.splitlines())

    return run


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_notebook_to_a_script(cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())

    run = cli("train.ipynb", "-o", "train_ddp.py")

    assert run.code == 0
    assert (workdir / "train_ddp.py").read_bytes() == (FIXTURES / "training" / "expected.py").read_bytes()
    assert any(line.startswith("train.ipynb:cell 4:3: ") for line in run.err), run.err
    assert run.err[-3].startswith("converted train.ipynb -> train_ddp.py (")
    assert run.err[-2] == "run it: torchrun --standalone --nproc_per_node=gpu train_ddp.py"
    assert files(workdir) == ["train.ipynb", "train_ddp.py"]


def test_diff_check_and_stdout(cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())
    expected = (FIXTURES / "training" / "expected.py").read_text()

    printed = cli("train.ipynb")
    diff = cli("train.ipynb", "--diff")
    missing = cli("train.ipynb", "-o", "train_ddp.py", "--check")
    (workdir / "train_ddp.py").write_text(expected)
    current = cli("train.ipynb", "-o", "train_ddp.py", "--check")

    assert (printed.code, printed.out) == (0, expected)
    assert diff.code == 0
    assert diff.out.startswith("--- train.ipynb\n+++ train.ipynb\n")
    assert "+    sampler=DistributedSampler(" in diff.out or "+from torch.utils.data.distributed" in diff.out
    assert missing.code == 1 and "would write train_ddp.py (it is missing)" in missing.err
    assert current.code == 0 and current.err[-1] == "train_ddp.py is up to date"
    assert files(workdir) == ["train.ipynb", "train_ddp.py"]


def test_output_folder_and_suffix_name_a_script(cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())

    assert cli("train.ipynb", "-o", "out/").code == 0
    assert cli("train.ipynb", "--suffix", "_dist").code == 0

    assert files(workdir) == ["out/train.py", "train.ipynb", "train_dist.py"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--in-place"],
            "error: --in-place cannot rewrite train.ipynb: the output is a script, not a notebook; "
            "give -o train_ddp.py (or no -o for stdout)",
        ),
        (
            ["-o", "train_ddp.ipynb"],
            "error: -o train_ddp.ipynb: the output of a notebook is a script; give -o train_ddp.py",
        ),
    ],
    ids=["in-place", "notebook-output"],
)
def test_a_notebook_is_never_written_over(argv: list[str], message: str, cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())

    run = cli("train.ipynb", *argv)

    assert (run.code, run.err) == (2, [message])
    assert (workdir / "train.ipynb").read_bytes() == TRAINING.read_bytes()
    assert files(workdir) == ["train.ipynb"]


@pytest.mark.parametrize("case", ["corrupt_json", "unknown_version", "invalid_notebook", "not_python"])
def test_an_unreadable_notebook_exits_2_and_writes_nothing(case: str, cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes((FIXTURES / case / "input.ipynb").read_bytes())
    reason = (FIXTURES / case / "diagnostics.txt").read_text().removeprefix("unreadable: input.ipynb: ").strip()

    run = cli("train.ipynb", "-o", "train_ddp.py")

    assert (run.code, run.err) == (2, [f"error: train.ipynb: {reason}"])
    assert files(workdir) == ["train.ipynb"]


def test_without_nbformat_a_notebook_says_what_to_install(cli, workdir: Path, monkeypatch) -> None:
    monkeypatch.setattr(notebook, "available", lambda: False)
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())

    run = cli("train.ipynb", "-o", "train_ddp.py")

    assert (run.code, run.err) == (
        2,
        ["error: train.ipynb: reading a notebook needs nbformat: pip install 'ddpify[notebook]'"],
    )
    assert files(workdir) == ["train.ipynb"]


def test_an_already_distributed_notebook_gets_the_usual_answer(cli, workdir: Path) -> None:
    case = FIXTURES / "already_distributed"
    (workdir / "train.ipynb").write_bytes((case / "input.ipynb").read_bytes())

    run = cli("train.ipynb", "-o", "train_ddp.py")

    assert run.code == 0
    assert any(" DDP010 already distributed" in line for line in run.err)
    assert run.err[-1] == "train.ipynb: nothing to do"
    script = notebook.read((case / "input.ipynb").read_bytes(), "train.ipynb")
    assert (workdir / "train_ddp.py").read_bytes() == script.source


def test_a_folder_takes_its_notebooks(cli, workdir: Path) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "train.ipynb").write_bytes(TRAINING.read_bytes())
    (workdir / "src" / "look.ipynb").write_bytes((FIXTURES / "no_training" / "input.ipynb").read_bytes())

    run = cli("src", "-j", "1")

    assert run.code == 0
    assert "converted src/train.ipynb -> src/train_ddp.py" in "\n".join(run.err)
    assert run.err[-1] == "2 files: 1 converted, 1 unchanged"
    assert files(workdir) == ["src/look.ipynb", "src/train.ipynb", "src/train_ddp.py"]


def test_a_folder_run_passes_over_notebooks_it_cannot_read(cli, workdir: Path, monkeypatch) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "broken.ipynb").write_bytes((FIXTURES / "corrupt_json" / "input.ipynb").read_bytes())
    (workdir / "src" / "train.ipynb").write_bytes(TRAINING.read_bytes())
    (workdir / "src" / "train.py").write_text("print('a script of the same name')\n")

    diff = cli("src", "--diff", "-j", "1")
    monkeypatch.setattr(notebook, "available", lambda: False)
    without = cli("src", "--diff", "-j", "1")

    assert diff.code == 0
    assert "src/broken.ipynb: skipped, not a notebook: not JSON (" in "\n".join(diff.err)
    assert "src/train.ipynb: skipped, a notebook whose script src/train_ddp.py is another input's output" in diff.err
    assert diff.err[-1] == "1 file: 1 unchanged"
    assert without.code == 0
    assert "src: 2 notebooks skipped: reading them needs nbformat: pip install 'ddpify[notebook]'" in without.err
    assert files(workdir) == ["src/broken.ipynb", "src/train.ipynb", "src/train.py"]


def test_a_folder_run_in_place_leaves_notebooks_alone(cli, workdir: Path) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "train.ipynb").write_bytes(TRAINING.read_bytes())
    (workdir / "src" / "a.py").write_text("print(1)\n")

    run = cli("src", "--in-place")

    assert run.code == 0
    assert "src/train.ipynb: skipped, a notebook; --in-place cannot rewrite it as a script" in run.err
    assert (workdir / "src" / "train.ipynb").read_bytes() == TRAINING.read_bytes()


def test_verify_asks_for_the_script(cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())

    run = cli("verify", "train.ipynb")

    assert (run.code, run.err) == (
        2,
        ["error: train.ipynb: a notebook; convert it to a script first: ddpify train.ipynb -o train_ddp.py"],
    )


def test_a_notebook_without_code_is_nothing_to_do(cli, workdir: Path) -> None:
    (workdir / "notes.ipynb").write_text(
        '{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, '
        '"cells": [{"cell_type": "markdown", "metadata": {}, "source": "Only words."}]}'
    )

    run = cli("notes.ipynb")

    assert (run.code, run.out) == (0, "")
    assert run.err[-1] == "notes.ipynb: nothing to do"


def test_cells_without_ids_are_read_quietly(cli, workdir: Path) -> None:
    (workdir / "train.ipynb").write_text(
        '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
        '"metadata": {}, "source": "x = 1", "outputs": [], "execution_count": null}]}'
    )

    run = cli("train.ipynb")

    assert (run.code, run.out) == (0, "# %% cell 1\nx = 1\n")
    assert run.err == [
        "train.ipynb:cell 1:1:1: DDP011 no training step (`.backward()`) found: nothing to do (script line 1)",
        "train.ipynb: nothing to do",
    ]


@pytest.mark.torchrun
def test_a_converted_notebook_trains_in_sync(cli, workdir: Path) -> None:
    """The notebook of case ``trains`` (magics, cells that display, a training loop, a save), converted
    through the command line and run under torchrun with two CPU processes."""
    pytest.importorskip("torch")
    (workdir / "train.ipynb").write_bytes((FIXTURES / "trains" / "input.ipynb").read_bytes())
    assert cli("train.ipynb", "-o", "train_ddp.py").code == 0

    report = verify(workdir / "train_ddp.py", nproc=2, script_args=[], workdir=workdir, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
    assert [Path(p).name for p in rank0.saves] == ["model.pt"] and not rank1.saves
    assert report.output.count("torch.Size([256, 8])") == 1, "a displayed value is printed once, by rank 0"


def code_notebook(*cells: str) -> str:
    """A version 4 notebook of these code cells."""
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 4,
            "metadata": {},
            "cells": [
                {"cell_type": "code", "metadata": {}, "source": cell, "outputs": [], "execution_count": None}
                for cell in cells
            ],
        }
    )


HELPERS = "import torch.nn as nn\n\n\ndef make_model():\n    return nn.Linear(8, 1)\n"
USES_HELPERS = (
    "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom helpers import make_model",
    "loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)\n"
    "model = make_model()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n    opt.zero_grad()\n"
    "    loss.backward()\n    opt.step()",
)


def test_a_notebook_imports_its_local_modules(cli, workdir: Path) -> None:
    (workdir / "helpers.py").write_text(HELPERS)
    (workdir / "train.ipynb").write_text(code_notebook(*USES_HELPERS))

    run = cli("train.ipynb", "-o", "out/")

    assert run.code == 0
    assert "converted train.ipynb -> out/train.py; copied helpers.py, which it imports (" in run.err[-3]
    assert files(workdir) == ["helpers.py", "out/helpers.py", "out/train.py", "train.ipynb"]


def test_an_import_it_cannot_follow_is_named_by_cell(cli, workdir: Path) -> None:
    (workdir / "helpers.py").write_text(HELPERS)
    first, *rest = USES_HELPERS
    (workdir / "train.ipynb").write_text(code_notebook("import sys\nsys.path.insert(0, sys.argv[1])\n" + first, *rest))

    run = cli("train.ipynb", "-o", "train_ddp.py")

    assert run.code == 0
    assert run.err[0] == (
        "train.ipynb:cell 1:2:1: DDP012 `sys.path.insert()`: modules found through the changed search path "
        "are not followed (script line 3)"
    )


def test_a_folder_of_notebooks_in_worker_processes(cli, workdir: Path) -> None:
    (workdir / "src").mkdir()
    for name in ("a", "b", "c"):
        (workdir / "src" / f"{name}.ipynb").write_bytes(TRAINING.read_bytes())

    run = cli("src", "-j", "2", "-o", "out/")

    assert run.code == 0
    assert run.err[-1] == "3 files: 3 converted"
    expected = (FIXTURES / "training" / "expected.py").read_bytes()
    assert all((workdir / "out" / f"{name}.py").read_bytes() == expected for name in ("a", "b", "c"))
    assert "src/b.ipynb:cell 5:2: wrap `model` in DistributedDataParallel" in run.err


def test_only_notebooks_need_nbformat(workdir: Path) -> None:
    """With nbformat impossible to import, a script converts as before and a notebook asks for the extra."""
    (workdir / "train.ipynb").write_bytes(TRAINING.read_bytes())
    (workdir / "train.py").write_bytes((FIXTURES / "training" / "expected.py").read_bytes())
    blocked = "import sys; sys.modules['nbformat'] = None; from ddpify.cli import main; sys.exit(main(sys.argv[1:]))"

    def ddpify(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "NO_COLOR": "1"}
        command = [sys.executable, "-c", blocked, *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)

    script = ddpify("train.py")
    notebook_run = ddpify("train.ipynb", "-o", "train_ddp.py")

    assert (script.returncode, script.stderr.splitlines()[-1]) == (0, "train.py: nothing to do")
    assert (notebook_run.returncode, notebook_run.stderr) == (
        2,
        "error: train.ipynb: reading a notebook needs nbformat: pip install 'ddpify[notebook]'\n",
    )
    assert files(workdir) == ["train.ipynb", "train.py"]
