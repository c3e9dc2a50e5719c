"""gpt.py — the GPT of the trainer benchmarks: train_offload.py, train_remote.py and train_compressed.py train it
(the first two with the arguments and batches below); optim_step.py and device_put.py move optimizer states of its
parameters' shapes."""
import glob
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # bytes


def add_trainer_args(ap):
    """The arguments of a benchmark that trains this GPT beside an lctd: the binary, where results go, the shape."""
    ap.add_argument("--lctd", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8, help="sequences per (micro-)batch")
    ap.add_argument("--block", type=int, default=512)


def batches(data, n, batch, block):
    """n (inputs, targets) pairs of batch windows of block tokens from data (1-D), at the same seeded places in
    every run; the targets are the inputs shifted by one token."""
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        ix = torch.randint(len(data) - block - 1, (batch,), generator=g).tolist()
        yield (torch.stack([data[i:i + block] for i in ix]), torch.stack([data[i + 1:i + block + 1] for i in ix]))


def corpus(limit=32 << 20):
    """The benchmarks' real text: the Python sources of the installed torch, the first limit bytes."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "**", "*.py"), recursive=True))
    return b"".join(open(f, "rb").read() for f in files)[:limit]


class Block(nn.Module):
    def __init__(self, d, h, device=None):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d, device=device), nn.LayerNorm(d, device=device)
        self.qkv, self.proj = nn.Linear(d, 3 * d, device=device), nn.Linear(d, d, device=device)
        self.fc, self.fc2 = nn.Linear(d, 4 * d, device=device), nn.Linear(4 * d, d, device=device)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, 2))
        # Explicit attention: its backward is deterministic, unlike the fused kernels'.
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.h) ** 0.5)
        att = att.masked_fill(torch.ones(T, T, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """block: the longest context; d: the embedding width; vocab: token ids (bytes by default)."""

    def __init__(self, block, d=1024, heads=16, layers=12, device=None, vocab=VOCAB):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d, device=device), nn.Embedding(block, d, device=device)
        self.blocks = nn.ModuleList(Block(d, heads, device) for _ in range(layers))
        self.lnf, self.head = nn.LayerNorm(d, device=device), nn.Linear(d, vocab, bias=False, device=device)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.lnf(x))


def shapes(block=512, d=1024, heads=16, layers=12):
    """The parameters' shapes, in order, without allocating them."""
    return [tuple(p.shape) for p in GPT(block, d, heads, layers, device="meta").parameters()]
