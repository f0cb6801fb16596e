"""hal.torch: the SDPA operator against torch's math SDPA, autograd, opcheck, torch.compile, fallback, routing."""
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
import hal  # noqa: E402
import hal.torch as ht  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

# Relative to the largest reference value; hal computes in the input dtype
# with f32 accumulation, the reference is torch's math SDPA in float64.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
GRAD_TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


def relative_error(actual, expected):
    expected = expected.double()
    return ((actual.double() - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def reference(q, k, v, **kwargs):
    """torch's math SDPA in float64 (forward and, through autograd, backward)."""
    with sdpa_kernel(SDPBackend.MATH):
        return ht._torch_sdpa(q.double(), k.double(), v.double(), **kwargs)


def inputs(b, hq, hkv, sq, skv, d, dtype=torch.float32, dv=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    dv = d if dv is None else dv
    make = lambda *shape: torch.randn(*shape, generator=generator).to(dtype).requires_grad_()  # noqa: E731
    return make(b, hq, sq, d), make(b, hkv, skv, d), make(b, hkv, skv, dv)


def gappy_mask(n):
    """A mask hal cannot run: every query sees key 0 and keys 2.. but not key 1 (two intervals)."""
    mask = torch.ones(n, n, dtype=torch.bool)
    mask[:, 1] = False
    return mask


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.delenv("HAL_ATTN_STRICT", raising=False)
    ht._warned.clear()
    yield
    ht._warned.clear()


def check(q, k, v, dtype, **kwargs):
    out = ht.scaled_dot_product_attention(q, k, v, **kwargs)
    expected = reference(q, k, v, **kwargs)
    assert out.dtype == q.dtype and out.shape == expected.shape
    assert relative_error(out, expected) <= TOLERANCE[dtype]
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    actual_grads = torch.autograd.grad(out, (q, k, v), grad)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad.double())
    for name, actual, wanted in zip("qkv", actual_grads, expected_grads):
        assert actual.dtype == dtype and actual.shape == wanted.shape, name
        assert relative_error(actual, wanted) <= GRAD_TOLERANCE[dtype], f"grad {name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("d", [64, 80, 128])
def test_forward_and_backward_match_torch(dtype, d):
    q, k, v = inputs(2, 4, 4, 37, 37, d, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ht.FallbackWarning)  # hal runs it, no fallback
        check(q, k, v, dtype, is_causal=True)


@pytest.mark.parametrize("hq, hkv", [(8, 2), (6, 1)])
def test_gqa(hq, hkv):
    q, k, v = inputs(1, hq, hkv, 19, 19, 64)
    check(q, k, v, torch.float32, is_causal=True, enable_gqa=True)


def test_causal_is_top_left_with_different_lengths():
    q, k, v = inputs(1, 2, 2, 7, 23, 64)
    check(q, k, v, torch.float32, is_causal=True)
    q, k, v = inputs(1, 2, 2, 23, 7, 64)
    check(q, k, v, torch.float32, is_causal=True)


def test_scale_and_odd_lengths():
    q, k, v = inputs(3, 2, 2, 1, 61, 64)
    check(q, k, v, torch.float32, scale=0.37)
    q, k, v = inputs(1, 3, 3, 129, 3, 80)
    check(q, k, v, torch.float32, scale=2.0, is_causal=False)


def test_different_value_head_dim():
    q, k, v = inputs(1, 2, 2, 9, 11, 64, dv=32)
    check(q, k, v, torch.float32)


def test_non_contiguous_inputs_without_copy():
    generator = torch.Generator().manual_seed(3)
    # (B, S, H, E) memory viewed as (B, H, S, E), as attention after a projection does.
    q, k, v = (torch.randn(2, 21, 4, 64, generator=generator).transpose(1, 2).requires_grad_() for _ in range(3))
    assert not q.is_contiguous()
    check(q, k, v, torch.float32, is_causal=True)


def test_batch_zero():
    q, k, v = inputs(0, 2, 2, 5, 5, 64)
    out = ht.scaled_dot_product_attention(q, k, v)
    assert out.shape == (0, 2, 5, 64)
    out.sum().backward()
    assert q.grad.shape == q.shape


def test_outputs_are_torch_tensors_written_in_place_by_hal():
    q, k, v = inputs(1, 2, 2, 8, 8, 64)
    out, lse = torch.ops.hal.sdpa_forward(q.detach(), k.detach(), v.detach(), False, None)
    assert isinstance(out, torch.Tensor) and lse.dtype == torch.float32 and lse.shape == (1, 2, 8)
    scores = (q.double() @ k.double().transpose(-1, -2)) / 8.0
    assert relative_error(lse, torch.logsumexp(scores, dim=-1)) <= 1e-6


def test_opcheck():
    q, k, v = inputs(2, 4, 2, 17, 17, 64)
    torch.library.opcheck(torch.ops.hal.sdpa_forward.default, (q, k, v, True, None))
    torch.library.opcheck(torch.ops.hal.sdpa_forward.default, (q, k, v, False, 0.5))
    out, lse = torch.ops.hal.sdpa_forward(q.detach(), k.detach(), v.detach(), True, None)
    grad = torch.randn_like(out)
    torch.library.opcheck(torch.ops.hal.sdpa_backward.default,
                          (grad, q.detach(), k.detach(), v.detach(), out, lse, True, None))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(64, 3 * 64)
        self.out = torch.nn.Linear(64, 64)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 32).permute(2, 0, 3, 1, 4)
        y = ht.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, 64))


