"""hal.transformers: hal's attention for Hugging Face transformers models, by name.

``import hal.transformers`` registers ``"hal"`` with transformers'
``AttentionInterface`` (the attention function) and ``AttentionMaskInterface``
(the masks: those of ``"sdpa"``; a name registered with the first alone gets no
padding mask at all, and padded batches go wrong), so that::

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="hal")
    model.set_attn_implementation("hal")          # or on a model already made
    print(hal.transformers.describe(model))       # per layer: how many calls hal ran, and what fell back and why

run every attention layer through ``hal.torch.scaled_dot_product_attention``.
A mask that is exactly all-visible or causal (what transformers passes
during generation and for unpadded batches) is checked and run as such; a
padding, sliding-window or packed-sequence mask (one interval of visible
keys per query) runs on hal's kernels as per-query key ranges
(``hal.torch.mask_key_ranges``). A call hal cannot run (any other mask;
dropout; a position bias; a head dim or dtype hal refuses) runs
transformers' own SDPA attention instead, with the reason counted per layer
and warned once (``hal.torch.FallbackWarning``). ``output_attentions`` is
refused as transformers' "sdpa" refuses it (a warning, no weights).

``MemoryPlanCallback`` (a ``TrainerCallback``) plans activation checkpointing
when training starts, for the model and the first batch the Trainer will use
(``hal.torch.memory.plan``), applies it (under DeepSpeed: in its
``activation_checkpointing`` section and through its checkpoint function) and
logs the plan; every Trainer made after ``import hal.transformers`` has one,
which acts when
``CHECKPOINT_OPTIMIZATION=true`` (or ``HAL_CHECKPOINT_OPTIMIZATION``; budget
``HAL_MEMORY_BUDGET``, else the device's free memory less 10%). Tested with
transformers 5.25 (``AttentionInterface`` and ``AttentionMaskInterface``, which
older releases lack: importing this module there raises ImportError naming
the minimum version).
"""

from __future__ import annotations

import collections
import os
import sys
import warnings
import weakref
from typing import Dict, Optional, Union

import torch
from torch._subclasses.fake_tensor import FakeTensor

import hal.torch as _hal_torch
from hal.torch import memory as _memory

try:
    import transformers.trainer as _trainer
    from transformers import AttentionInterface, TrainerCallback
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError as _error:  # transformers missing, or older than its attention registries
    raise ImportError(f"hal.transformers needs transformers >= 4.53 (AttentionInterface and AttentionMaskInterface); "
                      f"import failed: {_error}") from None

__all__ = ["NAME", "MemoryPlanCallback", "attention_forward", "calls_of", "describe", "mask_pattern", "reset_counts"]

NAME = "hal"

# Per attention module: {"hal": calls hal ran, "<reason>": calls that ran transformers' SDPA for that reason}.
_calls: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_warned: set = set()


def mask_pattern(mask: torch.Tensor, q_length: int, kv_length: int) -> Optional[bool]:
    """What a (batch, 1 or heads, q, kv) mask (boolean: True attends; additive: 0 attends, a large negative value
    does not) asks for, checked element by element: False when every query sees every key, True when it is exactly
    the causal pattern of q == kv (query i sees keys 0..i), None for anything else (padding, sliding windows,
    packed sequences: hal runs those as key ranges). Read from the mask's key ranges (hal.torch.mask_key_ranges,
    kept per mask, so the layers that share a mask read it once). A fake mask (a trace for memory or shapes) has
    no values to check: None."""
    if isinstance(mask, FakeTensor) or mask.dim() < 2:
        return None
    ranges = _hal_torch.mask_key_ranges(mask, mask.shape[0] if mask.dim() == 4 else 1, q_length, kv_length)
    if ranges is None or not bool((ranges[..., 0] == 0).all()):
        return None
    ends = ranges[..., 1]
    if bool((ends == kv_length).all()):
        return False
    if q_length == kv_length and bool((ends == torch.arange(1, q_length + 1, device=ends.device)).all()):
        return True
    return None


