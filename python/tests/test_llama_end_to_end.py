"""End to end: a small Llama-style decoder (RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP) built from torch.nn
parts and trained for 20 steps on the CPU, once with torch's SDPA, once edited to call hal.torch's, and once
unmodified but routed through hal with use_hal_attention(). The loss curves must agree."""
import math

import pytest

torch = pytest.importorskip("torch")
import hal  # noqa: E402
import hal.torch as ht  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, SEQ, BATCH, STEPS = 96, 256, 2, 4, 2, 48, 4, 20
HEAD_DIM = DIM // HEADS  # 64


def rotary_tables(seq, head_dim, base=10000.0):
    inverse_frequency = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inverse_frequency)  # (seq, head_dim / 2)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """Rotary embedding on (batch, heads, seq, head_dim), pairing the two halves of head_dim as Llama does."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.sdpa = sdpa  # None: look up F.scaled_dot_product_attention at call time, as Hugging Face models do
        self.q = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.kv = nn.Linear(DIM, 2 * KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        # (batch, seq, heads, dim) viewed as (batch, heads, seq, dim): strided, not copied
        q = self.q(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, KV_HEADS, HEAD_DIM).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        sdpa = self.sdpa if self.sdpa is not None else F.scaled_dot_product_attention
        out = sdpa(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))


class Block(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM, eps=1e-5)
        self.attention = Attention(sdpa)
        self.mlp_norm = nn.RMSNorm(DIM, eps=1e-5)
        hidden = 2 * DIM
        self.gate = nn.Linear(DIM, hidden, bias=False)
        self.up = nn.Linear(DIM, hidden, bias=False)
        self.down = nn.Linear(hidden, DIM, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(sdpa) for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM, eps=1e-5)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        cos, sin = rotary_tables(SEQ, HEAD_DIM)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def batches():
    """Sequences with structure to learn: each is a random start and a fixed stride modulo the vocabulary."""
    generator = torch.Generator().manual_seed(7)
    for _ in range(STEPS):
        start = torch.randint(0, VOCAB, (BATCH, 1), generator=generator)
        stride = torch.randint(1, 5, (BATCH, 1), generator=generator)
        yield (start + stride * torch.arange(SEQ + 1)) % VOCAB


def train(sdpa):
    torch.manual_seed(0)
    model = Decoder(sdpa)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for tokens in batches():
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.fixture(scope="module")
def curves():
    calls = {"forward": 0, "backward": 0}
    entries = {"forward": "_attention_forward_at", "backward": "_attention_backward_at"}
    originals = {name: getattr(hal._hal, entry) for name, entry in entries.items()}

    def counting(name):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return originals[name](*args, **kwargs)
        return wrapper

    # hal.torch's operators call hal's C++ entry points by name: counting them proves hal ran every attention.
    for name, entry in entries.items():
        setattr(hal._hal, entry, counting(name))
    try:
        torch_losses = train(ht._torch_sdpa)
        assert calls == {"forward": 0, "backward": 0}
        edited = train(ht.scaled_dot_product_attention)
        edited_calls = dict(calls)
        with ht.use_hal_attention():
            routed = train(None)
    finally:
        for name, entry in entries.items():
            setattr(hal._hal, entry, originals[name])
    assert F.scaled_dot_product_attention is ht._torch_sdpa  # the scope restored torch's
    return {"torch": torch_losses, "edited": edited, "routed": routed, "edited_calls": edited_calls, "calls": calls}


def test_hal_ran_every_attention_of_every_step(curves):
    assert curves["edited_calls"] == {"forward": STEPS * LAYERS, "backward": STEPS * LAYERS}
    assert curves["calls"] == {"forward": 2 * STEPS * LAYERS, "backward": 2 * STEPS * LAYERS}


def test_the_model_learns(curves):
    losses = curves["torch"]
    assert losses[0] > 0.9 * math.log(VOCAB)  # starts near chance
    assert losses[-1] < 0.7 * losses[0], losses


def test_loss_curves_of_hal_and_torch_agree(curves):
    worst = max(abs(a - b) / b for a, b in zip(curves["edited"], curves["torch"]))
    print(f"largest relative loss difference over {STEPS} steps: {worst:.2e}")
    print("torch:", " ".join(f"{x:.5f}" for x in curves["torch"]))
    print("hal:  ", " ".join(f"{x:.5f}" for x in curves["edited"]))
    assert worst <= 1e-5


def test_routed_model_is_the_edited_one(curves):
    # The same operator on the same inputs in the same order: the same floats.
    assert curves["routed"] == curves["edited"]
