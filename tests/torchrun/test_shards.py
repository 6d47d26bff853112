"""Each rank trains on its own share of every epoch, and together the shares cover the data once.

For each way of holding training data that ddpify shards (a DataLoader, read
directly or through a generator of the program's own; tensors and numpy arrays
sliced by hand; a list of examples shuffled and sliced; one full batch), the
golden output runs twice under ``record_examples.py``, which notes the rows
each training step hands the wrapped model: once as a plain ``python``
process, a group of one, whose first epoch gives the data set E; then on two
ranks. Each rank's first len(E)/2 rows must be its own (no row on both ranks)
and together they must be E. Programs that draw their data at random with
replacement have no epoch to share: their ranks must draw differently (an
unconverted program draws the same sequence on every rank from the same seed).
Batchified text is told apart token by token (a text whose every word is
distinct): each rank's streams are its own, and together they hold the text
that one process reads, less the last window of each stream.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpify.verify import verify

pytest.importorskip("torch")

FORKED = os.environ.get("DDPIFY_TEST_TORCHRUN") != "1"
FIXTURES = Path(__file__).parent.parent / "fixtures"
RECORDER = Path(__file__).parent / "record_examples.py"

# fixture -> the position of the examples among the arguments of the wrapped model's forward
SHARDED = {
    "data/loader_passed_to_a_method": 0,
    "data/loader_read_through_a_generator": 0,
    "data/loader_from_a_loader_class_into_a_trainer": 0,
    "model/ema_copy_updated_beside_forward": 0,
    "tensors/hand_made_batches": 0,
    "tensors/permutation": 0,
    "tensors/full_batch_in_main_guard": 0,
    "tensors/numpy_arrays_converted_in_the_loop": 0,
    "tensors/example_list_shuffled_and_sliced": 0,
    "tensors/examples_batched_by_a_generator": 0,
}
DRAWN = {
    "data/sampler_with_replacement": 0,
    "tensors/drawn_each_step": 0,
    "tensors/get_batch_numpy": 0,  # windows of one array drawn with np.random
    "tensors/examples_picked_from_a_parameter": 0,  # a random pick each step from a list handed in
}


def _record(case: str, position: int | str, workdir: Path, nproc: int) -> list[list[str]]:
    script = workdir / "train_ddp.py"
    shutil.copy(FIXTURES / case / "expected.py", script)
    out = workdir / f"rows-{nproc}"
    out.mkdir()
    arguments = [str(out), str(position), str(script)]
    if nproc == 1:
        result = _python(workdir, [str(RECORDER), *arguments])
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        report = verify(RECORDER, nproc=nproc, workdir=workdir, timeout=240, script_args=arguments)
        assert report.ranks and all(rank.steps > 0 for rank in report.ranks), report.output[-3000:]
    return [json.loads((out / f"rows-{rank}.json").read_text()) for rank in range(nproc)]


def _python(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python *argv``: forked from the server that has imported torch (tests/forkrun.py) where the
    matrix forks its runs, a torch import less."""
    if FORKED:
        import forkrun

        done: subprocess.CompletedProcess[str] = forkrun.run_plain_forked(cwd, argv, _plain_environment(), timeout=240)
        return done
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=240)


def _plain_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}


def _first_epoch(rows: list[str]) -> list[str]:
    """The rows before the first one seen again: in a single process, one pass over the data."""
    seen: set[str] = set()
    for count, row in enumerate(rows):
        if row in seen:
            return rows[:count]
        seen.add(row)
    return rows


@pytest.mark.torchrun
@pytest.mark.parametrize("case", sorted(SHARDED))
def test_each_rank_trains_on_its_own_share_and_the_shares_cover_the_epoch(case: str, tmp_path: Path) -> None:
    (single,) = _record(case, SHARDED[case], tmp_path, nproc=1)
    epoch = _first_epoch(single)
    assert len(epoch) >= 8 and len(epoch) % 2 == 0, len(epoch)
    rank0, rank1 = (rows[: len(epoch) // 2] for rows in _record(case, SHARDED[case], tmp_path, nproc=2))
    assert len(rank0) == len(rank1) == len(epoch) // 2
    assert not set(rank0) & set(rank1), "the ranks trained on the same examples"
    assert set(rank0) | set(rank1) == set(epoch), "the shares do not make up the data set"


@pytest.mark.torchrun
@pytest.mark.parametrize("case", sorted(DRAWN))
def test_ranks_that_draw_with_replacement_draw_differently(case: str, tmp_path: Path) -> None:
    rank0, rank1 = _record(case, DRAWN[case], tmp_path, nproc=2)
    steps = min(len(rank0), len(rank1))
    assert steps >= 8
    # draws may repeat an example, on one rank or on both; the same sequence on both is what must not happen
    assert rank0[:steps] != rank1[:steps], "the ranks drew the same examples in the same order"
    assert sum(a == b for a, b in zip(rank0, rank1)) < steps / 2


@pytest.mark.torchrun
def test_ranks_read_their_own_streams_of_batchified_text(tmp_path: Path) -> None:
    case = "tensors/batchified_by_a_corpus_method"
    (single,) = _record(case, "0/tokens", tmp_path, nproc=1)
    text = set(_first_epoch(single))
    rank0, rank1 = (set(_first_epoch(rows)) for rows in _record(case, "0/tokens", tmp_path, nproc=2))
    assert not rank0 & rank1, "the ranks read the same text"
    assert rank0 | rank1 <= text
    # each stream's last window is not read: twice as many streams leave out a few more tokens
    assert len(rank0 | rank1) >= 0.95 * len(text), (len(rank0 | rank1), len(text))
    assert abs(len(rank0) - len(rank1)) <= 1
