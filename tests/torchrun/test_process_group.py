"""The process group exists before its first use, on every path, and nothing asks for a rank before it.

The training code sits directly under the main guard (no ``main()``), with
the loader built before the model, and an import-time notice printed from an
``except ImportError:``. The converted script must start, train in sync on
sharded data and save once, under torchrun and as a plain ``python`` script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

pytest.importorskip("torch")

SCRIPT = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import wandb_is_not_installed as wandb
except ImportError:
    print("no tracker: metrics go to stdout only")
    wandb = None

if __name__ == "__main__":
    torch.manual_seed(0)
    features = torch.randn(192, 6)
    labels = (features.mean(1) > 0).long()
    loader = DataLoader(TensorDataset(features, labels), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "model.pt")
"""


@pytest.mark.torchrun
def test_training_under_the_main_guard_starts_with_the_process_group(tmp_path: Path) -> None:
    conversion = convert(SCRIPT.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED
    script = tmp_path / "train_ddp.py"
    script.write_bytes(conversion.code)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=180)
    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.saves and not rank1.saves

    plain = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.startswith("no tracker")
