"""Models kept in a list, and parts of one model, each with its own optimizer, train in sync.

An ensemble built in a list comprehension next to probes appended in a loop (every
model of both lists wrapped, their checkpoints saved through ``.module``), and a
backbone and head with optimizers of their own (the model wrapped once: its
forward runs both, so DDP averages every gradient before either optimizer steps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

torch = pytest.importorskip("torch")

ENSEMBLE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, width), nn.Tanh())
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        return self.out(self.body(x))


def main():
    torch.manual_seed(0)
    x = torch.randn(384, 6)
    y = torch.sin(x[:, :1]) + 0.1 * torch.randn(384, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=24, shuffle=True)
    members = [Regressor(16) for _ in range(3)]
    optimizers = [torch.optim.Adam(member.parameters(), lr=1e-2) for member in members]
    probes, probe_optimizers = [], []
    for width in (4, 8):
        probe = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 1))
        probes.append(probe)
        probe_optimizers.append(torch.optim.SGD(probe.parameters(), lr=0.05))
    for epoch in range(2):
        for xb, yb in loader:
            for net, optimizer in zip(members + probes, optimizers + probe_optimizers):
                loss = F.mse_loss(net(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save({"members": [m.state_dict() for m in members], "probes": [p.state_dict() for p in probes]}, "all.pt")


if __name__ == "__main__":
    main()
"""

PARTS = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.backbone(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(320, 10)
    y = x[:, :3].argmax(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=20, shuffle=True)
    model = Net()
    backbone_opt = torch.optim.SGD(model.backbone.parameters(), lr=1e-2, momentum=0.9)
    head_opt = torch.optim.Adam(model.head.parameters(), lr=1e-2)
    for epoch in range(2):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            backbone_opt.zero_grad()
            head_opt.zero_grad()
            loss.backward()
            backbone_opt.step()
            head_opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "net.pt")
"""


def _converted(source: str, name: str, tmp_path: Path) -> tuple[Path, str]:
    conversion = convert(source, path=name)
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    code = str(conversion.code)
    script = tmp_path / name
    script.write_text(code)
    return script, code


@pytest.mark.torchrun
def test_every_model_of_a_list_is_wrapped_and_trains_in_sync(tmp_path: Path) -> None:
    script, code = _converted(ENSEMBLE, "ensemble.py", tmp_path)
    assert "members = [DDP(member) for member in members]" in code
    assert "probe = DDP(probe)" in code

    report = verify(script, nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps and rank0.steps == rank1.steps
    assert rank0.saves and not rank1.saves
    checkpoint = torch.load(tmp_path / "all.pt", map_location="cpu")
    states = checkpoint["members"] + checkpoint["probes"]
    assert len(states) == 5
    for state in states:
        assert not any(key.startswith("module.") for key in state), list(state)[:3]


@pytest.mark.torchrun
def test_parts_with_their_own_optimizers_train_in_sync_through_one_wrap(tmp_path: Path) -> None:
    script, code = _converted(PARTS, "parts.py", tmp_path)
    assert code.count("DDP(") == 1 and "model = DDP(model)" in code

    report = verify(script, nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps and rank0.steps == rank1.steps
    assert rank0.saves and not rank1.saves
    state = torch.load(tmp_path / "net.pt", map_location="cpu")
    assert set(state) == {"backbone.0.weight", "backbone.0.bias", "head.weight", "head.bias"}
