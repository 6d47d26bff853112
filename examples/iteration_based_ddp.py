"""Train a bag-of-tokens classifier for a fixed number of steps rather than epochs.

Each example is a sequence of 16 tokens from a vocabulary of 8; its label says
whether token 1 occurs more often than token 2. The model embeds the tokens,
averages the embeddings and classifies the mean with a small MLP. Training is
counted in optimizer steps: the data loader is restarted whenever it runs dry,
the learning rate warms up linearly and then follows a cosine decay, and a
single checkpoint is written when the step budget is spent.
"""

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
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


class BagOfTokensClassifier(nn.Module):
    def __init__(self, vocab_size, embed_dim=32, hidden_dim=64, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.head = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, num_classes),
        )

    def forward(self, tokens):
        return self.head(self.embed(tokens).mean(dim=1))


def make_dataset(num_samples, seq_len, vocab_size, generator):
    tokens = torch.randint(vocab_size, (num_samples, seq_len), generator=generator)
    labels = ((tokens == 1).sum(dim=1) > (tokens == 2).sum(dim=1)).long()
    return TensorDataset(tokens, labels)


def get_lr(step, args):
    """Linear warm-up to args.lr, then cosine decay to args.min_lr at args.max_steps."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def accuracy(model, loader, device):
    model.eval()
    correct = 0
    for tokens, labels in loader:
        tokens, labels = tokens.to(device), labels.to(device)
        correct += (model(tokens).argmax(dim=1) == labels).sum().item()
    model.train()
    return correct / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser(description="Step-based training of a token-count classifier")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=str, default="iteration_based.pt", help="checkpoint path")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    vocab_size, seq_len = 8, 16
    g = torch.Generator().manual_seed(1234)
    train_set = make_dataset(2000, seq_len, vocab_size, g)
    val_set = make_dataset(500, seq_len, vocab_size, g)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set))
    val_loader = DataLoader(val_set, batch_size=250)

    model = BagOfTokensClassifier(vocab_size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    model.train()
    model = DDP(model)
    data_iter = iter(loader)
    running_loss = 0.0
    for step in range(args.max_steps):
        try:
            batch = next(data_iter)
        except StopIteration:
            loader.sampler.set_epoch(loader.sampler.epoch + 1)
            # One pass over the data is done; start another with a fresh shuffle.
            data_iter = iter(loader)
            batch = next(data_iter)
        tokens, labels = (t.to(device) for t in batch)

        lr = get_lr(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr

        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        running_loss += loss.item()
        if (step + 1) % args.log_every == 0:
            if dist.get_rank() == 0:
                print(f"step {step + 1:4d}/{args.max_steps} | lr {lr:.2e} | loss {running_loss / args.log_every:.4f}")
            running_loss = 0.0

    accuracy_result = accuracy(model, val_loader, device)
    if dist.get_rank() == 0:
        print(f"validation accuracy: {accuracy_result:.3f}")

    checkpoint = {
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": args.max_steps,
        "config": vars(args),
    }
    if dist.get_rank() == 0:
        torch.save(checkpoint, args.out)
        print(f"saved checkpoint to {args.out}")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        dist.destroy_process_group()
