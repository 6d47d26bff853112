"""Samplers the script already has, and loaders kept in a dict: each rank trains on its own share.

A ``SubsetRandomSampler`` over the training indices of a dataset (next to a
validation subset that stays whole), a bucketing ``batch_sampler`` whose 21
batches do not split evenly over two ranks (the wrapper pads them, so neither
rank waits for a batch the other never draws), and a ``{x: DataLoader(...)
for x in ["train", "val"]}`` dict read in a loop over the phases (only the
training entry is sharded; every rank validates on the whole set, so all keep
the same best weights). Converted, each must train in sync on disjoint data
under torchrun on two ranks, save once and exit cleanly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

pytest.importorskip("torch")

FIXTURES = Path(__file__).parents[1] / "fixtures" / "data"


def converted(case: str, tmp_path: Path) -> Path:
    conversion = convert((FIXTURES / case / "input.py").read_bytes(), path="train.py")
    assert conversion.status is Status.CONVERTED
    assert not conversion.diagnostics, conversion.diagnostics
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)
    return script


@pytest.mark.torchrun
def test_a_subset_random_sampler_is_shared_out_under_torchrun(tmp_path: Path) -> None:
    report = verify(converted("subset_random_sampler", tmp_path), nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    sharded = next(check for check in report.checks if check.name == "sharded-data")
    assert "240 of 600 samples per rank per epoch" in sharded.message  # half of the 480 training indices
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps == 4 * 8  # 4 epochs of 240 / 30 batches


@pytest.mark.torchrun
def test_a_batch_sampler_with_an_odd_number_of_batches_keeps_the_ranks_in_step(tmp_path: Path) -> None:
    report = verify(converted("bucket_batch_sampler", tmp_path), nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps == 3 * 11  # 3 epochs of 21 batches, padded to 22 and dealt out


@pytest.mark.torchrun
def test_only_the_training_entry_of_a_dict_of_loaders_is_sharded_under_torchrun(tmp_path: Path) -> None:
    report = verify(converted("loader_dict_phases", tmp_path), nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    sharded = next(check for check in report.checks if check.name == "sharded-data")
    assert "240 of 480 samples per rank per epoch" in sharded.message
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps == 4 * 10  # 4 epochs of 240 / 24 batches
    assert rank0.saves and not rank1.saves
