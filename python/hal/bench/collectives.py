"""python -m hal.bench collectives: torch.distributed on backend "hal" against gloo (and mpi where torch has it).

Starts its own ranks on this machine (``-n``, through mpirun when it is
installed, so that hal's host engine is MPI's; ``--launcher local`` starts
them with torchrun's variables, and hal uses Gloo), or runs as one rank when
a launcher already started it. Each size is all-reduced (float32, SUM) on
every backend in turn, the order alternating round by round (ABAB...) so the
machine's noise lands on all of them; the figure is the median round's time
per call, the slowest rank's. Then one DDP training step of a small
Llama-style model on each backend, alternating the same way.

Goals (printed beside each figure): at 8 B-64 KiB hal's time <= 0.5x gloo's;
at 16-64 MiB hal's bus bandwidth >= 1.5x gloo's; the DDP step no slower.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from typing import Dict, List

from . import _ranks

SMALL_MESSAGE_BYTES = 64 << 10
LARGE_MESSAGE_BYTES = 16 << 20


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b")
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 8, 64K, 16M)") from None


def add_parser(sub) -> None:
    parser = sub.add_parser("collectives", help="torch.distributed all_reduce and a DDP step: hal against gloo")
    parser.add_argument("-n", "--ranks", type=int, default=2, help="ranks to start on this machine (default 2)")
    parser.add_argument("--launcher", choices=_ranks.LAUNCHERS, default="auto",
                        help="auto: mpirun when installed (hal's MPI engine), else local (hal's Gloo engine)")
    parser.add_argument("-b", "--min-bytes", type=_size, default=8)
    parser.add_argument("-e", "--max-bytes", type=_size, default=64 << 20)
    parser.add_argument("-f", "--factor", type=int, default=8, help="size multiplier between rows")
    parser.add_argument("--rounds", type=int, default=5, help="ABAB rounds per size (the median is shown)")
    parser.add_argument("--ddp-steps", type=int, default=3, help="DDP steps per backend (0: none)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")


def run(args: argparse.Namespace) -> int:
    for name in ("ranks", "rounds", "min_bytes", "max_bytes"):
        if getattr(args, name) < 1:
            print(f"--{name.replace('_', '-')} is {getattr(args, name)}; it must be >= 1", file=sys.stderr)
            return 2
    if args.factor < 2 or args.max_bytes < args.min_bytes:
        print(f"sizes {args.min_bytes}..{args.max_bytes} by x{args.factor}: need factor >= 2 and max >= min",
              file=sys.stderr)
        return 2
    if _ranks.launched():
        return _rank(args)
    return _launch(args)


def _launch(args: argparse.Namespace) -> int:
    try:
        return _ranks.run(["collectives"] + args.argv, args.ranks, args.launcher)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2


# ------------------------------------------------------------------ one rank

def _rank(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    import hal.torch  # noqa: F401  (registers "hal")
    from hal.torch import distributed as hal_dist

    dist.init_process_group("hal", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"hal": dist.distributed_c10d._get_default_group(), "gloo": dist.new_group(backend="gloo")}
    if dist.is_mpi_available():
        groups["mpi"] = dist.new_group(backend="mpi")
    dist.all_reduce(torch.ones(1))  # hal's communicator exists before the description is read
    engine = hal_dist.describe()

    sizes = []
    size = args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= args.factor
    if sizes[-1] != args.max_bytes:
        sizes.append(args.max_bytes)  # the largest size asked for is always measured
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        tensor = torch.ones(count)
        calls = max(2, min(200, (4 << 20) // max(size, 1)))
        per_backend: Dict[str, List[float]] = {name: [] for name in groups}
        for round_index in range(args.rounds + 1):  # round 0 warms up
            order = list(groups) if round_index % 2 == 0 else list(reversed(list(groups)))
            for name in order:
                group = groups[name]
                dist.all_reduce(tensor, group=group)  # the ranks start together
                start = time.perf_counter()
                for _ in range(calls):
                    dist.all_reduce(tensor, group=group)
                elapsed = (time.perf_counter() - start) / calls
                if round_index:
                    per_backend[name].append(elapsed)
        medians = {name: statistics.median(times) for name, times in per_backend.items()}
        slowest = torch.tensor([medians[name] for name in groups], dtype=torch.float64)
        dist.all_reduce(slowest, dist.ReduceOp.MAX, group=groups["gloo"])
        row = {"bytes": count * 4, "calls": calls}
        for name, seconds in zip(groups, slowest.tolist()):
            row[f"{name}_us"] = seconds * 1e6
            row[f"{name}_busbw_gbps"] = 2 * (world - 1) / world * count * 4 / seconds / 1e9
        row["hal_over_gloo_time"] = row["hal_us"] / row["gloo_us"]
        rows.append(row)

    ddp = _ddp_steps(args, groups, rank) if args.ddp_steps > 0 else {}
    if rank == 0:
        _report(args, rows, ddp, engine, world, list(groups))
    dist.destroy_process_group()
    return 0


def _ddp_steps(args, groups, rank) -> Dict[str, float]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from hal.torch.models import CONFIGS, Llama, synthetic_batches

    config = CONFIGS["llama3-8b"].scaled(layers=2, hidden=256, heads=4, kv_heads=2, vocab=512)
    models = {}
    for name, group in groups.items():
        torch.manual_seed(0)
        model = DistributedDataParallel(Llama(config, max_seq=128), process_group=group)
        models[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    times: Dict[str, List[float]] = {name: [] for name in groups}
    batches = list(synthetic_batches(config.vocab, 2, 128, args.ddp_steps + 1, seed=rank))
    for step, tokens in enumerate(batches):
        order = list(groups) if step % 2 == 0 else list(reversed(list(groups)))
        for name in order:
            model, optimizer = models[name]
            dist.barrier(group=groups["gloo"])
            start = time.perf_counter()
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab), tokens[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step:  # step 0 warms up
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _report(args, rows, ddp, engine, world, backends) -> None:
    small = [r["hal_over_gloo_time"] for r in rows if r["bytes"] <= SMALL_MESSAGE_BYTES]
    large = [r["hal_busbw_gbps"] / r["gloo_busbw_gbps"] for r in rows if r["bytes"] >= LARGE_MESSAGE_BYTES]
    summary = {
        "small_time_ratio_max": max(small) if small else None,
        "large_busbw_ratio_min": min(large) if large else None,
        "ddp_step_ratio": ddp["hal"] / ddp["gloo"] if ddp else None,
    }
    if args.json:
        print(json.dumps({"schema": "hal.bench.collectives/1", "world_size": world, "engine": engine, "rows": rows,
                          "ddp_step_seconds": ddp, "summary": summary}, indent=1))
        return
    print(engine)
    header = f"{'bytes':>10} {'calls':>5}"
    for name in backends:
        header += f" {name + ' us':>11} {name + ' GB/s':>10}"
    print(header + f" {'hal/gloo time':>13}  goal")
    for row in rows:
        line = f"{row['bytes']:>10} {row['calls']:>5}"
        for name in backends:
            line += f" {row[name + '_us']:>11.1f} {row[name + '_busbw_gbps']:>10.3f}"
        goal = ""
        if row["bytes"] <= SMALL_MESSAGE_BYTES:
            goal = f"time <= 0.5x gloo: {'met' if row['hal_over_gloo_time'] <= 0.5 else 'NOT met'}"
        elif row["bytes"] >= LARGE_MESSAGE_BYTES:
            ratio = row["hal_busbw_gbps"] / row["gloo_busbw_gbps"]
            goal = f"busbw {ratio:.2f}x gloo, goal >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'}"
        print(line + f" {row['hal_over_gloo_time']:>13.3f}  {goal}")
    if ddp:
        steps = ", ".join(f"{name} {seconds * 1e3:.1f} ms" for name, seconds in ddp.items())
        ratio = ddp["hal"] / ddp["gloo"]
        print(f"DDP step (median of {args.ddp_steps}): {steps}; hal/gloo {ratio:.3f}, goal <= 1.0: "
              f"{'met' if ratio <= 1.0 else 'NOT met'}")
