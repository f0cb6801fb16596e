"""hal.bench train's report: the JSON object (schema hal.bench.train/1, docs/bench-train.schema.json), the table,
the loss check that marks a cell WRONG, the HTML page with SVG charts, and the comparison of two reports."""

from __future__ import annotations

import datetime
import html
import math
import platform
from typing import Dict, List, Optional

SCHEMA = "hal.bench.train/1"


def _machine() -> Dict[str, str]:
    import torch

    import hal

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "python": platform.python_version(), "torch": torch.__version__,
            "hal": hal.__version__, "devices": ", ".join(d.id for d in hal.runtime().devices)}


def build_report(args, config, seq: int, results: List[dict]) -> dict:
    cells = []
    for index, result in enumerate(results):
        cell = dict(result)
        cell["baseline"] = index == 0
        cells.append(cell)
    baseline = cells[0]
    for cell in cells:
        if "error" in cell or "error" in baseline:
            continue
        cell["delta_tokens_per_s_pct"] = 100.0 * (cell["tokens_per_s"] / baseline["tokens_per_s"] - 1.0)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "config": {"model": args.model, "name": config.name, "layers": config.layers, "hidden": config.hidden,
                   "heads": config.heads, "kv_heads": config.kv_heads, "ffn": config.ffn, "vocab": config.vocab,
                   "rope_theta": config.rope_theta, "seq": seq, "batch": args.batch, "steps": args.steps,
                   "warmup": args.warmup, "ranks": args.ranks, "parallel": args.parallel,
                   "dtype": args.dtype or "default", "seed": args.seed, "loss_rtol": args.loss_rtol},
        "cells": cells,
    }


def check_losses(report: dict, rtol: float) -> bool:
    """Marks each cell whose loss curve leaves the baseline's by more than rtol (relative) WRONG; True if any."""
    cells = report["cells"]
    baseline = cells[0]
    wrong = False
    for cell in cells:
        if "error" in cell or "error" in baseline:
            cell["loss_matches_baseline"] = None
            continue
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(cell["losses"], baseline["losses"]))
        cell["loss_max_relative_difference"] = worst
        cell["loss_matches_baseline"] = worst <= rtol and len(cell["losses"]) == len(baseline["losses"])
        wrong = wrong or not cell["loss_matches_baseline"]
    return wrong


def _mib(value: Optional[float]) -> str:
    return "-" if value is None else f"{value / 2 ** 20:.0f}"


def _memory_bytes(cell: dict) -> Optional[int]:
    """The device allocator's peak reserved memory where there is one; on the host, what the steps added to the
    process's resident memory at its peak."""
    memory = cell.get("memory", {})
    return memory.get("max_reserved_bytes", memory.get("steps_resident_bytes"))


def print_table(report: dict) -> None:
    config = report["config"]
    print(f"{config['name']}: {config['layers']} layers, hidden {config['hidden']}, seq {config['seq']}, batch "
          f"{config['batch']} x {config['ranks']} rank(s), {config['steps']} steps after {config['warmup']} warm-up")
    print(f"{'cell':<74} {'tokens/s':>9} {'delta %':>8} {'p50 ms':>8} {'p90 ms':>8} {'TFLOP/s':>8} {'MFU':>6} "
          f"{'mem MiB':>8} {'attn ms':>8} {'coll ms':>8} {'loss':>8}  check")
    for cell in report["cells"]:
        name = cell["name"] + (" (baseline)" if cell["baseline"] else "")
        if "error" in cell:
            print(f"{name:<74} ERROR: {cell['error']}")
            continue
        split = cell["time_split"]
        check = "ok" if cell["loss_matches_baseline"] else \
            f"WRONG (loss off by {cell['loss_max_relative_difference']:.2e})"
        print(f"{name:<74} {cell['tokens_per_s']:>9.0f} {cell.get('delta_tokens_per_s_pct', 0.0):>+8.1f} "
              f"{cell['step_p50_s'] * 1e3:>8.1f} {cell['step_p90_s'] * 1e3:>8.1f} "
              f"{cell['model_tflops_per_device']:>8.4f} {cell['mfu']:>6.1%} {_mib(_memory_bytes(cell)):>8} "
              f"{split['attention_ms']:>8.1f} {split['collectives_ms']:>8.1f} {cell['losses'][-1]:>8.4f}  {check}")


# ------------------------------------------------------------------ HTML

