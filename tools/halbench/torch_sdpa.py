#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the CPU, on the shapes of `halbench attn`.

Runs torch.nn.functional.scaled_dot_product_attention forward (under
torch.no_grad) and, with --backward, backward (torch.autograd.grad of the
output), with the thread count set by torch.set_num_threads, and prints the
result fields of `halbench attn` (schema hal.bench/1), so `halbench attn
--compare-torch` can put the two side by side. With --seq-q the query
lengths differ from the key/value lengths (--seq) and every pair is measured;
a causal mask is then aligned bottom-right (the queries are the last seq_q
positions, as in decode), which torch's is_causal is not, so an explicit
boolean mask built before timing is passed instead. Where torch cannot be imported
it says so and exits 0: the comparison is optional and must not fail a build.

With --serve it times nothing itself: it prints its document (no results;
"cases" lists each shape and direction, in order) on one line, then runs
one call of case N for each line "N" read from stdin and answers
"<wall seconds> <CPU seconds>", until "quit" or the end of input. That is how
`halbench attn --compare-torch` alternates hal's calls and torch's, one by
one, so the machine's noise falls on both.
"""

import argparse
import json
import math
import os
import platform
import socket
import statistics
import sys
import time

AUTO_TARGET_SECONDS = 1.0  # as halbench attn: timed calls add up to about this
AUTO_MIN_ITERATIONS = 2
AUTO_MAX_ITERATIONS = 50


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number; expected an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is too small; expected an integer >= 1")
    return value


def seq_list(text):
    items = text.split(",")
    if any(item == "" for item in items):
        raise argparse.ArgumentTypeError(f"'{text}' has an empty item; separate items by single commas")
    return sorted({positive_int(item) for item in items})


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="torch_sdpa.py",
        description="PyTorch CPU scaled_dot_product_attention on halbench attn's shapes (BHSD tensors).")
    parser.add_argument("--seq", type=seq_list, default=[512, 2048, 4096],
                        help="sequence lengths, query = key/value (default 512,2048,4096); "
                             "with --seq-q the key/value lengths")
    parser.add_argument("--seq-q", type=seq_list, default=None,
                        help="query lengths (e.g. 1,16): every pair with a --seq value is measured; "
                             "default: query length = key length")
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--heads-q", type=positive_int, default=32)
    parser.add_argument("--heads-kv", type=positive_int, default=8)
    parser.add_argument("--head-dim", type=positive_int, default=128)
    parser.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    parser.add_argument("--causal", action="store_true",
                        help="causal mask: is_causal where seq_q = seq_kv; bottom-right aligned (an explicit "
                             "boolean mask) where they differ")
    direction = parser.add_mutually_exclusive_group()
    direction.add_argument("--backward", action="store_true", help="measure the backward pass too")
    direction.add_argument("--forward-only", action="store_true", help="forward only (the default)")
    parser.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1,
                        help="torch.set_num_threads (default: every logical CPU, as hal's host backend)")
    parser.add_argument("--gqa", choices=["expand", "native"], default="expand",
                        help="grouped-query attention: 'expand' repeats K/V to the query heads before the "
                             "timed calls (torch's fastest CPU path, its cost not timed); 'native' passes "
                             "enable_gqa=True (default expand)")
    parser.add_argument("--iters", type=positive_int, default=None,
                        help="timed calls per shape after one warm-up (default: about 1 s, 2..50)")
    parser.add_argument("--json", action="store_true", help="print one hal.bench/1 JSON document")
    parser.add_argument("--serve", action="store_true",
                        help="time single calls on request (stdin 'N' -> stdout '<wall s> <cpu s>'), for "
                             "halbench attn --compare-torch; see the module's description")
    arguments = parser.parse_args(argv)
    if arguments.heads_q % arguments.heads_kv != 0:
        parser.error(f"--heads-kv {arguments.heads_kv} does not divide --heads-q {arguments.heads_q}; "
                     "expected a divisor (GQA groups are equal)")
    return arguments


def shapes(arguments):
    """(seq_q, seq_kv) pairs in halbench attn's order: by query length, then key length."""
    if arguments.seq_q is None:
        return [(seq, seq) for seq in arguments.seq]
    return [(seq_q, seq_kv) for seq_q in arguments.seq_q for seq_kv in arguments.seq]


def visible_pairs(seq_q, seq_kv, causal):
    """Query/key pairs a mask leaves visible. Causal is bottom-right aligned:
    query i sees keys 0 .. i + seq_kv - seq_q (top-left when the lengths are equal)."""
    if not causal:
        return seq_q * seq_kv
    offset = seq_kv - seq_q
    return sum(min(max(i + offset + 1, 0), seq_kv) for i in range(seq_q))


