"""A program's write killed, raced or edited under it: the journal, the folder lock, and the inputs' check.

The kills are real: ``python -m ddpify`` runs with a ``sitecustomize`` (written
here, on ``PYTHONPATH``) that sends SIGKILL to the process at a chosen file
operation, as an out-of-memory kill or a power loss would stop it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ddpify.cli import backend, main

if TYPE_CHECKING:
    from conftest import RunDdpify

REPOSITORY = Path(__file__).resolve().parents[1]
SOLVER = REPOSITORY / "tests" / "fixtures" / "projects" / "solver"
CHANGED = ("train.py", "data_loader.py", "solver.py")  # the files of the solver program a conversion changes

# Stops the process with SIGKILL at the COUNT-th call of os.CALL on a matching file, where STOP_AT is
# "CALL:KIND:COUNT": KIND "py" matches a visible *.py file (a target moved into place), "tmp" and "old"
# the temporary and kept files a write makes. SLOW_REPLACE slows every os.replace onto a *.py file.
SITECUSTOMIZE = """
import os, signal, time

def _name(path):
    return os.path.basename(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""

def _matches(name, kind):
    if kind == "py":
        return name.endswith(".py") and not name.startswith(".")
    return name.startswith(".") and name.endswith("." + kind)

_stop = os.environ.get("STOP_AT")
if _stop:
    _call, _kind, _count = _stop.split(":")
    _left = [int(_count)]
    _original = getattr(os, _call)

    def _stopping(*args, **kwargs):
        path = args[1] if _call == "replace" else args[0]
        if _matches(_name(path), _kind):
            _left[0] -= 1
            if _left[0] == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        return _original(*args, **kwargs)

    setattr(os, _call, _stopping)

_slow = float(os.environ.get("SLOW_REPLACE", "0"))
if _slow:
    _replace = os.replace

    def _slow_replace(src, dst, *args, **kwargs):
        if _matches(_name(dst), "py"):
            time.sleep(_slow)
        return _replace(src, dst, *args, **kwargs)

    os.replace = _slow_replace
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(SOLVER / "input", folder)
    (folder / "pyproject.toml").write_text("")
    return folder


@pytest.fixture
def hooks(tmp_path: Path) -> Path:
    folder = tmp_path / "hooks"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def ddpify(cwd: Path, hooks: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": f"{hooks}{os.pathsep}{REPOSITORY}", "NO_COLOR": "1", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "ddpify", *args],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(child: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = child.communicate(timeout=120)
    return child.returncode, err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder``, hidden ones included, with its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*") if p.is_file())


# -- a write killed --------------------------------------------------------------------------------

KILLS = {
    "while-writing-temporary-files": "open:tmp:2",
    "after-one-file-moved-into-place": "replace:py:2",
    "after-every-file-moved-into-place": "unlink:old:1",
}


@pytest.mark.parametrize("stop", KILLS.values(), ids=KILLS.keys())
def test_an_in_place_write_killed_is_undone_or_finished_by_the_next_run(
    stop: str, project: Path, hooks: Path, run_ddpify: RunDdpify
) -> None:
    before = snapshot(project)

    code, err = finished(ddpify(project, hooks, "train.py", "--in-place", STOP_AT=stop))
    assert code == -signal.SIGKILL, err
    assert hidden(project), "the kill left nothing behind: the case tests nothing"

    # Any run below the folder first repairs it, --diff included, and says what it did in one line.
    repair = run_ddpify(project, "train.py", "--diff")
    assert repair.returncode == 0, repair.stderr
    notes = [line for line in repair.stderr.splitlines() if "stopped ddpify run" in line]
    assert len(notes) == 1, repair.stderr
    if stop.startswith("unlink"):
        assert notes == [
            "note: finished the write of train.py and 2 more that a stopped ddpify run left unfinished (3 files)"
        ]
        for name in CHANGED:
            assert (project / name).read_bytes() == (SOLVER / "expected" / name).read_bytes()
    else:
        assert notes == [
            "note: undid the write of train.py and 2 more that a stopped ddpify run left unfinished: 3 files as before"
        ]
        assert snapshot(project) == before
    assert hidden(project) == []

    done = run_ddpify(project, "train.py", "--in-place")
    assert done.returncode == 0, done.stderr
    for name in CHANGED:
        assert (project / name).read_bytes() == (SOLVER / "expected" / name).read_bytes()
    assert hidden(project) == []


@pytest.mark.parametrize("stop", ["replace:py:1", "replace:py:3"], ids=["first", "third"])
def test_a_write_into_an_output_folder_killed_is_undone_by_the_next_run(
    stop: str, project: Path, tmp_path: Path, hooks: Path, run_ddpify: RunDdpify
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "solver.py").write_text("an older output\n")
    before, sources = snapshot(out), snapshot(project)

    code, err = finished(ddpify(project, hooks, "train.py", "-o", "../out/", STOP_AT=stop))
    assert code == -signal.SIGKILL, err
    assert hidden(out)

    done = run_ddpify(project, "train.py", "-o", "../out/")
    assert done.returncode == 0, done.stderr
    assert (
        "note: undid the write of ../out/train.py and 3 more that a stopped ddpify run left unfinished in ../out: "
        "4 files as before" in done.stderr
    )
    assert hidden(out) == []
    assert sorted(snapshot(out)) == ["data_loader.py", "models.py", "solver.py", "train.py"]
    assert (out / "solver.py").read_bytes() == (SOLVER / "expected" / "solver.py").read_bytes()
    assert snapshot(project) == sources
    assert before != snapshot(out)


def test_a_file_changed_after_a_killed_write_is_left_as_the_user_saved_it(
    project: Path, hooks: Path, run_ddpify: RunDdpify
) -> None:
    code, err = finished(ddpify(project, hooks, "train.py", "--in-place", STOP_AT="replace:py:2"))
    assert code == -signal.SIGKILL, err
    replaced = [name for name in CHANGED if (project / name).read_bytes() == (SOLVER / "expected" / name).read_bytes()]
    assert len(replaced) == 1, replaced
    (project / replaced[0]).write_text("# saved by the user after the kill\n")

    repair = run_ddpify(project, "train.py", "--diff")

    assert f"changed since, so left as they are: {replaced[0]} (its text before: ." in repair.stderr
    assert (project / replaced[0]).read_text() == "# saved by the user after the kill\n"
    (kept,) = hidden(project)
    assert (project / kept).read_bytes() == (SOLVER / "input" / replaced[0]).read_bytes()


def test_a_journal_that_names_files_elsewhere_is_left_alone(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copy(SOLVER / "input" / "models.py", tmp_path / "train.py")
    victim = tmp_path / "elsewhere" / "notes.txt"
    victim.parent.mkdir()
    victim.write_text("mine\n")
    record = {
        "ddpify": 1,
        "state": "commit",
        "about": "train.py",
        "files": [{"target": str(victim), "temporary": None, "kept": str(tmp_path / "train.py"), "new": "0" * 64}],
        "folders": [],
    }
    (tmp_path / ".ddpify-journal").write_text(json.dumps(record))

    done = run_ddpify(tmp_path, "train.py", "--diff")

    assert "warning: .ddpify-journal: not a journal this ddpify wrote; left as it is" in done.stderr
    assert victim.read_text() == "mine\n"
    assert (tmp_path / "train.py").exists()


# -- two runs into one folder ----------------------------------------------------------------------


def test_a_run_waits_while_another_holds_the_output_folder(
    project: Path, tmp_path: Path, hooks: Path, run_ddpify: RunDdpify
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    holder = os.open(out, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another run, in the middle of its write
    try:
        child = ddpify(project, hooks, "train.py", "-o", "../out/")
        assert child.stderr is not None
        waiting = ""
        deadline = time.monotonic() + 120
        while "waiting for another ddpify run" not in waiting:
            assert time.monotonic() < deadline and child.poll() is None, waiting
            waiting += child.stderr.readline()
        time.sleep(0.2)
        assert snapshot(out) == {}
    finally:
        os.close(holder)
    code, err = finished(child)
    assert code == 0, err
    assert "waiting for another ddpify run that is writing in ../out" in waiting
    assert sorted(snapshot(out)) == ["data_loader.py", "models.py", "solver.py", "train.py"]


def test_two_runs_into_one_output_folder_never_mix_their_programs(tmp_path: Path, hooks: Path) -> None:
    # Two projects whose programs have modules of the same names, imported (and so written) in opposite
    # orders, written slowly into one folder at once.
    count = 8
    projects = []
    for which, order in (("a", range(count)), ("b", reversed(range(count)))):
        folder = tmp_path / which
        folder.mkdir()
        (folder / "pyproject.toml").write_text("")
        imports = "".join(f"import m{i}\n" for i in order)
        (folder / "train.py").write_bytes(imports.encode() + (REPOSITORY / "examples" / "regression.py").read_bytes())
        for i in range(count):
            (folder / f"m{i}.py").write_text(f"PROJECT = {which!r}\n")
        projects.append(folder)
    out = tmp_path / "out"
    out.mkdir()

    children = [ddpify(folder, hooks, "train.py", "-o", "../out/", SLOW_REPLACE="0.1") for folder in projects]
    results = [finished(child) for child in children]

    assert [code for code, _ in results] == [0, 0], results
    owners = {(out / f"m{i}.py").read_text() for i in range(count)}
    assert len(owners) == 1, owners
    assert hidden(out) == []


# -- an input edited while ddpify runs -------------------------------------------------------------


@pytest.mark.parametrize("edited", ["train.py", "data_loader.py"], ids=["entry", "module"])
def test_an_input_saved_while_ddpify_converts_it_is_kept_and_nothing_is_written(
    edited: str, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    convert = backend.convert
    saved = (project / edited).read_text() + "# saved in the editor while ddpify ran\n"

    def converting(*args: object, **kwargs: object) -> object:
        (project / edited).write_text(saved)  # the user saves during the analysis
        return convert(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "convert", converting)
    before = snapshot(project)
    before[edited] = hashlib.sha256(saved.encode()).hexdigest()

    code = main(["train.py", "--in-place"])

    err = capsys.readouterr().err
    assert code == 2, err
    assert err.splitlines()[-1] == (
        f"error: {edited} changed on disk while ddpify was converting it; nothing written, so that the change is "
        "kept; run ddpify again to convert the new text"
    )
    assert snapshot(project) == before


def test_an_input_saved_just_before_it_is_replaced_is_kept_and_the_rest_undone(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The save lands between the first file moved into place and the next one.
    monkeypatch.chdir(project)
    original = os.replace
    moved: list[str] = []

    def replace(src: str, dst: str) -> None:
        original(src, dst)
        if dst.endswith(".py") and not os.path.basename(dst).startswith(".") and not moved:
            moved.append(dst)
            with open(project / "train.py", "a") as file:
                file.write("# saved\n")

    monkeypatch.setattr(os, "replace", replace)
    before = snapshot(project)

    assert main(["train.py", "--in-place"]) == 2

    assert "error: train.py changed on disk while ddpify was converting it" in capsys.readouterr().err
    assert moved and not moved[0].endswith("train.py")
    after = snapshot(project)
    assert after.pop("train.py") != before.pop("train.py")
    assert after == before
    assert (project / "train.py").read_text().endswith("# saved\n")