def test_torch_compile_fullgraph():
    model = Block()
    x = torch.randn(2, 13, 64, generator=torch.Generator().manual_seed(5), requires_grad=True)
    eager = model(x)
    (eager_grad,) = torch.autograd.grad(eager.sum(), x)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    result = compiled(x)
    (compiled_grad,) = torch.autograd.grad(result.sum(), x)
    assert relative_error(result, eager) <= 1e-5
    assert relative_error(compiled_grad, eager_grad) <= 1e-5
    # And against torch's own attention in the same model.
    torch_model_out = model.out(reference(*model.qkv(x).view(2, 13, 3, 2, 32).permute(2, 0, 3, 1, 4),
                                          is_causal=True).float().transpose(1, 2).reshape(2, 13, 64))
    assert relative_error(result, torch_model_out) <= 1e-5


def test_attn_mask_and_dropout_fall_back_with_one_warning_per_reason():
    q, k, v = inputs(1, 2, 2, 6, 6, 64)
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True
    with pytest.warns(ht.FallbackWarning, match="attn_mask") as record:
        out = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(record) == 1
    assert relative_error(out, reference(q, k, v, attn_mask=mask)) <= 1e-5
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert not [w for w in again if issubclass(w.category, ht.FallbackWarning)], "warned twice for one reason"
    with pytest.warns(ht.FallbackWarning, match="dropout_p"):
        out = ht.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == q.shape


def test_unsupported_dtype_falls_back():
    q, k, v = (t.detach().double() for t in inputs(1, 2, 2, 5, 5, 64))
    with pytest.warns(ht.FallbackWarning, match="torch.float64"):
        out = ht.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert relative_error(out, reference(q, k, v, is_causal=True)) <= 1e-12
    assert ht.fallback_reasons(q, k, v) == ["dtype torch.float64 (hal's attention takes float32, float16 and bfloat16)"]


def strict_runtime(monkeypatch):
    """HAL_ATTN_STRICT=1 in a default runtime made after it is set (a runtime reads its settings once)."""
    monkeypatch.setenv("HAL_ATTN_STRICT", "1")
    monkeypatch.setattr(hal, "_default_runtime", None)
    assert hal.runtime().setting("attention.strict").source == "HAL_ATTN_STRICT=1"


def test_strict_mode_raises(monkeypatch):
    strict_runtime(monkeypatch)
    q, k, v = inputs(1, 2, 2, 6, 6, 64)
    with pytest.raises(hal.UnsupportedError, match="attn_mask"):
        ht.scaled_dot_product_attention(q, k, v, attn_mask=gappy_mask(6))
    # What hal can do still runs under strict mode.
    check(q, k, v, torch.float32, is_causal=True)


def test_torch_errors_stay_torchs():
    q, k, v = inputs(1, 4, 2, 6, 6, 64)
    with pytest.raises(RuntimeError):
        ht.scaled_dot_product_attention(q, k, v)  # heads differ without enable_gqa: torch refuses


