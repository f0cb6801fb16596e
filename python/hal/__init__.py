"""hal: the vendor-neutral hardware abstraction layer for accelerators, from Python.

A thin layer over the C++ API (the ``hal._hal`` extension): runtimes, backends
and devices, streams and events, tensors exchanged through DLPack without a
copy, scaled dot-product attention and collectives (hal.Communicator). ``hal.torch`` integrates the attention
with PyTorch. See docs/python.md.
"""

from __future__ import annotations

import threading as _threading
from typing import Any, Optional, Sequence, Tuple

from . import _hal
from ._errors import (  # noqa: F401  (re-exported)
    AbortedError,
    DeviceLostError,
    Error,
    InternalError,
    InvalidArgumentError,
    NotPresentError,
    OutOfMemoryError,
    TimeoutError,
    UnsupportedError,
)
from ._hal import (  # noqa: F401  (re-exported)
    AttentionCandidate,
    AttentionDecision,
    AttentionParams,
    BackendReport,
    Device,
    DeviceInfo,
    Event,
    Runtime,
    Setting,
    StatusCode,
    LaunchEnvironment,
    Store,
    Stream,
    Tensor,
    dtype_name,
    known_backend_names,
)

__all__ = [
    "AbortedError", "AttentionCandidate", "AttentionDecision", "AttentionParams", "BackendReport", "Communicator",
    "Device", "DeviceInfo", "DeviceLostError", "Error", "Event", "InternalError", "InvalidArgumentError",
    "LaunchEnvironment", "NotPresentError", "OutOfMemoryError", "Runtime", "Setting", "StatusCode", "Store", "Stream", "Tensor",
    "TimeoutError", "UnsupportedError",
    "attention_backward", "attention_forward", "attention_params", "default_stream", "dtype_name", "empty",
    "explain_attention", "from_dlpack", "known_backend_names", "runtime",
]

from ._collectives import Communicator  # noqa: E402  (after the names it uses)

__version__ = "0.1.0"

_lock = _threading.Lock()
_default_runtime: Optional[Runtime] = None
_default_streams: dict = {}


def runtime() -> Runtime:
    """The process-wide default Runtime, created on first use."""
    global _default_runtime
    if _default_runtime is None:
        with _lock:
            if _default_runtime is None:
                _default_runtime = Runtime()
    return _default_runtime


def default_stream(device: Device) -> Stream:
    """A stream per device that hal's Python functions use when given none (created on first use).

    Keyed by the device itself, not its id: host:0 of another Runtime is another device."""
    stream = _default_streams.get(device)
    if stream is None:
        with _lock:
            stream = _default_streams.get(device)
            if stream is None:
                stream = _default_streams[device] = device.create_stream()
    return stream


# ------------------------------------------------------------------ DLPack

def from_dlpack(obj: Any, stream: Any = None, *, runtime: Optional[Runtime] = None) -> Tensor:
    """A hal.Tensor over the memory of any DLPack producer (numpy, torch, jax, ...), without a copy.

    Calls ``obj.__dlpack__`` itself: first with ``max_version=(1, 1)`` (a
    versioned capsule), then the legacy call for producers that do not take
    max_version. The capsule is consumed (renamed "used_dltensor...") and hal
    owns the tensor: the producer's deleter runs once hal lets go of the
    memory. A hal.Tensor is returned as is; a bare capsule is consumed.
    ``stream`` is passed on to the producer (for GPU tensors: the consumer
    stream the data must be ready on; None for CPU).
    """
    rt = runtime if runtime is not None else globals()["runtime"]()
    if isinstance(obj, Tensor):
        return obj
    if type(obj).__name__ == "PyCapsule":
        return _hal._from_capsule(rt, obj)
    if not hasattr(obj, "__dlpack__"):
        raise InvalidArgumentError(
            f"from_dlpack: {type(obj).__name__} does not implement __dlpack__ (numpy arrays, torch tensors and "
            "other array-API objects do)")
    kwargs = {} if stream is None else {"stream": stream}
    try:
        capsule = obj.__dlpack__(max_version=(1, 1), **kwargs)
    except TypeError:
        capsule = obj.__dlpack__(**kwargs)  # a producer that predates DLPack 1.0 in Python
    return _hal._from_capsule(rt, capsule)


