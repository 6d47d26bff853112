"""Training on tensors without a DataLoader, under torchrun: each rank trains on its own equal shard.

The verification's probe sees DataLoader batches only, so these tests record
what the model is called on themselves: a global forward pre-hook, added to
the converted script, keeps the rows of every input the DDP-wrapped model
gets while gradients are on, and each rank writes them out at exit (outside
the working folder, where the probe does not judge writes). The ranks must
stay in sync, take the same number of steps, and have seen disjoint rows:
together the training set (less the few left out for equal shards), or for
data drawn in each step, different draws.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from ddpify import Status, convert
from ddpify.verify import verify

pytest.importorskip("torch")

RECORDER = """\
import atexit as _atexit
import os as _os
import pickle as _pickle

import torch as _torch

_SEEN = []


def _record(module, args):
    if isinstance(module, _torch.nn.parallel.DistributedDataParallel) and _torch.is_grad_enabled():
        _SEEN.append([tuple(row.flatten().tolist()) for row in args[0]])


def _dump():
    with open(_os.path.join({out!r}, "seen-" + _os.environ.get("RANK", "0") + ".pkl"), "wb") as f:
        _pickle.dump(_SEEN, f)


_torch.nn.modules.module.register_module_forward_pre_hook(_record)
_atexit.register(_dump)
"""

FULL_BATCH = """
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    x = torch.linspace(-2, 2, 301).unsqueeze(1)
    y = torch.sin(3 * x) + 0.1 * torch.randn(x.size())
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, line_search_fn="strong_wolfe")
    loss_fn = nn.MSELoss()

    def closure():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    for step in range(8):
        optimizer.step(closure)
    with torch.no_grad():
        print(f"final loss {loss_fn(model(x), y).item():.4f}")
    torch.save(model.state_dict(), "sine.pt")


if __name__ == "__main__":
    main()
"""

MINI_BATCHES = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(203, 6)
Y = (X[:, :3].sum(dim=1) > 0).long()
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batch_size = 16

for epoch in range(3):
    permutation = torch.randperm(X.size()[0])
    for i in range(0, X.size()[0], batch_size):
        indices = permutation[i : i + batch_size]
        batch_x, batch_y = X[indices], Y[indices]
        optimizer.zero_grad()
        loss = criterion(model(batch_x), batch_y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
torch.save(model.state_dict(), "classifier.pt")
"""

DRAWN_EACH_STEP = """
import torch
import torch.nn as nn


def main():
    torch.manual_seed(42)
    teacher = torch.randn(5, 1)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(40):
        x = torch.randn(16, 5)
        y = x @ teacher + 0.01 * torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(model.state_dict(), "student.pt")


if __name__ == "__main__":
    main()
"""

STREAMS = """
import torch
import torch.nn as nn

BATCH, BPTT = 8, 10


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


class LanguageModel(nn.Module):
    def __init__(self, ntoken):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, 16)
        self.rnn = nn.GRU(16, 32)
        self.decoder = nn.Linear(32, ntoken)

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(self.encoder(tokens), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        return torch.zeros(1, bsz, 32)


torch.manual_seed(0)
corpus = torch.randint(0, 50, (1700,))
train_data = batchify(corpus, BATCH)
model = LanguageModel(50)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
hidden = model.init_hidden(BATCH)
for i in range(0, train_data.size(0) - 1, BPTT):
    data, targets = get_batch(train_data, i)
    hidden = hidden.detach()
    optimizer.zero_grad()
    output, hidden = model(data, hidden)
    nn.functional.cross_entropy(output.view(-1, 50), targets).backward()
    optimizer.step()
torch.save(model.state_dict(), "lm.pt")
"""