def test_use_hal_attention_routes_functional_sdpa():
    original = F.scaled_dot_product_attention
    q, k, v = inputs(1, 2, 2, 6, 6, 64)
    with ht.use_hal_attention():
        assert F.scaled_dot_product_attention is ht.scaled_dot_product_attention
        with ht.use_hal_attention():  # nests
            routed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert F.scaled_dot_product_attention is ht.scaled_dot_product_attention
    assert F.scaled_dot_product_attention is original
    assert relative_error(routed, reference(q, k, v, is_causal=True)) <= 1e-5
    with pytest.raises(KeyError), ht.use_hal_attention():
        raise KeyError("restored on errors too")
    assert F.scaled_dot_product_attention is original


def test_routing_reaches_hal_also_inside_torch_modules():
    q, k, v = inputs(1, 2, 2, 6, 6, 64)
    layer = torch.nn.MultiheadAttention(64, 2, batch_first=True)  # calls F.scaled_dot_product_attention
    x = torch.randn(1, 6, 64, requires_grad=True)
    with ht.use_hal_attention():
        with pytest.warns(ht.FallbackWarning):
            F.scaled_dot_product_attention(q, k, v, attn_mask=gappy_mask(6))
        with torch.profiler.profile() as profile:
            routed, _ = layer(x, x, x, need_weights=False)
    assert "hal::sdpa_forward" in {event.name for event in profile.events()}
    with torch.profiler.profile() as profile:
        unrouted, _ = layer(x, x, x, need_weights=False)
    assert "hal::sdpa_forward" not in {event.name for event in profile.events()}
    assert relative_error(routed, unrouted) <= 1e-5


def test_torch_compile_fullgraph_of_a_fallback_warns_at_trace_time():
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 6, 6, 64))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: ht.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                             fullgraph=True, backend="aot_eager")
    with pytest.warns(ht.FallbackWarning, match="attn_mask"):
        out = compiled(q, k, v)
    assert relative_error(out, reference(q, k, v, attn_mask=mask)) <= 1e-5


def test_strict_mode_under_torch_compile_names_the_reason(monkeypatch):
    strict_runtime(monkeypatch)
    q = torch.randn(1, 2, 6, 64)
    mask = torch.ones(6, 6, dtype=torch.bool)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q: ht.scaled_dot_product_attention(q, q, q, attn_mask=mask), fullgraph=True,
                             backend="aot_eager")
    with pytest.raises(Exception) as caught:
        compiled(q)
    # torch._dynamo wraps what is raised while tracing (InternalTorchDynamoError); hal's error is its context.
    error = caught.value if isinstance(caught.value, hal.UnsupportedError) else caught.value.__context__
    assert isinstance(error, hal.UnsupportedError) and "HAL_ATTN_STRICT=1): attn_mask" in str(error)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_torch_tensors_through_dlpack_without_copy(dtype):
    a = torch.arange(24).to(dtype).reshape(2, 3, 4).transpose(1, 2)
    t = hal.from_dlpack(a)
    assert t.dtype == {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
    assert t.shape == tuple(a.shape) and t.strides == a.stride() and t.data_ptr == a.data_ptr()
    back = torch.from_dlpack(t)
    assert back.data_ptr() == a.data_ptr() and back.stride() == a.stride()
    back[0, 0, 0] = 100
    assert a[0, 0, 0].item() == 100
    with pytest.raises(BufferError, match="require"):
        hal.from_dlpack(a.clone().requires_grad_())  # torch's own refusal: detach first


def test_torch_compile_with_changing_batch_and_sequence_lengths():
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: ht.scaled_dot_product_attention(q, k, v, is_causal=True),
                             fullgraph=True, backend="aot_eager")
    for b, s in ((1, 7), (2, 13), (3, 21)):  # the second shape recompiles with dynamic batch and length
        q, k, v = (t.detach() for t in inputs(b, 2, 2, s, s, 64, seed=s))
        with torch.profiler.profile() as profile:
            out = compiled(q, k, v)
        assert "hal::sdpa_forward" in {event.name for event in profile.events()}
        assert relative_error(out, reference(q, k, v, is_causal=True)) <= 1e-5


