"""Classify points from three interleaved spirals, written in the older PyTorch style.

Each of the three classes is an arm of a noisy 2-D spiral, which no linear
model can separate. A two-hidden-layer MLP is trained with SGD and momentum.
The script follows the habits of older code bases: an explicit ``use_cuda``
flag, ``.cuda()`` calls, ``nn.DataParallel`` when several GPUs are present,
and a full checkpoint (epoch, model and optimizer state) written after every
epoch, from which a run can be resumed with ``--resume``.
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup_distributed():
    """Join the process group started by torchrun (or srun), or form a group of one under plain `python`."""
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ and "MASTER_ADDR" in os.environ:
        # Started by `srun` without torchrun: SLURM numbers the processes, the batch script sets MASTER_ADDR/PORT.
        os.environ.update(
            RANK=os.environ["SLURM_PROCID"],
            LOCAL_RANK=os.environ["SLURM_LOCALID"],
            WORLD_SIZE=os.environ["SLURM_NTASKS"],
        )
    if torch.cuda.is_available():
        # Before init_process_group, so that NCCL binds this process to its own GPU.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        backend = "cpu:gloo,cuda:nccl"  # NCCL for GPU tensors; Gloo still serves a model kept on the CPU
    else:
        backend = "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend)
    else:  # plain `python`: a group of one, which needs no rendezvous port
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def without_module_prefix(state_dict):
    """A checkpoint saved from nn.DataParallel names its keys `module.*`; the model loads them without."""
    consume_prefix_in_state_dict_if_present(state_dict, "module.")
    return state_dict


def make_spirals(points_per_class, num_classes=3, noise=0.2):
    xs, ys = [], []
    for c in range(num_classes):
        r = torch.linspace(0.0, 1.0, points_per_class)
        t = torch.linspace(c * 4.0, (c + 1) * 4.0, points_per_class) + noise * torch.randn(points_per_class)
        xs.append(torch.stack((r * torch.sin(t), r * torch.cos(t)), dim=1))
        ys.append(torch.full((points_per_class,), c, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


class SpiralNet(nn.Module):
    def __init__(self, hidden=128, num_classes=3):
        super(SpiralNet, self).__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def save_checkpoint(state, filename="legacy_checkpoint.pt"):
    if dist.get_rank() == 0:
        torch.save(state, filename)


def main():
    parser = argparse.ArgumentParser(description="Spiral classification (legacy style)")
    parser.add_argument("--epochs", default=10, type=int, help="number of total epochs to run")
    parser.add_argument("--batch-size", default=32, type=int, help="mini-batch size")
    parser.add_argument("--lr", default=0.1, type=float, help="initial learning rate")
    parser.add_argument("--momentum", default=0.9, type=float, help="momentum")
    parser.add_argument("--resume", default="", type=str, metavar="PATH",
                        help="path to latest checkpoint (default: none)")
    parser.add_argument("--seed", default=42, type=int)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    use_cuda = torch.cuda.is_available()

    inputs_all, labels_all = make_spirals(300)
    train_dataset = TensorDataset(inputs_all, labels_all)
    train_loader = DataLoader(train_dataset,
                              batch_size=args.batch_size, sampler=DistributedSampler(train_dataset))

    model = SpiralNet()
    if use_cuda:
        model = model.cuda()
        if dist.get_rank() == 0:
            print("Using", torch.cuda.device_count(), "GPUs")
        torch.backends.cudnn.benchmark = True

    criterion = nn.CrossEntropyLoss()
    if use_cuda:
        criterion = criterion.cuda()
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    start_epoch = 0
    if args.resume:
        if os.path.isfile(args.resume):
            if dist.get_rank() == 0:
                print("=> loading checkpoint '{}'".format(args.resume))
            checkpoint = torch.load(args.resume, map_location="cpu")
            start_epoch = checkpoint["epoch"] + 1
            model.load_state_dict(without_module_prefix(checkpoint["model_state_dict"]))
            optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
            if dist.get_rank() == 0:
                print("=> loaded checkpoint '{}' (epoch {})".format(args.resume, checkpoint["epoch"]))
        else:
            if dist.get_rank() == 0:
                print("=> no checkpoint found at '{}'".format(args.resume))
    model = DDP(model)

    for epoch in range(start_epoch, args.epochs):
        train_loader.sampler.set_epoch(epoch)
        model.train()
        running_loss = 0.0
        correct = 0
        total = 0
        for inputs, targets in train_loader:
            if use_cuda:
                inputs, targets = inputs.cuda(), targets.cuda()

            outputs = model(inputs)
            loss = criterion(outputs, targets)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            running_loss += loss.item() * targets.size(0)
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()

        if dist.get_rank() == 0:
            print("Epoch: {} | Loss: {:.4f} | Acc: {:.2f}% ({}/{})".format(
                epoch, running_loss / total, 100.0 * correct / total, correct, total))

        save_checkpoint({
            "epoch": epoch,
            "model_state_dict": model.module.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
        })


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        dist.destroy_process_group()