def attention_flops(seq_q, seq_kv, arguments, backward):
    """The FLOP count of halbench attn: visible query/key pairs only."""
    pairs = visible_pairs(seq_q, seq_kv, arguments.causal)
    pairs *= arguments.batch * arguments.heads_q
    d = arguments.head_dim
    return 2.0 * pairs * ((3 * d + 2 * d) if backward else (d + d))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def document(arguments, results, skipped, torch_version, threads, cpu_capability=None):
    return {
        "schema": "hal.bench/1",
        "benchmark": "attn_torch_sdpa",
        "device": {"id": "torch:cpu", "name": cpu_model(), "vendor": "", "type": "cpu", "backend": "torch",
                   "uuid": "", "total_memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")},
        "parameters": {
            "implementations": ["torch_sdpa"],
            "seq": arguments.seq,
            "seq_q": arguments.seq_q,
            "batch": arguments.batch,
            "heads_q": arguments.heads_q,
            "heads_kv": arguments.heads_kv,
            "head_dim": arguments.head_dim,
            "dtype": arguments.dtype,
            "causal": arguments.causal,
            "causal_alignment": (("bottom_right where seq_q != seq_kv" if arguments.seq_q is not None else "top_left")
                                 if arguments.causal else None),
            "layout": "bhsd",
            "directions": ["forward", "backward"] if arguments.backward else ["forward"],
            "iterations": arguments.iters if arguments.iters else "auto",
            "statistic": "median",
            "clock": "time.perf_counter (wall; torch's CPU calls are synchronous)",
            "flops": "visible query/key pairs only: forward 2*pairs*(d_qk+d_v), backward 2*pairs*(3*d_qk+2*d_v)",
            "gqa": arguments.gqa,
        },
        "results": results,
        "environment": {"torch_version": torch_version, "threads": threads, "cpu_capability": cpu_capability,
                        "isa_variables": {name: os.environ.get(name) for name in ISA_VARIABLES},
                        "hostname": socket.gethostname(),
                        "cpu": cpu_model(), "logical_cpus": os.cpu_count(), "load_average_1m": load_average(),
                        "python_version": platform.python_version()},
        "skipped": skipped,
    }


def time_calls(call, iterations, threads):
    """One warm-up call, then `iterations` (or enough for about 1 s) timed calls.

    Returns the milliseconds of each timed call, the CPU share of the timed
    calls (process CPU time / (wall time x threads), as halbench attn reports
    it) and the mean CPU seconds per call.
    """
    start = time.perf_counter()
    call()
    warm_up = time.perf_counter() - start
    if iterations is None:
        iterations = min(max(math.ceil(AUTO_TARGET_SECONDS / max(warm_up, 1e-6)), AUTO_MIN_ITERATIONS),
                         AUTO_MAX_ITERATIONS)
    samples = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(iterations):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    cpu_seconds = time.process_time() - cpu_start
    cpu_share = cpu_seconds / ((time.perf_counter() - wall_start) * threads)
    return samples, cpu_share, cpu_seconds / iterations


