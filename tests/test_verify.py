"""ddpify.verify: a correct DDP script passes, each classic mistake fails its own check.

The scripts live in ``tests/verify_cases``: ``ddp_train.py`` is a correct DDP
script whose ``--bug`` option breaks it one way at a time, ``plain_train.py``
a single-process script as written before conversion. Every torchrun run
costs seconds, so each case is one run and asserts everything it shows.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import cast

import pytest
import torch
from torch import nn

from ddpify.verify import CHECK_NAMES, VerifyReport, ownership, verify
from ddpify.verify.checks import evaluate
from ddpify.verify.failures import stderr_exception
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
    assert "ddp_train.py:47): 32 of 64 samples per rank" in report.check("sharded-data").message
    assert report.check("wrapped").message == (
        "every parameter of optimizer #0 (SGD) belongs to a DistributedDataParallel module (checked at its first step)"
    )
    table = report.format_table()
    assert table.splitlines()[0].split()[:3] == ["rank", "status", "steps"]
    assert table.splitlines()[-1].startswith("ok: all 8 checks passed")
    document = json.loads(json.dumps(report.to_json()))
    assert document["ok"] is True
    assert [rank["params"] for rank in document["ranks"]] == [rank0.params] * 2


@pytest.mark.torchrun
def test_unconverted_script_stays_in_sync_by_accident_but_is_not_sharded(tmp_path: Path) -> None:
    report = verify(CASES / "plain_train.py", workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"process-group", "wrapped", "sharded-data", "single-writer"}, explain(report)
    assert failed["process-group"].startswith("rank 0 never initialized a process group")
    assert failed["wrapped"] == (
        "model (Linear) is not wrapped in DistributedDataParallel, yet optimizer #0 (SGD) steps its parameters "
        "(model.weight, model.bias): their gradients are never averaged across ranks (found at its first step)"
    )
    assert failed["sharded-data"] == (
        "ranks 0 and 1 drew the same batches from DataLoader #0 (plain_train.py:15): "
        "every rank reads the same data (no DistributedSampler?)"
    )
    assert failed["single-writer"].startswith("plain.pt was written by ranks 0, 1")
    # Same seed, same batches: identical parameters prove nothing on their own.
    assert report.check("in-sync").passed
    assert report.format_table().splitlines()[-4:] == [
        f"FAILED {name}: {failed[name]}" for name in ("process-group", "wrapped", "sharded-data", "single-writer")
    ]


@pytest.mark.torchrun
def test_missing_ddp_wrap_is_caught_at_the_first_step(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "no-ddp"], max_steps=1, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"wrapped", "in-sync"}, explain(report)
    assert failed["wrapped"] == (
        "model (Sequential) is not wrapped in DistributedDataParallel, yet optimizer #0 (SGD) steps its parameters "
        "(model.0.weight, model.0.bias, model.2.weight, model.2.bias): their gradients are never averaged across "
        "ranks (found at its first step)"
    )
    assert failed["in-sync"].startswith("parameters of optimizer #0 (SGD) differ between ranks after the last step")
    assert failed["in-sync"].endswith(
        "they belong to a module that is not wrapped in DistributedDataParallel (see wrapped)"
    )
    # The max_steps stop is clean: every rank unwound through the script's finally.
    assert report.check("launched").message.startswith("every rank stopped cleanly after max_steps=1")
    assert [(rank.status, rank.steps, rank.destroyed) for rank in report.ranks] == [("max-steps", 1, True)] * 2


@pytest.mark.torchrun
def test_parameters_unfrozen_after_wrapping_are_wrapped_but_never_reduced(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "unfreeze-after-wrap"], max_steps=2, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"in-sync"}, explain(report)
    assert report.check("wrapped").passed
    assert "is the model wrapped" not in failed["in-sync"]
    assert failed["in-sync"].endswith(
        ": model.module.2.weight, model.module.2.bias require grad but were not registered for reduction when "
        "DistributedDataParallel was built (frozen when the model was wrapped and unfrozen later?): their gradients "
        "are never averaged; wrap the model after changing requires_grad, or wrap it again"
    )


@pytest.mark.torchrun
def test_the_rank_that_raised_is_blamed_not_the_peer_whose_collective_broke(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "crash-on-rank-1"], workdir=tmp_path)

    launched = report.check("launched")
    assert not launched.passed, explain(report)
    assert launched.message.startswith(
        'rank 1 raised ValueError: corrupt sample in batch 2 at ddp_train.py:66 `raise ValueError(f"corrupt sample '
        'in batch {batch}")`'
    ), explain(report)
    assert launched.message.endswith("; torchrun exited with code 1")
    # Rank 0 either saw its all-reduce fail or was stopped by torchrun first; either way it is not the cause.
    assert re.search(r"\(rank 0 (failed in turn: .+|was stopped by torchrun)\); torchrun", launched.message)
    assert report.ranks[1].where == "ddp_train.py:66"
    assert report.format_table().splitlines()[report.nproc + 1] == f"FAILED launched: {launched.message}"


@pytest.mark.torchrun
def test_missing_sampler_gives_every_rank_the_whole_dataset(tmp_path: Path) -> None:
    report = verify(DDP_TRAIN, script_args=["--bug", "no-sampler"], max_steps=3, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"sharded-data"}, explain(report)
    assert failed["sharded-data"] == (
        "DataLoader #0 (ddp_train.py:47) gives each rank 64 of the 64 samples per epoch; "
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
    assert failed["launched"] == (
        "stopped after 20 s: rank 0 was waiting at ddp_train.py:84 `dist.barrier()`; "
        "rank 1 was waiting at ddp_train.py:82 `time.sleep(0.1)`; torchrun and its ranks were then killed"
    )
    assert failed["clean-exit"] == (
        "hang: after 20 s, rank 0 was still running at ddp_train.py:84 `dist.barrier()`; "
        "rank 1 was still running at ddp_train.py:82 `time.sleep(0.1)`"
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
        "optimizers": [
            {
                "index": 0,
                "type": "SGD",
                "steps": 4,
                "ownership": {"parameters": 2, "unwrapped": 0, "unwrapped_modules": [], "unregistered": 0},
                "at_end": {"unregistered": 0, "unregistered_names": []},
                "numel": 100,
                "sha256": sha,
                "stats": stats,
            }
        ],
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


def _outcome(*records: dict[str, object], returncode: int = 0, output: str = "") -> RunOutcome:
    return RunOutcome(
        script=str(DDP_TRAIN),
        nproc=len(records),
        command=("torchrun",),
        max_steps=None,
        timeout=60.0,
        returncode=returncode,
        timed_out=False,
        duration_s=1.0,
        output=output,
        records=dict(enumerate(records)),
    )


def _raised(record: dict[str, object], when: float, **exception: object) -> dict[str, object]:
    return {**record, "exit": {"kind": "exception", "code": 1, "time": when, **exception}}


GLOO_PEER_GONE = {
    "error": "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:13221",
    "message": "[pair.cc:553] Connection closed by peer [127.0.0.1]:13221",
    "type": "builtins.RuntimeError",
    "bases": ["builtins.Exception", "builtins.BaseException"],
    "where": "ddp_train.py:69",
    "in_torch": True,
}
SCRIPT_ERROR = {
    "error": "ValueError: corrupt sample in batch 2",
    "message": "corrupt sample in batch 2",
    "type": "builtins.ValueError",
    "bases": ["builtins.Exception", "builtins.BaseException"],
    "where": "ddp_train.py:66",
    "in_torch": False,
}


def test_blame_goes_to_the_rank_with_its_own_exception_even_when_a_peer_failed_first() -> None:
    # Rank 1's finally destroyed the process group before its exception reached the
    # probe, so rank 0's broken all-reduce was recorded first.
    rank0 = _raised(_record(0, "a" * 64, [1.0, 2.0, 3.0]), 100.0, **GLOO_PEER_GONE)
    rank1 = _raised(_record(1, "a" * 64, [1.0, 2.0, 3.0]), 100.5, **SCRIPT_ERROR)

    launched = evaluate(_outcome(rank0, rank1, returncode=1)).check("launched")

    assert launched.message == (
        'rank 1 raised ValueError: corrupt sample in batch 2 at ddp_train.py:66 `raise ValueError(f"corrupt sample '
        'in batch {batch}")` (rank 0 failed in turn: Connection closed by peer); torchrun exited with code 1'
    )


def test_a_network_error_of_the_script_itself_is_its_own_failure() -> None:
    own = {**GLOO_PEER_GONE, "error": "ConnectionResetError: [Errno 104] Connection reset by peer", "in_torch": False}
    rank0 = _raised(_record(0, "a" * 64, [1.0, 2.0, 3.0]), 100.0, **own)
    rank1 = _raised(_record(1, "a" * 64, [1.0, 2.0, 3.0]), 101.0, **GLOO_PEER_GONE)

    launched = evaluate(_outcome(rank0, rank1, returncode=1)).check("launched")

    assert launched.message.startswith("rank 0 raised ConnectionResetError: [Errno 104] Connection reset by peer")
    assert "(rank 1 failed in turn: Connection closed by peer)" in launched.message


RANK1_TRACEBACK = f"""\
[rank1]: Traceback (most recent call last):
[rank1]:   File "<frozen runpy>", line 88, in _run_code
[rank1]:   File "{DDP_TRAIN}", line 66, in train
[rank1]:     raise ValueError(f"corrupt sample in batch {{batch}}")
[rank1]: ValueError: corrupt sample in batch 2
[rank0]: Traceback (most recent call last):
[rank0]:   File "{DDP_TRAIN}", line 69, in train
[rank0]:   File "{torch.__file__}", line 623, in backward
[rank0]: RuntimeError: Connection closed by peer
"""


def test_a_rank_without_an_exit_record_is_blamed_from_its_traceback_in_the_output() -> None:
    rank0 = _raised(_record(0, "a" * 64, [1.0, 2.0, 3.0]), 100.0, **GLOO_PEER_GONE)
    rank1 = {**_record(1, "a" * 64, [1.0, 2.0, 3.0]), "phase": "running", "exit": None}

    report = evaluate(_outcome(rank0, rank1, returncode=1, output=RANK1_TRACEBACK))

    assert report.check("launched").message.startswith(
        "rank 1 raised ValueError: corrupt sample in batch 2 at ddp_train.py:66 `raise"
    )
    assert report.ranks[1].where == "ddp_train.py:66"
    assert stderr_exception(RANK1_TRACEBACK, 0, str(DDP_TRAIN)) == {
        "error": "RuntimeError: Connection closed by peer",
        "type": "RuntimeError",
        "message": "Connection closed by peer",
        "where": "ddp_train.py:69",
        "in_torch": True,
    }


TORCHRUN_SUMMARY = """\
Failures:
[1]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 101)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 102)  (SIGSEGV)
"""


def test_a_rank_killed_by_a_signal_is_blamed_before_the_rank_torchrun_stopped() -> None:
    unfinished = [{**_record(rank, "a" * 64, [1.0, 2.0, 3.0]), "phase": "running", "exit": None} for rank in (0, 1)]

    launched = evaluate(_outcome(*unfinished, returncode=1, output=TORCHRUN_SUMMARY)).check("launched")

    assert launched.message == (
        "rank 1 was killed by SIGSEGV before the script ended (rank 0 was stopped by torchrun); "
        "torchrun exited with code 1"
    )


def test_ranks_that_raised_the_same_error_are_named_once() -> None:
    rank0 = _raised(_record(0, "a" * 64, [1.0, 2.0, 3.0]), 100.0, **SCRIPT_ERROR)
    rank1 = _raised(_record(1, "a" * 64, [1.0, 2.0, 3.0]), 100.1, **SCRIPT_ERROR)

    launched = evaluate(_outcome(rank0, rank1, returncode=1)).check("launched")

    assert launched.message.startswith("rank 0 raised ValueError: corrupt sample in batch 2 at ddp_train.py:66")
    assert launched.message.endswith("(rank 1 failed the same way); torchrun exited with code 1")


class _Wrapper:
    """Stands in for a DistributedDataParallel instance: the probe only reads ``module``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def test_ownership_names_the_largest_module_outside_every_wrapper() -> None:
    net = _Net()
    wrapper = _Wrapper(net.backbone)
    roots = {"net": net}

    found = ownership.ownership(
        list(net.parameters()), [ownership.WrapperRecord(wrapper)], roots, ownership.parameter_names(roots)
    )

    assert found == {
        "parameters": 6,
        "unwrapped": 4,
        "unwrapped_names": ["net.head.0.weight", "net.head.0.bias", "net.head.2.weight", "net.head.2.bias"],
        "unwrapped_modules": [{"name": "net.head", "type": "Sequential", "parameters": 4}],
        "unregistered": 0,
        "unregistered_names": [],
    }


