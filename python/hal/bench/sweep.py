"""python -m hal.bench attention --sweep: hal's attention against torch's over every shape class, as a table and a
heat map.

Cells: prefill at each ``--seq`` (query = key length) and decode (``--decode-q`` queries against each ``--seq`` keys,
the mask aligned bottom-right), times each head dim, mask (causal, full), pass (forward; forward + backward for
prefill) and dtype. Each cell times hal.torch's and torch's SDPA on the same tensors taking turns call by call
(ABAB...) and reports the median of the paired ratios torch time / hal time (> 1: hal is faster) with their range;
a cell whose median's 95% interval holds 1.0 takes more turns, until it settles or ``--max-repeats``.
A cell whose call would take longer than ``--max-cell-seconds`` (estimated from the FLOP rate of the previous prefill
cell of its row) is skipped and listed. The goals are printed beside the figures: every cell >= 1.0, the median cell >= 1.3,
forward + backward at seq <= 128 >= 1.0.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

GOAL_EVERY_CELL = 1.0
GOAL_MEDIAN = 1.3
GOAL_SHORT_TRAINING = 1.0  # forward + backward at seq <= SHORT_SEQ
SHORT_SEQ = 128
# An unsettled cell's extra turns: this many at a time, for at most this long a cell.
SETTLE_TURNS = 4
SETTLE_SECONDS = 60.0


# What lowers torch's own kernels and the GEMM libraries it calls to the instruction set HAL_HOST_ISA gives hal's
# (as halbench attn --compare-torch does); torch has no scalar path, so scalar gets its lowest.
_TORCH_ISA_VARIABLES = {"ATEN_CPU_CAPABILITY": {"scalar": "default", "avx2": "avx2", "avx512": "avx512",
                                                "avx512bf16": "avx512"},
                        "MKL_ENABLE_INSTRUCTIONS": {"scalar": "SSE4_2", "avx2": "AVX2", "avx512": "AVX512",
                                                    "avx512bf16": "AVX512"},
                        "ONEDNN_MAX_CPU_ISA": {"scalar": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE",
                                               "avx512bf16": "AVX512_CORE_BF16"}}


def lower_torch_isa() -> List[str]:
    """Before torch is imported: when HAL_HOST_ISA names an instruction set, the variables that run torch on the
    same one (those the user set are kept). Returns what was set, NAME=value."""
    isa = os.environ.get("HAL_HOST_ISA")
    if isa not in _TORCH_ISA_VARIABLES["ONEDNN_MAX_CPU_ISA"] or "torch" in sys.modules:
        return []
    chosen = []
    for name, values in _TORCH_ISA_VARIABLES.items():
        if name not in os.environ:
            os.environ[name] = values[isa]
            chosen.append(f"{name}={values[isa]}")
    return chosen


def add_arguments(attention) -> None:
    attention.add_argument("--sweep", action="store_true",
                           help="instead of the rows: every shape class (seq x decode x head dim x mask x pass x dtype), "
                                "a table and an SVG heat map of hal's speed against torch's; with --json the numbers")
    attention.add_argument("--head-dims", type=int, nargs="+", default=[64, 128], help="--sweep: head dims")
    attention.add_argument("--dtypes", nargs="+", default=None, choices=["float32", "bfloat16", "float16"],
                           help="--sweep: dtypes (default float32 bfloat16 on the CPU, bfloat16 float16 on a GPU)")
    attention.add_argument("--decode-q", type=int, nargs="*", default=[1, 16],
                           help="--sweep: query lengths of the decode cells (none: no decode cells)")
    attention.add_argument("--max-cell-seconds", type=float, default=5.0,
                           help="--sweep: skip a cell whose one call is estimated to take longer (0: no limit)")
    attention.add_argument("--svg", default="attention-sweep.svg", help="--sweep: where the heat map goes")
    attention.add_argument("--max-repeats", type=int, default=41,
                           help="--sweep: the most turns a cell takes while 1.0 lies within the 95%% interval of its "
                                "median ratio (at most --repeats: none extra)")


def _cells(args) -> List[dict]:
    """Every cell, cheapest first within each row, so that the FLOP rate is known before the long calls."""
    cells = []
    for dtype, head_dim, causal in itertools.product(args.dtypes, args.head_dims, (True, False)):
        for seq in sorted(args.seq):
            for backward in (False, True):
                cells.append({"dtype": dtype, "head_dim": head_dim, "causal": causal, "backward": backward,
                              "seq_q": seq, "seq_kv": seq, "kind": "prefill"})
            for seq_q in args.decode_q:
                if seq_q < seq:
                    cells.append({"dtype": dtype, "head_dim": head_dim, "causal": causal, "backward": False,
                                  "seq_q": seq_q, "seq_kv": seq, "kind": "decode"})
    return cells


def _flop(args, cell) -> float:
    """Visible query/key pairs times 4 * head dim (QK^T and PV), times 3.5 with the backward."""
    seq_q, seq_kv = cell["seq_q"], cell["seq_kv"]
    pairs = seq_q * seq_kv
    if cell["causal"]:  # bottom-right: query i sees keys up to i + seq_kv - seq_q
        pairs = sum(min(seq_kv, i + seq_kv - seq_q + 1) for i in range(seq_q))
    return 4.0 * args.batch * args.heads * pairs * cell["head_dim"] * (3.5 if cell["backward"] else 1.0)


def _measure(args, cell, device, synchronize, interleaved, paired_ratio) -> dict:
    import torch

    import hal.torch as ht

    dtype = getattr(torch, cell["dtype"])
    generator = torch.Generator(device=device).manual_seed(cell["seq_kv"] * 131 + cell["seq_q"])

    def make(heads, seq):
        return torch.randn(args.batch, heads, seq, cell["head_dim"], generator=generator, device=device, dtype=dtype)

    q, k, v = make(args.heads, cell["seq_q"]), make(args.kv_heads, cell["seq_kv"]), make(args.kv_heads, cell["seq_kv"])
    reasons = ht.fallback_reasons(q, k, v, is_causal=cell["causal"], enable_gqa=True)
    if reasons:
        return {"skipped": "hal does not run it: " + "; ".join(reasons)}
    if cell["kind"] == "decode" and cell["causal"]:
        # torch's is_causal is top-left; decode masks bottom-right, which hal.torch takes as a boolean mask too
        mask = torch.ones(cell["seq_q"], cell["seq_kv"], dtype=torch.bool, device=device).tril(
            cell["seq_kv"] - cell["seq_q"])
        kwargs = {"attn_mask": mask}
    else:
        kwargs = {"is_causal": cell["causal"]}
    implementations = {"torch": ht._torch_sdpa, "hal": ht.scaled_dot_product_attention}
    runs = {}
    for name, sdpa in implementations.items():
        if cell["backward"]:
            qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
            grad = torch.randn_like(q)

            def run(sdpa=sdpa, qg=qg, kg=kg, vg=vg, grad=grad):
                out = sdpa(qg, kg, vg, enable_gqa=True, **kwargs)
                torch.autograd.grad(out, (qg, kg, vg), grad)
        else:
            def run(sdpa=sdpa):
                with torch.no_grad():
                    sdpa(q, k, v, enable_gqa=True, **kwargs)
        runs[name] = run
    times, ratio = settled_turns(runs, args.repeats, args.max_repeats, synchronize, interleaved, paired_ratio)
    flop = _flop(args, cell)
    return {"torch_ms": statistics.median(times["torch"]) * 1e3, "hal_ms": statistics.median(times["hal"]) * 1e3,
            "hal_tflops": flop / statistics.median(times["hal"]) / 1e12, "ratio": ratio["median"],
            "ratio_range": [ratio["min"], ratio["max"]], "ratio_interval": ratio["interval"],
            "ratios": ratio["ratios"]}


def settled_turns(runs, repeats, max_repeats, synchronize, interleaved, paired_ratio):
    """runs["torch"] and runs["hal"] taking ``repeats`` turns, then SETTLE_TURNS more at a time while
    GOAL_EVERY_CELL lies within the 95% interval of the median ratio torch/hal, up to ``max_repeats`` turns or
    SETTLE_SECONDS of extra turns. Returns the times of every turn and their paired ratio."""
    times = interleaved(runs, repeats, synchronize)
    ratio = paired_ratio(times["torch"], times["hal"])
    start = time.perf_counter()
    while (_holds_goal(ratio["interval"]) and len(ratio["ratios"]) < max_repeats
           and time.perf_counter() - start < SETTLE_SECONDS):
        more = interleaved(runs, min(SETTLE_TURNS, max_repeats - len(ratio["ratios"])), synchronize, warm_up=False)
        for name in times:
            times[name] += more[name]
        ratio = paired_ratio(times["torch"], times["hal"])
    return times, ratio


def _holds_goal(interval: List[float]) -> bool:
    """Whether GOAL_EVERY_CELL lies within a median's interval: the cell is not settled on either side of it."""
    return interval[0] <= GOAL_EVERY_CELL <= interval[1]


