"""Downloads under torchrun: one rank fetches the data set, the others read what it fetched.

The script's data set downloads its file (from a ``file://`` URL, standing in
for a server) when it is missing. Run by two ranks at once, both would find it
missing and write it; converted, rank 0 downloads it first and the other rank
finds it in place. The verification's single-writer check sees every file
opened for writing in the working folder, so it shows that only one rank wrote
the downloaded file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

torch = pytest.importorskip("torch")

SCRIPT = """
import os
import sys
import urllib.request

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Points(Dataset):
    def __init__(self, root, url, download=False):
        path = os.path.join(root, "points.pt")
        if download and not os.path.exists(path):
            os.makedirs(root, exist_ok=True)
            urllib.request.urlretrieve(url, path)
        self.x, self.y = torch.load(path, map_location="cpu")

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    dataset = Points("data", sys.argv[1], download=True)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.torchrun
def test_one_rank_downloads_and_the_other_reads_its_file(tmp_path: Path) -> None:
    conversion = convert(SCRIPT.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    assert not conversion.diagnostics, conversion.diagnostics
    served = tmp_path / "server" / "points.pt"
    served.parent.mkdir()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    torch.save((x, x.sum(dim=1, keepdim=True)), served)
    workdir = tmp_path / "run"
    workdir.mkdir()
    script = workdir / "train_ddp.py"
    script.write_bytes(conversion.code)

    report = verify(script, nproc=2, workdir=workdir, script_args=[served.as_uri()], timeout=240)

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    assert (workdir / "data" / "points.pt").read_bytes() == served.read_bytes()
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