def test_ownership_without_variables_names_the_owner_through_the_garbage_collector() -> None:
    net = _Net()

    found = ownership.ownership(list(net.backbone.parameters()), [], {}, {})

    assert found["unwrapped_names"] == ["Linear.weight", "Linear.bias"]
    assert found["unwrapped_modules"] == []


def test_ownership_of_a_parameter_frozen_when_wrapped_and_unfrozen_after() -> None:
    net = _Net()
    net.head.requires_grad_(False)
    ddp = _Wrapper(net)  # held: only live wrappers count
    wrapper = ownership.WrapperRecord(ddp)
    net.head.requires_grad_(True)
    params = list(net.parameters())

    found = ownership.ownership(params, [wrapper], {"net": net}, ownership.parameter_names({"net": net}))

    assert (found["unwrapped"], found["unwrapped_modules"]) == (0, [])
    assert found["unregistered"] == 4
    assert found["unregistered_names"] == [
        "net.head.0.weight",
        "net.head.0.bias",
        "net.head.2.weight",
        "net.head.2.bias",
    ]


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


def test_an_optimizer_over_the_programs_own_inputs_is_neither_wrapped_nor_in_sync() -> None:
    """``SGD([delta])`` over an adversarial perturbation: each rank's own tensor, outside any module."""

    def with_attack(rank: int, sha: str) -> dict[str, object]:
        record = _record(rank, "a" * 64, [1.0, 2.0, 3.0])
        attack = {
            "index": 1,
            "type": "SGD",
            "steps": 12,
            "inputs": True,
            "ownership": {"parameters": 1, "unwrapped": 1, "unwrapped_modules": [], "unregistered": 1},
            "at_end": {"unregistered": 1, "unregistered_names": []},
            "numel": 10,
            "sha256": sha,
            "stats": [0.1, 0.2, 0.3],
        }
        return {**record, "optimizers": [*cast(list[object], record["optimizers"]), attack]}

    report = evaluate(_outcome(with_attack(0, "c" * 64), with_attack(1, "d" * 64)))

    assert report.check("wrapped").passed, report.check("wrapped").message
    assert report.check("in-sync").passed, report.check("in-sync").message


