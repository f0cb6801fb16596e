"""hal.attention_forward / attention_backward / explain_attention on numpy arrays against a numpy reference."""
import hal
import numpy as np
import pytest
from conftest import attention_backward_reference, attention_reference, relative_error

F32_TOLERANCE = 1e-5


def make(rng, b, hq, hkv, sq, skv, d, dv=None, dtype=np.float32):
    dv = d if dv is None else dv
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    k = rng.standard_normal((b, hkv, skv, d)).astype(dtype)
    v = rng.standard_normal((b, hkv, skv, dv)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("implementation", ["flash", "math"])
@pytest.mark.parametrize("b, hq, hkv, sq, skv, d, causal", [
    (2, 4, 4, 37, 37, 64, False),   # MHA, odd length
    (1, 8, 2, 33, 47, 64, True),    # GQA, causal, seq_q != seq_kv
    (2, 6, 1, 17, 17, 80, True),    # MQA, head dim 80
    (1, 2, 2, 5, 129, 128, False),  # head dim 128
])
def test_forward_f32_matches_reference(rng, implementation, b, hq, hkv, sq, skv, d, causal):
    q, k, v = make(rng, b, hq, hkv, sq, skv, d)
    out, lse = hal.attention_forward(q, k, v, causal=causal, return_lse=True, implementations=[implementation])
    out, lse = np.from_dlpack(out), np.from_dlpack(lse)
    expected, expected_lse, _, _ = attention_reference(q, k, v, causal=causal)
    assert out.shape == (b, hq, sq, d) and out.dtype == np.float32
    assert relative_error(out, expected) <= F32_TOLERANCE
    assert lse.shape == (b, hq, sq) and lse.dtype == np.float32
    assert np.abs(lse - expected_lse).max() <= 1e-5 * np.abs(expected_lse).max()


def test_scale_window_and_bottom_right(rng):
    q, k, v = make(rng, 1, 2, 2, 9, 21, 32)
    out = np.from_dlpack(hal.attention_forward(q, k, v, causal=True, alignment="bottom_right", scale=0.3,
                                               window_left=4, window_right=-1))
    expected, *_ = attention_reference(q, k, v, causal=True, alignment="bottom_right", scale=0.3, window=(4, -1))
    assert relative_error(out, expected) <= F32_TOLERANCE


def test_transposed_bshd_input_needs_no_copy(rng):
    # Memory in (batch, seq, heads, dim) order, viewed as (batch, heads, seq, dim): non-contiguous.
    b, s, h, d = 2, 19, 4, 64
    q_mem, k_mem, v_mem = (rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(3))
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q_mem, k_mem, v_mem))
    assert not q.flags.c_contiguous
    expected, *_ = attention_reference(q, k, v, causal=True)
    out = np.from_dlpack(hal.attention_forward(q, k, v, causal=True))
    assert relative_error(out, expected) <= F32_TOLERANCE
    # The same memory as layout "bshd": out comes back in (batch, seq, heads, dim).
    out_bshd = np.from_dlpack(hal.attention_forward(q_mem, k_mem, v_mem, causal=True, layout="bshd"))
    assert out_bshd.shape == (b, s, h, d)
    assert relative_error(out_bshd.transpose(0, 2, 1, 3), expected) <= F32_TOLERANCE


def test_caller_allocated_output_is_written_in_place(rng):
    q, k, v = make(rng, 1, 2, 2, 8, 8, 16)
    out = np.full((1, 8, 2, 16), np.nan, dtype=np.float32).transpose(0, 2, 1, 3)  # a strided output view
    result = hal.attention_forward(q, k, v, out=out)
    assert result is out
    expected, *_ = attention_reference(q, k, v)
    assert relative_error(out, expected) <= F32_TOLERANCE


def test_inputs_are_seen_without_copy(rng):
    q, k, v = make(rng, 1, 1, 1, 4, 4, 8)
    before = np.from_dlpack(hal.attention_forward(q, k, v)).copy()
    v *= 2.0  # hal reads the numpy memory itself, not a snapshot
    after = np.from_dlpack(hal.attention_forward(q, k, v))
    assert np.allclose(after, 2.0 * before, rtol=1e-6)


def test_f16_inputs(rng):
    q, k, v = make(rng, 1, 4, 2, 31, 31, 64, dtype=np.float16)
    out = np.from_dlpack(hal.attention_forward(q, k, v, causal=True))
    assert out.dtype == np.float16
    expected, *_ = attention_reference(q, k, v, causal=True)
    assert relative_error(out, expected) <= 2e-3


@pytest.mark.parametrize("hq, hkv, causal", [(4, 4, False), (8, 2, True)])
def test_backward_f32_matches_reference(rng, hq, hkv, causal):
    q, k, v = make(rng, 2, hq, hkv, 23, 23, 64)
    grad_o = rng.standard_normal(q.shape).astype(np.float32)
    out, lse = hal.attention_forward(q, k, v, causal=causal, return_lse=True)
    grads = hal.attention_backward(grad_o, q, k, v, out, lse, causal=causal)
    expected = attention_backward_reference(grad_o, q, k, v, causal=causal)
    for name, actual, reference in zip(("grad_q", "grad_k", "grad_v"), grads, expected):
        actual = np.from_dlpack(actual)
        assert actual.shape == reference.shape, name
        assert relative_error(actual, reference) <= F32_TOLERANCE, name


def test_empty_batch_returns_empty_output():
    q = np.zeros((0, 2, 3, 8), np.float32)
    out = np.from_dlpack(hal.attention_forward(q, q, q))
    assert out.shape == (0, 2, 3, 8)