def test_torch_export_keeps_the_hal_operator():
    model = Block()
    x = torch.randn(2, 13, 64, generator=torch.Generator().manual_seed(6))
    exported = torch.export.export(model, (x,))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert "hal.sdpa_forward.default" in targets, targets
    assert relative_error(exported.module()(x), model(x)) <= 1e-6


def test_explain_says_what_runs_and_why():
    q, k, v = inputs(1, 4, 2, 9, 9, 64)
    explanation = ht.explain(q, k, v, is_causal=True, enable_gqa=True)
    assert explanation.runs == "hal" and explanation.reasons == []
    assert explanation.forward.found and explanation.backward.found
    assert explanation.forward.chosen in ("fused", "flash", "math")
    assert explanation.forward.chosen in str(explanation)  # the decision tables are in the report
    masked = ht.explain(q, k, v, attn_mask=gappy_mask(9))
    assert masked.runs == "torch" and masked.forward is None
    assert "attn_mask is not one interval of visible keys per query" in str(masked)
    padded = ht.explain(q, k, v, attn_mask=torch.ones(9, 9, dtype=torch.bool).tril(), enable_gqa=True)
    assert padded.runs == "hal" and padded.forward.found


def test_route_attention_is_the_unscoped_switch():
    original = F.scaled_dot_product_attention
    try:
        ht.route_attention()
        assert F.scaled_dot_product_attention is ht.scaled_dot_product_attention
        ht.route_attention(False)
        assert F.scaled_dot_product_attention is ht._torch_sdpa
    finally:
        F.scaled_dot_product_attention = original


def test_cuda_tensors_map_to_the_same_physical_device_not_the_same_index():
    class Info:
        def __init__(self, uuid, pci):
            self.uuid, self.pci_bus_id = uuid, pci

    class Fake:
        def __init__(self, name, uuid, pci):
            self.id, self.info = name, Info(uuid, pci)

    # hal counts in PCI order; torch (CUDA_DEVICE_ORDER=FASTEST_FIRST) may not.
    devices = [Fake("cuda:0", "GPU-00000000-1111-2222-3333-444444444444", "0000:1B:00.0"),
               Fake("cuda:1", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "0000:3b:00.0")]
    by_uuid = ht._same_physical_device(devices, "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE", None)
    assert by_uuid.id == "cuda:1"
    assert ht._same_physical_device(devices, "", (0, 0x1B, 0)).id == "cuda:0"
    assert ht._same_physical_device(devices, "ffffffff-0000-0000-0000-000000000000", (0, 0x3B, 0)).id == "cuda:1"
    assert ht._same_physical_device(devices, "ffffffff-0000-0000-0000-000000000000", (1, 0x3B, 0)) is None
    assert ht._pci_triple("3b:00.0") == (0, 0x3B, 0) and ht._pci_triple("not a bus id") is None


@pytest.mark.parametrize("dtypes", [(torch.float32,) * 3, (torch.float32, torch.float32, torch.bfloat16)])
def test_autocast_casts_as_aten_and_runs_hal(dtypes):
    """Under CPU bf16 autocast (the Trainer's bf16=True) aten's SDPA casts its inputs to bf16 and returns bf16; so
    does hal's, on hal's bf16 kernels, with gradients in each input's own dtype. Mixed inputs as a transformers
    Llama makes them (RoPE leaves q and k in f32, v in bf16)."""
    generator = torch.Generator().manual_seed(5)
    inputs = [torch.randn(1, 4, 32, 64, generator=generator, dtype=dtype, requires_grad=True) for dtype in dtypes]
    results = []
    calls = []
    original = hal._hal._attention_forward_at

    def counting(*args, **kwargs):
        calls.append(args[1].dtype)  # the params' dtype: what hal's kernels ran in
        return original(*args, **kwargs)
    hal._hal._attention_forward_at = counting
    try:
        for sdpa in (ht._torch_sdpa, ht.scaled_dot_product_attention):
            leaves = [t.detach().clone().requires_grad_() for t in inputs]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = sdpa(*leaves, is_causal=True)
            out.float().sum().backward()
            results.append((out, [t.grad for t in leaves]))
    finally:
        hal._hal._attention_forward_at = original
    (expected, expected_grads), (out, grads) = results
    assert out.dtype == expected.dtype == torch.bfloat16
    assert calls == ["bf16"]
    assert (out.float() - expected.float()).abs().max().item() < 2e-2
    for grad, reference in zip(grads, expected_grads):
        assert grad.dtype == reference.dtype
        assert (grad.float() - reference.float()).abs().max().item() < 5e-2 * reference.float().abs().max().item()


