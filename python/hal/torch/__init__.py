"""hal.torch: hal's attention as a PyTorch operator.

``hal.torch.scaled_dot_product_attention`` has the signature and semantics of
``torch.nn.functional.scaled_dot_product_attention`` (inputs (B, H, L, E),
``is_causal`` aligned top-left as torch does, ``enable_gqa``). It runs hal's
attention through the custom operators ``hal::sdpa_forward`` and
``hal::sdpa_backward`` (``torch.library``; the log-sum-exp of the forward pass
is saved for the backward one), with fake implementations so that
``torch.compile(fullgraph=True)`` traces it. Outputs are allocated by torch;
hal reads and writes torch's memory through DLPack, without copies (strided
views are passed with their strides).

An ``attn_mask`` (boolean, or additive with 0 and -inf) whose visible keys
form one interval per query, the same for every head, runs on hal's kernels
as per-query key ranges (``mask_key_ranges``): key padding on either side,
packed sequences, causal and sliding-window masks, as frameworks pass them.
What hal cannot do runs torch's own SDPA instead, with one warning
(``hal.torch.FallbackWarning``) per distinct reason: any other mask,
``dropout_p > 0``, a dtype other than float32/float16/bfloat16, inputs that
are not 4-D, a device hal has not loaded, or a problem every hal
implementation refuses (its reasons are in the warning). In strict mode (the
``attention.strict`` setting of ``hal.runtime()``: ``HAL_ATTN_STRICT=1`` or the
config file) these raise ``hal.UnsupportedError`` instead.

``with hal.torch.use_hal_attention():`` makes
``torch.nn.functional.scaled_dot_product_attention`` this function within
the scope.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
import weakref
from typing import Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

import hal

__all__ = ["Explanation", "FallbackWarning", "explain", "fallback_reasons", "mask_key_ranges", "route_attention",
           "scaled_dot_product_attention", "use_hal_attention"]

# torch's own function, whatever use_hal_attention() puts in its place.
_torch_sdpa = F.scaled_dot_product_attention

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


class FallbackWarning(UserWarning):
    """hal.torch ran torch's own SDPA because hal cannot do what was asked (the message says why)."""


_warned: set = set()


@torch.compiler.assume_constant_result
def _strict_origin() -> str:
    """Who turned strict mode on (the attention.strict setting: HAL_ATTN_STRICT or the config file); "" when off.

    A constant to torch.compile: the default runtime resolved it once."""
    setting = hal.runtime().setting("attention.strict")
    return setting.origin if setting.value == "true" else ""


def _uuid_digits(text: str) -> str:
    """The 32 hex digits of a device UUID however it is spelt ('GPU-1a2b...', '1a2b3c4d-...', upper or lower)."""
    text = text.lower()
    for prefix in ("gpu-", "mig-"):
        text = text[len(prefix):] if text.startswith(prefix) else text
    return "".join(c for c in text if c in "0123456789abcdef")


def _pci_triple(text: str) -> Optional[Tuple[int, int, int]]:
    """(domain, bus, device) of a PCI bus id 'dddd:bb:dd.f' or 'bb:dd.f'; None when it is not one."""
    try:
        parts = text.strip().lower().split(":")
        domain = int(parts[0], 16) if len(parts) == 3 else 0
        bus, device = parts[-2], parts[-1].split(".")[0]
        return domain, int(bus, 16), int(device, 16)
    except (ValueError, IndexError):
        return None


def _same_physical_device(candidates, uuid: str, pci: Optional[Tuple[int, int, int]]):
    """The hal device among candidates that is the physical device torch names: by UUID, else by PCI bus id (never
    by index alone: the two may count devices in different orders)."""
    wanted = _uuid_digits(uuid) if uuid else ""
    if wanted:
        for device in candidates:
            if device.info.uuid and _uuid_digits(device.info.uuid) == wanted:
                return device
    if pci is not None:
        for device in candidates:
            if _pci_triple(device.info.pci_bus_id) == pci:
                return device
    return None


