"""Train an MLP to tell apart three concentric rings of 2-D points.

Points are sampled from three noisy rings (radius 1, 2 and 3) and labelled by
their ring; a small network has to learn the circular decision boundaries.
Training is organised around a ``Trainer`` class that runs the epochs and
writes a checkpoint every ``save_every`` epochs. Usage::

    python trainer.py TOTAL_EPOCHS SAVE_EVERY [--batch_size N]
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
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


class RingsDataset(Dataset):
    """Noisy points on concentric rings; the label is the ring index."""

    def __init__(self, size, num_rings=3, noise=0.15, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_rings, (size,), generator=g)
        angle = torch.rand(size, generator=g) * 2 * math.pi
        radius = self.labels.float() + 1 + noise * torch.randn(size, generator=g)
        self.points = torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), dim=1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.points[index], self.labels[index]


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader,
        optimizer: torch.optim.Optimizer,
        gpu_id,
        save_every: int,
    ) -> None:
        self.gpu_id = gpu_id
        self.model = model.to(gpu_id)
        self.model = DDP(self.model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        total_loss = 0.0
        for source, targets in self.train_data:
            source = source.to(self.gpu_id)
            targets = targets.to(self.gpu_id)
            total_loss += self._run_batch(source, targets)
        avg_loss = total_loss / len(self.train_data)
        if dist.get_rank() == 0:
            print(f"Epoch {epoch} | Batch size: {self.train_data.batch_size} | "
                  f"Steps: {len(self.train_data)} | Loss: {avg_loss:.4f}")

    def _save_checkpoint(self, epoch):
        checkpoint = self.model.module.state_dict()
        path = "checkpoint.pt"
        if dist.get_rank() == 0:
            torch.save(checkpoint, path)
            print(f"Epoch {epoch} | Checkpoint saved at {path}")

    def train(self, max_epochs: int):
        for epoch in range(max_epochs):
            self.train_data.sampler.set_epoch(epoch)
            self._run_epoch(epoch)
            if (epoch + 1) % self.save_every == 0:
                self._save_checkpoint(epoch)


def load_train_objs():
    train_set = RingsDataset(2048)
    model = nn.Sequential(
        nn.Linear(2, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 3),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int):
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset))


def main(device, total_epochs, save_every, batch_size):
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, device, save_every)
    trainer.train(total_epochs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Single-device training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a checkpoint")
    parser.add_argument("--batch_size", default=64, type=int, help="Input batch size (default: 64)")
    args = parser.parse_args()

    setup_distributed()
    try:
        torch.manual_seed(0)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        main(device, args.total_epochs, args.save_every, args.batch_size)
    finally:
        dist.destroy_process_group()