def test_a_repeated_unwatched_call_skips_the_dispatcher_and_anything_watching_still_sees_the_operator(monkeypatch):
    """The thin path: a call like one hal ran, with nothing needing a gradient, runs hal's kernels without torch's
    dispatcher, and gives torch's answer; a dispatch mode, the profiler, or a gradient brings the operator back."""
    from torch.utils._python_dispatch import TorchDispatchMode

    q, k, v = (t.detach() for t in inputs(2, 4, 2, 9, 9, 32, seed=3))
    ran = []
    original = hal._hal._attention_forward_at
    monkeypatch.setattr(hal._hal, "_attention_forward_at", lambda *args: ran.append(1) or original(*args))
    dispatched = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            dispatched.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        first = ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        again = ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with Recorder():
            watched = ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with torch.profiler.profile() as profile:
            ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert len(ran) == 4  # hal's kernels ran every time
    expected = reference(q, k, v, is_causal=True, enable_gqa=True)
    for out in (first, again, watched):
        assert relative_error(out, expected) <= 1e-5
    assert "hal.sdpa_forward.default" in dispatched
    assert any(event.name == "hal::sdpa_forward" for event in profile.events())
    # The same shapes wanting gradients go through the operator and its autograd.
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    ht.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True).sum().backward()
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    reference(qr, kr, vr, is_causal=True, enable_gqa=True).sum().backward()
    for hal_grad, torch_grad in ((qg.grad, qr.grad), (kg.grad, kr.grad), (vg.grad, vr.grad)):
        assert relative_error(hal_grad, torch_grad) <= 1e-4


def padding_masks(batch, seq_q, seq_kv):
    """Masks as frameworks pass them, each (name, bool mask broadcastable to (batch, heads, seq_q, seq_kv))."""
    causal = torch.ones(seq_q, seq_kv, dtype=torch.bool).tril(diagonal=seq_kv - seq_q)
    keys = torch.arange(seq_kv)
    left = torch.stack([keys >= pad for pad in range(0, 3 * batch, 3)])[:batch]  # row b: 3b left padding keys
    right = torch.stack([keys < seq_kv - pad for pad in range(0, 2 * batch, 2)])[:batch]
    packed = torch.zeros(seq_q, seq_kv, dtype=torch.bool)  # documents [0, 4), [4, seq): causal within each
    packed[:4, :4], packed[4:, 4:] = causal[:4, :4], causal[4:, 4:]
    window = causal & ~torch.ones(seq_q, seq_kv, dtype=torch.bool).tril(diagonal=seq_kv - seq_q - 4)
    return {
        "left padding, causal (fully masked rows)": causal & left[:, None, None, :],
        "right padding, causal": causal & right[:, None, None, :],
        "left padding, no causal": left[:, None, None, :],
        "packed documents": packed,
        "sliding window and padding": window & left[:, None, None, :],
    }


