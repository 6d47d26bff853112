"""A small DDP training script that is correct, unless ``--bug`` breaks it.

Each ``--bug`` is a classic mistake that still runs to completion under
torchrun (or hangs) without training in data-parallel:

* ``no-ddp``: the model is not wrapped, gradients are never averaged;
* ``no-sampler``: no DistributedSampler, every rank reads the whole dataset;
* ``save-on-every-rank``: the checkpoint is written by every rank;
* ``hang``: rank 1 waits for a checkpoint under the wrong name while rank 0
  waits for it at a barrier;
* ``crash-on-rank-1``: rank 1 raises at its third batch, while rank 0 waits
  for its gradients in the all-reduce;
* ``unfreeze-after-wrap``: the last layer is frozen when DDP is built and
  unfrozen after, so DDP never averages its gradients.

Runs without torchrun too (a process group of one is not created).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

BUGS = ("none", "no-ddp", "no-sampler", "save-on-every-rank", "hang", "crash-on-rank-1", "unfreeze-after-wrap")


def make_dataset(num_samples, generator):
    x = torch.randn(num_samples, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(num_samples, 1, generator=generator)
    return TensorDataset(x, y)


def train(args, rank, distributed):
    # A different seed per rank (dropout, augmentation); DDP broadcasts rank 0's weights.
    torch.manual_seed(1234 + rank)
    data = torch.Generator().manual_seed(0)  # the same dataset on every rank
    train_set, val_set = make_dataset(64, data), make_dataset(16, data)

    use_sampler = distributed and args.bug != "no-sampler"
    sampler = DistributedSampler(train_set, shuffle=True, seed=0) if use_sampler else None
    train_loader = DataLoader(train_set, batch_size=8, sampler=sampler, shuffle=sampler is None)
    val_loader = DataLoader(val_set, batch_size=8)

    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    frozen_head = args.bug == "unfreeze-after-wrap"
    model[2].requires_grad_(not frozen_head)
    if distributed and args.bug != "no-ddp":
        model = DDP(model)
    if frozen_head:
        model.requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()

    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for batch, (inputs, targets) in enumerate(train_loader):
            if args.bug == "crash-on-rank-1" and rank == 1 and batch == 2:
                raise ValueError(f"corrupt sample in batch {batch}")
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = sum(criterion(model(x), y).item() for x, y in val_loader) / len(val_loader)
        if rank == 0:
            print(f"epoch {epoch}: val loss {val_loss:.4f}")

    module = model.module if isinstance(model, DDP) else model
    if rank == 0 or args.bug == "save-on-every-rank":
        torch.save(module.state_dict(), args.checkpoint)
    if args.bug == "hang" and rank == 1:
        while not os.path.exists("checkpoint.pt"):  # rank 0 wrote args.checkpoint
            time.sleep(0.1)
    if distributed:
        dist.barrier()  # the checkpoint is complete before anyone reads it


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", choices=BUGS, default="none")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--checkpoint", default="model.pt")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    try:
        train(args, rank, distributed)
    finally:
        if distributed:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