def _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs) -> Optional[str]:
    if dropout:
        return f"attention dropout {dropout}: hal's attention has no dropout"
    if kwargs.get("position_bias") is not None:
        return "a position bias"
    if kwargs.get("softcap") is not None:
        return "logit soft-capping"
    reasons = _hal_torch.fallback_reasons(query, key, value, attn_mask=attention_mask,
                                          enable_gqa=key.shape[1] != query.shape[1])
    return "; ".join(reasons) if reasons else None


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs):
    """transformers' attention-function contract: query (batch, heads, q, dim), key and value (batch, kv heads, k,
    dim) -> (output (batch, q, heads, dim), None)."""
    if attention_mask is not None:  # transformers passes masks that are plain causal or all-visible too
        pattern = mask_pattern(attention_mask, query.shape[2], key.shape[2])
        if pattern is not None:
            attention_mask, is_causal = None, pattern
    reason = _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs)
    counts = _calls.setdefault(module, collections.Counter())
    if reason is not None:
        counts[reason] += 1
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(f"hal.transformers: transformers' SDPA ran instead of hal's for {reason}",
                          _hal_torch.FallbackWarning, stacklevel=2)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    if kwargs.get("output_attentions", False):
        warnings.warn("hal.transformers: output_attentions=True gives no attention weights (as with 'sdpa'); use "
                      "attn_implementation='eager' for them", UserWarning, stacklevel=2)
    q_length, kv_length = query.shape[2], key.shape[2]
    if attention_mask is not None:  # padding, a sliding window or packed sequences: hal runs it as key ranges
        causal = False
    else:
        causal = (is_causal if is_causal is not None else getattr(module, "is_causal", True)) and q_length > 1
    if causal and kv_length > q_length:  # a prefill into an empty static cache: the keys past the queries are unset
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    out = _hal_torch.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, is_causal=causal,
                                                  scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    counts["hal"] += 1
    return out.transpose(1, 2).contiguous(), None


def describe(model: torch.nn.Module) -> str:
    """One line per attention layer of the model: the calls hal ran and those that fell back, with the reasons."""
    lines = []
    for name, module in model.named_modules():
        counts: Dict[str, int] = dict(_calls.get(module, {}))
        if not counts:
            continue
        ran = counts.pop("hal", 0)
        others = "; ".join(f"{count} x {reason}" for reason, count in counts.items())
        lines.append(f"{name}: hal ran {ran} call(s)" + (f"; transformers' SDPA ran {others}" if others else ""))
    return "\n".join(lines) if lines else "no attention layer has run through 'hal' yet"


def calls_of(module: torch.nn.Module) -> Dict[str, int]:
    """The counts describe() prints, for one attention module."""
    return dict(_calls.get(module, {}))


def reset_counts() -> None:
    _calls.clear()


# ------------------------------------------------------------------ the memory planner in the Trainer

# The Trainer's `optim` names hal.torch.memory models, by prefix.
_OPTIMIZERS = {"adamw": "adamw", "adam": "adam", "sgd": "sgd"}

# Models a plan was applied to: one plan per model, however many callbacks a Trainer has.
_planned: "weakref.WeakSet" = weakref.WeakSet()


