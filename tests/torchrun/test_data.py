"""The data every rank trains on: one split, disjoint shards, full batches, whole validation.

The script splits its data with an unseeded ``random_split``, draws its
training batches through an iterator, builds a tensor of the batch size in the
training step (the training set does not divide into full batches per rank),
peeks at a validation batch inside the training loop and stops early on a
full-set evaluation. Converted, it must train in sync on disjoint shards of the
same split under torchrun on two ranks, and every rank must stop at the same
epoch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

pytest.importorskip("torch")

SCRIPT = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

BATCH = 16


def main():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 6, generator=g)
    y = 2 * x[:, :1] + 0.1 * torch.randn(300, 1, generator=g)
    train_set, val_set = random_split(TensorDataset(x, y), [232, 68])
    loader = DataLoader(train_set, batch_size=BATCH, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=68)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    best, bad_epochs = float("inf"), 0
    for epoch in range(6):
        batches = iter(loader)
        for step in range(len(loader)):
            xb, yb = next(batches)
            weights = torch.ones(BATCH, 1)
            loss = (weights * (model(xb) - yb) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                with torch.no_grad():
                    vx, vy = next(iter(val_loader))
                    print(f"step {step} probe {F.mse_loss(model(vx), vy).item():.4f}")
        with torch.no_grad():
            val = sum(F.mse_loss(model(vx), vy, reduction="sum").item() for vx, vy in val_loader) / len(val_set)
        if val < best - 1e-2:
            best, bad_epochs = val, 0
        else:
            bad_epochs += 1
            if bad_epochs == 2:
                break
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""


@pytest.mark.torchrun
def test_the_split_shards_and_batches_are_right_under_torchrun(tmp_path: Path) -> None:
    conversion = convert(SCRIPT.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED
    assert not conversion.diagnostics, conversion.diagnostics
    code = conversion.code.decode()
    assert "generator=torch.Generator().manual_seed(0)" in code
    assert "sampler=DistributedSampler(train_set), drop_last=True)" in code
    assert "val_loader = DataLoader(val_set, batch_size=68)" in code
    assert code.count("set_epoch(epoch)") == 1
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
    assert rank0.saves and not rank1.saves


STREAM = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        g = torch.Generator().manual_seed(3)
        for _ in range(self.length):
            x = torch.randn(5, generator=g)
            yield x, x.sum(dim=0, keepdim=True)


def main():
    loader = DataLoader(Stream(203), batch_size=8)
    model = nn.Linear(5, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    torch.save(model.state_dict(), "stream.pt")


if __name__ == "__main__":
    main()
"""


@pytest.mark.torchrun
def test_a_stream_is_split_into_equal_shares_under_torchrun(tmp_path: Path) -> None:
    conversion = convert(STREAM.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    code = conversion.code.decode()
    assert "DataLoader(RankShard(Stream(203)), batch_size=8)" in code
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    # 203 items: 101 per rank (the last, unpaired item dropped), 13 batches of 8 per epoch.
    assert rank0.steps == rank1.steps == 2 * 13
    assert rank0.first_batch != rank1.first_batch


# A dataset that records, per rank, the order in which it hands out its samples.
RECORDER = """
import os

import torch
from torch.utils.data import Dataset


class Recorded(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        with open(f"seen_{os.environ.get('RANK', '0')}.txt", "a") as seen:
            seen.write(f"{i}\\n")
        return self.x[i], self.y[i]
"""
RESTARTS = """
import torch
import torch.nn as nn
from recorded import Recorded
from torch.utils.data import DataLoader

loader = DataLoader(Recorded(96), batch_size=16, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
batches = iter(loader)
for step in range(12):
    try:
        x, y = next(batches)
    except:
        batches = iter(loader)
        x, y = next(batches)
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.torchrun
def test_an_iterator_restarted_in_a_catch_all_handler_reshuffles_every_pass(tmp_path: Path) -> None:
    conversion = convert(RESTARTS.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)
    (tmp_path / "recorded.py").write_text(RECORDER)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=180)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    seen = [[int(i) for i in (tmp_path / f"seen_{rank}.txt").read_text().split()] for rank in (0, 1)]
    # 48 samples per rank and pass (3 batches of 16): 12 steps are 4 passes
    passes = [[indices[p * 48 : (p + 1) * 48] for p in range(4)] for indices in seen]
    for p in range(4):
        shard0, shard1 = set(passes[0][p]), set(passes[1][p])
        assert len(shard0) == len(shard1) == 48 and shard0.isdisjoint(shard1), f"pass {p}: disjoint halves"
    for rank in (0, 1):
        orders = {tuple(one_pass) for one_pass in passes[rank]}
        assert len(orders) == 4, f"rank {rank}: every pass is shuffled anew"
