"""The cyclic collector is paused while ddpify reads a program, and restored after (``ddpify.collector``)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from ddpify import collector, core
from ddpify.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_paused_restores_the_collector_as_it_was_also_when_nested() -> None:
    assert gc.isenabled()
    with collector.paused():
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_conversion_runs_without_the_collector_and_the_caller_gets_it_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[bool] = []
    convert = core._convert

    def spied(*args, **kwargs):
        seen.append(gc.isenabled())
        return convert(*args, **kwargs)

    monkeypatch.setattr(core, "_convert", spied)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes((ROOT / "examples" / "mnist_cnn.py").read_bytes())
    frozen = gc.get_freeze_count()
    assert main(["train.py", "-o", "out.py", "-q"]) == 0
    assert seen == [False]
    assert gc.isenabled() and gc.get_freeze_count() == frozen  # called with arguments: not the command's exit
