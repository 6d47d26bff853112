"""Fit a small MLP to a noisy nonlinear function of three inputs.

The target mixes a sine, a square and a linear term,
y = sin(2 x0) + 0.5 x1^2 - x2 + noise, sampled on 1,024 random points. A
two-hidden-layer network is trained with Adam on mean squared error, the
epoch's average loss is printed as it goes and the weights are saved at the
end.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

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

train_loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)

model = nn.Sequential(
    nn.Linear(input_size, hidden_size),
    nn.Tanh(),
    nn.Linear(hidden_size, hidden_size),
    nn.Tanh(),
    nn.Linear(hidden_size, 1),
).to(device)

criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

for epoch in range(num_epochs):
    running_loss = 0.0
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)

        outputs = model(inputs)
        loss = criterion(outputs, targets)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        running_loss += loss.item() * inputs.size(0)

    print(f"Epoch [{epoch + 1}/{num_epochs}], Loss: {running_loss / len(train_loader.dataset):.4f}")

torch.save(model.state_dict(), "regression.pt")
