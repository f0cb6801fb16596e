"""A training step's peak memory, predicted before it runs, and the cheapest activation checkpointing that fits.

``estimate(model, *example_args)`` traces one step (forward, loss, backward)
under fake tensors: no memory is used and no kernel runs. Every storage the
step makes is recorded with when it is made and freed; the optimizer's states
and its transient buffers are measured once by running the real optimizer on a
small tensor. The timeline is then composed with what the options change
(sharded states under ZeRO/FSDP, DDP's buckets, the all-gathered unit, a
caching allocator's rounding and segments) into the peak of a step in steady
state, with what is live at that moment.

``plan(model, *example_args, budget_bytes=...)`` searches checkpointing plans
over the model's repeated blocks (the children of its longest nn.ModuleList):
the first k blocks recomputed whole, optionally with the others under a
selective policy that saves matmul and attention outputs (hal's attention op
included) and recomputes the rest. It returns the plan with the least
recomputation whose predicted peak fits the budget, or raises NoPlanFits
naming the smallest peak reachable and what dominates it.

``auto(model, *example_args)`` plans and applies when CHECKPOINT_OPTIMIZATION
(or HAL_CHECKPOINT_OPTIMIZATION) is true. ``python -m hal.torch.memory`` plans
a named model config (hal.torch.models.CONFIGS) without memory. The model of
memory, what it counts and how accurate it was measured to be: docs/memory.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import os
import re
import sys
import warnings
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import flop_registry
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils.weak import WeakIdKeyDictionary

import weakref

__all__ = ["Estimate", "NoPlanFits", "Plan", "apply", "auto", "estimate", "plan", "selective_policy", "parse_bytes"]

GiB = 1 << 30
# What a step's memory is made of; the order of the tables.
CATEGORIES = ("parameters", "gradients", "optimizer states", "DDP buckets", "gathered unit", "inputs",
              "activations", "transient")
_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum")


def parse_bytes(text: Union[str, int, float]) -> int:
    """'80GiB', '1.5 GB', '512MiB', '4096' -> bytes."""
    if isinstance(text, (int, float)):
        return int(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?)B?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"memory size {text!r} is not a number of bytes; write e.g. 80GiB, 1.5GB, 512MiB or 4096")
    number, prefix, binary = match.groups()
    base = 1024 if binary or not prefix else 1000
    return int(float(number) * base ** " KMGT".index(prefix.upper() or " "))


def _format_bytes(count: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(count) >= size:
            return f"{count / size:.2f} {unit}"
    return f"{int(count)} B"


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


# ------------------------------------------------------------------ the storage timeline


@dataclasses.dataclass
class _Storage:
    bytes: int
    phase: str                   # "before" (parameters, inputs), "forward", "backward"
    segment: Tuple[int, str, int]  # (micro-batch, part, block position): where the step was when it was made
    op: str
    block: Optional[str] = None  # the name of the block whose part made it


def _alive(events: Iterable[Tuple[int, int, Tuple[int, str, int]]]) -> set:
    """The storages made and not yet freed after `events`."""
    alive = set()
    for kind, index, _ in events:
        if kind > 0:
            alive.add(index)
        else:
            alive.discard(index)
    return alive


class _StorageTimeline(TorchDispatchMode):
    """Records every storage the ops make (outputs whose storage is new) and when it is freed (a finalizer on the
    storage), in order, each with the part of the step it happened in; with the matmul and attention FLOPs and the
    elements made by other ops in each block's forward.

    Parts of a step, in order: "before" (parameters, inputs), then per micro-batch "pre" (before the first block),
    "fwd" of each block, "post" (after the last block: the loss, and backward until the last block's), "bwd" of
    each block from the last, "end" (after the first block's backward)."""

    def __init__(self):
        super().__init__()
        self.storages: List[_Storage] = []
        self.events: List[Tuple[int, int, Tuple[int, str, int]]] = []  # (+1 made / -1 freed, storage, part)
        self.phase, self.segment = "before", (0, "before", -1)
        self.forward_flops: Dict[int, float] = {}
        self.forward_elements: Dict[int, float] = {}
        self._index = WeakIdKeyDictionary()

    def _freed(self, index: int) -> None:
        self.events.append((-1, index, self.segment))

    def add(self, tensor: torch.Tensor, op: str) -> int:
        storage = tensor.untyped_storage()
        index = self._index.get(storage)
        if index is not None:
            return index
        index = len(self.storages)
        self.storages.append(_Storage(storage.nbytes(), self.phase, self.segment, op))
        self._index[storage] = index
        self.events.append((1, index, self.segment))
        weakref.finalize(storage, self._freed, index)
        return index

    def index_of(self, tensor: torch.Tensor) -> Optional[int]:
        return self._index.get(tensor.untyped_storage())

    def live(self) -> set:
        return _alive(self.events)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket.__name__)
        if self.phase == "forward":
            block = self.segment[2]  # -1 outside the blocks
            counter = flop_registry.get(func._overloadpacket)
            if counter is not None:
                self.forward_flops[block] = self.forward_flops.get(block, 0) + counter(*args, **kwargs, out_val=out)
            else:
                elements = sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
                self.forward_elements[block] = self.forward_elements.get(block, 0) + elements
        # Outputs that alias an input (views, in-place and out= results) are not new memory.
        returns = func._schema.returns
        for position, value in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
            aliases = position < len(returns) and returns[position].alias_info is not None
            for tensor in tree_leaves(value):
                if isinstance(tensor, torch.Tensor) and not aliases:
                    self.add(tensor, name)
        return out


def _register_hal_attention_flops() -> None:
    """FLOP formulas for hal's attention ops, as torch counts its own SDPA (so planners and FlopCounterMode see
    attention)."""
    from torch.utils import flop_counter

    if not hasattr(torch.ops.hal, "sdpa_forward"):
        import hal.torch  # noqa: F401  (defines the ops)
    if torch.ops.hal.sdpa_forward in flop_registry:
        return

    @flop_counter.register_flop_formula(torch.ops.hal.sdpa_forward)
    def _forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    @flop_counter.register_flop_formula(torch.ops.hal.sdpa_backward)
    def _backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
        return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# ------------------------------------------------------------------ blocks and checkpointing


def find_blocks(model: nn.Module) -> List[str]:
    """The qualified names of the children of the model's longest nn.ModuleList (a transformer's layers)."""
    best: List[str] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > len(best):
            best = [f"{name}.{child}" if name else child for child, _ in module.named_children()]
    return best


_SAVED_OPS = None


def _saved_ops() -> set:
    """The ops whose outputs a selective policy keeps: matmuls and attention, aten's and hal's."""
    global _SAVED_OPS
    if _SAVED_OPS is None:
        aten = torch.ops.aten
        names = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward")
        _SAVED_OPS = {getattr(aten, name) for name in names if hasattr(aten, name)}
        import hal.torch  # noqa: F401  (defines hal's ops)
        _SAVED_OPS.add(torch.ops.hal.sdpa_forward)
    return _SAVED_OPS


def selective_policy(ctx, op, *args, **kwargs):
    """torch.utils.checkpoint's selective policy: save matmul and attention outputs (hal::sdpa_forward included,
    which torch's own policies do not know), recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    packet = getattr(op, "_overloadpacket", op)
    return CheckpointPolicy.MUST_SAVE if packet in _saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    return torch_checkpoint.create_selective_checkpoint_contexts(selective_policy)


# A block's keyword arguments that hold a KV cache, under the names transformers' layers use.
_CACHE_KEYWORDS = ("cache", "past_key_values", "past_key_value", "layer_past")


def _without_cache(block: nn.Module, keywords: dict) -> dict:
    """A checkpointed block's recomputation runs its forward a second time: one that writes a KV cache would append
    to it twice (keys of twice the length against the same mask). So in training, as transformers' own gradient
    checkpointing does, the block runs without a cache; layers that only read one (transformers'
    `_can_checkpoint_with_cache`) keep it. Warns when it changed something (once per block class: Python shows a
    warning once per message)."""
    changed = []
    if keywords.get("use_cache"):
        keywords = dict(keywords, use_cache=False)
        changed.append("use_cache=False")
    if not getattr(block, "_can_checkpoint_with_cache", False):
        for name in _CACHE_KEYWORDS:
            if keywords.get(name) is not None:
                keywords = dict(keywords, **{name: None})
                changed.append(f"{name}=None")
    if changed:
        warnings.warn(f"hal.torch.memory: a KV cache cannot pass through a checkpointed {type(block).__name__} in "
                      f"training (its recomputation would write it twice): running it with {', '.join(changed)}",
                      UserWarning, stacklevel=3)
    return keywords


def _torch_checkpoint(function: Callable, *inputs, **keywords):
    return torch_checkpoint.checkpoint(function, *inputs, use_reentrant=False, **keywords)


def _torch_selective_checkpoint(function: Callable, *inputs, **keywords):
    return torch_checkpoint.checkpoint(function, *inputs, use_reentrant=False, context_fn=_selective_context,
                                       **keywords)


def _wrap(block: nn.Module, selective: bool, function: Callable) -> None:
    original = block.__dict__.get("_hal_original_forward", block.forward)
    checkpoint = _torch_selective_checkpoint if selective else function

    def checkpointed(*inputs, **keywords):
        if block.training and torch.is_grad_enabled():
            keywords = _without_cache(block, keywords)
        return checkpoint(original, *inputs, **keywords)
    block._hal_original_forward = original
    block._hal_checkpoint = "selective" if selective else "full"
    block.forward = checkpointed


def _unwrap(block: nn.Module) -> None:
    original = block.__dict__.pop("_hal_original_forward", None)
    block.__dict__.pop("_hal_checkpoint", None)
    if original is not None:
        if getattr(original, "__self__", None) is block and original.__func__ is type(block).forward:
            block.__dict__.pop("forward", None)
        else:
            block.forward = original


def apply(model: nn.Module, checkpoint: Iterable[str] = (), selective: Iterable[str] = (),
          function: Callable = _torch_checkpoint) -> None:
    """Checkpoints the named blocks: whole in `checkpoint`, through `function` (called as function(forward, *inputs,
    **keywords); default non-reentrant torch.utils.checkpoint, or e.g. deepspeed.checkpointing.checkpoint), and
    under selective_policy in `selective` (non-reentrant torch.utils.checkpoint: only torch has a selective form);
    the other blocks' checkpointing by hal is removed."""
    checkpoint, selective = set(checkpoint), set(selective)
    if checkpoint & selective:
        raise ValueError(f"blocks {sorted(checkpoint & selective)} are both fully and selectively checkpointed")
    modules = dict(model.named_modules())
    for name in sorted(checkpoint | selective):
        if name not in modules:
            raise ValueError(f"block {name!r} is not a module of the model; its blocks are {find_blocks(model)}")
    for name, module in modules.items():
        if "_hal_original_forward" in module.__dict__:
            _unwrap(module)
        if name in checkpoint or name in selective:
            _wrap(module, selective=name in selective, function=function)


# What _wrap sets on a block's instance.
_WRAP_ATTRIBUTES = ("forward", "_hal_original_forward", "_hal_checkpoint")


@contextlib.contextmanager
def _applied(model: nn.Module, checkpoint: Sequence[str], selective: Sequence[str]) -> Iterator[None]:
    # Restored as they were, checkpoint function included (a plan applied through DeepSpeed's stays DeepSpeed's).
    previous = {m: {key: m.__dict__[key] for key in _WRAP_ATTRIBUTES if key in m.__dict__} for m in model.modules()}
    apply(model, checkpoint, selective)
    try:
        yield
    finally:
        for module, attributes in previous.items():
            for key in _WRAP_ATTRIBUTES:
                module.__dict__.pop(key, None)
            module.__dict__.update(attributes)


@contextlib.contextmanager
def _block_hooks(model: nn.Module, blocks: Sequence[str], timeline: _StorageTimeline) -> Iterator[None]:
    """Marks the parts of the step: a block's forward from its pre-hook; its backward from when the gradient of its
    output is computed (a tensor hook); "post" after the last block's forward, "end" when the first block's input
    has its gradient."""
    modules = dict(model.named_modules())
    handles = []

    def mark(part: str, position: int):
        def hook(*_):
            timeline.segment = (timeline.segment[0], part, position)
        return hook

    def first_differentiable(value) -> Optional[torch.Tensor]:
        return next((t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.requires_grad), None)

    for position, name in enumerate(blocks):
        def leave(module, args, output, _position=position):
            produced = first_differentiable(output)
            if produced is not None:
                produced.register_hook(mark("bwd", _position))
            if _position == 0 and first_differentiable(args) is not None:
                first_differentiable(args).register_hook(mark("end", -1))
            if _position == len(blocks) - 1:
                mark("post", -1)()
        handles += [modules[name].register_forward_pre_hook(mark("fwd", position)),
                    modules[name].register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# ------------------------------------------------------------------ the optimizer, measured


@functools.lru_cache(maxsize=None)
def _optimizer_profile(optimizer: str, foreach: bool) -> Tuple[float, float]:
    """(state bytes per parameter byte, transient bytes per parameter byte) of torch's optimizer, measured by
    running it on small real tensors: single-tensor implementations (torch's default on CPU) make their transients
    one parameter at a time (per largest parameter), foreach ones for all parameters at once (per total)."""
    params = [torch.zeros(256, 256, requires_grad=True)]  # large against the optimizer's scalars
    for param in params:
        param.grad = torch.ones_like(param)
    opt = _make_optimizer(optimizer, params, foreach)
    total = sum(p.numel() * p.element_size() for p in params)
    largest = max(p.numel() * p.element_size() for p in params)
    timeline = _StorageTimeline()
    with timeline:
        opt.step()
    states = sum(timeline.storages[i].bytes for i in timeline.live())
    timeline = _StorageTimeline()
    live = peak = 0
    with timeline:
        opt.step()
    for kind, index, _ in timeline.events:
        live += kind * timeline.storages[index].bytes
        peak = max(peak, live)
    return states / total, peak / (total if foreach else largest)


def _make_optimizer(name: str, params, foreach: Optional[bool] = None) -> torch.optim.Optimizer:
    if name in ("adamw", "adam"):
        return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(params, lr=1e-3, foreach=foreach)
    if name in ("sgd", "sgd-momentum"):
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "sgd-momentum" else 0.0, foreach=foreach)
    raise ValueError(f"optimizer {name!r} is not modelled; choose one of {', '.join(_OPTIMIZERS)}")


# ------------------------------------------------------------------ a caching allocator, modelled


class _CachingAllocator:
    """The reserved memory of PyTorch's CUDA caching allocator (also HIP's): requests rounded to 512 B; up to 1 MiB
    served from 2 MiB segments, up to 10 MiB from 20 MiB segments, larger ones from their own segment rounded to
    2 MiB; best fit among cached free blocks of the same pool, split when the rest is large enough, merged with free
    neighbours when freed; segments are kept (no empty_cache)."""

    def __init__(self):
        self.reserved = 0
        self.free: Dict[bool, List[List[int]]] = {True: [], False: []}  # small pool? -> [segment, offset, size]
        self.blocks: Dict[int, Tuple[bool, int, int, int]] = {}          # key -> (small, segment, offset, size)
        self.segments = 0

    @staticmethod
    def _round(size: int) -> int:
        return max(512, (size + 511) // 512 * 512)

    def malloc(self, key: int, size: int) -> None:
        size = self._round(size)
        small = size <= (1 << 20)
        pool = self.free[small]
        fits = [block for block in pool if block[2] >= size]
        if fits:
            block = min(fits, key=lambda b: b[2])
            pool.remove(block)
        else:
            segment_size = (2 << 20) if small else (20 << 20) if size < (10 << 20) else \
                (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            self.reserved += segment_size
            self.segments += 1
            block = [self.segments, 0, segment_size]
        rest = block[2] - size
        if rest >= (512 if small else (1 << 20) + 1):
            pool.append([block[0], block[1] + size, rest])
            block[2] = size
        self.blocks[key] = (small, block[0], block[1], block[2])

    def release(self, key: int) -> None:
        small, segment, offset, size = self.blocks.pop(key)
        pool = self.free[small]
        for neighbour in [b for b in pool if b[0] == segment and (b[1] + b[2] == offset or offset + size == b[1])]:
            pool.remove(neighbour)
            offset, size = min(offset, neighbour[1]), size + neighbour[2]
        pool.append([segment, offset, size])


# ------------------------------------------------------------------ options and the traced step


@dataclasses.dataclass(frozen=True)
class Options:
    """What changes a step's memory besides checkpointing; each is modelled (docs/memory.md)."""
    optimizer: str = "adamw"
    param_dtype: Optional[torch.dtype] = None    # None: the model's own
    autocast: Optional[torch.dtype] = None       # compute dtype under torch.autocast
    accumulation: int = 1                        # micro-batches per optimizer step
    world_size: int = 1
    zero: int = 0                                # ZeRO stage 0-3 (DeepSpeed's sharding)
    fsdp: bool = False                           # FSDP2 fully_shard per block: sharded like ZeRO-3
    device: str = "cpu"                          # "cpu" (no allocator model) or "cuda"/"rocm" (caching allocator)
    foreach: Optional[bool] = None               # the optimizer's implementation; None: torch's default there

    def check(self) -> None:
        if self.optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r} is not modelled; choose one of {', '.join(_OPTIMIZERS)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero={self.zero} is not a ZeRO stage; choose 0, 1, 2 or 3")
        if self.world_size < 1 or self.accumulation < 1:
            raise ValueError(f"world_size={self.world_size} and accumulation={self.accumulation} must be >= 1")
        if self.device not in ("cpu", "cuda", "rocm"):
            raise ValueError(f"device {self.device!r} is not modelled; choose cpu, cuda or rocm")

    @property
    def caching_allocator(self) -> bool:
        return self.device in ("cuda", "rocm")

    @property
    def sharded(self) -> Dict[str, bool]:
        """Which model states are divided over the data-parallel ranks."""
        full = self.fsdp or self.zero >= 3
        return {"parameters": full, "gradients": full or self.zero >= 2,
                "optimizer states": full or self.zero >= 1}


@dataclasses.dataclass
class _Trace:
    storages: List[_Storage]
    events: List[Tuple[int, int, Tuple[int, str, int]]]
    category: Dict[int, str]
    blocks: List[str]                  # in the order they run
    backward_at: int                   # the event at which the first micro-batch's backward starts
    param_block: Dict[int, int]        # parameter storage -> the position of the block that owns it
    forward_flops: Dict[int, float]    # per block position
    forward_elements: Dict[int, float]
    element_size: int                  # of the parameters

    @property
    def param_bytes(self) -> List[int]:
        return [self.storages[i].bytes for i, name in self.category.items() if name == "parameters" and
                self.storages[i].op == "parameter"]

    @property
    def block_param_bytes(self) -> int:
        """The largest block's parameters: the unit FSDP all-gathers."""
        per_block: Dict[int, int] = {}
        for index, position in self.param_block.items():
            per_block[position] = per_block.get(position, 0) + self.storages[index].bytes
        return max(per_block.values(), default=0)

    def saved_per_block(self) -> Dict[str, int]:
        """The activations each block's forward leaves for backward (alive when backward starts)."""
        saved = {name: 0 for name in self.blocks}
        for index in _alive(self.events[:self.backward_at]):
            storage = self.storages[index]
            if self.category[index] == "activations" and storage.segment[1] == "fwd":
                saved[self.blocks[storage.segment[2]]] += storage.bytes
        return saved


def _fake_like(tensor: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """A tensor of the same shape and strides, made under the active FakeTensorMode on the CPU (no memory)."""
    dtype = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
    return torch.empty_strided(tuple(tensor.shape), tuple(tensor.stride()), dtype=dtype, device="cpu")


def _default_step(model: nn.Module, *args, **kwargs) -> torch.Tensor:
    """The model's output's .loss (a transformers model given labels), else the sum of its floating tensors."""
    output = model(*args, **kwargs)
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    tensors = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        raise ValueError("the model's output has no floating tensor to take a loss of; pass step=")
    return sum(t.sum() for t in tensors)


def _trace(model: nn.Module, args: tuple, kwargs: dict, options: Options, blocks: Sequence[str],
           checkpoint: Sequence[str], selective: Sequence[str], step: Optional[Callable]) -> _Trace:
    _register_hal_attention_flops()
    # Fake CPU tensors, not the meta device: the CPU's kernels choose their outputs (SDPA's among them) as a real
    # step does, and autocast has the CPU's dispatch keys.
    fake_mode = FakeTensorMode()
    timeline = _StorageTimeline()
    with fake_mode:
        params = {name: _fake_like(p, options.param_dtype).requires_grad_(p.requires_grad)
                  for name, p in model.named_parameters()}
        buffers = {name: _fake_like(b, None) for name, b in model.named_buffers()}
        fake_args, fake_kwargs = tree_map(lambda t: _fake_like(t, None) if isinstance(t, torch.Tensor) else t,
                                          (args, kwargs))
    category: Dict[int, str] = {}
    param_block: Dict[int, int] = {}
    owners = {prefix + ".": position for position, prefix in enumerate(blocks)}
    for name, tensor in list(params.items()) + list(buffers.items()):
        # Optimizer states are kept for the parameters that train.
        index = timeline.add(tensor, "parameter" if name in params and tensor.requires_grad else "buffer")
        category[index] = "parameters"
        owner = next((position for prefix, position in owners.items() if name.startswith(prefix)), None)
        if owner is not None:
            param_block[index] = owner
    for tensor in tree_leaves((fake_args, fake_kwargs)):
        if isinstance(tensor, torch.Tensor):
            category[timeline.add(tensor, "input")] = "inputs"
    state = {**params, **buffers}
    autocast = torch.autocast("cpu", dtype=options.autocast) if options.autocast else contextlib.nullcontext()
    backward_at = 0
    # The fake parameters stay in the model through backward, where checkpointed blocks run again.
    with _applied(model, checkpoint, selective), _block_hooks(model, blocks, timeline), \
            _reparametrize_module(model, state, tie_weights=True, strict=False), fake_mode, timeline:
        for micro in range(min(options.accumulation, 2)):  # the second micro-batch runs with gradients kept
            timeline.phase, timeline.segment = "forward", (micro, "pre", -1)
            with autocast:
                loss = (step or _default_step)(model, *fake_args, **fake_kwargs)
            timeline.phase = "backward"
            if micro == 0:
                backward_at = len(timeline.events)
            loss.backward()
            del loss
    events = list(timeline.events)  # what is freed from here on (the fake model) is not the step's
    for tensor in params.values():
        if tensor.grad is not None:
            category[timeline.index_of(tensor.grad)] = "gradients"
    for index, storage in enumerate(timeline.storages):
        category.setdefault(index, "activations" if storage.phase == "forward" else "transient")
        if storage.segment[2] >= 0:
            storage.block = blocks[storage.segment[2]]
    element = (torch.empty((), dtype=options.param_dtype).element_size() if options.param_dtype else
               next((p.element_size() for p in model.parameters() if p.is_floating_point()), 4))
    return _Trace(timeline.storages, events, category, list(blocks), backward_at, param_block,
                  timeline.forward_flops, timeline.forward_elements, element)


class _NotRepeating(Exception):
    """The blocks of a run do not make the same storages in the same order: a trace cannot stand for more."""


def _expand(trace: _Trace, copies: Dict[int, int], names: Sequence[str]) -> _Trace:
    """The trace of the model with block `position` repeated copies[position] more times (an interior block of a
    run of identical blocks), named `names`: each part of a copy is the original's part, and a storage a part
    refers to in another block is the one made in the block as far away in the longer model."""
    slots = [position for position in range(len(trace.blocks)) for _ in range(1 + copies.get(position, 0))]
    first_slot = {position: slots.index(position) for position in range(len(trace.blocks))}
    made_in: Dict[Tuple, int] = {}   # (micro, part, position, ordinal) -> storage
    ordinal: Dict[int, int] = {}     # storage -> its ordinal in the part that made it
    made_so_far: Dict[Tuple, int] = {}
    parts: Dict[Tuple, List[int]] = {}  # part -> its events' positions
    for position, (kind, index, segment) in enumerate(trace.events):
        parts.setdefault(segment, []).append(position)
        if kind > 0 and segment[2] >= 0:
            ordinal[index] = made_so_far.get(segment, 0)
            made_so_far[segment] = ordinal[index] + 1
            made_in[segment + (ordinal[index],)] = index
    storages: List[_Storage] = []
    category: Dict[int, str] = {}
    param_block: Dict[int, int] = {}
    keys: Dict[Tuple, int] = {}
    events = []
    backward_at = 0

    def storage_for(index: int, slot: Optional[int]) -> int:
        """The new storage standing for `index` at `slot` (None: a storage outside the blocks)."""
        original = trace.storages[index]
        if index in trace.param_block:
            key: Tuple = ("parameter", index, slot)
            source, segment = index, original.segment
        elif slot is None or original.segment[2] < 0:
            key, source, segment = ("outside", index), index, original.segment
        else:
            key = original.segment[:2] + (ordinal[index], slot)
            source = made_in.get(original.segment[:2] + (slots[slot], ordinal[index]))
            if source is None:
                raise _NotRepeating(f"{names[slot]} makes fewer storages than {trace.blocks[original.segment[2]]}")
            segment = original.segment[:2] + (slot,)
        if key not in keys:
            keys[key] = len(storages)
            storages.append(dataclasses.replace(trace.storages[source], segment=segment,
                                                block=names[slot] if slot is not None else None))
            category[keys[key]] = trace.category[source]
        return keys[key]

    def emit(event_positions: List[int], slot: Optional[int], origin: int) -> None:
        nonlocal backward_at
        for position in event_positions:
            kind, index, segment = trace.events[position]
            if index in trace.param_block:
                continue  # made up front, below; never freed in a step
            made_by = trace.storages[index].segment[2]
            if made_by < 0:
                target = None
            elif slot is None:  # a part outside the blocks refers to the block in its own place
                target = first_slot[made_by] + copies.get(made_by, 0)
            else:
                target = slot + (made_by - origin)
                if not 0 <= target < len(slots):
                    raise _NotRepeating(f"a storage of {trace.blocks[made_by]} is used {made_by - origin} blocks away")
            if position == trace.backward_at:
                backward_at = len(events)
            events.append((kind, storage_for(index, target), segment[:2] + ((-1 if slot is None else slot),)))

    # Parameters in the traced order, a repeated block's own repeated with it (block by block, as the deep model
    # makes them).
    before = parts.pop((0, "before", -1), [])
    group: List[int] = []
    for position in before + [None]:
        index = trace.events[position][1] if position is not None else None
        owner = trace.param_block.get(index)
        if group and (owner is None or owner != trace.param_block[group[0]]):
            first = first_slot[trace.param_block[group[0]]]
            for slot in range(first, first + 1 + copies.get(trace.param_block[group[0]], 0)):
                for member in group:
                    param_block[storage_for(member, slot)] = slot
                    events.append((1, keys[("parameter", member, slot)], (0, "before", -1)))
            group = []
        if owner is not None:
            group.append(index)
        elif position is not None:
            emit([position], None, -1)
    micros = sorted({segment[0] for segment in parts})
    for micro in micros:
        order = [(micro, "before", -1, None), (micro, "pre", -1, None)]
        order += [(micro, "fwd", slots[slot], slot) for slot in range(len(slots))]
        order += [(micro, "post", -1, None)]
        order += [(micro, "bwd", slots[slot], slot) for slot in reversed(range(len(slots)))]
        order += [(micro, "end", -1, None)]
        for micro_, part, position, slot in order:
            emit(parts.get((micro_, part, position), []), slot, position)
    origin = {slot: slots[slot] if slot >= 0 else -1 for slot in range(-1, len(slots))}
    flops = {slot: trace.forward_flops.get(position, 0.0) for slot, position in origin.items()}
    elements = {slot: trace.forward_elements.get(position, 0.0) for slot, position in origin.items()}
    return _Trace(storages, events, category, list(names), backward_at, param_block, flops, elements,
                  trace.element_size)


def _repeating(model: nn.Module, blocks: Sequence[str]) -> bool:
    """True when the blocks are the children of one nn.ModuleList, of one class with the same parameters."""
    parents = {name.rpartition(".")[0] for name in blocks}
    if len(parents) != 1 or not isinstance(model.get_submodule(next(iter(parents))), nn.ModuleList):
        return False
    modules = dict(model.named_modules())
    shapes = {(type(modules[name]), tuple((n, p.shape, p.dtype) for n, p in modules[name].named_parameters()))
              for name in blocks}
    return len(shapes) == 1


@contextlib.contextmanager
def _keeping(model: nn.Module, blocks: Sequence[str], keep: Sequence[int]) -> Iterator[List[str]]:
    """The model with only the blocks at positions `keep` in its nn.ModuleList; yields their names there."""
    parent = model.get_submodule(blocks[0].rpartition(".")[0])
    children = parent._modules
    chosen = [children[blocks[position].rpartition(".")[2]] for position in keep]
    parent._modules = type(children)((str(i), module) for i, module in enumerate(chosen))
    try:
        prefix = blocks[0].rpartition(".")[0]
        yield [f"{prefix}.{i}" if prefix else str(i) for i in range(len(keep))]
    finally:
        parent._modules = children


RUN = 3  # blocks of a run traced: the first, one interior block that stands for the others, the last


def _trace_prefix(model: nn.Module, args: tuple, kwargs: dict, options: Options, blocks: Sequence[str],
                  whole: int, rest_selective: bool, step: Optional[Callable]) -> _Trace:
    """The step with the first `whole` blocks checkpointed whole and the rest not (or selectively). With repeated
    blocks, a model of at most RUN blocks per run is traced and its interior blocks repeated (_expand): the cost
    does not grow with the depth, and the result is the deep model's trace."""
    count = len(blocks)
    whole_names, rest_names = list(blocks[:whole]), list(blocks[whole:]) if rest_selective else []
    if count <= 2 * RUN or not _repeating(model, blocks):
        return _trace(model, args, kwargs, options, blocks, whole_names, rest_names, step)
    head, tail = min(whole, RUN), min(count - whole, RUN)
    copies = {position: extra for position, extra in ((1, whole - RUN), (head + 1, count - whole - RUN)) if extra > 0}
    with _keeping(model, blocks, list(range(head)) + list(range(whole, whole + tail))) as names:
        trace = _trace(model, args, kwargs, options, names, names[:head], names[head:] if rest_selective else [],
                       step)
    try:
        return _expand(trace, copies, blocks)
    except _NotRepeating:  # the blocks differ in what they make after all: trace the whole model
        return _trace(model, args, kwargs, options, blocks, whole_names, rest_names, step)


# ------------------------------------------------------------------ composing a step


@dataclasses.dataclass
class Estimate:
    """The predicted peak of one training step in steady state (optimizer states already made)."""
    peak_bytes: int                 # reserved under a caching allocator (what runs out), else live tensors
    allocated_bytes: int            # live tensors at their peak
    breakdown: Dict[str, int]       # what is live at the peak, by category
    moment: str                     # where the step is at the peak
    saved_per_block: Dict[str, int]
    largest_transient_bytes: int
    checkpoint: Tuple[str, ...]
    selective: Tuple[str, ...]
    options: Options

    def __str__(self) -> str:
        rows = [("category at the peak", "bytes")]
        rows += [(name, _format_bytes(self.breakdown.get(name, 0))) for name in CATEGORIES
                 if self.breakdown.get(name, 0)]
        rows.append(("total (live tensors)", _format_bytes(self.allocated_bytes)))
        if self.options.caching_allocator:
            rows.append((f"reserved ({self.options.device} caching allocator)", _format_bytes(self.peak_bytes)))
        rows.append(("largest transient tensor", _format_bytes(self.largest_transient_bytes)))
        saved = [(f"  saved by {name}", _format_bytes(b)) for name, b in self.saved_per_block.items()]
        if len(saved) > 8:
            saved = saved[:3] + [("  ...", "")] + saved[-3:]
        rows += [("saved activations per block (no checkpointing)", "")] + saved if saved else []
        width = max(len(r[0]) for r in rows)
        text = "\n".join(f"{a:<{width}}  {b:>12}" for a, b in rows)
        return (f"predicted peak {_format_bytes(self.peak_bytes)} at {self.moment}\n{text}\n"
                f"checkpointed: {_describe_set(self.checkpoint, self.selective)}")


def _describe_set(checkpoint: Sequence[str], selective: Sequence[str]) -> str:
    parts = []
    if checkpoint:
        parts.append(f"{len(checkpoint)} block(s) whole ({_span(checkpoint)})")
    if selective:
        parts.append(f"{len(selective)} selective ({_span(selective)})")
    return ", ".join(parts) or "nothing"


def _span(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


def _compose(trace: _Trace, options: Options, checkpoint: Sequence[str], selective: Sequence[str]) -> Estimate:
    world = options.world_size
    sharded = options.sharded if world > 1 else {}
    scale = {name: 1.0 / world if sharded.get(name) else 1.0 for name in CATEGORIES}
    state_ratio, transient_ratio = _optimizer_profile(options.optimizer, _foreach(options))
    param_total = sum(trace.param_bytes)
    allocator = _CachingAllocator() if options.caching_allocator else None
    live = {name: 0.0 for name in CATEGORIES}
    sizes: Dict[int, float] = {}
    key = iter(range(-1, -10 ** 9, -1))  # allocator keys of the modelled (not traced) allocations

    def make(size: float, name: str, handle: Optional[int] = None) -> None:
        live[name] += size
        if allocator is not None and size > 0:
            allocator.malloc(next(key) if handle is None else handle, int(size))

    # Made before the step: parameters and inputs (traced), then the optimizer states and DDP's buckets.
    for kind, index, _ in trace.events:
        if kind > 0 and trace.storages[index].phase == "before":
            name = trace.category[index]
            sizes[index] = trace.storages[index].bytes * scale[name]
            make(sizes[index], name, index)
    for size in trace.param_bytes:
        make(size * state_ratio * scale["optimizer states"], "optimizer states")
    if world > 1 and not options.fsdp and options.zero == 0:
        make(param_total, "DDP buckets")  # torch's DDP copies gradients into buckets of their size
    gathered_forward = gathered_backward = 0.0
    if world > 1 and sharded.get("parameters"):  # the unit being used and the next one, prefetched
        gathered_forward = 2 * trace.block_param_bytes * (1 - 1 / world)
        gathered_backward = gathered_forward + trace.block_param_bytes * (1 - 1 / world)  # its unsharded gradients

    best, best_breakdown, moment = -1.0, {}, ""
    reserved_peak = allocator.reserved if allocator else 0

    def observe(label: str, extra: float) -> None:
        nonlocal best, best_breakdown, moment, reserved_peak
        total = sum(live.values()) + extra
        if total > best:
            best, best_breakdown, moment = total, dict(live, **{"gathered unit": extra}), label
        if allocator is not None:
            reserved_peak = max(reserved_peak, allocator.reserved + extra)

    largest_transient = 0
    for kind, index, _ in trace.events:
        storage = trace.storages[index]
        if storage.phase == "before":
            continue
        name = trace.category[index]
        if kind > 0:
            sizes[index] = storage.bytes * scale[name]
            make(sizes[index], name, index)
            extra = gathered_forward if storage.phase == "forward" else gathered_backward
            observe(f"{storage.phase} ({(storage.block or 'outside the blocks')}, {storage.op})", extra)
        else:
            live[name] -= sizes[index]
            if allocator is not None and sizes[index] > 0:
                allocator.release(index)
            if name == "transient" or name == "activations":
                largest_transient = max(largest_transient, storage.bytes)
    # The optimizer step: its transients for the largest parameter (single-tensor) or all of them (foreach).
    largest = max(trace.param_bytes, default=0)
    transient = (param_total if _foreach(options) else largest) * transient_ratio * scale["optimizer states"]
    make(transient, "transient")
    observe("optimizer step", 0.0)
    allocated = int(round(best))
    return Estimate(int(round(reserved_peak)) if allocator else allocated, allocated,
                    {k: int(round(v)) for k, v in best_breakdown.items()}, moment, trace.saved_per_block(),
                    largest_transient, tuple(checkpoint), tuple(selective), options)


def _foreach(options: Options) -> bool:
    """torch's optimizers default to foreach on CUDA (and ROCm), to one tensor at a time on the CPU."""
    return options.foreach if options.foreach is not None else options.caching_allocator


def _options(options: dict) -> Options:
    fields = {f.name for f in dataclasses.fields(Options)}
    unknown = set(options) - fields
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}; the options are {sorted(fields)}")
    result = Options(**options)
    result.check()
    return result


def estimate(model: nn.Module, *example_args, checkpoint: Union[Sequence[str], bool] = (),
             selective: Union[Sequence[str], bool] = (), blocks: Optional[Sequence[str]] = None,
             step: Optional[Callable] = None, model_kwargs: Optional[dict] = None, **options) -> Estimate:
    """The peak memory of one training step of `model` on `example_args` (step(model, *example_args,
    **model_kwargs) -> loss -- default: the output's .loss, else the sum of its floating tensors -- then backward and
    the optimizer step), traced under fake tensors.

    checkpoint / selective: qualified block names (True: every block) recomputed whole / under selective_policy.
    Options (see Options): optimizer ("adamw", "adam", "sgd", "sgd-momentum"), param_dtype, autocast,
    accumulation, world_size, zero (0-3), fsdp, device ("cpu", "cuda", "rocm"), foreach.
    """
    opts = _options(options)
    blocks = list(blocks) if blocks is not None else find_blocks(model)
    checkpoint = list(blocks) if checkpoint is True else list(checkpoint or ())
    selective = list(blocks) if selective is True else list(selective or ())
    whole = len(checkpoint)
    if checkpoint == blocks[:whole] and selective in ([], blocks[whole:]):  # a prefix: the depth costs nothing
        trace = _trace_prefix(model, example_args, model_kwargs or {}, opts, blocks, whole, bool(selective), step)
    else:
        trace = _trace(model, example_args, model_kwargs or {}, opts, blocks, checkpoint, selective, step)
    return _compose(trace, opts, checkpoint, selective)


# ------------------------------------------------------------------ planning


class NoPlanFits(RuntimeError):
    """No checkpointing plan brings the predicted peak under the budget."""


@dataclasses.dataclass
class Candidate:
    checkpoint: Tuple[str, ...]
    selective: Tuple[str, ...]
    estimate: Estimate
    recompute_flops: float
    fits: bool


@dataclasses.dataclass
class Plan:
    """The checkpointing with the least recomputation whose predicted peak fits the budget."""
    checkpoint: Tuple[str, ...]
    selective: Tuple[str, ...]
    predicted_peak_bytes: int
    recompute_flops: float
    budget_bytes: int
    budget_origin: str
    blocks: Tuple[str, ...]
    candidates: List[Candidate]
    step_flops: float

    def apply(self, model: nn.Module, function: Callable = _torch_checkpoint) -> nn.Module:
        """Checkpoints the plan's blocks of `model` (the whole ones through `function`, as the module's apply does);
        returns the model."""
        apply(model, self.checkpoint, self.selective, function)
        return model

    def deepspeed_config(self) -> dict:
        """DeepSpeed's activation_checkpointing section for the plan (DeepSpeed checkpoints whole layers: a
        selective plan counts its selective blocks as not checkpointed) and ZeRO-3's prefetch setting. The section
        acts only through deepspeed.checkpointing.configure, on blocks run through deepspeed.checkpointing.checkpoint
        (self.apply(model, deepspeed.checkpointing.checkpoint))."""
        return {"activation_checkpointing": {"partition_activations": False, "cpu_checkpointing": False,
                                             "contiguous_memory_optimization": False,
                                             "number_checkpoints": len(self.checkpoint),
                                             "synchronize_checkpoint_boundary": False, "profile": False},
                "zero_optimization": {"stage3_prefetch_bucket_size": "auto"}}

    def __str__(self) -> str:
        rows = [("checkpointed", "predicted peak", "extra FLOPs", "fits")]
        for c in sorted(self.candidates, key=lambda c: (c.recompute_flops, -c.estimate.peak_bytes)):
            chosen = c.checkpoint == self.checkpoint and c.selective == self.selective
            rows.append((("-> " if chosen else "   ") + _describe_set(c.checkpoint, c.selective),
                         _format_bytes(c.estimate.peak_bytes),
                         f"{c.recompute_flops / 1e12:.3f} T ({c.recompute_flops / max(self.step_flops, 1):.0%})",
                         "yes" if c.fits else "no"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        table = "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}"
                          for r in rows)
        return (f"budget {_format_bytes(self.budget_bytes)} ({self.budget_origin}); {len(self.blocks)} blocks\n"
                f"{table}\nplan: checkpoint {_describe_set(self.checkpoint, self.selective)}, predicted peak "
                f"{_format_bytes(self.predicted_peak_bytes)}, recompute {self.recompute_flops / 1e12:.3f} TFLOP "
                f"per step")


def default_budget(options: Options, headroom: float = 0.10) -> Tuple[int, str]:
    """The hal device's free memory less `headroom` of it: the GPU the job runs on, or the host."""
    import hal

    runtime = hal.runtime()
    device_id = "host:0"
    if options.device in ("cuda", "rocm") and torch.cuda.is_available():
        import hal.torch as ht
        device = ht._hal_device(torch.device("cuda", torch.cuda.current_device()))
        device_id = device.id if device is not None else device_id
    device = runtime.device(device_id)
    free = device.free_memory
    return int(free * (1 - headroom)), f"{device_id} free {_format_bytes(free)} less {headroom:.0%} headroom"


def _dominant(est: Estimate) -> str:
    name = max(est.breakdown, key=lambda k: est.breakdown[k])
    advice = {"optimizer states": "shard them (ZeRO-1 or more) or use SGD",
              "gradients": "shard them (ZeRO-2 or more)",
              "parameters": "shard them (ZeRO-3 or FSDP) or keep them in a lower precision",
              "DDP buckets": "use ZeRO or FSDP instead of DDP",
              "gathered unit": "use smaller FSDP units",
              "inputs": "use a smaller batch",
              "activations": "use a smaller batch or a shorter sequence",
              "transient": "use a smaller batch or a shorter sequence"}[name]
    return f"{name} {_format_bytes(est.breakdown[name])} of {_format_bytes(est.allocated_bytes)}: {advice}"


def plan(model: nn.Module, *example_args, budget_bytes: Union[int, str, None] = None,
         blocks: Optional[Sequence[str]] = None, step: Optional[Callable] = None,
         model_kwargs: Optional[dict] = None, selective: bool = True, **options) -> Plan:
    """The plan with the least recomputation whose predicted peak fits budget_bytes (default: the hal device's
    free memory less 10%). Candidates: the first k blocks checkpointed whole, the others not checkpointed or (with
    selective=True) under selective_policy; k found by bisection (the peak falls as k grows)."""
    opts = _options(options)
    if budget_bytes is None:
        budget, origin = default_budget(opts)
    else:
        budget, origin = parse_bytes(budget_bytes), "given"
    blocks = list(blocks) if blocks is not None else find_blocks(model)
    if not blocks:
        raise ValueError("the model has no nn.ModuleList of blocks to checkpoint; name them with blocks=")
    kwargs = model_kwargs or {}
    baseline = _trace_prefix(model, example_args, kwargs, opts, blocks, 0, False, step)
    block_flops = [baseline.forward_flops.get(position, 0.0) for position in range(len(blocks))]
    pointwise = [baseline.forward_elements.get(position, 0.0) for position in range(len(blocks))]
    step_flops = 3 * sum(baseline.forward_flops.values())
    cache: Dict[Tuple[Tuple[str, ...], Tuple[str, ...]], Candidate] = {}

    def candidate(k: int, rest_selective: bool) -> Candidate:
        whole, rest = tuple(blocks[:k]), tuple(blocks[k:]) if rest_selective else ()
        if (whole, rest) not in cache:
            trace = baseline if not (whole or rest) else _trace_prefix(model, example_args, kwargs, opts, blocks, k,
                                                                       rest_selective, step)
            est = _compose(trace, opts, whole, rest)
            flops = sum(block_flops[:k]) + sum(pointwise[:k]) + (sum(pointwise[k:]) if rest_selective else 0)
            cache[(whole, rest)] = Candidate(whole, rest, est, flops, est.peak_bytes <= budget)
        return cache[(whole, rest)]

    def smallest_fitting(rest_selective: bool) -> Optional[Candidate]:
        """The least k whose candidate fits: the peak falls about linearly in k (the blocks repeat), so k is
        guessed by interpolation between a bracket that does not fit and one that does, then checked."""
        low, high = 0, len(blocks)
        if candidate(low, rest_selective).fits:
            return candidate(low, rest_selective)
        if not candidate(high, rest_selective).fits:
            return None
        while high - low > 1:  # candidate(low) does not fit, candidate(high) does
            above = candidate(low, rest_selective).estimate.peak_bytes - budget
            below = budget - candidate(high, rest_selective).estimate.peak_bytes
            guess = low + math.ceil((high - low) * above / max(above + below, 1))
            guess = min(max(guess, low + 1), high - 1)
            if candidate(guess, rest_selective).fits:
                high = guess
            else:
                low = guess
        return candidate(high, rest_selective)

    candidate(len(blocks), False)  # every block whole, and every block selective: the table's bounds
    if selective:
        candidate(0, True)
    choices = [c for c in (smallest_fitting(False), smallest_fitting(True) if selective else None) if c]
    if not choices:
        smallest = min(cache.values(), key=lambda c: c.estimate.peak_bytes)
        raise NoPlanFits(f"no checkpointing fits the budget of {_format_bytes(budget)} ({origin}): the smallest "
                         f"peak reachable is {_format_bytes(smallest.estimate.peak_bytes)} (checkpointing "
                         f"{_describe_set(smallest.checkpoint, smallest.selective)}); "
                         f"{_dominant(smallest.estimate)}")
    best = min(choices, key=lambda c: (c.recompute_flops, c.estimate.peak_bytes))
    return Plan(best.checkpoint, best.selective, best.estimate.peak_bytes, best.recompute_flops, budget, origin,
                tuple(blocks), list(cache.values()), step_flops)


_logged = False


def auto(model: nn.Module, *example_args, **keywords) -> Optional[Plan]:
    """Under CHECKPOINT_OPTIMIZATION=true (or HAL_CHECKPOINT_OPTIMIZATION=true): plans (budget: HAL_MEMORY_BUDGET
    when set, else plan's default), applies the plan to `model` and logs it once to stderr. Otherwise None."""
    global _logged
    if not (_truthy("CHECKPOINT_OPTIMIZATION") or _truthy("HAL_CHECKPOINT_OPTIMIZATION")):
        return None
    if "budget_bytes" not in keywords and os.environ.get("HAL_MEMORY_BUDGET"):
        keywords["budget_bytes"] = os.environ["HAL_MEMORY_BUDGET"]
    result = plan(model, *example_args, **keywords)
    result.apply(model)
    if not _logged:
        _logged = True
        print(f"hal.torch.memory (CHECKPOINT_OPTIMIZATION): {result}", file=sys.stderr, flush=True)
    return result


# ------------------------------------------------------------------ the command line


_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
           "fp16": torch.float16, "float16": torch.float16}


def main(argv: Optional[Sequence[str]] = None) -> int:
    from hal.torch.models import CONFIGS, Llama

    parser = argparse.ArgumentParser(prog="python -m hal.torch.memory",
                                     description="Predict a named model's training-step peak memory and plan "
                                                 "activation checkpointing, without memory (fake tensors).")
    parser.add_argument("--model", choices=sorted(CONFIGS), default="llama3-8b")
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--layers", type=int, help="fewer layers than the published config")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bf16", help="parameter dtype")
    parser.add_argument("--autocast", choices=sorted(_DTYPES), help="compute dtype under torch.autocast")
    parser.add_argument("--optimizer", choices=_OPTIMIZERS, default="adamw")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3))
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--device", choices=("cuda", "rocm", "cpu"), default="cuda",
                        help="whose allocator to model (cuda/rocm: the caching allocator's reserved memory)")
    parser.add_argument("--device-memory", help="the budget, e.g. 80GiB (default: hal's device's free memory)")
    parser.add_argument("--no-selective", action="store_true", help="consider whole-block checkpointing only")
    args = parser.parse_args(argv)

    config = CONFIGS[args.model]
    if args.layers:
        config = config.scaled(layers=args.layers)
    with torch.device("meta"):
        model = Llama(config, max_seq=args.seq)
    tokens = torch.zeros((args.batch, args.seq + 1), dtype=torch.long, device="meta")
    options = dict(optimizer=args.optimizer, param_dtype=_DTYPES[args.dtype],
                   autocast=_DTYPES[args.autocast] if args.autocast else None, world_size=args.world_size,
                   zero=args.zero, fsdp=args.fsdp, accumulation=args.accumulation, device=args.device)
    print(f"{config.name}: hidden {config.hidden}, {config.layers} layers, {config.heads} heads "
          f"({config.kv_heads} KV), FFN {config.ffn}, vocab {config.vocab}; seq {args.seq}, batch {args.batch}, "
          f"params {args.dtype}" + (f", autocast {args.autocast}" if args.autocast else "") +
          f", {args.optimizer}, world size {args.world_size}" + (f", ZeRO-{args.zero}" if args.zero else "") +
          (", FSDP2" if args.fsdp else "") + f", {args.device} allocator")
    try:
        result = plan(model, tokens, budget_bytes=args.device_memory, selective=not args.no_selective,
                      step=lambda m, t: m.loss(t), **options)
    except NoPlanFits as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