def empty(shape: Sequence[int], dtype: str = "f32", device: Optional[Device] = None) -> Tensor:
    """An uninitialized compact row-major hal.Tensor allocated by hal (default device: the first one, host:0)."""
    if device is None:
        device = runtime().device("host:0")
    return _hal._empty(device, [int(extent) for extent in shape], dtype)


# ------------------------------------------------------------------ attention

_AXES = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}  # position of batch, head, seq, dim in the shape


def _as_tensor(obj: Any, name: str, rt: Optional[Runtime]) -> Tensor:
    if obj is None:
        raise InvalidArgumentError(f"attention: {name} is None")
    return from_dlpack(obj, runtime=rt)


def _bhsd(tensor: Tensor, name: str, layout: str) -> Tuple[Tuple[int, int, int, int], Tuple[int, int, int, int]]:
    """(batch, heads, seq, dim) extents and strides of a 4-D tensor in the given layout."""
    if layout not in _AXES:
        raise InvalidArgumentError(f"attention: layout '{layout}' is not one of 'bhsd', 'bshd'")
    if tensor.ndim != 4:
        raise InvalidArgumentError(
            f"attention: {name} has {tensor.ndim} dimensions with shape {tensor.shape}; it must have 4 "
            f"({'(batch, heads, seq, dim)' if layout == 'bhsd' else '(batch, seq, heads, dim)'} for layout '{layout}')")
    axes = _AXES[layout]
    shape, strides = tensor.shape, tensor.strides
    return tuple(shape[a] for a in axes), tuple(strides[a] for a in axes)


def _layout_shape(extents: Tuple[int, int, int, int], layout: str) -> Tuple[int, ...]:
    b, h, s, d = extents
    return (b, h, s, d) if layout == "bhsd" else (b, s, h, d)


def attention_params(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None,
                     layout: str = "bhsd", alignment: str = "top_left", window_left: int = -1,
                     window_right: int = -1, return_lse: bool = False, o: Any = None, grad_o: Any = None,
                     grad_q: Any = None, grad_k: Any = None, grad_v: Any = None,
                     key_ranges: bool = False) -> AttentionParams:
    """The hal.AttentionParams of tensors (hal.Tensor or anything with shape/strides or DLPack).

    Shapes come from the tensors, in the layout's axis order ('bhsd': (batch,
    heads, seq, dim), torch's; 'bshd': (batch, seq, heads, dim)); strides are
    passed explicitly, so non-contiguous views run without a copy.
    """
    tensors = {"q": q, "k": k, "v": v, "o": o, "grad_o": grad_o, "grad_q": grad_q, "grad_k": grad_k, "grad_v": grad_v}
    geometry = {name: _bhsd(t, name, layout) for name, t in tensors.items() if t is not None}
    (b, hq, sq, dq), _ = geometry["q"]
    (bk, hkv, skv, dk), _ = geometry["k"]
    (bv, hv, sv, dv), _ = geometry["v"]
    if (bk, bv) != (b, b) or hv != hkv or sv != skv or dk != dq:
        raise InvalidArgumentError(
            f"attention: shapes do not match ({layout}): q {q.shape}, k {k.shape}, v {v.shape}; k and v need q's "
            "batch, the same heads and sequence length, and k q's head dim")
    dtypes = {name: t.dtype for name, t in tensors.items() if t is not None}
    if len(set(dtypes.values())) != 1:
        raise InvalidArgumentError(f"attention: the tensors' dtypes differ: {dtypes}")
    p = AttentionParams()
    p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim_qk, p.head_dim_v = b, hq, hkv, sq, skv, dq, dv
    p.dtype = q.dtype
    p.layout = layout
    p.causal = bool(causal)
    p.alignment = alignment
    p.window_left, p.window_right = int(window_left), int(window_right)
    p.softmax_scale = None if scale is None else float(scale)
    p.return_lse = bool(return_lse)
    p.key_ranges = bool(key_ranges)
    expected = {"o": (b, hq, sq, dv), "grad_o": (b, hq, sq, dv), "grad_q": (b, hq, sq, dq),
                "grad_k": (b, hkv, skv, dq), "grad_v": (b, hkv, skv, dv)}
    for name, (extents, strides) in geometry.items():
        if name in expected and extents != expected[name]:
            raise InvalidArgumentError(
                f"attention: {name} has shape {tensors[name].shape}; it must be {_layout_shape(expected[name], layout)} "
                f"({layout})")
        setattr(p, f"{name}_strides", strides)
    return p


