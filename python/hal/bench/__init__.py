"""python -m hal.bench attention | collectives | memory | train: hal against torch measured in one run.

attention: hal.torch's SDPA against torch's, and the Python path's per-call overhead.
collectives: torch.distributed on backend "hal" against gloo (hal/bench/collectives.py).
memory: hal.torch.memory's predicted peak against the measured one (hal/bench/memory.py).
train: a named model's training steps through hal, with ablations (hal/bench/train.py).

For each sequence length: forward, and forward + backward, of
``hal.torch.scaled_dot_product_attention`` and ``torch.nn.functional.scaled_dot_product_attention``
on the same tensors (default: the Llama-3-8B shape, 32 query heads, 8 kv
heads, head dim 128, causal, batch 1), hal and torch taking turns call by
call (ABAB...): the median time of the repeats, TFLOP/s, and hal's speed
relative to torch's as the median of the turns' ratios (> 1: hal is faster)
with their range.

The per-call cost (``--overhead`` alone): at a tiny shape, hal.torch's op,
hal's Python API and a no-op torch custom operator taking turns call by
call, and the same C++ call (hal::attention_forward and the stream's
synchronize) in C++ loops between them; printed beside the goal: hal.torch
at most the no-op operator + the C++ call + 10 us.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Callable, List


def _parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hal.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="benchmark", required=True)
    attention = sub.add_parser("attention", help="hal.torch's SDPA against torch's, and the per-call overhead")
    attention.add_argument("--seq", type=int, nargs="+", default=None,
                           help="sequence lengths (default 512 1024 2048 4096; with --sweep 32 64 ... 4096)")
    attention.add_argument("--batch", type=int, default=1)
    attention.add_argument("--heads", type=int, default=32, help="query heads")
    attention.add_argument("--kv-heads", type=int, default=8)
    attention.add_argument("--head-dim", type=int, default=128)
    attention.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                           help="default: bfloat16 on a GPU, float32 on the CPU")
    attention.add_argument("--device", default=None, help="a torch device; default cuda when available, else cpu")
    attention.add_argument("--no-causal", dest="causal", action="store_false")
    attention.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (the median is shown)")
    attention.add_argument("--no-backward", dest="backward", action="store_false")
    attention.add_argument("--overhead-calls", type=int, default=2000, help="calls per overhead measurement")
    attention.add_argument("--overhead", action="store_true",
                           help="only the per-call cost at a tiny shape, beside its goal (no --seq rows)")
    attention.add_argument("--transformers", action="store_true",
                           help="instead of the SDPA rows: a one-layer Hugging Face Llama of this shape on a padded "
                                "batch (a quarter of row 0 left padding), forward and backward, attn_implementation "
                                "'sdpa' against 'hal', and what turning its mask into key ranges costs")
    attention.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    from . import sweep
    sweep.add_arguments(attention)
    from .collectives import add_parser as add_collectives
    from .memory import add_parser as add_memory
    from .train import add_parser as add_train
    add_collectives(sub)
    add_memory(sub)
    add_train(sub)
    args = parser.parse_args(argv)
    args.argv = list(argv)[1:]  # the benchmark's own flags, for the ranks it starts
    if args.benchmark != "attention":
        return args
    if args.seq is None:
        args.seq = [32, 64, 128, 256, 512, 1024, 2048, 4096] if args.sweep else [512, 1024, 2048, 4096]
    if any(d < 1 for d in args.head_dims) or any(q < 1 for q in args.decode_q):
        parser.error(f"--head-dims {args.head_dims} / --decode-q {args.decode_q}: every value must be >= 1")
    for name in ("batch", "heads", "kv_heads", "head_dim", "repeats", "max_repeats", "overhead_calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; it must be >= 1")
    if any(s < 1 for s in args.seq):
        parser.error(f"--seq {args.seq}: every length must be >= 1")
    if args.heads % args.kv_heads:
        parser.error(f"--kv-heads {args.kv_heads} does not divide --heads {args.heads}")
    return args


def _interleaved(runs: dict, repeats: int, synchronize: Callable[[], None], warm_up: bool = True) -> dict:
    """Seconds of each run, timed call by call with the runs taking turns (ABAB...), so that the machine's noise
    lands on all of them alike; after one untimed warm-up call each (allocations, kernel loads, compiled paths)
    unless the runs are warm already."""
    if warm_up:
        for run in runs.values():
            run()
        synchronize()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def _median_interval(samples: List[float]) -> List[float]:
    """A distribution-free 95% confidence interval of the median of samples: the order statistics whose binomial
    tails are each at most 2.5% (below six samples no such pair exists, and it is their whole range)."""
    ordered, n = sorted(samples), len(samples)
    k, tail = 1, 0.5 ** n  # tail: P(Binomial(n, 1/2) < k)
    while k < n // 2 and tail + math.comb(n, k) * 0.5 ** n <= 0.025:
        tail += math.comb(n, k) * 0.5 ** n
        k += 1
    return [ordered[k - 1], ordered[n - k]]


def _paired_ratio(numerators: List[float], denominators: List[float]) -> dict:
    """The median of the per-turn ratios, their range and the median's 95% interval: a ratio of two runs measured
    side by side."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "interval": _median_interval(ratios), "ratios": ratios}