def _row_name(cell) -> str:
    mask = "causal" if cell["causal"] else "full"
    return f"{cell['dtype']} d{cell['head_dim']} {mask} {'f+b' if cell['backward'] else 'fwd'}"


def _column_name(cell) -> str:
    return str(cell["seq_kv"]) if cell["kind"] == "prefill" else f"q{cell['seq_q']}/{cell['seq_kv']}"


def _goals(cells: List[dict]) -> List[dict]:
    measured = [c for c in cells if "ratio" in c]
    ratios = [c["ratio"] for c in measured]
    short = [c["ratio"] for c in measured if c["backward"] and c["seq_kv"] <= SHORT_SEQ]
    worst = min(measured, key=lambda c: c["ratio"]) if measured else None
    goals = [
        {"goal": f"every cell >= {GOAL_EVERY_CELL:g}x", "value": min(ratios) if ratios else None,
         "met": bool(ratios) and min(ratios) >= GOAL_EVERY_CELL,
         "detail": (f"worst: {_row_name(worst)} at {_column_name(worst)}, {len(worst['ratios'])} turns, 95% interval "
                    f"{worst['ratio_interval'][0]:.2f}..{worst['ratio_interval'][1]:.2f}") if worst
         else "no cell measured"},
        {"goal": f"median cell >= {GOAL_MEDIAN:g}x", "value": statistics.median(ratios) if ratios else None,
         "met": bool(ratios) and statistics.median(ratios) >= GOAL_MEDIAN, "detail": f"{len(ratios)} cells"},
        {"goal": f"forward + backward at seq <= {SHORT_SEQ} >= {GOAL_SHORT_TRAINING:g}x",
         "value": min(short) if short else None, "met": bool(short) and min(short) >= GOAL_SHORT_TRAINING,
         "detail": f"the worst of {len(short)} cells"},
    ]
    return goals


