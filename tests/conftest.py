"""Fixtures shared by the test folders."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]

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
