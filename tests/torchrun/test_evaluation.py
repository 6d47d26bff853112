"""--shard-eval: each rank evaluates its share, and every rank decides on the whole set's metrics.

The script evaluates a classifier after every epoch (accuracy and mean loss
from sums and counts), keeps the best model and stops when the accuracy has
not improved for three epochs. Converted with ``--shard-eval``, it must train
in sync under torchrun on two ranks, every rank must see the same metrics and
stop at the same epoch, and the metrics must be the whole set's: exactly when
the set divides evenly by the world size, and over a set padded by one
repeated sample when it does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpify import Options, Status, convert
from ddpify.verify import verify

pytest.importorskip("torch")

SCRIPT = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

VAL = {val}
history = []


def evaluate(model, loader):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for xb, yb in loader:
            logits = model(xb)
            loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
            correct += (logits.argmax(1) == yb).sum().item()
            total += yb.size(0)
    model.train()
    return correct / total, loss_sum / total, total


torch.manual_seed(0)
x = torch.randn(256 + VAL, 6)
y = (x[:, 0] - x[:, 1] + 0.5 * torch.randn(256 + VAL) > 0).long()
train_loader = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=16, shuffle=True)
val_x, val_y = x[256:], y[256:]
val_loader = DataLoader(TensorDataset(val_x, val_y), batch_size=25)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
best, stale = 0.0, 0
for epoch in range(40):
    for xb, yb in train_loader:
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    accuracy, val_loss, seen = evaluate(model, val_loader)
    history.append((epoch, accuracy, val_loss, seen))
    if accuracy > best:
        best, stale = accuracy, 0
        torch.save(model.state_dict(), "best.pt")
    else:
        stale += 1
        if stale == 3:
            break
"""

# Added to the converted script by the test: what this rank saw, and the whole set's metrics for the final weights.
RECORD = """
import json

with torch.no_grad():
    logits = model.module(val_x)
    full = (logits.argmax(1) == val_y).sum().item() / len(val_y), F.cross_entropy(logits, val_y).item()
with open(os.path.join(os.environ["EVAL_RESULTS"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"history": history, "full": full}, f)
"""


def run(tmp_path: Path, val: int) -> tuple[dict, dict]:
    conversion = convert(SCRIPT.format(val=val), path="train.py", options=Options(shard_eval=True))
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    assert not conversion.diagnostics, conversion.diagnostics
    code = str(conversion.code)
    assert "sampler=DistributedSampler(eval_dataset, shuffle=False)" in code
    assert "correct, total, loss_sum = sum_over_ranks(correct, total, loss_sum)" in code
    workdir, results = tmp_path / "run", tmp_path / "results"
    workdir.mkdir()
    results.mkdir()
    script = workdir / "train_ddp.py"
    script.write_text(code + RECORD)

    report = verify(script, nproc=2, workdir=workdir, timeout=240, env={"EVAL_RESULTS": str(results)})

    assert report.ok, f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
    assert rank0.saves and not rank1.saves
    return tuple(json.loads((results / f"rank{rank}.json").read_text()) for rank in (0, 1))  # type: ignore[return-value]


@pytest.mark.torchrun
def test_a_set_that_divides_evenly_gives_every_rank_the_whole_sets_metrics(tmp_path: Path) -> None:
    rank0, rank1 = run(tmp_path, val=200)

    assert rank0["history"] == rank1["history"]  # the same metrics, so the same early-stopping epoch
    assert len(rank0["history"]) < 40, "the run should stop early"
    assert {seen for *_, seen in rank0["history"]} == {200}
    _, accuracy, loss, _ = rank0["history"][-1]
    assert accuracy == rank0["full"][0]
    assert loss == pytest.approx(rank0["full"][1], rel=1e-5)


@pytest.mark.torchrun
def test_a_set_that_does_not_divide_counts_one_sample_twice_on_every_rank_alike(tmp_path: Path) -> None:
    rank0, rank1 = run(tmp_path, val=201)

    assert rank0["history"] == rank1["history"]
    assert {seen for *_, seen in rank0["history"]} == {202}  # padded to 2 x 101
    _, accuracy, loss, _ = rank0["history"][-1]
    assert accuracy == pytest.approx(rank0["full"][0], abs=1 / 201)
    assert loss == pytest.approx(rank0["full"][1], rel=0.05)
