import numpy as np
import pytest


def attention_reference(q, k, v, *, causal=False, scale=None, alignment="top_left", window=(-1, -1),
                        key_ranges=None):
    """Plain numpy attention in float64 on (batch, heads, seq, dim) arrays; GQA by repeating k, v heads;
    key_ranges (batch, seq_q, 2): query i of row b also sees only keys [begin, end).

    Returns (out, lse, probabilities, scale) so backward references can reuse them.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, hkv = q.shape[1], k.shape[1]
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    sq, skv = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = scale * (q @ k.transpose(0, 1, 3, 2))
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    d = j - (i + (0 if alignment == "top_left" else skv - sq))
    visible = np.ones((sq, skv), bool)
    if causal:
        visible &= d <= 0
    if window[0] >= 0:
        visible &= d >= -window[0]
    if window[1] >= 0:
        visible &= d <= window[1]
    if key_ranges is not None:
        ranges = np.asarray(key_ranges)
        visible = visible & (j >= ranges[:, None, :, 0:1]) & (j < ranges[:, None, :, 1:2])
    scores = np.where(visible, scores, -np.inf)
    m = scores.max(-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(scores - m_safe)
    l = p.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probabilities = np.where(l > 0, p / np.where(l > 0, l, 1), 0.0)
        lse = np.where(l[..., 0] > 0, (m_safe + np.log(np.where(l > 0, l, 1)))[..., 0], -np.inf)
    return probabilities @ v, lse, probabilities, scale


def attention_backward_reference(grad_o, q, k, v, *, causal=False, scale=None, key_ranges=None):
    """Gradients of attention_reference (float64), summed over the query heads of each kv head for GQA."""
    out, _, p, scale = attention_reference(q, k, v, causal=causal, scale=scale, key_ranges=key_ranges)
    grad_o = np.asarray(grad_o, dtype=np.float64)
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k64, group, axis=1), np.repeat(v64, group, axis=1)
    grad_v = p.transpose(0, 1, 3, 2) @ grad_o
    grad_p = grad_o @ vr.transpose(0, 1, 3, 2)
    grad_s = p * (grad_p - (grad_o * out).sum(-1, keepdims=True))
    grad_q = scale * grad_s @ kr
    grad_k = scale * grad_s.transpose(0, 1, 3, 2) @ q64

    def fold(x):
        b, h, s, d = x.shape
        return x.reshape(b, h // group, group, s, d).sum(axis=2)

    return grad_q, fold(grad_k), fold(grad_v)


def relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(np.abs(expected).max(), 1e-30)
    return float(np.abs(actual - expected).max() / scale)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
