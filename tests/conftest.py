"""Fixtures shared by the test folders."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]

# README's test command (`pytest`, which leaves out `exhaustive`) keeps these
# torchrun runs, one of each kind, so that it ends in about five minutes on two
# cores. Every other torchrun test counts as `exhaustive`: the full matrix,
# `pytest -m exhaustive`, which CI runs as well. A new torchrun test joins the
# matrix unless it is listed here.
QUICK_TORCHRUN = (
    # a bundled example converted and verified: sync, sharding, one checkpoint without `module.`
    "tests/test_torchrun.py::test_converted_example_trains_data_parallel[mnist_cnn]",
    # the verification itself: a correct script passes, an unconverted one fails
    "tests/test_verify.py::test_correct_ddp_script_passes_every_check",
    "tests/test_verify.py::test_unconverted_script_stays_in_sync_by_accident_but_is_not_sharded",
    # `ddpify --verify` end to end
    "tests/test_cli_verify.py::test_verify_converts_an_example_and_proves_it_trains_data_parallel",
    # a realistic script (a Trainer class), and a program of several modules
    "tests/test_trial.py::test_converted_script_trains_in_data_parallel[s15_trainer_class]",
    "tests/torchrun/test_projects.py::test_a_converted_program_trains_in_sync[solver--o]",
    # a path that cannot be converted, under one flag, stops at its start with its reason
    "tests/torchrun/test_projects.py::test_the_path_that_cannot_be_converted_stops_with_its_reason",
    # two nodes meeting through a c10d rendezvous
    "tests/test_launchers.py::test_multi_node_torchrun_command_joins_two_nodes_through_c10d",
    # a notebook converted through the command line (magics, displayed values, a save)
    "tests/test_notebook.py::test_a_converted_notebook_trains_in_sync",
)


# The exhaustive matrix forks its ranks from a server that has imported torch
# already (tests/forkrun.py): a third of the cost of three imports of torch per
# run. DDPIFY_TEST_TORCHRUN=1 runs it under real torchrun instead.
FORKED = os.environ.get("DDPIFY_TEST_TORCHRUN") != "1"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("torchrun") is not None and item.nodeid not in QUICK_TORCHRUN:
            item.add_marker(pytest.mark.exhaustive)
        # a script's twins run in one worker, which converts the script itself once for all of them
        callspec = getattr(item, "callspec", None)
        if item.nodeid.startswith("tests/test_twins.py::") and callspec is not None and "path" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(str(Path(callspec.params["path"]).relative_to(REPOSITORY))))


@pytest.fixture(autouse=True)
def _forked_ranks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if FORKED and request.node.get_closest_marker("exhaustive") is not None:
        import forkrun

        from ddpify.verify import launcher

        monkeypatch.setattr(launcher, "run_under_torchrun", forkrun.run_forked)


def pytest_sessionfinish() -> None:
    forkrun = sys.modules.get("forkrun")
    if forkrun is not None:
        forkrun.close_server()


RunDdpify = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_ddpify() -> RunDdpify:
    """``run_ddpify(cwd, *args)``: ``python -m ddpify *args`` in ``cwd``, with the ddpify under test
    (this repository, wherever ddpify is installed) and no colour."""

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "NO_COLOR": "1"}
        return subprocess.run(
            [sys.executable, "-m", "ddpify", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )

    return run