@pytest.mark.parametrize("name", list(padding_masks(2, 9, 9)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_padding_and_packing_masks_run_on_hal_and_match_torch(name, dtype):
    mask = padding_masks(2, 9, 9)[name]
    q, k, v = inputs(2, 4, 2, 9, 9, 64, dtype)
    assert ht.fallback_reasons(q, k, v, attn_mask=mask, enable_gqa=True) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", ht.FallbackWarning)  # hal runs it: no fallback
        check(q, k, v, dtype, attn_mask=mask, enable_gqa=True)
        additive = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
        out = ht.scaled_dot_product_attention(q, k, v, attn_mask=additive, enable_gqa=True)
    assert relative_error(out, reference(q, k, v, attn_mask=mask, enable_gqa=True)) <= TOLERANCE[dtype]


def test_mask_key_ranges_are_checked_not_assumed():
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[0, 0, 0, :2] = False  # row 0, query 0: keys [2, 5)
    mask[1, 0, 2, :] = False   # row 1, query 2: no key
    ranges = ht.mask_key_ranges(mask, 2, 3, 5)
    assert ranges.dtype == torch.int32 and ranges.is_contiguous()
    assert ranges.tolist() == [[[2, 5], [0, 5], [0, 5]], [[0, 5], [0, 5], [0, 0]]]
    assert ht.mask_key_ranges(gappy_mask(5), 1, 5, 5) is None
    long_keys = torch.zeros(1, 1, 2, 40000, dtype=torch.bool)
    long_keys[0, 0, 0, 5:30000] = True
    additive = torch.zeros(long_keys.shape).masked_fill(~long_keys, float("-inf"))  # past int16: the argmax path
    for form in (long_keys, additive):
        assert ht.mask_key_ranges(form, 1, 2, 40000).tolist() == [[[5, 30000], [0, 0]]]
    long_keys[0, 0, 1, 7] = long_keys[0, 0, 1, 39999] = True
    additive = torch.zeros(long_keys.shape).masked_fill(~long_keys, float("-inf"))
    assert ht.mask_key_ranges(long_keys, 1, 2, 40000) is None and ht.mask_key_ranges(additive, 1, 2, 40000) is None
    per_head = torch.ones(1, 2, 5, 5, dtype=torch.bool)
    per_head[0, 1].tril_()
    assert ht.mask_key_ranges(per_head, 1, 5, 5) is None  # heads differ
    assert ht.mask_key_ranges(per_head[:, 1:], 1, 5, 5).tolist()[0][4] == [0, 5]
    assert ht.mask_key_ranges(torch.zeros(5, 5) + 0.5, 1, 5, 5) is None  # a bias
    assert ht.mask_key_ranges(torch.ones(5, 5, dtype=torch.int64), 1, 5, 5) is None  # not a mask dtype
    with pytest.warns(ht.FallbackWarning, match="not one interval"):
        q, k, v = inputs(1, 2, 2, 5, 5, 64)
        out = ht.scaled_dot_product_attention(q, k, v, attn_mask=gappy_mask(5))
    assert relative_error(out, reference(q, k, v, attn_mask=gappy_mask(5))) <= 1e-5


def test_boolean_masks_read_in_one_pass_agree_with_the_additive_reading():
    """A host boolean mask is read by hal's one-pass C++ reader, an additive one by torch's elementwise ops: on
    intervals, gaps, heads that differ and strided masks both give the same ranges, or both refuse."""
    generator = torch.Generator().manual_seed(3)
    batch, heads, seq_q, seq_kv = 2, 3, 7, 11
    keys = torch.arange(seq_kv)
    outcomes = set()
    for trial in range(24):
        begin = torch.randint(0, seq_kv, (batch, 1, seq_q, 1), generator=generator)
        mask = (keys >= begin) & (keys < begin + torch.randint(0, seq_kv, (batch, 1, seq_q, 1), generator=generator))
        if trial % 4 == 1:  # a flipped key: often a gap
            mask[0, 0, trial % seq_q, (3 * trial) % seq_kv] ^= True
        elif trial % 4 == 2:  # one head differs
            mask = mask.expand(batch, heads, seq_q, seq_kv).clone()
            mask[1, 2, trial % seq_q, 0] ^= True
        elif trial % 4 == 3:  # keys not contiguous in memory
            mask = mask.transpose(2, 3).contiguous().transpose(2, 3)
        additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        from_bytes = ht._key_ranges_of(mask, batch, seq_q, seq_kv)
        from_values = ht._key_ranges_of(additive, batch, seq_q, seq_kv)
        assert (from_bytes is None) == (from_values is None), trial
        if from_bytes is not None:
            assert torch.equal(from_bytes, from_values), trial
        outcomes.add(from_bytes is None)
    assert outcomes == {True, False}  # both answers were exercised


def test_a_mask_shared_by_layers_is_read_once(monkeypatch):
    q, k, v = inputs(1, 2, 2, 8, 8, 64)
    mask = padding_masks(1, 8, 8)["right padding, causal"]
    reads = []
    original = ht._key_ranges_of
    monkeypatch.setattr(ht, "_key_ranges_of", lambda *args: reads.append(1) or original(*args))
    ht._last_mask = None
    for _ in range(3):
        ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(reads) == 1
    mask[0, 0, 0, 0] = False  # changed in place: read again
    ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(reads) == 2
