"""A tutorial-style single-GPU training program, with every training step timed.

An MLP classifies synthetic 256-feature vectors into 10 classes (a fixed
random linear teacher labels them). Training runs for a fixed number of
optimizer steps -- ``--warmup-steps`` untimed, then ``--steps`` timed -- over
as many epochs as that takes. Each timed step runs from the moment its batch
is in hand to the moment its loss is read back with ``loss.item()``.

The per-step times go to the JSON file named by ``--step-times`` (default:
the ``STEP_TIMES_JSON`` environment variable). The code between the
"step timing" markers, and the timed loop in ``train_one_epoch``, are
identical in ``reference_ddp.py``; ``step_overhead.py`` checks that, and that
ddpify left them alone.

    python benchmarks/tutorial_single.py --step-times times.json
"""

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


# --- step timing: begin (identical in tutorial_single.py and reference_ddp.py) ---
class StepTimer:
    """Wall time of each training step after the warm-up; adds no synchronisation."""

    def __init__(self, warmup_steps, steps):
        self.warmup_steps = warmup_steps
        self.total_steps = warmup_steps + steps
        self.step = 0
        self.times = []
        self.started = 0.0

    @property
    def done(self):
        return self.step >= self.total_steps

    def start(self):
        self.started = time.perf_counter()

    def stop(self):
        elapsed = time.perf_counter() - self.started
        if self.step >= self.warmup_steps:
            self.times.append(elapsed)
        self.step += 1


# --- step timing: end ---


def save_step_times(path, times):
    with open(path, "w") as f:
        json.dump({"step_times": times, "world_size": int(os.environ.get("WORLD_SIZE", "1"))}, f)


class MLP(nn.Module):
    def __init__(self, in_features=256, hidden=512, num_classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.net(x)


def make_dataset(num_samples, in_features, num_classes, seed):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_samples, in_features, generator=g)
    teacher = torch.randn(in_features, num_classes, generator=g)
    return TensorDataset(inputs, (inputs @ teacher).argmax(dim=1))


def train_one_epoch(model, loader, optimizer, criterion, device, timer):
    model.train()
    running_loss = 0.0
    for inputs, targets in loader:
        if timer.done:
            break
        timer.start()
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        timer.stop()
    return running_loss / len(loader)


def main():
    parser = argparse.ArgumentParser(description="MLP on synthetic data, every step timed")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="timed steps after the warm-up")
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-times",
        default=os.environ.get("STEP_TIMES_JSON", ""),
        help="JSON file for the per-step times (default: $STEP_TIMES_JSON)",
    )
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_set = make_dataset(4096, 256, 10, args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

    model = MLP().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    timer = StepTimer(args.warmup_steps, args.steps)
    for epoch in range(args.max_epochs):
        loss = train_one_epoch(model, train_loader, optimizer, criterion, device, timer)
        print(f"epoch {epoch} | loss {loss:.4f}")
        if timer.done:
            break

    if args.step_times:
        save_step_times(args.step_times, timer.times)


if __name__ == "__main__":
    main()
