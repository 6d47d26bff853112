"""Files are written once: a metrics file opened without ``with``, a log written in a ``with`` block
around training, and a checkpoint that stores the model object.

The converted script runs under torchrun on two ranks. The files are opened
in append mode, so a second writer would show as a second set of rows;
the checkpoint must hold the plain module, which loads without a process group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

torch = pytest.importorskip("torch")

SCRIPT = """
import csv

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    x = torch.randn(192, 4)
    loader = DataLoader(TensorDataset(x, x.pow(2).sum(1, keepdim=True)), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    metrics = open("metrics.csv", "a", newline="")
    writer = csv.writer(metrics)
    writer.writerow(["epoch", "batch", "loss"])
    with open("train_log.txt", "a") as log:
        for epoch in range(2):
            for batch, (xb, yb) in enumerate(loader):
                loss = F.mse_loss(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                writer.writerow([epoch, batch, round(loss.item(), 5)])
            metrics.flush()
            log.write(f"epoch {epoch} loss {loss.item():.5f}\\n")
            torch.save({"model": model, "epoch": epoch}, "full_model.pt")
    metrics.close()


if __name__ == "__main__":
    main()
"""


@pytest.mark.torchrun
def test_metrics_file_and_checkpoint_are_written_once(tmp_path: Path) -> None:
    conversion = convert(SCRIPT.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=180)
    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.saves and not rank1.saves

    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows.count("epoch,batch,loss") == 1
    assert len(rows) == 1 + rank0.steps, "every step of one rank, once"
    assert len((tmp_path / "train_log.txt").read_text().splitlines()) == 2, "one line per epoch, from one rank"
    checkpoint = torch.load(tmp_path / "full_model.pt", map_location="cpu", weights_only=False)
    assert type(checkpoint["model"]) is torch.nn.Sequential
