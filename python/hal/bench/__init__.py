"""python -m hal.bench attention | collectives | memory | train: hal against torch measured in one run.

attention: hal.torch's SDPA against torch's, and the Python path's per-call overhead.
collectives: torch.distributed on backend "hal" against gloo (hal/bench/collectives.py).
memory: hal.torch.memory's predicted peak against the measured one (hal/bench/memory.py).
train: a named model's training steps through hal, with ablations (hal/bench/train.py).

For each sequence length: forward, and forward + backward, of
``hal.torch.scaled_dot_product_attention`` and ``torch.nn.functional.scaled_dot_product_attention``
on the same tensors (default: the Llama-3-8B shape, 32 query heads, 8 kv
heads, head dim 128, causal, batch 1), as the median time of the repeats,
TFLOP/s and hal's speed relative to torch's (> 1: hal is faster).

The overhead: at a tiny shape, the mean time of one hal.torch call minus the
mean time of the same C++ call (hal::attention_forward and the stream's
synchronize) made in a C++ loop, both in this process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, List


def _parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hal.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="benchmark", required=True)
    attention = sub.add_parser("attention", help="hal.torch's SDPA against torch's, and the per-call overhead")
    attention.add_argument("--seq", type=int, nargs="+", default=[512, 1024, 2048, 4096], help="sequence lengths")
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
    attention.add_argument("--json", action="store_true", help="one JSON object instead of the table")
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
    for name in ("batch", "heads", "kv_heads", "head_dim", "repeats", "overhead_calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; it must be >= 1")
    if any(s < 1 for s in args.seq):
        parser.error(f"--seq {args.seq}: every length must be >= 1")
    if args.heads % args.kv_heads:
        parser.error(f"--kv-heads {args.kv_heads} does not divide --heads {args.heads}")
    return args


def _median_seconds(run: Callable[[], None], repeats: int, synchronize: Callable[[], None]) -> tuple:
    run()  # warm-up: allocations, kernel loads, compiled paths
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), (max(times) - min(times)) / 2


def _attention(args: argparse.Namespace) -> int:
    import torch
    import torch.nn.functional as F

    import hal
    import hal.torch as ht

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    implementations = {"torch": ht._torch_sdpa, "hal": ht.scaled_dot_product_attention}
    rows = []
    for seq in args.seq:
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
        for name, sdpa in implementations.items():
            def forward():
                with torch.no_grad():
                    sdpa(q, k, v, is_causal=args.causal, enable_gqa=True)
            seconds, spread = _median_seconds(forward, args.repeats, synchronize)
            row[f"{name}_forward_ms"], row[f"{name}_forward_spread_ms"] = seconds * 1e3, spread * 1e3
            row[f"{name}_forward_tflops"] = forward_flop / seconds / 1e12
            if args.backward:
                qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
                grad = torch.randn_like(q)

                def both():
                    out = sdpa(qg, kg, vg, is_causal=args.causal, enable_gqa=True)
                    torch.autograd.grad(out, (qg, kg, vg), grad)
                seconds, spread = _median_seconds(both, args.repeats, synchronize)
                row[f"{name}_fwd_bwd_ms"], row[f"{name}_fwd_bwd_spread_ms"] = seconds * 1e3, spread * 1e3
                row[f"{name}_fwd_bwd_tflops"] = 3.5 * forward_flop / seconds / 1e12  # backward: 2.5x the forward
        row["hal_vs_torch_forward"] = row["torch_forward_ms"] / row["hal_forward_ms"]
        if args.backward:
            row["hal_vs_torch_fwd_bwd"] = row["torch_fwd_bwd_ms"] / row["hal_fwd_bwd_ms"]
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
        print(f"\nper-call overhead at {overhead['shape']} ({overhead['calls']} calls each):")
        print(f"  hal.torch.scaled_dot_product_attention  {overhead['hal_torch_us']:8.2f} us")
        print(f"  hal.attention_forward (no torch op)     {overhead['hal_python_us']:8.2f} us")
        print(f"  the C++ call in a C++ loop              {overhead['cpp_us']:8.2f} us")
        print(f"  a no-op torch.library operator          {overhead['torch_custom_op_floor_us']:8.2f} us (torch's floor)")
        verdict = "meets" if overhead["overhead_us"] < 20 else "misses"
        print(f"  overhead of the Python path             {overhead['overhead_us']:8.2f} us ({verdict} the 20 us goal)")
    return 0


def _print_row(row, args, *, first, device, dtype):
    if first:
        print(f"attention on {device}, {str(dtype).split('.')[-1]}, batch {args.batch}, {args.heads}/{args.kv_heads} "
              f"heads, head dim {args.head_dim}, {'causal' if args.causal else 'not causal'}; median of "
              f"{args.repeats}; ratio = torch time / hal time")
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


def _overhead(args, device, dtype, synchronize) -> dict:
    import torch

    import hal
    import hal.torch as ht

    shape = (1, 1, 4, 64)
    q = torch.randn(*shape, device=device, dtype=dtype)
    out = torch.empty_like(q)
    lse = torch.empty(shape[:3], device=device, dtype=torch.float32)
    calls = args.overhead_calls

    def mean_us(run):
        for _ in range(min(calls, 50)):
            run()
        synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        synchronize()
        return (time.perf_counter() - start) / calls * 1e6

    with torch.no_grad():
        hal_torch = mean_us(lambda: ht.scaled_dot_product_attention(q, q, q))
        dispatch_floor = mean_us(lambda: _noop_operator()(q))
    hal_python = mean_us(lambda: hal.attention_forward(q, q, q, return_lse=True, out=out, lse=lse))
    qt, ot, lt = (hal.from_dlpack(t) for t in (q, out, lse))
    params = hal.attention_params(qt, qt, qt, return_lse=True, o=ot)
    stream = hal.default_stream(qt.device)
    hal._hal._time_attention_forward(stream, params, qt, qt, qt, ot, lt, min(calls, 50))  # warm-up
    cpp = hal._hal._time_attention_forward(stream, params, qt, qt, qt, ot, lt, calls) * 1e6
    return {"shape": shape, "calls": calls, "hal_torch_us": hal_torch, "hal_python_us": hal_python, "cpp_us": cpp,
            "overhead_us": hal_torch - cpp, "torch_custom_op_floor_us": dispatch_floor}


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
