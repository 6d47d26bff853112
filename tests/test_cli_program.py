"""The command line on a program of several modules: where each file goes, and what is refused."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ddpify.cli import main
from ddpify.cli.exits import Interrupted

if TYPE_CHECKING:
    from conftest import RunDdpify

PROJECTS = Path(__file__).parent / "fixtures" / "projects"
REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", folder)
    (folder / "pyproject.toml").write_text("")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_one_output_file_cannot_hold_a_program_whose_other_modules_change(project: Path, run_ddpify: RunDdpify) -> None:
    before = snapshot(project)
    done = run_ddpify(project, "train.py", "-o", "train_ddp.py")
    assert done.returncode == 2
    assert "data_loader.py, solver.py" in done.stderr and "--in-place" in done.stderr and "-o DIR/" in done.stderr
    assert snapshot(project) == before


PROGRESS_HELPER = """import sys


def progress(step, total, loss):
    sys.stdout.write(f"\\r{step}/{total} loss {loss:.3f}")
    if step == total:
        print()
"""
TRAINS_WITH_PROGRESS = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from utils import progress

loader = DataLoader(TensorDataset(torch.randn(64, 3), torch.randn(64, 1)), batch_size=8, shuffle=True)
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader, 1):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    progress(step, len(loader), loss.item())
"""


def test_one_output_file_leaves_terminal_output_of_other_modules_on_every_rank_and_says_so(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text(PROGRESS_HELPER)
    (tmp_path / "train.py").write_text(TRAINS_WITH_PROGRESS)

    one_file = run_ddpify(tmp_path, "train.py", "-o", "train_ddp.py")
    assert one_file.returncode == 0, one_file.stderr
    assert (
        "utils.py:5:5: DDP505 output to the terminal in utils.py stays on every rank, since one output file cannot "
        "hold that module" in one_file.stderr
    )
    assert (tmp_path / "utils.py").read_text() == PROGRESS_HELPER
    assert "DistributedSampler" in (tmp_path / "train_ddp.py").read_text()

    folder = run_ddpify(tmp_path, "train.py", "-o", "out/")
    assert folder.returncode == 0, folder.stderr
    assert "DDP505" not in folder.stderr
    assert "if not dist.is_initialized() or dist.get_rank() == 0:" in (tmp_path / "out" / "utils.py").read_text()


def test_diff_shows_every_changed_file_and_writes_nothing(project: Path, run_ddpify: RunDdpify) -> None:
    before = snapshot(project)
    done = run_ddpify(project, "train.py", "--diff")
    assert done.returncode == 0, done.stderr
    headers = [line for line in done.stdout.splitlines() if line.startswith("--- ")]
    assert headers == ["--- train.py", "--- data_loader.py", "--- solver.py"]
    assert "solver.py:14: wrap `self.model` in DistributedDataParallel" in done.stderr
    assert snapshot(project) == before


def test_in_place_rewrites_the_changed_modules_and_check_then_passes(project: Path, run_ddpify: RunDdpify) -> None:
    done = run_ddpify(project, "train.py", "--in-place")
    assert done.returncode == 0, done.stderr
    expected = PROJECTS / "solver" / "expected"
    for name in ("train.py", "solver.py", "data_loader.py"):
        assert (project / name).read_bytes() == (expected / name).read_bytes()
    assert (project / "models.py").read_bytes() == (PROJECTS / "solver" / "input" / "models.py").read_bytes()


def test_check_covers_every_file_of_the_program(project: Path, tmp_path: Path, run_ddpify: RunDdpify) -> None:
    assert run_ddpify(project, "train.py", "-o", "../out/").returncode == 0
    current = run_ddpify(project, "train.py", "-o", "../out/", "--check")
    assert current.returncode == 0, current.stderr
    (tmp_path / "out" / "solver.py").write_text("stale\n")
    stale = run_ddpify(project, "train.py", "-o", "../out/", "--check")
    assert stale.returncode == 1
    assert "would rewrite ../out/solver.py" in stale.stderr


def test_an_output_folder_receives_the_whole_program(project: Path, tmp_path: Path, run_ddpify: RunDdpify) -> None:
    done = run_ddpify(project, "train.py", "-o", "../out/")
    assert done.returncode == 0, done.stderr
    assert sorted(snapshot(tmp_path / "out")) == ["data_loader.py", "models.py", "solver.py", "train.py"]
    assert "copied models.py" in done.stderr


def test_a_script_written_away_from_its_modules_says_how_to_run_it(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    # Only the entry script changes: the local module holds the model alone.
    shutil.copy(REPOSITORY / "tests" / "trial" / "s21_external_model.py", project / "train.py")
    shutil.copy(REPOSITORY / "tests" / "trial" / "models.py", project / "models.py")
    (tmp_path / "build").mkdir()
    done = run_ddpify(project, "train.py", "-o", "../build/train_ddp.py")
    assert done.returncode == 0, done.stderr
    assert "train_ddp.py imports models.py from .: run it with PYTHONPATH=." in done.stderr
    assert "-o DIR/" in done.stderr


def test_a_folder_converts_each_program_once_with_its_modules(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "shared_with_eval" / "input", project)
    (project / "pyproject.toml").write_text("")
    done = run_ddpify(project, ".", "-o", "../out/")
    assert done.returncode == 0, done.stderr
    assert "common.py: converted with ./train.py, whose program imports it" in done.stderr
    assert "error" not in done.stderr
    expected = PROJECTS / "shared_with_eval" / "expected"
    out = tmp_path / "out"
    assert (out / "common.py").read_bytes() == (expected / "common.py").read_bytes()
    assert (out / "train.py").read_bytes() == (expected / "train.py").read_bytes()
    assert (out / "evaluate.py").read_bytes() == (project / "evaluate.py").read_bytes()
    assert run_ddpify(project, ".", "-o", "../out/", "--check").returncode == 0


def test_two_programs_that_change_one_module_alike_write_it_once(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project)
    (project / "pyproject.toml").write_text("")
    # A second entry with the same program; another script imports data_loader.py too.
    (project / "train_b.py").write_text((project / "train.py").read_text())
    (project / "other.py").write_text("import data_loader\n")
    done = run_ddpify(project, "train.py", "train_b.py", "--in-place")
    assert done.returncode == 0, done.stderr  # the same changes: written once
    assert "data_loader.py in place" in done.stderr


def test_a_module_target_that_is_not_a_regular_file_stops_everything_before_a_write(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "solver.py")
    done = run_ddpify(project, "train.py", "-o", "../out/")
    assert done.returncode == 2
    assert "solver.py: not a regular file (a FIFO)" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["solver.py"]  # nothing written, the FIFO never opened


# ----------------------------------------------------------------------------
# A program is written whole or not at all (--in-place, -o DIR/), never over its own sources,
# never through a symlink out of the output folder. Each case compares the files' sha256
# before and after.


def hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden temporary files included) with its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def fail_on(monkeypatch: pytest.MonkeyPatch, name: str, *, call: str = "replace") -> None:
    """Make ``os.<call>`` fail with ENOSPC when it writes to a file called ``name``."""
    original = getattr(os, call)

    def failing(src: object, dst: object, *args: object, **kwargs: object) -> object:
        if os.path.basename(os.fspath(dst)) == name:  # type: ignore[arg-type]
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(dst))  # type: ignore[arg-type]
        return original(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, call, failing)


