"""ddpify.verify: a correct DDP script passes, each classic mistake fails its own check.

The scripts live in ``tests/verify_cases``: ``ddp_train.py`` is a correct DDP
script whose ``--bug`` option breaks it one way at a time, ``plain_train.py``
a single-process script as written before conversion. Every torchrun run
costs seconds, so each case is one run and asserts everything it shows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpify.verify import CHECK_NAMES, VerifyReport, verify
from ddpify.verify.checks import evaluate
from ddpify.verify.launcher import RunOutcome

CASES = Path(__file__).parent / "verify_cases"
DDP_TRAIN = CASES / "ddp_train.py"


def failures(report: VerifyReport) -> dict[str, str]:
    return {check.name: check.message for check in report.failed}


def explain(report: VerifyReport) -> str:
    return f"{report.format_table()}\n--- torchrun output ---\n{report.output[-4000:]}"


@pytest.mark.torchrun
def test_correct_ddp_script_passes_every_check(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, workdir=tmp_path)

    assert report.ok, explain(report)
    assert [check.name for check in report.checks] == list(CHECK_NAMES)
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps == 8  # 64 samples / 2 ranks / batch 8, 2 epochs
    assert rank0.params == rank1.params
    assert rank0.first_batch != rank1.first_batch
    assert (rank0.saves, rank1.saves) == (("model.pt",), ())
    assert (tmp_path / "model.pt").is_file()
    assert "ddp_train.py:43): 32 of 64 samples per rank" in report.check("sharded-data").message
    table = report.format_table()
    assert table.splitlines()[0].split()[:3] == ["rank", "status", "steps"]
    assert table.splitlines()[-1].startswith("ok: all 7 checks passed")
    document = json.loads(json.dumps(report.to_json()))
    assert document["ok"] is True
    assert [rank["params"] for rank in document["ranks"]] == [rank0.params] * 2


@pytest.mark.torchrun
def test_unconverted_script_stays_in_sync_by_accident_but_is_not_sharded(tmp_path: Path) -> None:
    report = verify(CASES / "plain_train.py", workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"process-group", "sharded-data", "single-writer"}, explain(report)
    assert failed["process-group"].startswith("rank 0 never initialized a process group")
    assert failed["sharded-data"] == (
        "ranks 0 and 1 drew the same batches from DataLoader #0 (plain_train.py:15): "
        "every rank reads the same data (no DistributedSampler?)"
    )
    assert failed["single-writer"].startswith("plain.pt was written by ranks 0, 1")
    # Same seed, same batches: identical parameters prove nothing on their own.
    assert report.check("in-sync").passed
    assert report.format_table().splitlines()[-3:] == [
        f"FAILED {name}: {failed[name]}" for name in ("process-group", "sharded-data", "single-writer")
    ]


@pytest.mark.torchrun
def test_missing_ddp_wrap_lets_ranks_drift_apart(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "no-ddp"], max_steps=3, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"in-sync"}, explain(report)
    assert failed["in-sync"].startswith("parameters of optimizer #0 (SGD) differ between ranks after the last step")
    assert "is the model wrapped in DistributedDataParallel?" in failed["in-sync"]
    # The max_steps stop is clean: every rank unwound through the script's finally.
    assert report.check("launched").message.startswith("every rank stopped cleanly after max_steps=3")
    assert [(rank.status, rank.steps, rank.destroyed) for rank in report.ranks] == [("max-steps", 3, True)] * 2


@pytest.mark.torchrun
def test_missing_sampler_gives_every_rank_the_whole_dataset(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "no-sampler"], max_steps=3, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"sharded-data"}, explain(report)
    assert failed["sharded-data"] == (
        "DataLoader #0 (ddp_train.py:43) gives each rank 64 of the 64 samples per epoch; "
        "with 2 ranks each should get about 32 (no DistributedSampler?)"
    )
    assert report.check("in-sync").passed  # DDP still averages the gradients


@pytest.mark.torchrun
def test_saving_on_every_rank_is_not_a_single_writer(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "save-on-every-rank"], workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"single-writer"}, explain(report)
    assert failed["single-writer"] == (
        "model.pt was written by ranks 0, 1: torch.save runs on every rank; save on rank 0 only"
    )


@pytest.mark.torchrun
def test_hang_is_reported_with_where_each_rank_is_stuck(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "hang"], timeout=20, workdir=tmp_path)

    assert report.timed_out and report.returncode is None
    assert report.duration_s < 20 + 10  # stacks collected, then torchrun and the ranks killed
    failed = failures(report)
    assert set(failed) == {"launched", "in-sync", "clean-exit"}, explain(report)
    assert failed["clean-exit"] == (
        "hang: after 20 s, rank 0 was still running at ddp_train.py:74 `dist.barrier()`; "
        "rank 1 was still running at ddp_train.py:72 `time.sleep(0.1)`"
    )
    assert [(rank.status, rank.steps) for rank in report.ranks] == [("stuck", 8)] * 2
    assert not _probes_running("--bug", "hang")


def _probes_running(*words: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "ddpify.verify.probe" in argv and str(DDP_TRAIN) in argv and all(w in argv for w in words):
            found.append(int(entry.name))
    return found


# -- judging without torchrun ----------------------------------------------------


def _record(rank: int, sha: str, stats: list[float]) -> dict[str, object]:
    """A finished rank of a correct run, as the probe writes it."""
    return {
        "rank": rank,
        "pid": os.getpid(),
        "script": str(DDP_TRAIN),
        "phase": "exited",
        "exit": {"kind": "ok", "code": 0, "error": None, "where": None},
        "steps": 4,
        "checksummed": True,
        "optimizers": [{"index": 0, "type": "SGD", "steps": 4, "numel": 100, "sha256": sha, "stats": stats}],
        "loaders": [
            {
                "index": 0,
                "site": "train.py:9",
                "dataset_len": 64,
                "samples_per_epoch": 32,
                "steps": 4,
                "recorded": [{"iteration": 1, "batch": f"b{rank}", "samples": [f"s{rank}{i}" for i in range(8)]}],
            }
        ],
        "saves": [],
        "process_group": {"initialized": True, "world_size": 2, "backend": "gloo", "destroyed": True},
    }


def _outcome(*records: dict[str, object]) -> RunOutcome:
    return RunOutcome(
        script=str(DDP_TRAIN),
        nproc=len(records),
        command=("torchrun",),
        max_steps=None,
        timeout=60.0,
        returncode=0,
        timed_out=False,
        duration_s=1.0,
        output="",
        records=dict(enumerate(records)),
    )


@pytest.mark.parametrize(
    ("other_stats", "passed", "message"),
    [
        ([1.0, 2.0, 3.0], True, "parameters identical on every rank"),
        ([1.0 + 1e-9, 2.0, 3.0 - 1e-9], True, "within rounding (relative 1e-06), not bitwise"),
        ([1.001, 2.0, 3.0], False, "parameters of optimizer #0 (SGD) differ between ranks"),
    ],
    ids=["bitwise", "rounding", "diverged"],
)
def test_in_sync_tells_rounding_from_divergence(other_stats: list[float], passed: bool, message: str) -> None:
    other_sha = "a" * 64 if other_stats == [1.0, 2.0, 3.0] else "b" * 64
    report = evaluate(_outcome(_record(0, "a" * 64, [1.0, 2.0, 3.0]), _record(1, other_sha, other_stats)))

    check = report.check("in-sync")
    assert (check.passed, message in check.message) == (passed, True), check.message
    assert [c.name for c in report.failed] == ([] if passed else ["in-sync"])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"nproc": 1}, ValueError), ({"max_steps": 0}, ValueError), ({"timeout": 0}, ValueError)],
    ids=["one-rank", "no-steps", "no-time"],
)
def test_verify_refuses_arguments_that_cannot_show_data_parallelism(kwargs: dict[str, int], error: type) -> None:
    with pytest.raises(error):
        verify(DDP_TRAIN, **kwargs)  # type: ignore[arg-type]


def test_verify_refuses_a_missing_script(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        verify(tmp_path / "missing.py")