def _implementations(implementations: Optional[Sequence[str]]):
    return None if implementations is None else list(implementations)


def explain_attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None,
                      layout: str = "bhsd", alignment: str = "top_left", window_left: int = -1,
                      window_right: int = -1, backward: bool = False, key_ranges: bool = False,
                      implementations: Optional[Sequence[str]] = None, device: Optional[Device] = None,
                      runtime: Optional[Runtime] = None) -> AttentionDecision:
    """Which implementation (fused, flash, math) hal would run for these tensors, and why each other would not.

    Runs nothing. The result's fields are structured (chosen, found, order,
    order_source, candidates with reasons, fell_back); str() is the table of
    AttentionDecision::to_string(). q, k, v may be DLPack tensors or anything
    with .shape, .strides (in elements) and .dtype (then pass device=).
    key_ranges: whether the call would pass per-query key ranges.
    """
    if all(hasattr(t, "__dlpack__") or isinstance(t, Tensor) for t in (q, k, v)):
        q, k, v = (_as_tensor(t, n, runtime) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        device = q.device if device is None else device
    if device is None:
        device = globals()["runtime"]().device("host:0") if runtime is None else runtime.device("host:0")
    params = attention_params(q, k, v, causal=causal, scale=scale, layout=layout, alignment=alignment,
                              window_left=window_left, window_right=window_right, return_lse=backward,
                              key_ranges=key_ranges)
    return _hal._explain_attention(device, params, backward, _implementations(implementations))


def attention_forward(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None,
                      layout: str = "bhsd", alignment: str = "top_left", window_left: int = -1,
                      window_right: int = -1, return_lse: bool = False, out: Any = None, lse: Any = None,
                      key_ranges: Any = None, implementations: Optional[Sequence[str]] = None,
                      stream: Optional[Stream] = None, runtime: Optional[Runtime] = None):
    """Scaled dot-product attention O = softmax(scale * Q K^T + mask) V on any DLPack tensors, without copies.

    q: (batch, heads_q, seq_q, head_dim) for layout 'bhsd' (torch's order) or
    (batch, seq_q, heads_q, head_dim) for 'bshd'; k, v likewise with heads_kv
    (GQA/MQA when it divides heads_q) and seq_kv. Any strides (a transposed
    view needs no copy). dtype f32, f16 or bf16, the same for all. causal
    masks keys after the query, aligned top_left (torch's is_causal) or
    bottom_right; window_left/right bound a sliding window; scale defaults to
    1/sqrt(head_dim). key_ranges: int32, contiguous (batch, seq_q, 2): query i
    of batch row b sees only keys [key_ranges[b, i, 0], key_ranges[b, i, 1]),
    on top of causal and the windows (key padding, packed sequences).

    out (and lse with return_lse: f32, contiguous (batch, heads_q, seq_q)) may
    be given, written in place; otherwise hal allocates them on q's device in
    the layout's compact order. Returns out, or (out, lse) with return_lse, as
    given or as hal.Tensor (numpy.from_dlpack / torch.from_dlpack take it).

    With stream=None the call runs on hal's default stream of the device and
    returns when the result is there; with a stream it is only enqueued.
    implementations: a per-call order such as ['flash', 'math'].
    """
    qt, kt, vt = (_as_tensor(t, n, runtime) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    params = attention_params(qt, kt, vt, causal=causal, scale=scale, layout=layout, alignment=alignment,
                              window_left=window_left, window_right=window_right, return_lse=return_lse)
    device = qt.device
    out_obj = out
    if out is None:
        out_obj = empty(_layout_shape((params.batch, params.heads_q, params.seq_q, params.head_dim_v), layout),
                        qt.dtype, device)
    ot = _as_tensor(out_obj, "out", runtime)
    params = attention_params(qt, kt, vt, causal=causal, scale=scale, layout=layout, alignment=alignment,
                              window_left=window_left, window_right=window_right, return_lse=return_lse, o=ot,
                              key_ranges=key_ranges is not None)
    rt = _key_ranges(key_ranges, params, runtime)
    lse_obj, lt = None, None
    if return_lse:
        lse_obj = lse if lse is not None else empty((params.batch, params.heads_q, params.seq_q), "f32", device)
        lt = _as_tensor(lse_obj, "lse", runtime)
        _check_lse(lt, params)
    elif lse is not None:
        raise InvalidArgumentError("attention_forward: lse is given but return_lse is False")
    if qt.size and kt.size and ot.size:  # hal runs problems with at least one element; empty ones have nothing to do
        _hal._attention_forward(stream if stream is not None else default_stream(device), params, qt, kt, vt, ot, lt,
                                _implementations(implementations), rt, stream is None)
    elif ot.size and kt.size == 0:
        raise InvalidArgumentError("attention_forward: seq_kv is 0: no key to attend to")
    return (out_obj, lse_obj) if return_lse else out_obj


def _key_ranges(key_ranges: Any, params: AttentionParams, runtime: Optional[Runtime]) -> Optional[Tensor]:
    """The key ranges as a hal.Tensor, checked: int32, contiguous (batch, seq_q, 2); None when not given."""
    if key_ranges is None:
        return None
    rt = _as_tensor(key_ranges, "key_ranges", runtime)
    expected = (params.batch, params.seq_q, 2)
    if rt.dtype != "i32" or rt.shape != expected:
        raise InvalidArgumentError(f"attention: key_ranges must be int32 of shape {expected} (batch, seq_q, "
                                   f"[begin, end)), not {rt.dtype} {rt.shape}")
    if rt.size and rt.strides != (params.seq_q * 2, 2, 1):
        raise InvalidArgumentError(f"attention: key_ranges must be contiguous, its strides are {rt.strides}")
    return rt


def _check_lse(lt: Tensor, params: AttentionParams) -> None:
    expected = (params.batch, params.heads_q, params.seq_q)
    if lt.dtype != "f32" or lt.shape != expected:
        raise InvalidArgumentError(f"attention: lse must be f32 of shape {expected}, not {lt.dtype} {lt.shape}")
    if lt.size and lt.strides != (params.heads_q * params.seq_q, params.seq_q, 1):
        raise InvalidArgumentError(f"attention: lse must be contiguous, its strides are {lt.strides}")


def attention_backward(grad_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, *, causal: bool = False,
                       scale: Optional[float] = None, layout: str = "bhsd", alignment: str = "top_left",
                       window_left: int = -1, window_right: int = -1, grad_q: Any = None, grad_k: Any = None,
                       grad_v: Any = None, key_ranges: Any = None, implementations: Optional[Sequence[str]] = None,
                       stream: Optional[Stream] = None, runtime: Optional[Runtime] = None):
    """Gradients (grad_q, grad_k, grad_v) of attention_forward, from its out and lse (run it with return_lse=True).

    The same parameters as the forward pass. grad_q/grad_k/grad_v may be given
    (written in place, any strides); otherwise hal allocates them like q, k, v
    in the layout's compact order. Returns the three, as given or hal.Tensor.
    """
    ts = [_as_tensor(t, n, runtime) for t, n in ((grad_out, "grad_out"), (q, "q"), (k, "k"), (v, "v"), (out, "out"),
                                                  (lse, "lse"))]
    got, qt, kt, vt, ot, lt = ts
    device = qt.device
    params = attention_params(qt, kt, vt, causal=causal, scale=scale, layout=layout, alignment=alignment,
                              window_left=window_left, window_right=window_right, return_lse=True, o=ot, grad_o=got)
    grads = []
    for given, like in ((grad_q, qt), (grad_k, kt), (grad_v, vt)):
        grads.append(given if given is not None else empty(like.shape, like.dtype, device))
    gqt, gkt, gvt = (_as_tensor(g, n, runtime) for g, n in zip(grads, ("grad_q", "grad_k", "grad_v")))
    params = attention_params(qt, kt, vt, causal=causal, scale=scale, layout=layout, alignment=alignment,
                              window_left=window_left, window_right=window_right, return_lse=True, o=ot, grad_o=got,
                              grad_q=gqt, grad_k=gkt, grad_v=gvt, key_ranges=key_ranges is not None)
    _check_lse(lt, params)
    rt = _key_ranges(key_ranges, params, runtime)
    if not (qt.size and kt.size):  # nothing attends: the gradients are zero
        if qt.size and not kt.size:
            raise InvalidArgumentError("attention_backward: seq_kv is 0: no key to attend to")
        for g in (gqt, gkt, gvt):
            _hal._zero(g)
    else:
        _hal._attention_backward(stream if stream is not None else default_stream(device), params, qt, kt, vt, ot, got,
                                 lt, gqt, gkt, gvt, _implementations(implementations), rt, stream is None)
    return tuple(grads)
