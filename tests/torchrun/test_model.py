"""Every trained model is wrapped, where and how DDP needs it, and trains in sync.

One optimizer over an encoder and a decoder (``itertools.chain``), an auxiliary
head that ``forward`` runs only on even steps (``find_unused_parameters``), a
decoder layer unfrozen after the wrap (wrapped again), and an EMA copy taken
with ``copy.deepcopy``. The converted script must train in sync on sharded
data, save once, and keep the checkpoint's keys free of the ``module.`` prefix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

torch = pytest.importorskip("torch")

SCRIPT = """
import copy
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 16), nn.Tanh())
        self.code = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 2)

    def forward(self, x, with_aux=False):
        h = self.body(x)
        if with_aux:
            return self.code(h), self.aux(h)
        return self.code(h), None


if __name__ == "__main__":
    torch.manual_seed(0)
    signals = torch.randn(192, 12)
    labels = (signals[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(signals, labels), batch_size=16, shuffle=True)
    encoder = Encoder()
    decoder = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 12))
    for p in decoder[0].parameters():
        p.requires_grad = False
    optimizer = torch.optim.Adam(itertools.chain(encoder.parameters(), decoder.parameters()), lr=2e-3)
    ema = copy.deepcopy(encoder)
    step = 0
    for epoch in range(3):
        if epoch == 1:
            for p in decoder[0].parameters():
                p.requires_grad = True
        for xb, yb in loader:
            code, aux = encoder(xb, with_aux=step % 2 == 0)
            loss = F.mse_loss(decoder(code), xb)
            if aux is not None:
                loss = loss + 0.1 * F.cross_entropy(aux, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for e, p in zip(ema.parameters(), encoder.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
            step += 1
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save({"encoder": encoder.state_dict(), "decoder": decoder.state_dict(), "ema": ema.state_dict()}, "ae.pt")
"""


@pytest.mark.torchrun
def test_every_trained_model_is_wrapped_and_trains_in_sync(tmp_path: Path) -> None:
    conversion = convert(SCRIPT, path="autoencoder.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    code = str(conversion.code)
    assert "encoder = DDP(encoder, find_unused_parameters=True)" in code
    assert "decoder = DDP(decoder)" in code
    assert "decoder = DDP(decoder.module)" in code  # after unfreezing
    script = tmp_path / "autoencoder_ddp.py"
    script.write_text(code)

    report = verify(script, nproc=2, workdir=tmp_path, timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps and rank0.steps == rank1.steps
    assert rank0.saves and not rank1.saves
    checkpoint = torch.load(tmp_path / "ae.pt", map_location="cpu")
    for state in checkpoint.values():
        assert not any(key.startswith("module.") for key in state), list(state)[:3]