def run(tmp_path: Path, source: str) -> tuple[list[list[list[tuple[float, ...]]]], str]:
    """Convert ``source``, run it on two ranks with the recorder, and return each rank's inputs per step."""
    conversion = convert(source.encode(), path="train.py")
    assert conversion.status is Status.CONVERTED, conversion.diagnostics
    seen = tmp_path / "seen"
    seen.mkdir()
    workdir = tmp_path / "run"
    workdir.mkdir()
    script = workdir / "train_ddp.py"
    script.write_text(RECORDER.format(out=str(seen)) + conversion.code.decode())

    report = verify(script, nproc=2, workdir=workdir, timeout=240)

    failed = [check.name for check in report.checks if not check.passed]
    # no DataLoader: sharded-data judges what the wrapped model is given on each rank
    assert failed == [], f"{report.format_table()}\n{report.output[-3000:]}"
    rank0, rank1 = report.ranks
    assert rank0.steps == rank1.steps > 0
    assert rank0.saves and not rank1.saves
    steps = [pickle.loads((seen / f"seen-{rank}.pkl").read_bytes()) for rank in (0, 1)]
    return steps, conversion.code.decode()


@pytest.mark.torchrun
def test_full_batch_training_with_lbfgs_gives_each_rank_an_equal_disjoint_shard(tmp_path: Path) -> None:
    (steps0, steps1), code = run(tmp_path, FULL_BATCH)

    assert "loss = loss_fn(model(x[shard]), y[shard])" in code
    assert "return mean_over_ranks(loss)" in code  # LBFGS decides from the mean loss, the same on every rank
    assert len(steps0) == len(steps1) > 8  # as many closure calls on both ranks, several per step
    rows0, rows1 = set(steps0[0]), set(steps1[0])
    assert all(set(step) == rows0 for step in steps0) and all(set(step) == rows1 for step in steps1)
    assert len(rows0) == len(rows1) == 150  # 301 samples: equal shards, one left out
    assert not rows0 & rows1


@pytest.mark.torchrun
def test_hand_made_batches_of_shuffled_samples_give_each_rank_its_own_shard(tmp_path: Path) -> None:
    (steps0, steps1), code = run(tmp_path, MINI_BATCHES)

    assert "batch_x, batch_y = X[shard][indices], Y[shard][indices]" in code
    assert len(steps0) == len(steps1) == 3 * 7  # 101 samples per rank in batches of 16, three epochs
    rows0 = [row for step in steps0 for row in step]
    rows1 = [row for step in steps1 for row in step]
    assert len(rows0) == len(rows1) == 3 * 101
    assert len(set(rows0)) == len(set(rows1)) == 101  # each rank sees each of its samples once per epoch
    assert not set(rows0) & set(rows1)
    assert steps0[:7] != steps0[7:14]  # reshuffled every epoch


@pytest.mark.torchrun
def test_data_drawn_in_each_step_differs_between_the_ranks(tmp_path: Path) -> None:
    (steps0, steps1), code = run(tmp_path, DRAWN_EACH_STEP)

    assert "torch.manual_seed(torch.initial_seed() + dist.get_rank())" in code
    assert len(steps0) == len(steps1) == 40
    rows0 = {row for step in steps0 for row in step}
    rows1 = {row for step in steps1 for row in step}
    assert len(rows0) == len(rows1) == 40 * 16
    assert not rows0 & rows1


@pytest.mark.torchrun
def test_batchified_text_gives_each_rank_its_own_contiguous_streams(tmp_path: Path) -> None:
    import torch

    (steps0, steps1), code = run(tmp_path, STREAMS)

    assert "train_data = batchify(corpus, BATCH * dist.get_world_size())" in code
    torch.manual_seed(0)
    corpus = torch.randint(0, 50, (1700,))
    together = corpus[: 1700 // 16 * 16].view(16, -1).t()  # batchified for both ranks: 106 steps of 16 streams
    assert len(steps0) == len(steps1) == 11  # ceil(105 / 10) steps over the same 106 time steps
    for rank, steps in enumerate((steps0, steps1)):
        mine = together[:, rank * 8 : (rank + 1) * 8]
        assert [row for step in steps for row in step] == [tuple(row.tolist()) for row in mine[:-1]]
