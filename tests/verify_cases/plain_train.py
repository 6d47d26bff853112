"""A single-process training script with a fixed seed, as written before ddpify.

Under torchrun every rank builds the same model and draws the same batches,
so the ranks stay in sync by accident while none of them shares the work.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

x = torch.randn(64, 4)
y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(64, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.MSELoss()

for epoch in range(2):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

torch.save(model.state_dict(), "plain.pt")
