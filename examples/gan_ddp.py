"""Train a small GAN to generate 2-D points on a ring.

The real data are points at radius 2 around the origin with a little radial
noise (the labels stored with them, the octant of each point, are not used).
An MLP generator maps 8-D Gaussian noise to the plane and an MLP
discriminator tells real points from generated ones; both are trained with
the standard non-saturating BCE losses. Since GAN losses say little about
progress, every epoch also reports how far generated points lie from the
ring. Both networks are saved at the end.
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
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


class Generator(nn.Module):
    def __init__(self, latent_dim, hidden_dim=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden_dim, hidden_dim),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden_dim, 2),
        )

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, hidden_dim=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, hidden_dim),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden_dim, hidden_dim),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden_dim, 1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.net(x)


def make_ring(num_samples, radius=2.0, noise=0.05):
    angle = torch.rand(num_samples) * 2 * math.pi
    r = radius + noise * torch.randn(num_samples)
    points = torch.stack((r * torch.cos(angle), r * torch.sin(angle)), dim=1)
    octant = (angle / (math.pi / 4)).long()
    return points, octant


def main():
    parser = argparse.ArgumentParser(description="GAN on a 2-D ring")
    parser.add_argument("--n-epochs", type=int, default=20, help="number of epochs of training")
    parser.add_argument("--batch-size", type=int, default=64, help="size of the batches")
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate")
    parser.add_argument("--b1", type=float, default=0.5, help="Adam beta1")
    parser.add_argument("--b2", type=float, default=0.999, help="Adam beta2")
    parser.add_argument("--latent-dim", type=int, default=8, help="dimensionality of the latent space")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    points, octant = make_ring(1024)
    train_dataset = TensorDataset(points, octant)
    loader = DataLoader(train_dataset, batch_size=args.batch_size, sampler=DistributedSampler(train_dataset))

    generator = Generator(args.latent_dim).to(device)
    discriminator = Discriminator().to(device)
    adversarial_loss = nn.BCELoss()

    optimizer_G = torch.optim.Adam(generator.parameters(), lr=args.lr, betas=(args.b1, args.b2))
    generator = DDP(generator)
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=args.lr, betas=(args.b1, args.b2))
    discriminator = DDP(discriminator)

    # A fixed batch of noise to measure the generator on from epoch to epoch.
    fixed_z = torch.randn(1000, args.latent_dim, device=device)

    for epoch in range(args.n_epochs):
        loader.sampler.set_epoch(epoch)
        d_loss_sum = g_loss_sum = 0.0
        for i, (real, _) in enumerate(loader):
            real = real.to(device)
            valid = torch.ones(real.size(0), 1, device=device)
            fake = torch.zeros(real.size(0), 1, device=device)

            # Discriminator: real points -> 1, generated points -> 0.
            z = torch.randn(real.size(0), args.latent_dim, device=device)
            gen_points = generator(z)
            optimizer_D.zero_grad()
            real_loss = adversarial_loss(discriminator(real), valid)
            fake_loss = adversarial_loss(discriminator(gen_points.detach()), fake)
            d_loss = (real_loss + fake_loss) / 2
            d_loss.backward()
            optimizer_D.step()

            # Generator: make the discriminator call the generated points real.
            optimizer_G.zero_grad()
            g_loss = adversarial_loss(discriminator(gen_points), valid)
            g_loss.backward()
            optimizer_G.step()

            d_loss_sum += d_loss.item()
            g_loss_sum += g_loss.item()

        with torch.no_grad():
            samples = generator(fixed_z)
            ring_error = (samples.norm(dim=1) - 2.0).abs().mean().item()
        if dist.get_rank() == 0:
            print(
                f"[Epoch {epoch + 1}/{args.n_epochs}] D loss: {d_loss_sum / len(loader):.4f} "
                f"G loss: {g_loss_sum / len(loader):.4f} distance to ring: {ring_error:.4f}"
            )

    if dist.get_rank() == 0:
        torch.save(generator.module.state_dict(), "generator.pt")
        torch.save(discriminator.module.state_dict(), "discriminator.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        dist.destroy_process_group()
