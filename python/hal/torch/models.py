"""Llama-style decoders from torch.nn parts, for training workloads and tests that run through hal.

``LlamaConfig`` holds what a published model card gives (hidden size, layers,
heads, KV heads, FFN size, vocabulary, RoPE theta); ``CONFIGS`` has the
public dense families; ``Llama(config)`` is RMSNorm, rotary embeddings, GQA
attention through a chosen SDPA function (hal.torch's by default) and a
SwiGLU MLP. ``config.scaled(...)`` shrinks one for a small machine.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CONFIGS", "Llama", "LlamaConfig", "synthetic_batches"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def scaled(self, *, layers: Optional[int] = None, hidden: Optional[int] = None, heads: Optional[int] = None,
               kv_heads: Optional[int] = None, vocab: Optional[int] = None) -> "LlamaConfig":
        """The same family smaller: FFN and head counts follow the hidden size unless given."""
        hidden = hidden or self.hidden
        heads = heads or max(1, self.heads * hidden // self.hidden)
        kv_heads = kv_heads or max(1, min(heads, self.kv_heads * heads // self.heads))
        ffn = self.ffn * hidden // self.hidden
        ffn -= ffn % 8
        return dataclasses.replace(self, name=f"{self.name} (scaled)", layers=layers or self.layers, hidden=hidden,
                                   heads=heads, kv_heads=kv_heads, ffn=max(8, ffn), vocab=vocab or self.vocab)

    def check(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"{self.name}: hidden size {self.hidden} does not split into {self.heads} heads")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: {self.heads} query heads do not group over {self.kv_heads} KV heads")
        if self.head_dim % 2:
            raise ValueError(f"{self.name}: head dim {self.head_dim} is odd; rotary embeddings pair its halves")


# From the models' published configs (config.json of each release).
CONFIGS: Dict[str, LlamaConfig] = {
    "llama3-8b": LlamaConfig("llama3-8b", hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                             rope_theta=500000.0),
    "llama3-70b": LlamaConfig("llama3-70b", hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                              rope_theta=500000.0),
    "qwen2.5-7b": LlamaConfig("qwen2.5-7b", hidden=3584, layers=28, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                              rope_theta=1000000.0, norm_eps=1e-6),
}


def _rotary_tables(seq: int, head_dim: int, theta: float):
    inverse_frequency = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inverse_frequency)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on (batch, heads, seq, head_dim), pairing the two halves of head_dim as Llama does."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, sdpa: Callable):
        super().__init__()
        self.config, self.sdpa = config, sdpa
        self.q = nn.Linear(config.hidden, config.heads * config.head_dim, bias=False)
        self.kv = nn.Linear(config.hidden, 2 * config.kv_heads * config.head_dim, bias=False)
        self.o = nn.Linear(config.heads * config.head_dim, config.hidden, bias=False)

    def forward(self, x, cos, sin):
        c, (b, s, _) = self.config, x.shape
        q = self.q(x).view(b, s, c.heads, c.head_dim).transpose(1, 2)  # strided views, not copies
        k, v = self.kv(x).view(b, s, 2, c.kv_heads, c.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = self.sdpa(q, k, v, is_causal=True, enable_gqa=c.kv_heads != c.heads)
        return self.o(out.transpose(1, 2).reshape(b, s, c.heads * c.head_dim))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig, sdpa: Callable):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.hidden, eps=config.norm_eps)
        self.attention = Attention(config, sdpa)
        self.mlp_norm = nn.RMSNorm(config.hidden, eps=config.norm_eps)
        self.gate = nn.Linear(config.hidden, config.ffn, bias=False)
        self.up = nn.Linear(config.hidden, config.ffn, bias=False)
        self.down = nn.Linear(config.ffn, config.hidden, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """Tokens (batch, seq) -> logits (batch, seq, vocab). sdpa: the attention function (default hal.torch's)."""

    def __init__(self, config: LlamaConfig, max_seq: int, sdpa: Optional[Callable] = None):
        super().__init__()
        config.check()
        if sdpa is None:
            from . import scaled_dot_product_attention as sdpa
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.hidden)
        self.blocks = nn.ModuleList(Block(config, sdpa) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.hidden, eps=config.norm_eps)
        self.head = nn.Linear(config.hidden, config.vocab, bias=False)
        cos, sin = _rotary_tables(max_seq, config.head_dim, config.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:seq], self.sin[:seq]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross entropy over tokens (batch, seq + 1)."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def synthetic_batches(vocab: int, batch: int, seq: int, steps: int, seed: int = 7):
    """Token batches (batch, seq + 1) with structure to learn: a random start and a fixed stride per row, modulo
    the vocabulary; the same for a given seed on every machine."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=generator)
        stride = torch.randint(1, 5, (batch, 1), generator=generator)
        yield (start + stride * torch.arange(seq + 1)) % vocab