def _attention(args: argparse.Namespace) -> int:
    from . import sweep
    lowered = sweep.lower_torch_isa() if args.sweep else []
    if lowered:
        print(f"hal.bench: HAL_HOST_ISA={os.environ['HAL_HOST_ISA']}: torch runs with {' '.join(lowered)}",
              file=sys.stderr)
    import torch
    import torch.nn.functional as F

    import hal
    import hal.torch as ht

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    implementations = {"torch": ht._torch_sdpa, "hal": ht.scaled_dot_product_attention}
    if args.transformers:
        return _transformers_layer(args, device, dtype, synchronize)
    if args.sweep:
        return sweep.run(args, device, synchronize, _interleaved, _paired_ratio)
    rows = []
    for seq in ([] if args.overhead else args.seq):
        generator = torch.Generator(device=device).manual_seed(seq)
        make = lambda heads: torch.randn(args.batch, heads, seq, args.head_dim, generator=generator, device=device,  # noqa: E731
                                         dtype=dtype)
        q, k, v = make(args.heads), make(args.kv_heads), make(args.kv_heads)
        reasons = ht.fallback_reasons(q, k, v, is_causal=args.causal, enable_gqa=True)
        if reasons:
            print(f"hal.bench: hal does not run seq {seq}: {'; '.join(reasons)}", file=sys.stderr)
            return 1
        forward_flop = 4.0 * args.batch * args.heads * seq * seq * args.head_dim * (0.5 if args.causal else 1.0)
        row = {"seq": seq}
        passes = {"forward": 1.0}
        runs = {}
        for name, sdpa in implementations.items():
            def forward(sdpa=sdpa):
                with torch.no_grad():
                    sdpa(q, k, v, is_causal=args.causal, enable_gqa=True)
            runs[("forward", name)] = forward
            if args.backward:
                passes["fwd_bwd"] = 3.5  # backward: 2.5x the forward's FLOPs
                qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
                grad = torch.randn_like(q)

                def both(sdpa=sdpa, qg=qg, kg=kg, vg=vg, grad=grad):
                    out = sdpa(qg, kg, vg, is_causal=args.causal, enable_gqa=True)
                    torch.autograd.grad(out, (qg, kg, vg), grad)
                runs[("fwd_bwd", name)] = both
        for part, flop_factor in passes.items():
            times = _interleaved({name: runs[(part, name)] for name in implementations}, args.repeats, synchronize)
            for name, seconds in times.items():
                row[f"{name}_{part}_ms"] = statistics.median(seconds) * 1e3
                row[f"{name}_{part}_spread_ms"] = (max(seconds) - min(seconds)) / 2 * 1e3
                row[f"{name}_{part}_tflops"] = flop_factor * forward_flop / statistics.median(seconds) / 1e12
            ratio = _paired_ratio(times["torch"], times["hal"])
            row[f"hal_vs_torch_{part}"] = ratio["median"]
            row[f"hal_vs_torch_{part}_range"] = [ratio["min"], ratio["max"]]
            row[f"hal_vs_torch_{part}_ratios"] = ratio["ratios"]
        rows.append(row)
        if not args.json:
            _print_row(row, args, first=len(rows) == 1, device=device, dtype=dtype)

    overhead = _overhead(args, device, dtype, synchronize)
    if args.json:
        print(json.dumps({"benchmark": "attention", "device": str(device), "dtype": str(dtype).split(".")[-1],
                          "shape": {"batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads,
                                    "head_dim": args.head_dim, "causal": args.causal},
                          "hal_devices": [d.id for d in hal.runtime().devices], "rows": rows,
                          "overhead": overhead}, indent=1))
    else:
        _print_overhead(overhead)
    return 0