@pytest.mark.parametrize("wrapper", [True, False], ids=["wrapper-keys", "module-keys"])
def test_a_checkpoint_of_the_wrapper_is_not_loadable_into_the_model(wrapper: bool) -> None:
    save = {"kind": "path", "given": "best.pt", "path": "/run/best.pt", "step": 4, "wrapper": wrapper}
    rank0 = {**_record(0, "a" * 64, [1.0, 2.0, 3.0]), "saves": [save]}
    report = evaluate(_outcome(rank0, _record(1, "a" * 64, [1.0, 2.0, 3.0])))

    check = report.check("single-writer")
    assert check.passed is not wrapper, check.message
    if wrapper:
        assert check.message.startswith("best.pt holds the state_dict of the DDP wrapper (every key starts with")


def test_the_probe_tells_the_state_dict_of_a_wrapper() -> None:
    from ddpify.verify.probe import _wrapper_state

    model = nn.Linear(2, 1)
    wrapped = {f"module.{key}": value for key, value in model.state_dict().items()}
    assert _wrapper_state(wrapped)
    assert _wrapper_state({"epoch": 3, "model": wrapped, "optimizer": {"state": {}, "param_groups": []}})
    assert not _wrapper_state(model.state_dict())
    assert not _wrapper_state({"epoch": 3, "model": model.state_dict()})
    assert not _wrapper_state({})


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


