"""ddpify reads the user's script; it never imports or runs it.

The script below would leave a marker file behind if anything executed it
(module-level ``open(marker, "w")``), and it imports a sibling module that
would leave a second marker if anything imported it.  It also trains, so it
goes through the whole conversion: analysis, every pass and the output
checks.  It is converted through the CLI in-process, through ``python -m
ddpify`` in a subprocess started in the script's folder (where ``import
helper`` would resolve), and through ``convert()`` in a fresh interpreter,
which must not have imported torch afterwards either.
"""

from __future__ import annotations

import hashlib
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddpify.cli import main

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import helper_with_side_effect

open({marker!r}, "w").write("the script ran")

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

# (through pathlib: a helper that opens a file for writing when it is imported is refused, DDP503)
HELPER = 'import pathlib\npathlib.Path({marker!r}).write_text("the helper was imported")\n'


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``train.py`` and ``helper_with_side_effect.py`` in an empty folder, which is also the current one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper_with_side_effect.py").write_text(HELPER.format(marker=str(tmp_path / "imported.marker")))
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(marker=str(tmp_path / "ran.marker")))
    return path


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.marker"))


@pytest.mark.parametrize(
    "options",
    [["-o", "train_ddp.py"], ["--diff"], ["--in-place"], ["-o", "train_ddp.py", "--check"]],
    ids=["-o", "--diff", "--in-place", "--check"],
)
def test_cli_in_process_never_runs_the_script(options: list[str], script: Path, capsys) -> None:
    code = main([script.name, *options])

    assert code in (0, 1), capsys.readouterr().err  # 1: --check finds train_ddp.py missing
    assert markers(script.parent) == []
    assert "helper_with_side_effect" not in sys.modules
    if options == ["--in-place"]:
        assert b"DDP(model)" in script.read_bytes()  # it was converted, not skipped


def test_python_m_ddpify_never_runs_the_script(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddpify", script.name, "-o", "train_ddp.py"],
        cwd=script.parent,
        capture_output=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr.decode()
    assert b"DDP(model)" in (script.parent / "train_ddp.py").read_bytes()
    assert markers(script.parent) == []


def test_convert_imports_neither_torch_nor_the_script(script: Path) -> None:
    program = (
        "import sys, ddpify\n"
        f"conversion = ddpify.convert(open({str(script)!r}, 'rb').read())\n"
        "print(conversion.status.value)\n"
        "print('torch' in sys.modules, 'helper_with_side_effect' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=script.parent, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["converted", "False False"]
    assert markers(script.parent) == []


# ----------------------------------------------------------------------------
# Writing a program into a folder (-o DIR/): every output is a regular file inside DIR, at the
# place its import name gives it; a symlink never carries a write onto a source or out of DIR.

PROGRAM_ENTRY = """\
import torch
import torch.nn as nn

from utils import make_loader

loader = make_loader()
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

PROGRAM_UTILS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    return DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
"""


def sha256s(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def linked_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``project/train.py`` whose module ``utils.py`` is a symlink to ``shared/utils.py`` outside it."""
    project, shared = tmp_path / "project", tmp_path / "shared"
    project.mkdir()
    shared.mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (project / "train.py").write_text(PROGRAM_ENTRY)
    (shared / "utils.py").write_text(PROGRAM_UTILS)
    (project / "utils.py").symlink_to("../shared/utils.py")
    monkeypatch.chdir(project)
    return project


def test_a_symlinked_module_is_written_at_its_import_name_inside_the_output_folder(
    linked_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp = linked_program.parent
    before = sha256s(tmp / "shared")

    code = main(["train.py", "-o", "../out/"])

    assert code == 0, capsys.readouterr().err
    out = tmp / "out"
    assert sorted(p.name for p in out.iterdir()) == ["train.py", "utils.py"]
    assert not (out / "utils.py").is_symlink()
    assert b"DistributedSampler" in (out / "utils.py").read_bytes()
    assert sha256s(tmp / "shared") == before  # the linked source is untouched
    assert sorted(p.name for p in tmp.iterdir()) == ["out", "project", "pyproject.toml", "shared"]


def test_an_output_that_is_a_symlink_to_a_source_is_refused(
    linked_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp = linked_program.parent
    out = tmp / "out"
    out.mkdir()
    (out / "utils.py").symlink_to("../shared/utils.py")
    before = sha256s(tmp)

    code = main(["train.py", "-o", "../out/"])

    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: ../out/utils.py is ../shared/utils.py, a file of the program itself; "
        "choose an -o folder outside the program"
    )
    assert sha256s(tmp) == before


def test_an_output_that_leads_out_of_the_output_folder_is_refused(
    linked_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp = linked_program.parent
    (tmp / "elsewhere").mkdir()
    out = tmp / "out"
    out.mkdir()
    (out / "utils.py").symlink_to("../elsewhere/utils.py")
    before = sha256s(tmp)

    code = main(["train.py", "-o", "../out/"])

    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: ../out/utils.py leads outside ../out/ (to ../elsewhere/utils.py); "
        "remove the link or choose another -o folder"
    )
    assert sha256s(tmp) == before
    assert not (tmp / "elsewhere" / "utils.py").exists()


def test_in_place_through_a_symlinked_module_outside_the_project_says_where_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project, shared = tmp_path / "project", tmp_path / "shared"
    project.mkdir()
    shared.mkdir()
    (project / "pyproject.toml").write_text("")  # the project ends at its folder: shared/ lies outside
    (project / "train.py").write_text(PROGRAM_ENTRY)
    (shared / "utils.py").write_text(PROGRAM_UTILS)
    (project / "utils.py").symlink_to("../shared/utils.py")
    monkeypatch.chdir(project)

    assert main(["train.py", "--in-place"]) == 0

    err = capsys.readouterr().err.splitlines()
    assert "note: utils.py leads through a symbolic link: written to ../shared/utils.py, outside the project" in err
    assert (project / "utils.py").is_symlink()
    assert b"DistributedSampler" in (shared / "utils.py").read_bytes()


def test_in_place_on_a_read_only_input_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(PROGRAM_ENTRY)
    (tmp_path / "utils.py").write_text(PROGRAM_UTILS)
    (tmp_path / "utils.py").chmod(0o444)
    monkeypatch.chdir(tmp_path)

    assert main(["train.py", "--in-place"]) == 0

    err = capsys.readouterr().err.splitlines()
    assert "note: utils.py is read-only (0444): replaced all the same, as --in-place asks, and left read-only" in err
    assert stat.S_IMODE((tmp_path / "utils.py").stat().st_mode) == 0o444
    assert b"DistributedSampler" in (tmp_path / "utils.py").read_bytes()