def cases(torch, arguments):
    """Each (shape, direction) of the run, in halbench attn's order, with its call ready to time."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[arguments.dtype]
    group = arguments.heads_q // arguments.heads_kv
    grouped = group > 1
    native_gqa = grouped and arguments.gqa == "native"
    if grouped and arguments.gqa == "expand":
        gqa_note = f"K/V repeated {group}x to {arguments.heads_q} heads before timing (repeat not timed)"
    elif native_gqa:
        gqa_note = "enable_gqa=True"
    else:
        gqa_note = ""
    mask_note = ("causal with seq_q != seq_kv: bottom-right aligned by an explicit boolean attn_mask "
                 "(built before timing, not timed), since is_causal=True is top-left aligned there")
    generator = torch.Generator().manual_seed(20240607)

    def uniform(heads, seq):
        shape = (arguments.batch, heads, seq, arguments.head_dim)
        return (torch.rand(shape, generator=generator) * 2 - 1).to(dtype)

    result = []
    directions = ["forward", "backward"] if arguments.backward else ["forward"]
    for seq_q, seq_kv in shapes(arguments):
        q = uniform(arguments.heads_q, seq_q)
        k = uniform(arguments.heads_kv, seq_kv)
        v = uniform(arguments.heads_kv, seq_kv)
        if grouped and not native_gqa:
            k = k.repeat_interleave(group, dim=1).contiguous()
            v = v.repeat_interleave(group, dim=1).contiguous()
        extra = {"enable_gqa": True} if native_gqa else {}
        notes = [gqa_note] if gqa_note else []
        if arguments.causal and seq_q != seq_kv:
            # True = take part: query i sees keys up to i + seq_kv - seq_q.
            mask = torch.ones(seq_q, seq_kv, dtype=torch.bool).tril(diagonal=seq_kv - seq_q)
            extra["attn_mask"] = mask
            extra["is_causal"] = False
            notes.append(mask_note)
        else:
            extra["is_causal"] = arguments.causal
        for direction in directions:
            if direction == "forward":
                def call(q=q, k=k, v=v, extra=extra):
                    with torch.no_grad():
                        sdpa(q, k, v, **extra)
            else:
                q_leaf, k_leaf, v_leaf = (t.detach().requires_grad_() for t in (q, k, v))
                out = sdpa(q_leaf, k_leaf, v_leaf, **extra)
                grad_out = uniform(arguments.heads_q, seq_q)

                def call(out=out, leaves=(q_leaf, k_leaf, v_leaf), grad_out=grad_out):
                    torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
            result.append({"seq": seq_kv, "seq_q": seq_q, "direction": direction, "note": "; ".join(notes),
                           "flops": attention_flops(seq_q, seq_kv, arguments, direction == "backward"),
                           "call": call})
    return result


def measure(torch, arguments):
    results = []
    for case in cases(torch, arguments):
        samples, cpu_share, cpu_seconds_per_call = time_calls(case["call"], arguments.iters, torch.get_num_threads())
        ms = statistics.median(samples)
        flops = case["flops"]
        results.append({
            "implementation": "torch_sdpa", "direction": case["direction"], "seq": case["seq"],
            "seq_q": case["seq_q"], "iterations": len(samples),
            "ms_per_call": ms, "wall_ms_per_call": ms, "min_ms_per_call": min(samples), "flops": flops,
            "tflops": flops / (ms * 1e-3) * 1e-12, "efficiency": None, "cpu_share": cpu_share,
            "cpu_seconds_per_call": cpu_seconds_per_call,
            "gflops_per_cpu_second": flops / cpu_seconds_per_call * 1e-9 if cpu_seconds_per_call > 0 else None,
            "peak_extra_bytes": None,
            "note": case["note"]})
    return results


def serve(torch, arguments, doc):
    """The --serve loop: the document with its cases on one line, then one call per request."""
    prepared = cases(torch, arguments)
    doc["cases"] = [{key: case[key] for key in ("seq", "seq_q", "direction", "note", "flops")} for case in prepared]
    print(json.dumps(doc), flush=True)
    for line in sys.stdin:
        request = line.strip()
        if request == "quit":
            break
        try:
            call = prepared[int(request)]["call"]
        except (ValueError, IndexError):
            print(f"error: '{request}' is not a case number 0..{len(prepared) - 1} or 'quit'", flush=True)
            continue
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        call()
        wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
        print(f"{wall:.9f} {cpu:.9f}", flush=True)


def cpu_capability(torch):
    """The instruction set of ATen's CPU kernels (ATEN_CPU_CAPABILITY lowers it), or None."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # older torch
        return None


def print_table(doc):
    env = doc["environment"]
    capability = f" (CPU capability {env['cpu_capability']})" if env.get("cpu_capability") else ""
    print(f"# torch_sdpa.py: torch {env['torch_version']}{capability} on {env['cpu']}, {env['threads']} threads, "
          f"load average {env['load_average_1m']:.2f} on {env['logical_cpus']} CPUs")
    isa_set = " ".join(f"{name}={value}" for name, value in env["isa_variables"].items() if value)
    if isa_set:
        print(f"# {isa_set}")
    for skip in doc["skipped"]:
        print(f"# not measured: {skip['reason']}")
    if not doc["results"]:
        return
    separate = doc["parameters"]["seq_q"] is not None
    shape_header = f"{'seq_q':>7}{'seq_kv':>8}" if separate else f"{'seq':>6}"
    print(f"{'dir':<9}{shape_header}{'iters':>7}{'ms':>11}{'TFLOP/s':>9}{'cpu %':>7}  note")
    for row in doc["results"]:
        shape = f"{row['seq_q']:>7}{row['seq']:>8}" if separate else f"{row['seq']:>6}"
        print(f"{row['direction']:<9}{shape}{row['iterations']:>7}{row['ms_per_call']:>11.2f}"
              f"{row['tflops']:>9.3f}{row['cpu_share'] * 100:>7.0f}  {row['note']}")


def main(argv):
    arguments = parse_arguments(argv)
    try:
        import torch
    except Exception as error:  # ImportError, or OSError from a missing shared library
        reason = f"torch is not importable ({type(error).__name__}: {error})"
        doc = document(arguments, [], [{"reason": reason}], None, 0)
        if arguments.serve:
            print(json.dumps(doc), flush=True)
        elif arguments.json:
            print(json.dumps(doc, indent=2))
        else:
            print(f"torch_sdpa.py: {reason}; nothing measured", file=sys.stderr)
        return 0
    torch.set_num_threads(arguments.threads)
    if arguments.serve:
        serve(torch, arguments,
              document(arguments, [], [], torch.__version__, torch.get_num_threads(), cpu_capability(torch)))
        return 0
    doc = document(arguments, measure(torch, arguments), [], torch.__version__, torch.get_num_threads(),
                   cpu_capability(torch))
    if arguments.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