class MemoryPlanCallback(TrainerCallback):
    """Plans activation checkpointing when training starts and applies it.

    With the first batch of the Trainer's own dataloader, ``hal.torch.memory.plan`` predicts the peak of a step
    as the Trainer runs it (its optimizer, ``bf16``/``fp16`` autocast, gradient accumulation, data-parallel world
    size, DeepSpeed's ZeRO stage, the device's caching allocator) without running the model, chooses the
    checkpointing of the model's repeated blocks with the least recomputation that fits ``budget_bytes`` (default:
    ``HAL_MEMORY_BUDGET``, else the device's free memory less 10%), wraps those blocks and logs the plan to stderr;
    ``self.plan`` keeps it.
    ``enabled=None`` (the default one every Trainer gets) acts only under ``CHECKPOINT_OPTIMIZATION=true`` or
    ``HAL_CHECKPOINT_OPTIMIZATION=true``; ``MemoryPlanCallback(enabled=True)`` always. When no plan fits, training
    stops before its first step with ``hal.torch.memory.NoPlanFits`` (naming the smallest peak reachable and what
    dominates it) rather than running out of memory later. Left alone (logged): an optimizer the planner does not
    model and a Trainer with ``gradient_checkpointing`` (transformers checkpoints already).

    With DeepSpeed in the Trainer's arguments, the plan fills the ``activation_checkpointing`` section of the
    config the Trainer hands DeepSpeed (``args.hf_deepspeed_config.config``; values the user set there are kept,
    and the log says which were filled), configures ``deepspeed.checkpointing`` from that config and runs the
    plan's whole blocks through ``deepspeed.checkpointing.checkpoint`` (selective blocks stay on torch's selective
    checkpoint: DeepSpeed's has no selective form). The Trainer makes DeepSpeed's engine before ``on_train_begin``,
    so the engine has been given the config before the section is filled (the log says so); that loses nothing,
    since the engine never reads the section: only ``deepspeed.checkpointing.configure`` does, and it checkpoints
    nothing by itself."""

    def __init__(self, budget_bytes: Union[int, str, None] = None, enabled: Optional[bool] = None):
        self.budget_bytes = budget_bytes
        self.enabled = enabled
        self.plan: Optional[_memory.Plan] = None

    def _active(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return _memory._truthy("CHECKPOINT_OPTIMIZATION") or _memory._truthy("HAL_CHECKPOINT_OPTIMIZATION")

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        if not self._active() or model is None or model in _planned:
            return
        if args.gradient_checkpointing:
            self._log("the Trainer's gradient_checkpointing is on (transformers checkpoints every layer): no plan")
            return
        if train_dataloader is None:
            raise RuntimeError("hal.transformers.MemoryPlanCallback: the Trainer gave no train_dataloader to plan for")
        optim = str(getattr(args.optim, "value", args.optim))  # an OptimizerNames member, or its text
        optimizer = next((name for prefix, name in _OPTIMIZERS.items() if optim.startswith(prefix)), None)
        if optimizer is None:  # training goes on as it would without the planner
            self._log(f"the Trainer's optimizer {optim!r} is not one hal.torch.memory models "
                      f"({', '.join(sorted(_OPTIMIZERS))}*): no plan")
            return
        batch = next(iter(train_dataloader))
        autocast = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        budget = self.budget_bytes if self.budget_bytes is not None else os.environ.get("HAL_MEMORY_BUDGET") or None
        self.plan = _memory.plan(model, model_kwargs=dict(batch), budget_bytes=budget, optimizer=optimizer,
                                 autocast=autocast, accumulation=args.gradient_accumulation_steps,
                                 foreach=False if "fused" in optim else None,  # fused steps keep no foreach buffers
                                 world_size=args.world_size, zero=self._zero_stage(args),
                                 device="cuda" if args.device.type == "cuda" else "cpu")
        _planned.add(model)
        if args.deepspeed:
            self._apply_through_deepspeed(args, model, kwargs.get("optimizer"))
            return
        self.plan.apply(model)
        self._log(str(self.plan))

    @staticmethod
    def _zero_stage(args) -> int:
        """The ZeRO stage DeepSpeed shards with (0 without DeepSpeed): the plan counts the memory it saves."""
        return args.hf_deepspeed_config.get_value("zero_optimization.stage", 0) if args.deepspeed else 0

    def _apply_through_deepspeed(self, args, model, optimizer) -> None:
        """The plan in DeepSpeed's config and through DeepSpeed's checkpoint (the class's docstring says why)."""
        import deepspeed
        from accelerate.utils import DeepSpeedOptimizerWrapper

        config = args.hf_deepspeed_config.config  # the dict accelerate passes to deepspeed.initialize
        section = config.setdefault("activation_checkpointing", {})
        planned = self.plan.deepspeed_config()["activation_checkpointing"]
        filled = {key: value for key, value in planned.items() if key not in section}
        section.update(filled)
        kept = {key: section[key] for key in planned if key not in filled}
        deepspeed.checkpointing.configure(None, deepspeed_config=config)
        # DeepSpeed's checkpoint is reentrant: a block none of whose inputs needs a gradient gives its parameters
        # none. With frozen input embeddings (adapters), their output is made to need one, as transformers'
        # gradient_checkpointing_enable does.
        embeddings = model.get_input_embeddings() if hasattr(model, "enable_input_require_grads") else None
        frozen = embeddings is not None and not any(p.requires_grad for p in embeddings.parameters())
        if frozen:
            model.enable_input_require_grads()
        self.plan.apply(model, deepspeed.checkpointing.checkpoint)
        # accelerate wraps the optimizer once deepspeed.initialize has made the engine
        engine = ("DeepSpeed's engine was made before training began (the Trainer makes it first); it does not "
                  "read this section, deepspeed.checkpointing does, configured here"
                  if isinstance(optimizer, DeepSpeedOptimizerWrapper) else
                  "DeepSpeed's engine is not made yet: it gets the config with this section")
        selective = (f"; the {len(self.plan.selective)} selectively checkpointed block(s) run under torch's "
                     f"selective checkpoint (DeepSpeed's has no selective form)" if self.plan.selective else "")
        self._log(f"{self.plan}\nDeepSpeed config: activation_checkpointing filled with {filled}"
                  + (f", kept as the user set {kept}" if kept else "")
                  + f"; deepspeed.checkpointing configured from it; {len(self.plan.checkpoint)} block(s) run "
                  f"through deepspeed.checkpointing.checkpoint{selective}"
                  + ("; the input embeddings are frozen: their output now requires grad (enable_input_require_grads), "
                     "else DeepSpeed's reentrant checkpoint would leave the blocks without gradients" if frozen else "")
                  + f". {engine}")

    @staticmethod
    def _log(text: str) -> None:
        print(f"hal.transformers.MemoryPlanCallback (CHECKPOINT_OPTIMIZATION): {text}", file=sys.stderr, flush=True)


AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
if MemoryPlanCallback not in _trainer.DEFAULT_CALLBACKS:
    _trainer.DEFAULT_CALLBACKS.append(MemoryPlanCallback)
