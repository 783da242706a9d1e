"""The demo's tiny character transformer on PyTorch (imported only by ``demo --torch``).

The same shape as the minigrad one: token and position embeddings, one pre-norm block
of causal self-attention and an MLP, a final norm and a linear head over the characters.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        shape = (batch, time, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads)
        mask = torch.ones(time, time, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(batch, time, dim)
        projected: torch.Tensor = self.proj(out)
        return projected


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, dim: int = 32, heads: int = 2, context: int = 16) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attention = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.norm3 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1])
        x = self.tokens(idx) + self.positions(positions)
        x = x + self.attention(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        logits: torch.Tensor = self.head(self.norm3(x))
        return logits


def build(
    vocab: int, *, dim: int, heads: int, context: int, seed: int
) -> tuple[TinyTransformer, Any]:
    torch.manual_seed(seed)
    model = TinyTransformer(vocab, dim=dim, heads=heads, context=context)
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def as_batch(x: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(x, dtype=torch.long), torch.as_tensor(y, dtype=torch.long)