@pytest.mark.parametrize("failing", ["train.py", "solver.py"], ids=["entry-last", "module"])
def test_in_place_writes_the_whole_program_or_nothing(
    failing: str, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    before = hashes(project)
    fail_on(monkeypatch, failing)

    code = main(["train.py", "--in-place"])

    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error: cannot write {failing}: No space left on device; nothing written" in err.splitlines()
    assert hashes(project) == before  # data_loader.py and solver.py are back as they were


def test_an_output_folder_is_written_whole_or_not_at_all(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    out = tmp_path / "out"
    out.mkdir()
    (out / "solver.py").write_text("an older output\n")
    before, sources = hashes(out), hashes(project)
    fail_on(monkeypatch, "train.py")

    code = main(["train.py", "-o", "../out/"])

    assert code == 2, capsys.readouterr().err
    assert hashes(out) == before
    assert hashes(project) == sources


def test_a_new_output_folder_is_removed_again_when_the_program_cannot_be_written(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    fail_on(monkeypatch, "models.py")

    assert main(["train.py", "-o", "../out/new/"]) == 2

    assert "models.py: No space left on device; nothing written" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("step", ["fsync", "replace"], ids=["while-writing", "while-moving-into-place"])
@pytest.mark.parametrize("signums", [[signal.SIGINT], [signal.SIGINT, signal.SIGTERM]], ids=["one", "two"])
def test_stop_signals_during_the_writes_leave_the_program_as_it_was(
    step: str,
    signums: list[int],
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(project)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # as in a terminal, whatever the test runner left (a pytest-xdist worker ignores SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    before = hashes(project)
    original = getattr(os, step)
    calls = []

    def signalled(*args: object) -> object:
        calls.append(args)
        if len(calls) == 2:  # the second file of three: one is done already
            for signum in signums:
                # to this thread, as a terminal's Ctrl-C reaches a one-thread run (the test runner has others)
                signal.pthread_kill(threading.main_thread().ident or 0, signum)
        return original(*args)

    monkeypatch.setattr(os, step, signalled)
    try:
        code = main(["train.py", "--in-place"])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    assert code == 128 + signums[0]
    assert capsys.readouterr().err.splitlines()[-1] == "interrupted: nothing written"
    assert len(calls) >= 2
    assert hashes(project) == before


def test_two_stop_signals_during_the_writes_of_a_large_program_leave_it_whole_or_untouched(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    count = 190
    imports = "".join(f"import m{i:03d}\n" for i in range(count))
    (project / "train.py").write_bytes(imports.encode() + (REPOSITORY / "examples" / "regression.py").read_bytes())
    for i in range(count):
        (project / f"m{i:03d}.py").write_text(f"VALUE = {i}\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "NO_COLOR": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "ddpify", "train.py", "-o", "../out/"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not out.exists() and child.poll() is None:
        assert time.monotonic() < deadline, "no output folder within two minutes"
        time.sleep(0.001)
    child.send_signal(signal.SIGINT)
    time.sleep(0.005)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)

    written = sorted(p.name for p in out.iterdir()) if out.exists() else []
    every = sorted(["train.py", *(f"m{i:03d}.py" for i in range(count))])
    assert written in ([], every), (written[:5], err.decode())
    if not written:
        assert child.returncode == 130, err.decode()
        assert err.decode().splitlines()[-1] == "interrupted: nothing written"
    assert "Traceback" not in err.decode()


def test_an_output_folder_inside_the_program_never_replaces_its_sources(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project)
    (project / "pyproject.toml").write_text("")
    # A package of the program holds a module named like a top-level one: -o lib/ would put the
    # converted top-level solver.py over lib/solver.py.
    (project / "lib").mkdir()
    (project / "lib" / "__init__.py").write_text("")
    (project / "lib" / "solver.py").write_text("LIB = True\n")
    (project / "train.py").write_text(
        (project / "train.py")
        .read_text()
        .replace("import argparse", "import argparse\nfrom lib import solver as lib_solver")
    )
    before = hashes(project)

    done = run_ddpify(project, "train.py", "-o", "lib/")

    assert done.returncode == 2, done.stderr
    assert (
        "error: lib/solver.py is lib/solver.py, a file of the program itself; choose an -o folder outside the program"
        in done.stderr
    )
    assert hashes(project) == before


def test_a_program_written_to_its_own_folder_is_refused(project: Path, run_ddpify: RunDdpify) -> None:
    before = hashes(project)

    done = run_ddpify(project, "train.py", "-o", "./")

    assert done.returncode == 2
    assert "is the input file" in done.stderr or "a file of the program itself" in done.stderr
    assert hashes(project) == before


# ----------------------------------------------------------------------------
# Modules found as importlib finds them; imports ddpify cannot follow are named.


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def diff_headers(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("--- ")]


def test_a_package_comes_before_a_module_of_the_same_name(project: Path, run_ddpify: RunDdpify) -> None:
    (project / "data_loader").mkdir()
    (project / "data_loader.py").rename(project / "data_loader" / "__init__.py")
    (project / "data_loader.py").write_text("def get_loader(batch_size):\n    raise SystemExit('never imported')\n")

    done = run_ddpify(project, "train.py", "--diff")

    assert done.returncode == 0, done.stderr
    assert diff_headers(done.stdout) == ["--- train.py", "--- data_loader/__init__.py", "--- solver.py"]


@pytest.mark.parametrize("name", ["os", "sys", "abc"])
def test_a_local_file_named_like_a_module_python_has_loaded_already_is_not_read(
    name: str, project: Path, run_ddpify: RunDdpify
) -> None:
    (project / f"{name}.py").write_text("this is not python (\n")
    edit(project / "train.py", "import argparse\n", f"import argparse\nimport {name}\n")

    done = run_ddpify(project, "train.py", "--diff")

    assert done.returncode == 0, done.stderr
    assert "DDP002" not in done.stderr
    assert f"--- {name}.py" not in diff_headers(done.stdout)


def test_a_module_imported_by_a_constant_name_is_part_of_the_program(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    (project / "plugins.py").write_text("VALUE = 1\n")
    edit(
        project / "train.py",
        "import argparse\n",
        'import argparse\nimport importlib\n\nplugins = importlib.import_module("plugins")\n',
    )

    done = run_ddpify(project, "train.py", "-o", "../out/")

    assert done.returncode == 0, done.stderr
    assert "DDP012" not in done.stderr
    assert (tmp_path / "out" / "plugins.py").read_bytes() == (project / "plugins.py").read_bytes()


UNFOLLOWED = [
    (
        "importlib.import_module(sys.argv[1])",
        "`importlib.import_module()`: it loads a module whose name is known only when it runs, which ddpify "
        "cannot follow",
    ),
    (
        "__import__(sys.argv[1])",
        "`__import__()`: it loads a module whose name is known only when it runs, which ddpify cannot follow",
    ),
    (
        'sys.path.insert(0, "../shared")',
        "`sys.path.insert()`: modules found through the changed search path are not followed",
    ),
    (
        'runpy.run_path("setup_env.py")',
        "`runpy.run_path()`: it runs code from a file path, which ddpify does not follow",
    ),
]


@pytest.mark.parametrize(("line", "message"), UNFOLLOWED, ids=["import_module", "__import__", "sys.path", "run_path"])
def test_an_import_ddpify_cannot_follow_is_a_warning_in_place_and_refused_for_an_output_folder(
    line: str, message: str, project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    edit(
        project / "train.py",
        "import argparse\n",
        f"import argparse\nimport importlib\nimport runpy\nimport sys\n\n{line}\n",
    )
    where = "train.py:7:1: "

    in_place = run_ddpify(project, "train.py", "--in-place")

    assert in_place.returncode == 0, in_place.stderr
    assert f"{where}DDP012 {message}" in in_place.stderr.splitlines()

    (tmp_path / "fresh").mkdir()
    fresh = tmp_path / "fresh" / "project"
    shutil.copytree(PROJECTS / "solver" / "input", fresh)
    (fresh / "pyproject.toml").write_text("")
    edit(
        fresh / "train.py",
        "import argparse\n",
        f"import argparse\nimport importlib\nimport runpy\nimport sys\n\n{line}\n",
    )
    before = hashes(tmp_path / "fresh")

    folder = run_ddpify(fresh, "train.py", "-o", "../out/")

    assert folder.returncode == 3, folder.stderr
    assert f"{where}DDP013 {message}; -o ../out/ would hold a program without that code" in folder.stderr.splitlines()
    assert "train.py: not converted (1 error" in folder.stderr
    assert hashes(tmp_path / "fresh") == before
    assert not (tmp_path / "fresh" / "out").exists()


def test_adding_the_scripts_own_folder_to_the_search_path_is_no_warning(project: Path, run_ddpify: RunDdpify) -> None:
    edit(
        project / "train.py",
        "import argparse\n",
        "import argparse\nimport os\nimport sys\n\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n",
    )

    done = run_ddpify(project, "train.py", "--in-place")

    assert done.returncode == 0, done.stderr
    assert "DDP012" not in done.stderr


def test_a_relative_import_in_the_entry_script_is_named(project: Path, run_ddpify: RunDdpify) -> None:
    (project / "__init__.py").write_text("")
    (project / "config.py").write_text("EPOCHS = 3\n")
    edit(project / "train.py", "import argparse\n", "import argparse\n\nfrom . import config\n")

    done = run_ddpify(project, "train.py", "--in-place")

    assert done.returncode == 0, done.stderr
    assert (
        "train.py:4:1: DDP012 a relative import (.): an entry script runs only as `python -m` with it, "
        "and ddpify does not follow it (config is not converted)" in done.stderr.splitlines()
    )


def test_an_already_distributed_program_goes_to_an_output_folder_whole(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    assert run_ddpify(project, "train.py", "--in-place").returncode == 0
    converted = hashes(project)

    done = run_ddpify(project, "train.py", "-o", "../out/")

    assert done.returncode == 0, done.stderr
    assert "train.py: nothing to do" in done.stderr
    assert hashes(tmp_path / "out") == {name: converted[name] for name in converted if name != "pyproject.toml"}


# ----------------------------------------------------------------------------
# Messages


def test_a_module_of_a_program_in_a_folder_is_reported_with_its_program(project: Path, run_ddpify: RunDdpify) -> None:
    done = run_ddpify(project, ".", "--in-place", "-j", "1")

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "./solver.py: converted with ./train.py, whose program imports it" in lines
    assert "./data_loader.py: converted with ./train.py, whose program imports it" in lines
    assert not any(line.endswith("solver.py: nothing to do") for line in lines)


def test_an_output_folder_that_is_a_dangling_symlink_is_refused(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    (tmp_path / "out").symlink_to("missing")
    before = hashes(project)

    done = run_ddpify(project, "train.py", "-o", "../out/")

    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: ../out/: a symbolic link to a missing folder (missing); create that folder or choose another -o folder"
    )
    assert not (tmp_path / "missing").exists()
    assert hashes(project) == before


def test_a_stop_that_reaches_the_writes_as_an_exception_leaves_the_program_as_it_was(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A second signal whose handler ran just before the writes held the signals back: it raises
    # in the middle of them.
    monkeypatch.chdir(project)
    before = hashes(project)
    original = os.replace
    calls = []

    def interrupted(*args: object) -> object:
        calls.append(args)
        if len(calls) == 2:
            raise Interrupted(signal.SIGINT)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", interrupted)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = main(["train.py", "--in-place"])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)

    assert code == 130

    assert capsys.readouterr().err.splitlines()[-1] == "interrupted: nothing written"
    assert hashes(project) == before


def test_a_package_a_few_folders_up_is_part_of_a_program_without_a_root_marker(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    """A repository's scripts in ``projects/run/`` import its package ``lib`` (installed with ``pip
    install -e .`` or put on PYTHONPATH); with no root marker copied along, the package is still
    found a few folders up, and its training loop is converted rather than "nothing to do"."""
    repository = tmp_path / "repository"
    package = repository / "lib"
    shutil.copytree(PROJECTS / "solver" / "input", package)
    (package / "__init__.py").write_text("")
    for module in ("solver.py", "train.py", "data_loader.py"):
        text = (package / module).read_text()
        text = text.replace("from models import", "from lib.models import")
        text = text.replace("from data_loader import", "from lib.data_loader import")
        (package / module).write_text(text.replace("from solver import", "from lib.solver import"))
    script = repository / "projects" / "run" / "run.py"
    script.parent.mkdir(parents=True)
    shutil.move(package / "train.py", script)
    done = run_ddpify(script.parent, "run.py", "--diff")
    assert done.returncode == 0, done.stderr
    assert "lib/solver.py" in done.stdout and "lib/data_loader.py" in done.stdout
    assert "DDP011" not in done.stderr


def test_a_folder_run_reports_a_program_that_needs_a_folder_without_failing(
    project: Path, run_ddpify: RunDdpify
) -> None:
    before = snapshot(project)
    done = run_ddpify(project, ".", "--check")
    assert done.returncode == 0, done.stderr
    assert "./train.py: needs --in-place or -o DIR/ (its conversion also changes data_loader.py, solver.py)" in (
        done.stderr
    )
    assert "1 need --in-place or -o DIR/" in done.stderr.splitlines()[-1]
    assert snapshot(project) == before
    alone = run_ddpify(project, "train.py", "--suffix", "_ddp")
    assert alone.returncode == 2 and "which one output file cannot hold" in alone.stderr


def test_an_output_folder_with_a_module_above_the_script_says_to_put_the_folder_on_the_search_path(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project / "scripts")
    (project / "pyproject.toml").write_text("")
    (project / "scripts" / "solver.py").rename(project / "solver.py")  # at the project's root, as installed

    done = run_ddpify(project, "scripts/train.py", "-o", "../out dir/", "--sbatch", "../job.sh")

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out dir" / "solver.py").is_file()
    assert "export PYTHONPATH='../out dir'\"${PYTHONPATH:+:$PYTHONPATH}\"" in (tmp_path / "job.sh").read_text()
    run_it = next(line for line in done.stderr.splitlines() if line.startswith("run it: "))
    assert (
        run_it
        == "run it: PYTHONPATH='../out dir' torchrun --standalone --nproc_per_node=gpu '../out dir/scripts/train.py'"
    )
    several = next(line for line in done.stderr.splitlines() if line.startswith("on several nodes: "))
    assert several.startswith("on several nodes: PYTHONPATH='../out dir' torchrun ")
    # What the command sets up: the converted script finds the converted module, not the project's.
    found = subprocess.run(
        [sys.executable, "-c", "import solver; print(solver.__file__)"],
        cwd=tmp_path / "out dir" / "scripts",
        env={**os.environ, "PYTHONPATH": str(tmp_path / "out dir")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(found.stdout.strip()) == tmp_path / "out dir" / "solver.py"


def test_a_program_without_a_root_marker_keeps_its_layout_in_the_output_folder(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    # a download without .git or pyproject.toml: the entry in tools/, its package found a folder above
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project / "tools")
    (project / "solver").mkdir()
    (project / "tools" / "solver.py").rename(project / "solver" / "__init__.py")

    done = run_ddpify(project, "tools/train.py", "-o", "../out/")

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "tools" / "train.py").is_file()
    assert (tmp_path / "out" / "solver" / "__init__.py").is_file()
    assert not (tmp_path / "solver").exists()  # nothing written outside the output folder


def test_a_folder_above_the_entry_that_the_program_adds_to_the_search_path_is_read_without_a_root_marker(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    # a download without .git or pyproject.toml whose entry puts the repository's folder on sys.path itself
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project / "model")
    (project / "lib").mkdir()
    (project / "model" / "solver.py").rename(project / "lib" / "solver.py")
    edit(
        project / "model" / "train.py",
        "from solver import Solver\n",
        "import os\nimport sys\n\nsys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
        "from lib.solver import Solver\n",
    )

    done = run_ddpify(project / "model", "train.py", "-o", "../../out/")

    assert done.returncode == 0, done.stderr
    assert "DDP01" not in done.stderr
    assert "DistributedDataParallel" in (tmp_path / "out" / "lib" / "solver.py").read_text()
    assert (tmp_path / "out" / "model" / "train.py").is_file()


def test_an_output_folder_with_every_module_beside_the_script_needs_no_search_path(
    project: Path, run_ddpify: RunDdpify
) -> None:
    done = run_ddpify(project, "train.py", "-o", "../out/")

    assert done.returncode == 0, done.stderr
    assert "run it: torchrun --standalone --nproc_per_node=gpu ../out/train.py" in done.stderr.splitlines()


SHARED_DATA = """import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loader(batch_size):
    ds = TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
    return DataLoader(ds, batch_size=batch_size, shuffle=True)
"""
ENTRY_WITH_SHARED_DATA = """import torch
import torch.nn as nn

from data import get_loader

loader = get_loader(8)
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_second_entry_whose_shared_module_was_converted_before_is_told_how_to_convert_both(
    tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "data.py").write_text(SHARED_DATA)
    (tmp_path / "train.py").write_text(ENTRY_WITH_SHARED_DATA)
    (tmp_path / "finetune.py").write_text(ENTRY_WITH_SHARED_DATA.replace("range(2)", "range(1)"))
    git = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    git["GIT_COMMITTER_EMAIL"] = "a@b"
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "single GPU"]):
        subprocess.run(["git", *command], cwd=tmp_path, env=git, check=True)
    assert run_ddpify(tmp_path, "train.py", "--in-place").returncode == 0

    second = run_ddpify(tmp_path, "finetune.py")

    assert second.returncode == 3
    note = (
        "note: data.py already holds ddpify's conversion for another entry script (train.py); entry scripts that "
        "share modules are converted together, in one run: put back the files that conversion changed (with git: "
        "git checkout -- train.py data.py), then run: ddpify finetune.py train.py --in-place"
    )
    assert note in second.stderr.splitlines()
    # The advice, followed as given, converts both entries and their shared module.
    subprocess.run(["git", "checkout", "--", "train.py", "data.py"], cwd=tmp_path, env=git, check=True)
    both = run_ddpify(tmp_path, "finetune.py", "train.py", "--in-place")
    assert both.returncode == 0, both.stderr
    for entry in ("train.py", "finetune.py"):
        assert "def setup_distributed" in (tmp_path / entry).read_text()
    assert "DistributedSampler(ds) if dist.is_initialized() else None" in (tmp_path / "data.py").read_text()


HAND_DISTRIBUTED = """import os

import torch.distributed as dist


def init_distributed():
    if "RANK" in os.environ:
        dist.init_process_group("gloo")


def is_master():
    return not dist.is_initialized() or dist.get_rank() == 0
"""


def test_a_program_distributed_by_hand_is_not_taken_for_an_earlier_conversion(
    project: Path, run_ddpify: RunDdpify
) -> None:
    # The guard ddpify writes into shared modules is also what such programs write themselves.
    (project / "parallel.py").write_text(HAND_DISTRIBUTED)
    entry = "from parallel import init_distributed, is_master\n" + ENTRY_WITH_SHARED_DATA.replace(
        "from data import get_loader\n", ""
    ).replace("loader = get_loader(8)", "init_distributed()\nloader = [(torch.randn(8, 3), torch.randn(8, 1))]")
    (project / "train.py").write_text(entry)

    result = run_ddpify(project, "train.py")

    assert result.returncode == 0, result.stderr
    assert "DDP010" in result.stderr
    assert "ddpify's conversion" not in result.stderr


def test_a_module_present_only_as_bytecode_is_named(project: Path, run_ddpify: RunDdpify) -> None:
    # Python imports models.pyc beside the script when models.py is missing; ddpify cannot read it.
    subprocess.run(
        [sys.executable, "-c", "import py_compile; py_compile.compile('models.py', cfile='models.pyc', doraise=True)"],
        cwd=project,
        check=True,
    )
    (project / "models.py").unlink()
    finding = (
        "solver.py:4:1: {code} `models`: Python imports it from models.pyc, compiled code without its source, "
        "which ddpify can neither read nor convert; restore its .py file"
    )

    in_place = run_ddpify(project, "train.py", "--diff")
    folder = run_ddpify(project, "train.py", "-o", "../out/")

    assert in_place.returncode == 0, in_place.stderr
    assert finding.format(code="DDP012") in in_place.stderr.splitlines()
    assert folder.returncode == 3
    assert f"{finding.format(code='DDP013')}; -o ../out/ would hold a program without that code" in folder.stderr
    assert not (project.parent / "out").exists()


def test_check_of_a_program_ends_on_what_is_stale_and_tells_a_deleted_output_from_a_changed_one(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    assert run_ddpify(project, "train.py", "-o", "../out/").returncode == 0
    (tmp_path / "out" / "solver.py").write_text("stale\n")
    (tmp_path / "out" / "models.py").unlink()

    check = run_ddpify(project, "train.py", "-o", "../out/", "--check")

    assert check.returncode == 1
    assert check.stderr.splitlines()[-3:] == [
        "would rewrite ../out/solver.py",
        "would write ../out/models.py (it is missing)",
        "../out/train.py is current, but not the program: 2 other files would be written",
    ]
    assert "up to date" not in check.stderr


def test_a_folder_reports_an_invalid_module_as_invalid_not_as_nothing_to_do(
    project: Path, run_ddpify: RunDdpify
) -> None:
    with open(project / "models.py", "a") as file:
        file.write("def broken(:\n")
    before = snapshot(project)

    done = run_ddpify(project, ".", "--in-place", "-j", "1")

    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert "error: ./models.py: not valid Python, so the program that imports it is not converted" in lines
    assert not any(line.endswith("models.py: nothing to do") for line in lines), lines
    assert lines[-1] == "4 files: 2 unchanged, 2 invalid"
    assert snapshot(project) == before


def test_an_output_folder_that_is_a_hard_linked_copy_of_the_program_is_written_without_touching_it(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for source in project.iterdir():
        os.link(source, out / source.name)  # `cp -al project out`
    before = snapshot(project)

    done = run_ddpify(project, "train.py", "-o", "../out/")

    assert done.returncode == 0, done.stderr
    assert (
        "note: ../out/train.py was a hard link to train.py: it is a file of its own now, and train.py is as it was"
        in done.stderr.splitlines()
    )
    assert snapshot(project) == before
    for name in ("train.py", "solver.py", "data_loader.py"):
        assert (out / name).read_bytes() == (PROJECTS / "solver" / "expected" / name).read_bytes()


def test_an_output_folder_inside_a_package_of_the_program_is_refused(project: Path, run_ddpify: RunDdpify) -> None:
    (project / "lib").mkdir()
    (project / "lib" / "__init__.py").write_text("")
    edit(project / "train.py", "import argparse", "import argparse\n\nimport lib")
    before = hashes(project)

    done = run_ddpify(project, "train.py", "-o", "lib/ddp/")

    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: -o lib/ddp/ is inside lib/, a package of the program: the copy would become part of the code it "
        "copies; choose an -o folder outside the program's packages"
    )
    assert hashes(project) == before


def test_verify_of_an_output_folder_with_a_module_above_the_script_runs_it_with_the_folder_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddpify.cli import backend
    from ddpify.verify import CHECK_NAMES, Check, RankReport, VerifyReport

    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "solver" / "input", project / "scripts")
    (project / "pyproject.toml").write_text("")
    (project / "scripts" / "solver.py").rename(project / "solver.py")
    monkeypatch.chdir(project)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    runs: list[dict[str, object]] = []

    def verify(script: Path, **settings: object) -> VerifyReport:
        runs.append(settings)
        ranks = tuple(RankReport(rank, "ok", 4, "c0", f"{rank}b", (), True, None) for rank in (0, 1))
        checks = tuple(Check(name, True, "holds") for name in CHECK_NAMES)
        return VerifyReport(str(script), 2, ("torchrun",), None, 0, False, 1.0, ranks, checks, "")

    monkeypatch.setattr(backend, "verify", verify)

    assert main(["scripts/train.py", "-o", "../out/", "--verify"]) == 0

    assert runs[0]["env"] == {"PYTHONPATH": str(tmp_path / "out")}
    assert "verifying ../out/scripts/train.py under torchrun with 2 processes, ../out on PYTHONPATH" in (
        capsys.readouterr().err.splitlines()
    )


def test_a_module_that_would_not_print_back_byte_for_byte_is_refused_only_where_it_changes(
    project: Path, tmp_path: Path, run_ddpify: RunDdpify
) -> None:
    models = project / "models.py"  # only read
    models.write_bytes(models.read_bytes().replace(b"\n", b"\r"))

    done = run_ddpify(project, "train.py", "-o", f"{tmp_path / 'out'}/")

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "models.py").read_bytes() == models.read_bytes()
    assert (tmp_path / "out" / "solver.py").read_bytes() != (project / "solver.py").read_bytes()

    solver = project / "solver.py"  # changes
    solver.write_bytes(solver.read_bytes() + b"    \n\t\n  ")
    before = snapshot(project)

    done = run_ddpify(project, "train.py", "--in-place")

    assert done.returncode != 0
    assert "solver.py:1:1: DDP004 " in done.stderr
    assert snapshot(project) == before


def test_a_script_inside_a_namespace_package_is_written_with_that_folder(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    # `src/main.py` imports `src.utils` (no __init__.py): it runs as `python -m src.main` from the folder above,
    # so the output folder must hold `src/` and Python must search the output folder.
    fixture = PROJECTS / "script_inside_a_namespace_package" / "input"
    shutil.copytree(fixture, tmp_path / "in")

    result = run_ddpify(tmp_path / "in", "src/main.py", "-o", str(tmp_path / "out") + os.sep)

    assert result.returncode == 0, result.stderr
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.py")) == [
        "src/main.py",
        "src/utils.py",
    ]
    out = tmp_path / "out"
    assert f"run it: PYTHONPATH={out} torchrun --standalone --nproc_per_node=gpu {out}/src/main.py" in result.stderr


def test_a_module_that_imports_itself_by_name_is_no_unknown_code(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    # `importlib.import_module(__name__)` (a module looking up its own globals) loads nothing new: the program
    # written into a folder holds everything it runs.
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "lists.py").write_text(
        "import importlib\n\nFLOAT_OPS = ['mse_loss']\n_self = importlib.import_module(__name__)\n\n\n"
        "def ops(kind):\n    return getattr(_self, kind.upper() + '_OPS')\n"
    )
    (tmp_path / "train.py").write_text(
        "from lists import ops\n"
        + ENTRY_WITH_SHARED_DATA.replace("from data import get_loader\n", "").replace(
            "loader = get_loader(8)", "print(ops('float'))\nloader = [(torch.randn(8, 3), torch.randn(8, 1))]"
        )
    )

    result = run_ddpify(tmp_path, "train.py", "-o", "out/")

    assert result.returncode == 0, result.stderr
    assert "DDP012" not in result.stderr and "DDP013" not in result.stderr
    assert (tmp_path / "out" / "lists.py").read_text() == (tmp_path / "lists.py").read_text()
