"""Train an LSTM language model on a synthetic token stream.

The corpus is built from a handful of fixed "phrases" over a 24-token
vocabulary, strung together in random order, with one token in ten replaced by
a random one. A model that learns the phrases can predict most tokens, so the
perplexity falls well below the vocabulary size. The stream is cut into
fixed-length (input, target) windows; the hidden state is carried from batch to
batch and detached in between, the gradient norm is clipped, and the weights
with the best validation loss so far are saved after each epoch.
"""

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
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


class RNNModel(nn.Module):
    """Embedding -> multi-layer LSTM -> linear decoder over the vocabulary."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid
        self.nlayers = nlayers
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output))
        return F.log_softmax(decoded, dim=-1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


class SequenceDataset(Dataset):
    """Non-overlapping windows of a token stream, each with its next-token targets."""

    def __init__(self, tokens, seq_len):
        self.tokens = tokens
        self.seq_len = seq_len

    def __len__(self):
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, index):
        start = index * self.seq_len
        chunk = self.tokens[start:start + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


def make_corpus(num_tokens, phrases, vocab_size, noise, generator):
    """Concatenate randomly chosen phrases, then corrupt a fraction of the tokens."""
    pieces, length = [], 0
    while length < num_tokens:
        phrase = phrases[torch.randint(len(phrases), (1,), generator=generator).item()]
        pieces.append(phrase)
        length += len(phrase)
    tokens = torch.cat(pieces)[:num_tokens]
    corrupt = torch.rand(num_tokens, generator=generator) < noise
    tokens[corrupt] = torch.randint(vocab_size, (int(corrupt.sum()),), generator=generator)
    return tokens


def repackage_hidden(h):
    """Detach hidden states from the graph of the previous batch."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main():
    parser = argparse.ArgumentParser(description="LSTM language model on a synthetic corpus")
    parser.add_argument("--vocab_size", type=int, default=24, help="number of distinct tokens")
    parser.add_argument("--emsize", type=int, default=32, help="size of word embeddings")
    parser.add_argument("--nhid", type=int, default=64, help="number of hidden units per layer")
    parser.add_argument("--nlayers", type=int, default=2, help="number of layers")
    parser.add_argument("--lr", type=float, default=1e-2, help="initial learning rate")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping")
    parser.add_argument("--epochs", type=int, default=4, help="upper epoch limit")
    parser.add_argument("--batch_size", type=int, default=32, metavar="N", help="batch size")
    parser.add_argument("--bptt", type=int, default=20, help="sequence length")
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout applied to layers (0 = no dropout)")
    parser.add_argument("--seed", type=int, default=1111, help="random seed")
    parser.add_argument("--log-interval", type=int, default=5, metavar="N", help="report interval")
    parser.add_argument("--save", type=str, default="lstm_lm.pt", help="where to save the model with the best validation loss")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    # Data: the phrases are shared by the training and validation streams.
    g = torch.Generator().manual_seed(0)
    phrases = [torch.randint(args.vocab_size, (n,), generator=g) for n in (4, 5, 6, 7, 8, 9)]
    train_tokens = make_corpus(10_000, phrases, args.vocab_size, noise=0.1, generator=g)
    val_tokens = make_corpus(2_000, phrases, args.vocab_size, noise=0.1, generator=g)

    eval_batch_size = 10
    train_dataset = SequenceDataset(train_tokens, args.bptt)
    train_loader = DataLoader(train_dataset,
                              batch_size=args.batch_size, sampler=DistributedSampler(train_dataset), drop_last=True)
    val_loader = DataLoader(SequenceDataset(val_tokens, args.bptt),
                            batch_size=eval_batch_size, drop_last=True)

    ntokens = args.vocab_size
    model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout).to(device)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model = DDP(model)

    def evaluate(data_loader):
        model.eval()
        total_loss = 0.0
        hidden = model.module.init_hidden(eval_batch_size)
        with torch.no_grad():
            for data, targets in data_loader:
                data, targets = data.to(device), targets.to(device)
                output, hidden = model(data, hidden)
                total_loss += criterion(output.view(-1, ntokens), targets.reshape(-1)).item()
        return total_loss / len(data_loader)

    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        train_loader.sampler.set_epoch(epoch)
        epoch_start_time = time.time()
        model.train()
        total_loss = 0.0
        hidden = model.module.init_hidden(args.batch_size)
        for batch, (data, targets) in enumerate(train_loader):
            data, targets = data.to(device), targets.to(device)
            # Without detaching, backprop would run through every batch seen this epoch.
            hidden = repackage_hidden(hidden)
            optimizer.zero_grad()
            output, hidden = model(data, hidden)
            loss = criterion(output.view(-1, ntokens), targets.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()

            total_loss += loss.item()
            if (batch + 1) % args.log_interval == 0:
                cur_loss = total_loss / args.log_interval
                if dist.get_rank() == 0:
                    print(f"| epoch {epoch:3d} | {batch + 1:5d}/{len(train_loader):5d} batches | "
                          f"lr {lr:.4f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}")
                total_loss = 0.0

        val_loss = evaluate(val_loader)
        if dist.get_rank() == 0:
            print("-" * 89)
            print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s | "
                  f"valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")
            print("-" * 89)
        # Save the model if the validation loss is the best we've seen so far.
        if best_val_loss is None or val_loss < best_val_loss:
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), args.save)
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen on the validation set.
            lr /= 4.0
            for group in optimizer.param_groups:
                group["lr"] = lr


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        dist.destroy_process_group()