def test_explain_attention_is_structured():
    q = np.zeros((1, 4, 16, 64), np.float32)
    decision = hal.explain_attention(q, q, q, causal=True)
    assert decision.found and decision.chosen in ("flash", "math")
    names = [candidate.implementation for candidate in decision.candidates]
    assert sorted(names) == ["flash", "fused", "math"]
    fused = next(c for c in decision.candidates if c.implementation == "fused")
    assert not fused.eligible and fused.reasons and "fused" in fused.reasons[0]
    text = str(decision)
    assert "CHOSEN" in text and decision.order_source in text
    forced = hal.explain_attention(q, q, q, implementations=["math"])
    assert forced.chosen == "math" and forced.order == ["math"] and forced.order_source.startswith("per-call")
    backward = hal.explain_attention(q, q, q, backward=True)
    assert backward.found


def test_explain_on_shapes_alone():
    params = hal.AttentionParams()
    params.batch, params.heads_q, params.heads_kv, params.seq_q, params.head_dim_qk = 2, 8, 2, 128, 64
    params.dtype = "bf16"
    decision = hal._hal._explain_attention(hal.runtime().device("host:0"), params)
    assert decision.found
    assert "hq=8 hkv=2" in params.describe()


def test_bad_attention_inputs():
    q = np.zeros((1, 4, 8, 16), np.float32)
    with pytest.raises(hal.InvalidArgumentError, match="4 dimensions|it must have 4"):
        hal.attention_forward(q[0], q[0], q[0])
    with pytest.raises(hal.InvalidArgumentError, match="do not match"):
        hal.attention_forward(q, q[:, :, :, :8], q)
    with pytest.raises(hal.InvalidArgumentError, match="dtypes differ"):
        hal.attention_forward(q, q.astype(np.float16), q)
    with pytest.raises(hal.InvalidArgumentError, match="heads_kv"):
        hal.attention_forward(q, q[:, :3], q[:, :3])  # 3 does not divide 4: hal's own check
    with pytest.raises(hal.Error) as caught:
        hal.attention_forward(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64))
    assert "f64" in str(caught.value)
    with pytest.raises(hal.InvalidArgumentError, match="layout"):
        hal.attention_forward(q, q, q, layout="sbhd")
    with pytest.raises(hal.InvalidArgumentError, match="implementation 'cudnn'"):
        hal.attention_forward(q, q, q, implementations=["cudnn"])


def test_backward_with_no_queries_gives_zero_key_gradients(rng):
    q = np.zeros((1, 2, 0, 8), np.float32)
    k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(2))
    out, lse = hal.attention_forward(q, k, v, return_lse=True)
    grad_q, grad_k, grad_v = (np.from_dlpack(g) for g in hal.attention_backward(np.zeros_like(q), q, k, v, out, lse))
    assert grad_q.shape == q.shape and grad_k.shape == k.shape and grad_v.shape == v.shape
    assert not grad_k.any() and not grad_v.any()


def test_explain_attention_on_another_device_argument_still_reads_numpy_shapes():
    q = np.zeros((1, 4, 16, 64), np.float32)[:, :, ::2]  # strided: numpy's byte strides must not leak through
    decision = hal.explain_attention(q, q, q, device=hal.runtime().device("host:0"))
    assert decision.found


@pytest.mark.parametrize("implementation", ["flash", "math"])
def test_key_ranges_forward_and_backward_match_reference(rng, implementation):
    """Per-query key ranges (left padding, an empty row, ranges past either end, no order) with a causal band."""
    q, k, v = make(rng, 2, 4, 2, 13, 13, 32)
    ranges = np.array([[[3, 13]] * 13, [[0, 9]] * 13], dtype=np.int32)
    ranges[0, :3] = 0        # padding queries of row 0: no key
    ranges[1, 5] = (-4, 40)  # clamped to every key
    ranges[1, 6] = (7, 2)    # empty
    out, lse = hal.attention_forward(q, k, v, causal=True, return_lse=True, key_ranges=ranges,
                                     implementations=[implementation])
    expected, expected_lse, _, _ = attention_reference(q, k, v, causal=True, key_ranges=np.clip(ranges, 0, 13))
    assert relative_error(np.from_dlpack(out), expected) <= F32_TOLERANCE
    lse = np.from_dlpack(lse)
    assert np.isneginf(lse[0, :, :3]).all() and np.isneginf(lse[1, :, 6]).all()
    grad_o = rng.standard_normal(q.shape).astype(np.float32)
    grads = hal.attention_backward(grad_o, q, k, v, out, lse, causal=True, key_ranges=ranges,
                                   implementations=[implementation])
    wanted = attention_backward_reference(grad_o, q, k, v, causal=True, key_ranges=np.clip(ranges, 0, 13))
    for name, actual, reference in zip(("grad_q", "grad_k", "grad_v"), grads, wanted):
        assert relative_error(np.from_dlpack(actual), reference) <= F32_TOLERANCE, name


def test_key_ranges_are_checked(rng):
    q, k, v = make(rng, 2, 2, 2, 5, 5, 16)
    with pytest.raises(hal.InvalidArgumentError, match=r"key_ranges must be int32 of shape \(2, 5, 2\)"):
        hal.attention_forward(q, k, v, key_ranges=np.zeros((2, 5, 2), np.int64))
    with pytest.raises(hal.InvalidArgumentError, match="key_ranges must be contiguous"):
        hal.attention_forward(q, k, v, key_ranges=np.zeros((2, 2, 5), np.int32).transpose(0, 2, 1))
    params = hal.AttentionParams()
    params.key_ranges = True
    assert "key_ranges" in params.describe()
