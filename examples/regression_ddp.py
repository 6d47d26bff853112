"""Fit a small MLP to a noisy nonlinear function of three inputs.

The target mixes a sine, a square and a linear term,
y = sin(2 x0) + 0.5 x1^2 - x2 + noise, sampled on 1,024 random points. A
two-hidden-layer network is trained with Adam on mean squared error, the
epoch's average loss is printed as it goes and the weights are saved at the
end.
"""

import atexit
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


setup_distributed()
atexit.register(dist.destroy_process_group)  # every rank, also when training raises


# Hyper-parameters
input_size = 3
hidden_size = 64
num_samples = 1024
num_epochs = 20
batch_size = 64
learning_rate = 3e-3

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Synthetic data: inputs uniform in [-2, 2], a little observation noise.
x = torch.rand(num_samples, input_size) * 4 - 2
y = torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, 2]
y = (y + 0.05 * torch.randn(num_samples)).unsqueeze(1)

train_dataset = TensorDataset(x, y)
train_loader = DataLoader(train_dataset, batch_size=batch_size, sampler=DistributedSampler(train_dataset))

model = nn.Sequential(
    nn.Linear(input_size, hidden_size),
    nn.Tanh(),
    nn.Linear(hidden_size, hidden_size),
    nn.Tanh(),
    nn.Linear(hidden_size, 1),
).to(device)

criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
model = DDP(model)

for epoch in range(num_epochs):
    train_loader.sampler.set_epoch(epoch)
    running_loss = 0.0
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)

        outputs = model(inputs)
        loss = criterion(outputs, targets)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        running_loss += loss.item() * inputs.size(0)

    if dist.get_rank() == 0:
        print(f"Epoch [{epoch + 1}/{num_epochs}], Loss: {running_loss / len(train_loader.sampler):.4f}")

if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "regression.pt")