# A transformers layer through hal: at least as fast as through "sdpa", end to end.
TRANSFORMERS_GOAL = 1.0


def _transformers_layer(args: argparse.Namespace, device, dtype, synchronize) -> int:
    """A one-layer transformers Llama (hidden = heads x head dim, FFN 4x) on a padded batch, forward and backward,
    with attn_implementation "sdpa" and "hal" taking turns; and the cost of hal.torch.mask_key_ranges on the layer's
    mask (uncached) against hal's attention call on that mask."""
    import torch
    import transformers

    import hal.torch as ht
    import hal.transformers  # noqa: F401  (registers "hal")

    batch = max(2, args.batch)
    hidden = args.heads * args.head_dim
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=4 * hidden,
                                      num_hidden_layers=1, num_attention_heads=args.heads,
                                      num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                                      max_position_embeddings=max(args.seq))
    torch.manual_seed(0)
    models = {name: transformers.AutoModel.from_config(config, attn_implementation=name).to(device, dtype)
              for name in ("sdpa", "hal")}
    models["hal"].load_state_dict(models["sdpa"].state_dict())
    rows = []
    for seq in args.seq:
        generator = torch.Generator(device=device).manual_seed(seq)
        x = torch.randn(batch, seq, hidden, generator=generator, device=device, dtype=dtype)
        grad = torch.randn(batch, seq, hidden, generator=generator, device=device, dtype=dtype)
        mask = torch.ones(batch, seq, dtype=torch.long, device=device)
        mask[0, :seq // 4] = 0

        def step(model):
            inputs = x.detach().requires_grad_()
            out = model(inputs_embeds=inputs, attention_mask=mask, use_cache=False).last_hidden_state
            torch.autograd.grad(out, [inputs] + list(model.parameters()), grad, allow_unused=True)  # embeddings: unused
        times = _interleaved({name: (lambda model=model: step(model)) for name, model in models.items()},
                             args.repeats, synchronize)
        ratio = _paired_ratio(times["sdpa"], times["hal"])
        # The 4-D mask the layer's attention got, and the cost of reading it into key ranges against the call.
        causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
        layer_mask = causal & mask.bool()[:, None, None, :]
        q = torch.randn(batch, args.heads, seq, args.head_dim, generator=generator, device=device, dtype=dtype)
        kv = torch.randn(batch, args.kv_heads, seq, args.head_dim, generator=generator, device=device, dtype=dtype)

        def check():
            ht._last_mask = None
            ht.mask_key_ranges(layer_mask, batch, seq, seq)
        with torch.no_grad():
            cost = _interleaved({"check": check, "attention": lambda: ht.scaled_dot_product_attention(
                q, kv, kv, attn_mask=layer_mask, enable_gqa=True)}, args.repeats, synchronize)
        row = {"seq": seq, "batch": batch, "sdpa_ms": statistics.median(times["sdpa"]) * 1e3,
               "hal_ms": statistics.median(times["hal"]) * 1e3, "hal_vs_sdpa": ratio["median"],
               "hal_vs_sdpa_range": [ratio["min"], ratio["max"]], "goal": TRANSFORMERS_GOAL,
               "goal_met": ratio["median"] >= TRANSFORMERS_GOAL,
               "mask_check_ms": statistics.median(cost["check"]) * 1e3,
               "masked_attention_ms": statistics.median(cost["attention"]) * 1e3}
        row["mask_check_share"] = row["mask_check_ms"] / row["masked_attention_ms"]
        rows.append(row)
        if not args.json:
            if len(rows) == 1:
                print(f"transformers Llama, 1 layer, hidden {hidden} ({args.heads}/{args.kv_heads} heads, head dim "
                      f"{args.head_dim}), batch {batch} with row 0 a quarter left padding, forward and backward, on "
                      f"{device}, {str(dtype).split('.')[-1]}; median of {args.repeats} taking turns; ratio = sdpa "
                      f"time / hal time (goal >= {TRANSFORMERS_GOAL:g}); mask check = hal.torch.mask_key_ranges on "
                      f"the layer's mask, uncached, against hal's masked attention forward")
                print(f"{'seq':>6} {'sdpa ms':>9} {'hal ms':>9} {'ratio':>6} {'goal':>7} {'check ms':>9} "
                      f"{'attn ms':>9} {'share':>6}")
            print(f"{seq:>6} {row['sdpa_ms']:>9.2f} {row['hal_ms']:>9.2f} {row['hal_vs_sdpa']:>6.2f} "
                  f"{'met' if row['goal_met'] else 'missed':>7} {row['mask_check_ms']:>9.3f} "
                  f"{row['masked_attention_ms']:>9.2f} {row['mask_check_share']:>6.1%}", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "attention-transformers", "device": str(device),
                          "dtype": str(dtype).split(".")[-1], "rows": rows}, indent=1))
    return 0