def _short_name(cell: dict, baseline: dict) -> str:
    """What a cell changes from the baseline ("attention=torch"), which is what a chart's reader compares."""
    changed = [part for part in cell["name"].split() if part not in baseline["name"].split()]
    return " ".join(changed) or "baseline"


def _bar_chart(title: str, labels: List[str], values: List[float], unit: str) -> str:
    width, row, left = 760, 22, 200
    scale = max(values + [1e-12])
    rows = []
    for i, (label, value) in enumerate(zip(labels, values)):
        y = 30 + i * row
        length = (width - left - 90) * value / scale
        rows.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{html.escape(label)}</text>'
                    f'<rect x="{left}" y="{y + 2}" width="{length:.1f}" height="{row - 6}" fill="#3b73b9"/>'
                    f'<text x="{left + length + 4:.1f}" y="{y + 14}">{value:.4g} {unit}</text>')
    height = 40 + len(labels) * row
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="12" '
            f'font-family="sans-serif"><text x="4" y="16" font-weight="bold">{html.escape(title)}</text>'
            + "".join(rows) + "</svg>")


def _time_split_chart(labels: List[str], cells: List[dict]) -> str:
    """One stacked bar per cell: the profiled step's attention, collectives and the rest, in ms."""
    width, row, left = 760, 22, 200
    parts = [("attention_ms", "attention", "#3b73b9"), ("collectives_ms", "collectives", "#d9822b"),
             ("other_ms", "the rest", "#adb5bd")]
    totals = [sum(cell["time_split"][key] for key, _, _ in parts) for cell in cells]
    scale = max(totals + [1e-12])
    rows = []
    for i, (label, cell, total) in enumerate(zip(labels, cells, totals)):
        y, x = 30 + i * row, float(left)
        rows.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{html.escape(label)}</text>')
        for key, name, color in parts:
            length = (width - left - 90) * cell["time_split"][key] / scale
            rows.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{length:.1f}" height="{row - 6}" fill="{color}">'
                        f'<title>{name}: {cell["time_split"][key]:.1f} ms</title></rect>')
            x += length
        rows.append(f'<text x="{x + 4:.1f}" y="{y + 14}">{total:.1f} ms</text>')
    legend_y = 40 + len(cells) * row
    legend = "".join(f'<rect x="{left + 110 * i}" y="{legend_y}" width="12" height="12" fill="{color}"/>'
                     f'<text x="{left + 110 * i + 16}" y="{legend_y + 11}">{name}</text>'
                     for i, (_, name, color) in enumerate(parts))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{legend_y + 24}" font-size="12" '
            f'font-family="sans-serif"><text x="4" y="16" font-weight="bold">time of one profiled step</text>'
            + "".join(rows) + legend + "</svg>")


def _loss_chart(labels: List[str], cells: List[dict]) -> str:
    width, height, pad = 760, 300, 44
    curves = [(label, c["losses"]) for label, c in zip(labels, cells) if "losses" in c]
    if not curves:
        return ""
    values = [v for _, losses in curves for v in losses]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    steps = max(len(losses) for _, losses in curves)
    colors = ["#3b73b9", "#d9822b", "#2f9e44", "#c92a2a", "#7048e8", "#0c8599", "#e8590c", "#5c940d", "#862e9c",
              "#495057", "#1971c2", "#f08c00"]
    lines = []
    for i, (name, losses) in enumerate(curves):
        points = " ".join(f"{pad + (width - 2 * pad) * s / max(steps - 1, 1):.1f},"
                          f"{height - pad - (height - 2 * pad) * (v - low) / span:.1f}" for s, v in enumerate(losses))
        color = colors[i % len(colors)]
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}">'
                     f'<title>{html.escape(name)}</title></polyline>')
    axes = (f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#333"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#333"/>'
            f'<text x="{pad}" y="{pad - 8}">{high:.4f}</text><text x="{pad}" y="{height - pad + 16}">{low:.4f}'
            f' (step 1 .. {steps})</text>')
    # The legend under the plot: a curve hidden under another is one whose losses are the same.
    legend = "".join(f'<rect x="{pad + 190 * (i % 3)}" y="{height + 4 + 18 * (i // 3)}" width="12" height="3" '
                     f'fill="{colors[i % len(colors)]}"/><text x="{pad + 190 * (i % 3) + 16}" '
                     f'y="{height + 10 + 18 * (i // 3)}">{html.escape(name)}</text>'
                     for i, (name, _) in enumerate(curves))
    total_height = height + 10 + 18 * ((len(curves) + 2) // 3)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_height}" font-size="12" '
            f'font-family="sans-serif"><text x="4" y="16" font-weight="bold">loss per step (every cell; equal '
            f'curves overlap)</text>' + axes + "".join(lines) + legend + "</svg>")


