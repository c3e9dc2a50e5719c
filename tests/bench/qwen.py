"""qwen.py — a decoder with Qwen3-4B's shape (36 layers, hidden 2560, 32 query and 8 KV heads of 128, MLP 9728,
vocab 151,936, RMSNorm with q/k norms, RoPE, SwiGLU, tied embeddings), random weights, for train_compressed.py."""
import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPE = dict(layers=36, d=2560, heads=32, kv_heads=8, head_dim=128, mlp=9728, vocab=151936)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


class Layer(nn.Module):
    def __init__(self, d, heads, kv_heads, head_dim, mlp):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, heads * head_dim, bias=False)
        self.k = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, d, bias=False)
        self.q_norm, self.k_norm = RMSNorm(head_dim), RMSNorm(head_dim)
        self.gate = nn.Linear(d, mlp, bias=False)
        self.up = nn.Linear(d, mlp, bias=False)
        self.down = nn.Linear(mlp, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.ln1(x)
        q = self.q_norm(self.q(h).view(B, T, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k(h).view(B, T, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v(h).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, -1))
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Qwen3Shaped(nn.Module):
    def __init__(self, layers, d, heads, kv_heads, head_dim, mlp, vocab, theta=1e6):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads, kv_heads, head_dim, mlp) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.head_dim, self.theta = head_dim, theta
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        inv = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, device=idx.device).float() / self.head_dim)
        ang = torch.outer(torch.arange(T, device=idx.device).float(), inv)
        ang = torch.cat((ang, ang), -1)
        x = self.embed(idx)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))
