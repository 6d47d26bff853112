"""Train a small convolutional classifier on synthetic 28x28 "digit" images.

Each of the ten classes is drawn from its own coarse 7x7 stroke template,
blown up to 28x28, shifted by a pixel or two and buried in Gaussian noise, so
the task looks like MNIST to the network while needing no download. The
script trains with Adadelta and a step learning-rate schedule, reports the
test loss and accuracy after every epoch and saves the final weights.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import StepLR
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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(16 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 28 -> 26 -> 13
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 13 -> 11 -> 5
        x = self.dropout(torch.flatten(x, 1))
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def make_digits(num_samples, templates, generator):
    """Sample noisy, slightly shifted copies of the class templates."""
    labels = torch.randint(0, len(templates), (num_samples,), generator=generator)
    images = templates[labels].clone()
    shifts = torch.randint(-2, 3, (num_samples, 2), generator=generator)
    for i, (dy, dx) in enumerate(shifts.tolist()):
        images[i] = torch.roll(images[i], shifts=(dy, dx), dims=(1, 2))
    images += 0.6 * torch.randn(images.shape, generator=generator)
    # Normalise roughly as one would with the real MNIST mean and std.
    return (images - 0.25) / 0.6, labels


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0 and dist.get_rank() == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.sampler)}"
                f" ({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}"
            )


def test(model, device, test_loader):
    model.eval()
    test_loss = 0.0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1)
            correct += pred.eq(target).sum().item()

    test_loss /= len(test_loader.dataset)
    if dist.get_rank() == 0:
        print(
            f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)}"
            f" ({100.0 * correct / len(test_loader.dataset):.1f}%)\n"
        )


def main():
    parser = argparse.ArgumentParser(description="CNN on synthetic digits")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N",
                        help="input batch size for training (default: 64)")
    parser.add_argument("--test-batch-size", type=int, default=500, metavar="N",
                        help="input batch size for testing (default: 500)")
    parser.add_argument("--epochs", type=int, default=2, metavar="N",
                        help="number of epochs to train (default: 2)")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR",
                        help="learning rate (default: 1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M",
                        help="learning rate step gamma (default: 0.7)")
    parser.add_argument("--seed", type=int, default=1, metavar="S",
                        help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=5, metavar="N",
                        help="how many batches to wait before logging training status")
    parser.add_argument("--save-model", action=argparse.BooleanOptionalAction, default=True,
                        help="save the trained model to mnist_cnn.pt (default: on)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    # The templates and both splits come from one seeded generator, so the
    # data is the same on every run whatever the model initialisation does.
    g = torch.Generator().manual_seed(1234)
    coarse = (torch.rand(10, 1, 7, 7, generator=g) > 0.6).float()
    templates = F.interpolate(coarse, scale_factor=4, mode="nearest")
    train_dataset = TensorDataset(*make_digits(1200, templates, g))
    test_dataset = TensorDataset(*make_digits(500, templates, g))

    loader_kwargs = {"pin_memory": True} if device.type == "cuda" else {}
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=DistributedSampler(train_dataset), **loader_kwargs)
    test_loader = DataLoader(test_dataset, batch_size=args.test_batch_size, **loader_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    model = DDP(model)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train_loader.sampler.set_epoch(epoch)
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    if args.save_model and dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        dist.destroy_process_group()
