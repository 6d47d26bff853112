"""Programs of several modules, converted by the command line and trained under torchrun.

Each project of ``tests/fixtures/projects`` that converts is copied, converted
with ``--in-place`` or ``-o DIR/`` and run on two ranks: they must train in
sync, each on its own shard, with one writer, and the converted program must
still run under plain ``python``. A script that shares a module with the
training program, but is not part of it, must keep working without a process
group.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RunDdpify

from ddpify.verify import verify

pytest.importorskip("torch")

PROJECTS = Path(__file__).parent.parent / "fixtures" / "projects"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
# as conftest.py's: plain runs fork from the server that has imported torch (tests/forkrun.py)
FORKED = os.environ.get("DDPIFY_TEST_TORCHRUN") != "1"


def python(cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    if FORKED:  # forked from the server that has imported torch (tests/forkrun.py): a torch import less
        import forkrun

        done: subprocess.CompletedProcess[str] = forkrun.run_plain_forked(cwd, [script], env, timeout=120)
        return done
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, script], cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env
        )
        # Gloo's threads can abort the interpreter's teardown on a loaded machine (SIGABRT, "terminate called
        # without an active exception") after the program ended: torch's, not the program's; run it once more
        if not (done.returncode == -signal.SIGABRT and "terminate called" in done.stderr):
            break
    return done


def trains_in_sync(script: Path) -> None:
    report = verify(script, nproc=2, workdir=script.parent, timeout=240)
    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
    assert rank0.saves and not rank1.saves


@pytest.mark.torchrun
@pytest.mark.parametrize(
    ("case", "how"),
    [
        ("solver", "-o"),
        ("trainer_hierarchy", "--in-place"),
        ("builder_returns_the_model", "-o"),
        ("cache_helper_called_by_the_model_builder", "-o"),
        ("method_class_imported_in_each_branch", "--in-place"),
        ("unconvertible_trainer_calls_super_with_its_class", "-o"),
        ("optimizer_helper_shared_by_two_models", "--in-place"),
        pytest.param("code_that_never_runs", "--in-place", marks=pytest.mark.exhaustive),
        pytest.param("builtin_rebound_in_another_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("helpers", "-o", marks=pytest.mark.exhaustive),
        pytest.param("loader_dict", "--in-place", marks=pytest.mark.exhaustive),
        pytest.param("distributed_helper_never_called", "-o", marks=pytest.mark.exhaustive),
        pytest.param("base_trainer_through_a_star_import", "-o", marks=pytest.mark.exhaustive),
        pytest.param("flag_picks_an_unconvertible_trainer", "-o", marks=pytest.mark.exhaustive),
        pytest.param("trainer_from_a_registry", "-o", marks=pytest.mark.exhaustive),
        pytest.param("model_chosen_by_name_trains_its_head", "-o", marks=pytest.mark.exhaustive),
        pytest.param("folder_looked_at_in_a_runner", "-o", marks=pytest.mark.exhaustive),
        pytest.param("experiment_class_bound_to_a_short_name", "-o", marks=pytest.mark.exhaustive),
        pytest.param("validation_loader_from_a_shared_factory", "-o", marks=pytest.mark.exhaustive),
        pytest.param("model_from_a_registry_of_another_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("sampler_placeholder_in_a_trainer_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("loader_dict_in_a_shared_module", "--in-place", marks=pytest.mark.exhaustive),
        pytest.param("lbfgs_closure_in_a_shared_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("library_folder_added_to_the_search_path", "--in-place", marks=pytest.mark.exhaustive),
        pytest.param("model_loaded_back_only_when_resuming", "-o", marks=pytest.mark.exhaustive),
        pytest.param("data_parallel_after_a_builder_that_restores", "-o", marks=pytest.mark.exhaustive),
        pytest.param("data_loader_imported_through_a_project_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("solver_imported_in_each_of_three_branches", "-o", marks=pytest.mark.exhaustive),
        pytest.param("evaluation_counts_added_up_by_the_program", "-o", marks=pytest.mark.exhaustive),
        pytest.param("classes_reexported_by_a_package_left_unused", "-o", marks=pytest.mark.exhaustive),
        pytest.param("objective_looked_up_by_name_in_a_module", "-o", marks=pytest.mark.exhaustive),
        pytest.param("trainer_class_taken_from_a_registry_into_a_name", "-o", marks=pytest.mark.exhaustive),
        pytest.param("data_parallel_in_a_builder_whose_caller_moves_the_model", "-o", marks=pytest.mark.exhaustive),
    ],
)
def test_a_converted_program_trains_in_sync(case: str, how: str, tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / case / "input", project)
    (project / "pyproject.toml").write_text("")  # the project's root
    named = PROJECTS / case / "entry.txt"
    entry = named.read_text().strip() if named.exists() else "train.py"
    args = [entry, "--in-place"] if how == "--in-place" else [entry, "-o", "../out/"]
    done = run_ddpify(project, *args)
    assert done.returncode == 0, done.stderr
    folder = project if how == "--in-place" else tmp_path / "out"
    expected = PROJECTS / case / "expected"
    for file in expected.rglob("*.py"):
        assert (folder / file.relative_to(expected)).read_bytes() == file.read_bytes()
    trains_in_sync(folder / entry)
    alone = python(folder, entry)
    assert alone.returncode == 0, alone.stderr[-2000:]


@pytest.mark.torchrun
def test_a_script_sharing_a_module_keeps_working_without_a_process_group(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "shared_with_eval" / "input", project)
    (project / "pyproject.toml").write_text("")
    done = run_ddpify(project, "train.py", "--in-place")
    assert done.returncode == 0, done.stderr
    assert "common.py in place" in done.stderr
    assert (project / "evaluate.py").read_bytes() == (
        PROJECTS / "shared_with_eval" / "input" / "evaluate.py"
    ).read_bytes()

    trains_in_sync(project / "train.py")
    evaluated = python(project, "evaluate.py")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert evaluated.stdout.startswith("accuracy ")


def _converting_projects() -> list[str]:
    return sorted(
        case.name
        for case in PROJECTS.iterdir()
        if (case / "diagnostics.txt").exists()
        and (case / "diagnostics.txt").read_text().startswith("status: converted")
    )


@pytest.mark.torchrun
@pytest.mark.parametrize("case", _converting_projects())
def test_the_projects_other_scripts_still_run_without_a_process_group(case: str, tmp_path: Path) -> None:
    """After the conversion, every other script of the project runs under plain ``python`` as before:
    the scripts with a main block, and the original training script itself, which calls the
    converted modules the way any other script of the project would, without a process group."""
    sources = [p.read_text() for p in (PROJECTS / case / "input").rglob("*.py")]
    if any("torch.utils.tensorboard" in text for text in sources) and importlib.util.find_spec("tensorboard") is None:
        pytest.skip("the project writes TensorBoard logs, and tensorboard is not installed")
    if any("import fire" in text for text in sources) and importlib.util.find_spec("fire") is None:
        pytest.skip("the project's command line is python-fire's, and fire is not installed")
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / case / "input", project)
    named = PROJECTS / case / "entry.txt"
    entry = named.read_text().strip() if named.exists() else "train.py"
    folder = Path(entry).parent
    if (
        folder.parts
        and not (project / folder / "__init__.py").exists()
        and f"from {folder.parts[0]}." in (project / entry).read_text()
    ):
        pytest.skip("the entry imports its own folder as a namespace package: it runs only as `python -m`")
    original = (project / entry).with_name(f"{Path(entry).stem}_single.py")  # beside it: it imports the same
    shutil.copy(project / entry, original)
    expected = PROJECTS / case / "expected"
    for file in expected.rglob("*.py"):
        shutil.copy(file, project / file.relative_to(expected))
    others = sorted(
        str(p.relative_to(project))
        for p in project.rglob("*.py")
        if p not in (project / entry, original) and 'if __name__ == "__main__"' in p.read_text()
    )
    scripts = [str(original.relative_to(project)), *others]
    for script in scripts:
        done = python(project, script)
        assert done.returncode == 0, f"{script}:\n{done.stderr[-2000:]}"


@pytest.mark.torchrun
def test_a_download_in_the_programs_own_code_runs_in_turns(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    """Two ranks fetching and unpacking one archive at once race (``os.makedirs`` without
    ``exist_ok`` fails on the second); in turns, rank 0 fetches and the other finds it in place."""
    import tarfile

    import torch

    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "download_in_a_helper" / "input", project)
    (project / "pyproject.toml").write_text("")
    done = run_ddpify(project, "train.py", "-o", "../out/")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert (out / "train.py").read_bytes() == (PROJECTS / "download_in_a_helper" / "expected" / "train.py").read_bytes()
    (tmp_path / "points").mkdir()
    torch.save(torch.randn(192, 4), tmp_path / "points" / "x.pt")
    with tarfile.open(out / "points.tar", "w") as tar:
        tar.add(tmp_path / "points", arcname="points")
    report = verify(out / "train.py", nproc=2, workdir=out, timeout=240, script_args=["--url", "file:points.tar"])
    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    assert not (out / "data" / "points.tar").exists()


@pytest.mark.torchrun
def test_the_path_that_cannot_be_converted_stops_with_its_reason(tmp_path: Path, run_ddpify: RunDdpify) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "flag_picks_an_unconvertible_trainer" / "input", project)
    (project / "pyproject.toml").write_text("")
    done = run_ddpify(project, "train.py", "-o", "../out/")
    assert done.returncode == 0, done.stderr
    assert "DDP015" in done.stdout + done.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    stopped = subprocess.run(
        [*TORCHRUN, "train.py", "--gan_type", "TwinLossGAN"],
        cwd=tmp_path / "out",
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert stopped.returncode != 0
    assert "gans.py line 54: a second backward pass through one forward of a model (DDP312)" in stopped.stderr
    assert not (tmp_path / "out" / "gan.pt").exists()  # stopped before training, nothing saved
