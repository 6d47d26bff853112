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


# Stand-ins for visdom and tensorboard_logger that record which rank made each call.
VISDOM = """
import os


class Visdom:
    def __init__(self, env="main"):
        self._record("Visdom")

    def line(self, X, Y, win=None, update=None):
        self._record(f"line win={win}")
        return win or "window-1"

    def _record(self, call):
        with open("visdom_calls.txt", "a") as calls:
            calls.write(f"rank {os.environ.get('RANK', '0')}: {call}\\n")
"""
TENSORBOARD_LOGGER = """
import os


def configure(logdir):
    log_value("configure", logdir, 0)


def log_value(name, value, step):
    with open("tensorboard_logger_calls.txt", "a") as calls:
        calls.write(f"rank {os.environ.get('RANK', '0')}: {name} {step}\\n")
"""
PROGRESS = """
import sys

import torch
import torch.nn as nn
import visdom
from tensorboard_logger import configure, log_value
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    configure("runs/progress")
    viz = visdom.Visdom(env="progress")
    window = None
    x = torch.randn(128, 3)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=True)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        sys.stdout.write(f"progress: epoch {epoch} loss {loss.item():.4f}\\n")
        sys.stdout.flush()
        log_value("loss", loss.item(), epoch)
        window = viz.line(X=[epoch], Y=[loss.item()], win=window)


if __name__ == "__main__":
    main()
"""


@pytest.mark.torchrun
def test_progress_lines_and_trackers_of_every_kind_write_from_rank_zero_only(tmp_path: Path) -> None:
    conversion = convert(PROGRESS.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)
    (tmp_path / "visdom.py").write_text(VISDOM)
    (tmp_path / "tensorboard_logger.py").write_text(TENSORBOARD_LOGGER)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=180)
    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    assert report.output.count("progress: epoch 2") == 1, report.output[-3000:]
    visdom_calls = (tmp_path / "visdom_calls.txt").read_text().splitlines()
    # the window each call returns reaches the next call, on the one rank that plots
    assert visdom_calls == [
        "rank 0: Visdom",
        "rank 0: line win=None",
        "rank 0: line win=window-1",
        "rank 0: line win=window-1",
    ]
    logged = (tmp_path / "tensorboard_logger_calls.txt").read_text().splitlines()
    assert logged == ["rank 0: configure 0", "rank 0: loss 0", "rank 0: loss 1", "rank 0: loss 2"]