def _print_row(row, args, *, first, device, dtype):
    if first:
        print(f"attention on {device}, {str(dtype).split('.')[-1]}, batch {args.batch}, {args.heads}/{args.kv_heads} "
              f"heads, head dim {args.head_dim}, {'causal' if args.causal else 'not causal'}; median of "
              f"{args.repeats} taking turns; ratio = torch time / hal time, the median of the turns' ratios")
        header = f"{'seq':>6} {'torch fwd ms':>13} {'hal fwd ms':>11} {'TFLOP/s':>8} {'ratio':>6}"
        if args.backward:
            header += f" {'torch f+b ms':>13} {'hal f+b ms':>11} {'TFLOP/s':>8} {'ratio':>6}"
        print(header)
    line = (f"{row['seq']:>6} {row['torch_forward_ms']:>13.2f} {row['hal_forward_ms']:>11.2f} "
            f"{row['hal_forward_tflops']:>8.3f} {row['hal_vs_torch_forward']:>6.2f}")
    if args.backward:
        line += (f" {row['torch_fwd_bwd_ms']:>13.2f} {row['hal_fwd_bwd_ms']:>11.2f} "
                 f"{row['hal_fwd_bwd_tflops']:>8.3f} {row['hal_vs_torch_fwd_bwd']:>6.2f}")
    print(line, flush=True)


# The Python path's goal: hal.torch's op at the tiny shape costs at most torch's no-op custom operator, plus the
# C++ call, plus this.
OVERHEAD_GOAL_US = 10.0


