"""tutorial_single.py made data-parallel by hand, as the PyTorch DDP tutorials do.

The same model, data, optimizer and timed steps as ``tutorial_single.py``;
what changes is only what DistributedDataParallel needs: join the process
group that torchrun describes (NCCL on GPUs, Gloo on CPUs), shard the data
with a DistributedSampler (re-seeded every epoch), wrap the model in DDP,
print and write files on rank 0 only, leave the group at the end. Each
process keeps the per-process batch size, as ddpify does by default.

The code between the "step timing" markers, and ``train_one_epoch``, are
identical in ``tutorial_single.py`` (``step_overhead.py`` checks it).

    torchrun --standalone --nproc_per_node=2 benchmarks/reference_ddp.py --step-times times.json
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


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


def setup():
    """Join torchrun's process group; return this process's device."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before init_process_group, so NCCL uses this GPU
        dist.init_process_group("nccl")
        return torch.device("cuda", local_rank)
    dist.init_process_group("gloo")
    return torch.device("cpu")


def main():
    parser = argparse.ArgumentParser(description="MLP on synthetic data, every step timed (DDP)")
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="timed steps after the warm-up")
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-times",
        default=os.environ.get("STEP_TIMES_JSON", ""),
        help="JSON file for rank 0's per-step times (default: $STEP_TIMES_JSON)",
    )
    args = parser.parse_args()

    device = setup()
    rank = dist.get_rank()
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)

    train_set = make_dataset(4096, 256, 10, args.seed)
    sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = MLP().to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    timer = StepTimer(args.warmup_steps, args.steps)
    for epoch in range(args.max_epochs):
        sampler.set_epoch(epoch)
        loss = train_one_epoch(model, train_loader, optimizer, criterion, device, timer)
        if rank == 0:
            print(f"epoch {epoch} | loss {loss:.4f}")
        if timer.done:
            break

    if rank == 0 and args.step_times:
        save_step_times(args.step_times, timer.times)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