EVERY_RANK_WRITES = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
dataset = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
metrics = open("metrics.csv", "w")
with open(f"rank{dist.get_rank()}.log", "w") as log:
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        metrics.write(f"{loss.item()}\\n")
        log.write("step\\n")
metrics.close()
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "model.pt")
dist.destroy_process_group()
"""


@pytest.mark.torchrun
def test_a_file_opened_for_writing_on_every_rank_is_not_a_single_writer(tmp_path: Path) -> None:
    script = tmp_path / "every_rank_writes.py"
    script.write_text(EVERY_RANK_WRITES)

    report = verify(script, workdir=tmp_path)

    failed = failures(report)
    assert set(failed) == {"single-writer"}, explain(report)
    assert failed["single-writer"] == (
        "metrics.csv was opened for writing by ranks 0, 1: every rank writes the file; write it on rank 0 only"
    )


@pytest.mark.parametrize(
    ("inputs", "passed", "message"),
    [
        (
            ["x0", "x1"],
            True,
            "no DataLoader; the ranks gave the wrapped model different inputs in its first training steps",
        ),
        (
            ["x", "x"],
            False,
            "ranks 0 and 1 gave DistributedDataParallel #0 the same inputs in its first 2 training steps: every "
            "rank trains on the same data (no DataLoader; the tensors are not split between the ranks)",
        ),
        (
            [None, None],
            False,
            "no DataLoader batch preceded an optimizer step: nothing shows that the ranks train on different data",
        ),
    ],
)
def test_tensors_batched_by_hand_are_judged_by_what_the_wrapped_model_is_given(
    inputs: list[str | None], passed: bool, message: str
) -> None:
    records = []
    for rank, first in enumerate(inputs):
        record = {**_record(rank, "same", [1.0, 2.0, 3.0]), "loaders": []}
        if first is not None:
            record["inputs"] = [{"wrapper": 0, "recorded": [first, "then"]}]
        records.append(record)

    sharded = evaluate(_outcome(*records)).check("sharded-data")

    assert (sharded.passed, sharded.message) == (passed, message)