def _hal_device(device: torch.device) -> Optional[hal.Device]:
    """The hal device that is torch's device (None when hal has not loaded it), found once per torch device."""
    global _devices
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    runtime = hal.runtime()
    if _devices[0] is not runtime:  # a new default runtime (tests make one after changing settings)
        _devices = (runtime, {})
    try:
        return _devices[1][device]
    except KeyError:
        pass
    found = None
    if device.type == "cpu":
        try:
            found = runtime.find_dlpack_device(1, 0)
        except hal.NotPresentError:
            pass
    elif device.type == "cuda":
        found = _find_cuda_device(runtime, device.index)
    _devices[1][device] = found
    return found


# (runtime, {torch device: its hal device or None}): found once per device of the default runtime.
_devices: Tuple = (None, {})


def _find_cuda_device(runtime, index: int) -> Optional[hal.Device]:
    properties = torch.cuda.get_device_properties(index)
    pci = tuple(getattr(properties, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    # torch.version.hip: a ROCm build names its devices "cuda" too.
    backends = ("rocm",) if torch.version.hip else ("cuda", "ppu")
    candidates = [d for d in runtime.devices if d.backend in backends]
    return _same_physical_device(candidates, str(getattr(properties, "uuid", "")), pci if None not in pci else None)


@torch.compiler.assume_constant_result
def _hal_refusals(device: str, dtype: str, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                  head_dim_v: int, is_causal: bool, scale: Optional[float], key_ranges: bool) -> Tuple[str, ...]:
    """Why no hal implementation can run this problem (empty: one can). Constant for torch.compile."""
    return _hal_refusals_of(device, dtype, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, is_causal, scale,
                            key_ranges)


@functools.lru_cache(maxsize=512)  # asked once per problem, not per call
def _hal_refusals_of(device: str, dtype: str, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                     head_dim_v: int, is_causal: bool, scale: Optional[float], key_ranges: bool) -> Tuple[str, ...]:
    hal_device = _hal_device(torch.device(device))
    if hal_device is None:
        return (f"device {device} is not one hal has loaded ({', '.join(d.id for d in hal.runtime().devices)})",)
    params = hal.AttentionParams()
    params.batch, params.heads_q, params.heads_kv = 1, heads_q, heads_kv
    params.seq_q, params.seq_kv, params.head_dim_qk, params.head_dim_v = seq_q, seq_kv, head_dim, head_dim_v
    params.dtype, params.layout, params.causal = dtype, "bhsd", is_causal
    params.softmax_scale = scale
    params.return_lse = True
    params.key_ranges = key_ranges
    reasons = []
    for backward in (False, True):
        decision = hal._hal._explain_attention(hal_device, params, backward)
        if not decision.found:
            firsts = [f"{c.implementation}: {c.reasons[0]}" for c in decision.candidates if c.in_order and c.reasons]
            reasons.append(f"hal cannot run {params.describe()} {'backward' if backward else 'forward'} "
                           f"({'; '.join(firsts)})")
    return tuple(reasons)


def mask_key_ranges(attn_mask: torch.Tensor, batch: int, seq_q: int, seq_kv: int) -> Optional[torch.Tensor]:
    """hal's per-query key ranges, int32 (batch, seq_q, 2) of [begin, end), that say exactly what an SDPA attn_mask
    says (broadcast to (batch, heads, seq_q, seq_kv) as torch does; boolean: True attends; additive: 0 attends,
    -inf or a value at most half the dtype's lowest does not), or None when it says something else: visible keys
    that are not one interval per query, a pattern that differs between heads, or a bias. Checked on the mask's
    values, not assumed: a few passes over it, small against the attention it lets hal run; the last mask's answer
    is kept, so the layers of a model that share one mask pay once. A fake mask (FakeTensorMode: a trace for
    memory or shapes, as hal.torch.memory makes) has no values: its ranges are a fake tensor of their shape.

    The reading runs outside any dispatch mode: it is hal's bookkeeping, not the model's computation, and with the
    answer kept a recomputation would not repeat its ops, which selective checkpointing's mode (it counts every op
    of a block's forward and of its recomputation) takes for a changed computation."""
    global _last_mask
    if isinstance(attn_mask, FakeTensor):
        return torch.empty((batch, seq_q, 2), dtype=torch.int32, device=attn_mask.device)
    cached = _last_mask
    if (cached is not None and cached[0]() is attn_mask and cached[1] == attn_mask._version
            and cached[2] == (batch, seq_q, seq_kv)):
        return cached[3]
    with _disable_current_modes(), torch.no_grad():
        ranges = _key_ranges_of(attn_mask, batch, seq_q, seq_kv)
    try:
        _last_mask = (weakref.ref(attn_mask), attn_mask._version, (batch, seq_q, seq_kv), ranges)
    except TypeError:  # a tensor subclass without weak references: not kept
        _last_mask = None
    return ranges


# (weak reference to the last mask, its version, (batch, seq_q, seq_kv), its key ranges or None)
_last_mask: Optional[Tuple] = None


def _key_ranges_of(attn_mask: torch.Tensor, batch: int, seq_q: int, seq_kv: int) -> Optional[torch.Tensor]:
    if attn_mask.dim() > 4 or attn_mask.dim() < 2:
        return None
    mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    try:
        mask = mask.expand(batch, mask.shape[1], seq_q, seq_kv)
    except RuntimeError:
        return None  # not broadcastable: torch's SDPA will say so
    if mask.dtype == torch.bool and mask.device.type == "cpu":  # one pass in C++ over the mask's bytes
        ranges = torch.empty((batch, seq_q, 2), dtype=torch.int32)
        one_interval = hal._hal._bool_mask_key_ranges(mask.data_ptr(), tuple(mask.shape), mask.stride(),
                                                      ranges.data_ptr())
        return ranges if one_interval else None
    if mask.dtype == torch.bool:
        visible = mask
    elif mask.is_floating_point():
        visible = mask == 0
        if not bool(torch.logical_or(visible, mask <= torch.finfo(mask.dtype).min / 2).all()):
            return None  # a bias, not a pattern of visible and hidden keys
    else:
        return None
    if visible.shape[1] > 1 and not bool((visible == visible[:, :1]).all()):
        return None  # a different pattern per head
    visible = visible[:, 0]
    count = visible.sum(-1, dtype=torch.int32)
    if seq_kv < 1 << 15:  # the largest of int16 products: several times faster than argmax over bytes
        positions = torch.arange(1, seq_kv + 1, dtype=torch.int16, device=visible.device)
        begin = seq_kv - (visible * positions.flip(0)).amax(-1).to(torch.int32)  # the first visible key
        end = (visible * positions).amax(-1).to(torch.int32)  # one past the last
    else:
        as_bytes = visible.to(torch.uint8)
        begin = as_bytes.argmax(-1).to(torch.int32)
        end = seq_kv - as_bytes.flip(-1).argmax(-1).to(torch.int32)
    if not bool(((count == end - begin) | (count == 0)).all()):
        return None  # some query sees keys with a hidden one between them
    empty = count == 0
    begin, end = begin.masked_fill(empty, 0), end.masked_fill(empty, 0)
    return torch.stack((begin, end), dim=-1).contiguous()


def _mask_reason(query: torch.Tensor, key: torch.Tensor, attn_mask) -> Tuple[Optional[torch.Tensor], Optional[str]]:
    """(key ranges, None) for a mask hal runs, (None, why not) for one it does not, (None, None) without a mask."""
    if attn_mask is None:
        return None, None
    if torch.compiler.is_compiling():
        return None, "attn_mask under torch.compile (hal reads a mask's values to turn it into key ranges)"
    ranges = mask_key_ranges(attn_mask, query.shape[0], query.shape[2], key.shape[2])
    if ranges is None:
        return None, ("attn_mask is not one interval of visible keys per query, the same for every head (hal runs "
                      "padding, packed-sequence, causal and sliding-window masks as key ranges)")
    return ranges, None


def fallback_reasons(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None,
                     dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                     enable_gqa: bool = False) -> List[str]:
    """Why scaled_dot_product_attention would run torch's SDPA for these arguments (empty: hal runs it)."""
    reasons = []
    ranges, mask_reason = (None, None) if query.dim() != 4 or key.dim() != 4 else _mask_reason(query, key, attn_mask)
    if mask_reason is not None:
        reasons.append(mask_reason)
    if dropout_p > 0.0:
        reasons.append("dropout_p > 0 (hal's attention has no dropout)")
    if query.dtype not in _DTYPES:
        reasons.append(f"dtype {query.dtype} (hal's attention takes float32, float16 and bfloat16)")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        reasons.append("inputs that are not 4-D (hal takes (B, H, L, E); torch also takes other batch shapes)")
    if reasons:
        return reasons
    if key.shape[2] == 0 and query.shape[2] != 0:
        return ["a key sequence of length 0"]
    # Under torch.compile this is decided while tracing: int() specializes the head counts and dims (static in
    # practice), and the sequence lengths are left out so that dynamic ones stay dynamic (hal's implementations
    # do not depend on them; should one refuse a length, the operator raises hal's error at run time).
    compiling = torch.compiler.is_compiling()
    seq_q = 1 if compiling else max(int(query.shape[2]), 1)
    seq_kv = 1 if compiling else max(int(key.shape[2]), 1)
    reasons.extend(_hal_refusals(str(query.device), _DTYPES[query.dtype], int(query.shape[1]), int(key.shape[1]),
                                 seq_q, seq_kv, int(query.shape[3]), int(value.shape[3]), bool(is_causal),
                                 None if scale is None else float(scale), ranges is not None))
    return reasons


class Explanation:
    """What scaled_dot_product_attention does with some arguments: ``runs`` is 'hal' or 'torch'; ``reasons`` why
    torch's SDPA would run (empty for hal); ``forward`` and ``backward`` hal's AttentionDecision for each pass (which
    implementation and why each other is not chosen), None when hal does not run. str() is a report to read."""

    def __init__(self, runs: str, reasons: List[str], forward=None, backward=None):
        self.runs, self.reasons, self.forward, self.backward = runs, reasons, forward, backward

    def __repr__(self) -> str:
        chosen = "" if self.forward is None else f" ({self.forward.chosen} forward, {self.backward.chosen} backward)"
        return f"<hal.torch.Explanation runs {self.runs}{chosen}>"

    def __str__(self) -> str:
        if self.runs == "torch":
            return "torch's SDPA runs: " + "; ".join(self.reasons)
        return f"hal runs it.\nforward:\n{self.forward}\nbackward:\n{self.backward}"


def explain(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None, dropout_p: float = 0.0,
            is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False) -> Explanation:
    """What scaled_dot_product_attention would run for these arguments, and why; runs nothing."""
    reasons = fallback_reasons(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if reasons:
        return Explanation("torch", reasons)
    device = _hal_device(query.device)
    decisions = [hal.explain_attention(query.detach(), key.detach(), value.detach(), causal=is_causal, scale=scale,
                                       backward=backward, key_ranges=attn_mask is not None, device=device)
                 for backward in (False, True)]
    return Explanation("hal", [], *decisions)


def _needs_torch_for_errors(query, key, value, enable_gqa) -> bool:
    """Shapes torch refuses: let torch raise its own error (no hal call, no warning)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    if query.dtype != key.dtype or query.dtype != value.dtype or query.device != key.device or query.device != value.device:
        return True
    hq, hkv = query.shape[1], key.shape[1]
    if value.shape[1] != hkv or query.shape[0] != key.shape[0] or key.shape[0] != value.shape[0]:
        return True
    if key.shape[2] != value.shape[2] or query.shape[3] != key.shape[3]:
        return True
    if hq != hkv and (not enable_gqa or hkv == 0 or hq % hkv != 0):
        return True
    return False


@torch.compiler.assume_constant_result
def _warn(reason: str) -> bool:
    """Warns once per reason. Under torch.compile it runs when the graph is traced (a constant to the graph)."""
    # No lock: a rare second warning from a race is harmless.
    if reason in _warned:
        return False
    _warned.add(reason)
    warnings.warn(f"hal.torch.scaled_dot_product_attention runs torch's SDPA instead of hal's: {reason}",
                  FallbackWarning, stacklevel=3)
    return True


@torch.compiler.assume_constant_result
def _refuse(message: str) -> bool:
    """Raises hal.UnsupportedError; under torch.compile when the graph is traced."""
    raise hal.UnsupportedError(message)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention through hal.

    query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev); Hkv < Hq
    (dividing it) with enable_gqa=True. is_causal masks key j > query i
    (top-left, as torch). scale defaults to 1/sqrt(E). Differentiable in all
    three inputs. Returns (B, Hq, L, Ev), allocated by torch. An attn_mask whose
    visible keys are one interval per query runs as key ranges
    (mask_key_ranges). What hal cannot do
    runs torch's SDPA with a FallbackWarning (in strict mode, the
    attention.strict setting or HAL_ATTN_STRICT=1 when the runtime was made:
    raises hal.UnsupportedError); see fallback_reasons(). Under torch.autocast
    the inputs are cast as aten's SDPA casts them (lower-precision op: every
    floating input but float64 to the autocast dtype), so the output dtype is
    aten's and hal's f16/bf16 kernels run.
    """
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        target = torch.get_autocast_dtype(device_type)

        def cast(tensor):
            eligible = isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.dtype != torch.float64
            return tensor.to(target) if eligible else tensor
        with torch.autocast(device_type, enabled=False):
            return scaled_dot_product_attention(cast(query), cast(key), cast(value), cast(attn_mask), dropout_p,
                                                is_causal, scale, enable_gqa)
    signature = None
    if attn_mask is None and not dropout_p and not torch.compiler.is_compiling():
        signature = (query.shape, key.shape, value.shape, query.dtype, key.dtype, value.dtype, query.device,
                     key.device, value.device, is_causal, scale, enable_gqa, hal.runtime())
        if signature in _hal_runs:
            if _unobserved(query, key, value):
                return _forward(query, key, value, bool(is_causal), scale)[0]
            return torch.ops.hal.sdpa_forward(query, key, value, bool(is_causal), scale)[0]
    if _needs_torch_for_errors(query, key, value, enable_gqa):
        return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, enable_gqa=enable_gqa)
    reasons = fallback_reasons(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if reasons:
        strict = _strict_origin()
        if strict:
            _refuse("hal.torch.scaled_dot_product_attention (strict mode, " + strict + "): " + "; ".join(reasons))
        for reason in reasons:
            _warn(reason)
        return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, enable_gqa=enable_gqa)
    if attn_mask is not None:  # turned into key ranges by fallback_reasons (kept for this mask)
        ranges = mask_key_ranges(attn_mask, query.shape[0], query.shape[2], key.shape[2])
        if _unobserved(query, key, value):
            return _forward(query, key, value, bool(is_causal), scale, ranges)[0]
        return torch.ops.hal.sdpa_forward(query, key, value, bool(is_causal), scale, ranges)[0]
    out, _ = torch.ops.hal.sdpa_forward(query, key, value, bool(is_causal), scale)
    if signature is not None:
        if len(_hal_runs) >= _HAL_RUNS_KEPT:
            _hal_runs.clear()
        _hal_runs.add(signature)
    return out


# The calls hal has run, by everything the checks above read (shapes, dtypes, devices, is_causal, scale,
# enable_gqa, the runtime): a call like one of them goes straight to hal's operator. Bounded: cleared when full.
_hal_runs: set = set()
_HAL_RUNS_KEPT = 4096


# ------------------------------------------------------------------ the operators


def _for_hal(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as hal can take it: a copy only for broadcast (stride 0) axes, which hal refuses."""
    strides = tensor.stride()
    if 0 in strides and any(stride == 0 and size > 1 for stride, size in zip(strides, tensor.shape)):
        return tensor.contiguous()
    return tensor


class _Geometry:
    """What hal.attention_params reads of a tensor (shape, strides in elements, hal dtype)."""

    def __init__(self, shape, strides, dtype):
        self.shape, self.strides, self.dtype, self.ndim = shape, strides, dtype, len(shape)


@functools.lru_cache(maxsize=512)
def _params(dtype: str, geometries: Tuple, is_causal: bool, scale: Optional[float], key_ranges: bool):
    """hal.AttentionParams for tensors of these (shape, strides), in the order q, k, v, o[, grad_o, grad_q, grad_k,
    grad_v]; made once per distinct geometry, so the per-call path does not rebuild and recheck them."""
    named = dict(zip(("q", "k", "v", "o", "grad_o", "grad_q", "grad_k", "grad_v"),
                     (_Geometry(shape, strides, dtype) for shape, strides in geometries)))
    return hal.attention_params(**named, causal=is_causal, scale=scale, layout="bhsd", return_lse=True,
                                key_ranges=key_ranges)


class _Target:
    """Where a torch device's calls run: its hal device, and on the CPU hal's default stream, waited for after each
    call. A GPU call runs on torch's current stream, wrapped, so that hal's work joins its order, torch waits as
    usual, and torch's allocator reuses a freed operand's memory only for work ordered after hal's."""

    def __init__(self, device: hal.Device, torch_device: torch.device):
        self.device = device
        self.cpu_stream = hal.default_stream(device) if torch_device.type == "cpu" else None

    def stream(self, tensor: torch.Tensor):
        """(stream, synchronize) for a call on tensor's device."""
        if self.cpu_stream is not None:
            return self.cpu_stream, True
        return self.device.wrap_native_stream(torch.cuda.current_stream(tensor.device).cuda_stream), False


_targets: dict = {}  # (runtime, torch device) -> _Target


def _run_at(entry, query: torch.Tensor, operands, lse: torch.Tensor, is_causal: bool, scale: Optional[float],
            key_ranges: Optional[torch.Tensor]) -> None:
    """Runs one of hal's address entry points on the operands (in its order), the f32 lse and the int32 key ranges
    (None: none), on query's hal device. Shapes and strides travel in params (made once per geometry), the tensors
    as addresses: hal borrows the memory, so the caller keeps them referenced until this returns."""
    runtime = hal.runtime()
    target = _targets.get((runtime, query.device))
    if target is None:
        target = _targets[(runtime, query.device)] = _Target(_hal_device(query.device), query.device)
    params = _params(_DTYPES[query.dtype], tuple([(tuple(t.shape), t.stride()) for t in operands]), is_causal, scale,
                     key_ranges is not None)
    stream, synchronize = target.stream(query)
    addresses = [t.data_ptr() for t in operands]
    # The entries take the LSE after o (forward) or after grad_o (backward), the key ranges last.
    addresses.insert(4 if len(operands) == 4 else 5, lse.data_ptr())
    addresses.append(0 if key_ranges is None else key_ranges.data_ptr())
    entry(stream, params, *addresses, synchronize)


def _forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, scale: Optional[float],
             key_ranges: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """hal::sdpa_forward's implementation: (out, lse), allocated by torch, written by hal."""
    batch, heads_q, seq_q, _ = query.shape
    out = query.new_empty((batch, heads_q, seq_q, value.shape[3]))
    lse = query.new_empty((batch, heads_q, seq_q), dtype=torch.float32)
    if out.numel() == 0:
        return out, lse
    operands = (_for_hal(query), _for_hal(key), _for_hal(value), out)  # referenced until hal has returned
    _run_at(hal._hal._attention_forward_at, query, operands, lse, is_causal, scale, key_ranges)
    return out, lse


_sdpa_forward = torch.library.custom_op("hal::sdpa_forward", mutates_args=())(_forward)


def _unobserved(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether hal's forward may run without torch's dispatcher, which costs more than a small attention: nothing
    needs a gradient, the inputs are plain tensors, and no mode, transform or profiler watches the call (each of
    those is served by the operator, as is torch.compile, checked by the caller)."""
    return (not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad))
            and type(query) is torch.Tensor and type(key) is torch.Tensor and type(value) is torch.Tensor
            and not torch._C._len_torch_dispatch_stack() and not torch._C._is_torch_function_mode_enabled()
            and not torch._C._are_functorch_transforms_active() and not torch.autograd.profiler._is_profiler_enabled)


@_sdpa_forward.register_fake
def _sdpa_forward_fake(query, key, value, is_causal, scale, key_ranges=None):
    batch, heads_q, seq_q, _ = query.shape
    return (query.new_empty((batch, heads_q, seq_q, value.shape[3])),
            query.new_empty((batch, heads_q, seq_q), dtype=torch.float32))


@torch.library.custom_op("hal::sdpa_backward", mutates_args=())
def _sdpa_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, is_causal: bool, scale: Optional[float],
                   key_ranges: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_q, grad_k, grad_v = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (query, key, value))
    if query.numel() == 0 or key.numel() == 0:
        grad_q.zero_(), grad_k.zero_(), grad_v.zero_()
        return grad_q, grad_k, grad_v
    # Referenced until hal has returned (contiguous copies included).
    operands = [_for_hal(t) for t in (query, key, value, out, grad_out)] + [grad_q, grad_k, grad_v]
    _run_at(hal._hal._attention_backward_at, query, operands, lse.detach().contiguous(), is_causal, scale, key_ranges)
    return grad_q, grad_k, grad_v


@_sdpa_backward.register_fake
def _sdpa_backward_fake(grad_out, query, key, value, out, lse, is_causal, scale, key_ranges=None):
    return (torch.empty_like(query, memory_format=torch.contiguous_format),
            torch.empty_like(key, memory_format=torch.contiguous_format),
            torch.empty_like(value, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output):
    query, key, value, is_causal, scale, key_ranges = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse, key_ranges)
    ctx.is_causal, ctx.scale = is_causal, scale
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    query, key, value, out, lse, key_ranges = ctx.saved_tensors
    grad_q, grad_k, grad_v = torch.ops.hal.sdpa_backward(grad_out, query, key, value, out, lse, ctx.is_causal,
                                                         ctx.scale, key_ranges)
    return grad_q, grad_k, grad_v, None, None, None


_sdpa_forward.register_autograd(_backward, setup_context=_setup_context)


# ------------------------------------------------------------------ routing

_route_lock = threading.Lock()


def route_attention(enabled: bool = True) -> None:
    """From now on (until route_attention(False)), torch.nn.functional.scaled_dot_product_attention is hal.torch's
    (enabled) or torch's own; process-wide. use_hal_attention() is the scoped form."""
    with _route_lock:
        F.scaled_dot_product_attention = scaled_dot_product_attention if enabled else _torch_sdpa


@contextlib.contextmanager
def use_hal_attention() -> Iterator[None]:
    """Within the scope, torch.nn.functional.scaled_dot_product_attention is hal.torch's.

    Code that looks the function up at call time (F.scaled_dot_product_attention,
    as torch.nn.MultiheadAttention and most models do) runs hal's attention;
    a name imported before the scope (from torch.nn.functional import
    scaled_dot_product_attention) keeps torch's. Nests; restores what was there.
    Process-wide while active (all threads see it).
    """
    with _route_lock:
        previous = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        with _route_lock:
            F.scaled_dot_product_attention = previous


# torch.distributed's backend "hal" (hal/torch/distributed.py): registered on import, where torch has distributed.
if torch.distributed.is_available():
    from . import distributed  # noqa: E402

    distributed.register()