def _overhead(args, device, dtype, synchronize) -> dict:
    """Per-call microseconds at a tiny shape: hal.torch's op, hal's Python API, torch's no-op custom operator (the
    floor) and the C++ call in a C++ loop, interleaved: the Python calls take turns call by call (medians), and a
    C++ loop of the same number of calls runs between every tenth of them (median of the loops' means)."""
    import torch

    import hal
    import hal.torch as ht

    shape = (1, 1, 4, 64)
    q = torch.randn(*shape, device=device, dtype=dtype)
    out = torch.empty_like(q)
    lse = torch.empty(shape[:3], device=device, dtype=torch.float32)
    calls = args.overhead_calls
    qt, ot, lt = (hal.from_dlpack(t) for t in (q, out, lse))
    params = hal.attention_params(qt, qt, qt, return_lse=True, o=ot)
    stream = hal.default_stream(qt.device)
    noop = _noop_operator()
    runs = {"hal_torch": lambda: ht.scaled_dot_product_attention(q, q, q),
            "torch_custom_op_floor": lambda: noop(q),
            "hal_python": lambda: hal.attention_forward(q, q, q, return_lse=True, out=out, lse=lse)}
    rounds = min(10, calls)
    times = {name: [] for name in runs}
    cpp = []
    with torch.no_grad():
        for _ in range(min(calls, 50)):  # warm-up
            for run in runs.values():
                run()
        for _ in range(rounds):
            for name, seconds in _interleaved(runs, calls // rounds, synchronize).items():
                times[name] += seconds
            cpp.append(hal._hal._time_attention_forward(stream, params, qt, qt, qt, ot, lt, calls // rounds))
    result = {name + "_us": statistics.median(seconds) * 1e6 for name, seconds in times.items()}
    result.update({"shape": shape, "calls": rounds * (calls // rounds), "cpp_us": statistics.median(cpp) * 1e6})
    result["overhead_us"] = result["hal_torch_us"] - result["cpp_us"]
    result["goal_us"] = result["torch_custom_op_floor_us"] + result["cpp_us"] + OVERHEAD_GOAL_US
    result["goal_met"] = result["hal_torch_us"] <= result["goal_us"]
    return result


def _print_overhead(overhead: dict) -> None:
    print(f"\nper-call cost at {overhead['shape']} ({overhead['calls']} calls each, taking turns; medians):")
    print(f"  hal.torch.scaled_dot_product_attention  {overhead['hal_torch_us']:8.2f} us   goal <= "
          f"{overhead['goal_us']:.2f} us (floor + C++ call + {OVERHEAD_GOAL_US:g} us): "
          f"{'met' if overhead['goal_met'] else 'missed'}")
    print(f"  hal.attention_forward (no torch op)     {overhead['hal_python_us']:8.2f} us")
    print(f"  the C++ call in a C++ loop              {overhead['cpp_us']:8.2f} us")
    print(f"  a no-op torch.library operator          {overhead['torch_custom_op_floor_us']:8.2f} us (torch's floor)")
    print(f"  overhead of the Python path             {overhead['overhead_us']:8.2f} us (hal.torch minus the C++ call)")


_noop = None


def _noop_operator():
    """A torch.library custom operator that only allocates its output, as hal::sdpa_forward does: what any
    Python-defined operator costs torch to dispatch, the floor under hal.torch's overhead."""
    global _noop
    if _noop is None:
        import torch

        @torch.library.custom_op("hal_bench::noop", mutates_args=(), schema="(Tensor x) -> Tensor")
        def noop(x):
            return x.new_empty(x.shape)

        noop.register_fake(lambda x: x.new_empty(x.shape))
        _noop = torch.ops.hal_bench.noop
    return _noop


def main(argv: List[str] = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.benchmark == "attention":
        return _attention(args)
    if args.benchmark == "collectives":
        from .collectives import run
        return run(args)
    if args.benchmark == "train":
        from .train import run
        return run(args)
    if args.benchmark == "memory":
        from .memory import run
        return run(args)
    return 2