def _grid(cells: List[dict]):
    """The cells as {row name: {column name: cell}} and the column names in order."""
    rows: Dict[str, Dict[str, dict]] = {}
    for cell in cells:
        rows.setdefault(_row_name(cell), {})[_column_name(cell)] = cell
    columns = sorted({_column_name(cell) for cell in cells}, key=_column_order)
    return rows, columns


def _settle_mark(cell, repeats: int) -> str:
    """Beside a ratio: "*" where the cell took extra turns and settled, "?" where 1.0 still lies within its median's
    interval, " " otherwise."""
    if _holds_goal(cell["ratio_interval"]):
        return "?"
    return "*" if len(cell["ratios"]) > repeats else " "


def _table(cells: List[dict], repeats: int) -> str:
    rows, columns = _grid(cells)
    width = max(len(name) for name in rows)
    lines = [" " * width + "".join(f"{column:>11}" for column in columns)]
    for name, row in rows.items():
        entries = []
        for column in columns:
            cell = row.get(column)
            if cell is None:
                entries.append(f"{'':>11}")
            elif "ratio" in cell:
                entries.append(f"{cell['ratio']:>10.2f}{_settle_mark(cell, repeats)}")
            else:
                entries.append(f"{'skipped':>11}")
        lines.append(f"{name:<{width}}" + "".join(entries))
    return "\n".join(lines)


def _column_order(column: str):
    """Prefill columns by length, then decode columns by key length and query length."""
    if column.startswith("q"):
        seq_q, seq_kv = column[1:].split("/")
        return (1, int(seq_kv), int(seq_q))
    return (0, int(column), 0)


def _color(ratio: Optional[float]) -> str:
    """Red below 1 (hal slower), white at 1, green above; saturated at 4x either way (log scale)."""
    if ratio is None:
        return "#dddddd"
    strength = max(-1.0, min(1.0, math.log(ratio) / math.log(4.0)))
    fade = int(round(255 * (1 - abs(strength))))
    return f"#{fade:02x}{255:02x}{fade:02x}" if strength >= 0 else f"#{255:02x}{fade:02x}{fade:02x}"