def write_html(report: dict, path: str) -> None:
    cells = [c for c in report["cells"] if "error" not in c]
    labels = [_short_name(c, report["cells"][0]) for c in cells]
    config, machine = report["config"], report["machine"]
    rows = []
    for cell in report["cells"]:
        if "error" in cell:
            rows.append(f"<tr><td>{html.escape(cell['name'])}</td><td colspan='7' class='bad'>ERROR: "
                        f"{html.escape(cell['error'])}</td></tr>")
            continue
        check = "ok" if cell["loss_matches_baseline"] else "WRONG"
        rows.append(
            f"<tr><td>{html.escape(cell['name'])}{' (baseline)' if cell['baseline'] else ''}</td>"
            f"<td>{cell['tokens_per_s']:.0f}</td><td>{cell.get('delta_tokens_per_s_pct', 0.0):+.1f}</td>"
            f"<td>{cell['step_p50_s'] * 1e3:.1f}</td><td>{cell['mfu']:.1%}</td><td>{_mib(_memory_bytes(cell))}</td>"
            f"<td>{cell['losses'][-1]:.4f}</td><td class='{'ok' if check == 'ok' else 'bad'}'>{check}</td></tr>")
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>hal.bench train: {html.escape(config['name'])}</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:first-child{{text-align:left}}
.ok{{color:#2f9e44;font-weight:bold}} .bad{{color:#c92a2a;font-weight:bold}} .meta{{color:#555}}</style></head>
<body><h1>hal.bench train: {html.escape(config['name'])}</h1>
<p class="meta">{config['layers']} layers, hidden {config['hidden']}, heads {config['heads']}/{config['kv_heads']},
seq {config['seq']}, batch {config['batch']} x {config['ranks']} rank(s) ({config['parallel']}),
{config['steps']} steps after {config['warmup']} warm-up; {html.escape(machine['cpu'])}, torch
{html.escape(machine['torch'])}, devices {html.escape(machine['devices'])}; {html.escape(report['created'])}</p>
<table><tr><th>cell</th><th>tokens/s</th><th>&Delta;% vs baseline</th><th>step p50 ms</th><th>MFU</th>
<th>peak memory MiB</th><th>final loss</th><th>loss check</th></tr>
{''.join(rows)}</table>
<h2>Throughput</h2>{_bar_chart('tokens/s per cell', labels, [c['tokens_per_s'] for c in cells], 'tok/s')}
<h2>Where the time goes</h2>{_time_split_chart(labels, cells)}
<h2>Memory</h2>{_bar_chart('peak memory per cell', labels, [(_memory_bytes(c) or 0) / 2 ** 20 for c in cells],
                            'MiB')}
<h2>Loss</h2>{_loss_chart(labels, cells)}
</body></html>
"""
    with open(path, "w") as out:
        out.write(page)


# ------------------------------------------------------------------ comparison

def print_comparison(old: dict, new: dict) -> None:
    if old.get("schema") != SCHEMA:
        print(f"--compare: the old report's schema is {old.get('schema')!r}, not {SCHEMA}; not compared")
        return
    print("compared with the report of", old.get("created", "?"))
    for key in ("cpu", "torch", "hal", "devices"):
        if old["machine"].get(key) != new["machine"].get(key):
            print(f"  machine {key}: {old['machine'].get(key)} -> {new['machine'].get(key)}")
    for key, value in new["config"].items():
        if old["config"].get(key) != value:
            print(f"  config {key}: {old['config'].get(key)} -> {value}")
    before = {c["name"]: c for c in old["cells"]}
    for cell in new["cells"]:
        previous = before.get(cell["name"])
        if previous is None or "error" in cell or "error" in previous:
            print(f"  {cell['name']}: {'new cell' if previous is None else 'not comparable (an error)'}")
            continue
        change = 100.0 * (cell["tokens_per_s"] / previous["tokens_per_s"] - 1.0)
        print(f"  {cell['name']}: tokens/s {previous['tokens_per_s']:.0f} -> {cell['tokens_per_s']:.0f} "
              f"({change:+.1f}%), final loss {previous['losses'][-1]:.4f} -> {cell['losses'][-1]:.4f}")