def heat_map_svg(cells: List[dict], title: str) -> str:
    """The ratios as a grid: a row per (dtype, head dim, mask, pass), a column per shape; each square colored by
    the ratio and labelled with it (skipped cells grey)."""
    rows, columns = _grid(cells)
    cell_w, cell_h, left, top = 64, 24, 190, 70
    width, height = left + cell_w * len(columns) + 20, top + cell_h * len(rows) + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="10" y="20" font-size="13">{html.escape(title)}</text>',
             '<text x="10" y="38">ratio = torch time / hal time (green: hal faster, red: hal slower; '
             'log scale, saturated at 4x)</text>']
    for index, column in enumerate(columns):
        parts.append(f'<text x="{left + index * cell_w + cell_w / 2}" y="{top - 8}" text-anchor="middle">'
                     f'{html.escape(column)}</text>')
    for row_index, (name, row) in enumerate(rows.items()):
        y = top + row_index * cell_h
        parts.append(f'<text x="{left - 8}" y="{y + cell_h * 0.65}" text-anchor="end">{html.escape(name)}</text>')
        for index, column in enumerate(columns):
            cell = row.get(column)
            if cell is None:
                continue
            ratio = cell.get("ratio")
            x = left + index * cell_w
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{_color(ratio)}"/>')
            label = f"{ratio:.2f}" if ratio is not None else "skip"
            parts.append(f'<text x="{x + cell_w / 2 - 1}" y="{y + cell_h * 0.65}" text-anchor="middle">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def run(args, device, synchronize, interleaved, paired_ratio) -> int:
    import torch

    if args.dtypes is None:
        args.dtypes = ["bfloat16", "float16"] if device.type == "cuda" else ["float32", "bfloat16"]
    cells = _cells(args)
    # FLOP/s of the slower implementation in the latest prefill cell of the row: rows grow in seq, and the rate
    # with them, so the latest is the closest estimate for the next (decode cells run far below it).
    rate: Dict[str, float] = {}
    for index, cell in enumerate(cells):
        key = f"{_row_name(cell)}"
        flop = _flop(args, cell)
        estimate = flop / rate[key] if key in rate else 0.0
        if args.max_cell_seconds > 0 and estimate > args.max_cell_seconds:
            cell["skipped"] = f"one call estimated at {estimate:.1f} s > --max-cell-seconds {args.max_cell_seconds:g}"
        else:
            cell.update(_measure(args, cell, device, synchronize, interleaved, paired_ratio))
        if "ratio" in cell and cell["kind"] == "prefill":
            rate[key] = flop / (max(cell["torch_ms"], cell["hal_ms"]) / 1e3)
        if not args.json:
            status = (f"ratio {cell['ratio']:.2f} (torch {cell['torch_ms']:.3f} ms, hal {cell['hal_ms']:.3f} ms)"
                      if "ratio" in cell else f"skipped: {cell['skipped']}")
            print(f"[{index + 1}/{len(cells)}] {_row_name(cell)} {_column_name(cell)}: {status}", file=sys.stderr,
                  flush=True)
    goals = _goals(cells)
    machine = platform.processor() or platform.machine()
    try:
        machine = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    isa = os.environ.get("HAL_HOST_ISA")
    title = (f"hal vs torch SDPA on {device} ({machine}{', HAL_HOST_ISA=' + isa if isa else ''}), batch {args.batch}, "
             f"{args.heads}/{args.kv_heads} heads, torch {torch.__version__}, {torch.get_num_threads()} threads")
    Path(args.svg).write_text(heat_map_svg(cells, title))
    if args.json:
        print(json.dumps({"benchmark": "attention-sweep", "device": str(device), "machine": machine,
                          "shape": {"batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads},
                          "torch_threads": torch.get_num_threads(), "repeats": args.repeats, "cells": cells,
                          "goals": goals, "svg": str(args.svg)}, indent=1))
        return 0
    print(title)
    print(f"ratio = torch time / hal time, the median of {args.repeats} turns (ABAB); columns: seq, or decode "
          f"q<queries>/<keys>; a cell whose median's 95% interval held 1.0 took more turns, up to {args.max_repeats}: "
          f"* settled, ? still unsettled")
    print(_table(cells, args.repeats))
    for goal in goals:
        value = "n/a" if goal["value"] is None else f"{goal['value']:.2f}"
        print(f"goal {goal['goal']}: {value} ({goal['detail']}): {'met' if goal['met'] else 'missed'}")
    print(f"heat map: {args.svg}")
    return 0
