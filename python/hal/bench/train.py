"""python -m hal.bench train: a named LLM's training steps end to end through hal, with ablations and a report.

The model is a Llama-style decoder (hal.torch.models) built from a published
config (--model llama3-8b, llama3-70b, qwen2.5-7b), full size or scaled with
--layers/--hidden/--seq/--batch; AdamW; synthetic tokens from a fixed seed.
Each cell of the run is one configuration, run in fresh processes (its own
ranks, so its peak memory is its own): the baseline (hal's attention, hal's
collectives, no compile, no checkpointing) and, with --ablate, each axis
varied from it one at a time:

  attention     torch (torch's SDPA), hal (hal's choice), hal-flash, hal-math
  collectives   gloo (torch's own backend), hal (hal's engine choice), hal-gloo, hal-mpi (an engine by name)
  compile       off, on (torch.compile)
  checkpoint    none, plan (hal.torch.memory's plan, as CHECKPOINT_OPTIMIZATION=true), all (every block)

Per cell: tokens/s per device and in total, step time p50/p90 after warm-up,
model TFLOP/s per device, MFU against a peak measured in the same cell (torch's
matmul on that device), peak memory, the time in attention and in
collectives (torch.profiler, one step), and the loss at every step. Every
cell's loss curve must match the baseline's (relative tolerance --loss-rtol);
one that does not is WRONG in the table and in the exit status (1).

FLOPs per step (docs/bench-train.md): 6 N T for the matmuls of N
non-embedding parameters over T tokens (forward 2 N T, backward 4 N T), plus
attention's scores and weighted sum: 12 L B S^2 H x (1/2 causal) for L
layers, B sequences of S tokens and hidden size H (forward 4 L B S^2 H).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from . import _ranks
from ._resident import reset_peak_resident, status_bytes

SCHEMA = "hal.bench.train/1"
ATTENTION = ("torch", "hal", "hal-flash", "hal-math")
COLLECTIVES = ("gloo", "hal", "hal-gloo", "hal-mpi")
CHECKPOINT = ("none", "plan", "all")
AXES = ("attention", "collectives", "compile", "checkpoint")


@dataclasses.dataclass(frozen=True)
class Cell:
    attention: str = "hal"
    collectives: str = "hal"
    compile: bool = False
    checkpoint: str = "none"

    @property
    def name(self) -> str:
        return (f"attention={self.attention} collectives={self.collectives} "
                f"compile={'on' if self.compile else 'off'} checkpoint={self.checkpoint}")

    def environment(self) -> Dict[str, str]:
        """What the cell's processes are started with: hal's settings are read once, at start-up."""
        environment = {"KINETO_LOG_LEVEL": "5"}  # the profiler's own start and stop lines are not the report's
        if self.attention in ("hal-flash", "hal-math"):
            environment["HAL_ATTN_BACKENDS"] = self.attention.split("-")[1]
        if self.collectives in ("hal-gloo", "hal-mpi"):
            environment["HAL_COLL_ENGINE"] = self.collectives.split("-")[1]
        if self.checkpoint == "plan":
            environment["CHECKPOINT_OPTIMIZATION"] = "true"
        return environment


def add_parser(sub) -> None:
    parser = sub.add_parser("train", help="a named model's training steps through hal, with ablations")
    parser.add_argument("--model", default="llama3-8b", help="llama3-8b, llama3-70b or qwen2.5-7b")
    parser.add_argument("--layers", type=int, help="default: 2 on the CPU, the model's own on a GPU")
    parser.add_argument("--hidden", type=int, help="default: 256 on the CPU (heads and FFN follow), else the model's")
    parser.add_argument("--heads", type=int, help="query heads (default: follow --hidden)")
    parser.add_argument("--vocab", type=int, help="default: 2048 on the CPU, else the model's")
    parser.add_argument("--hf", choices=["llama", "mistral", "qwen2"],
                        help="a Hugging Face transformers model of this family and --model's shape instead of hal's "
                             "Llama (attention through attn_implementation 'hal', or 'sdpa' for torch's)")
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: 128 on the CPU, 8192)")
    parser.add_argument("--batch", type=int, default=2, help="sequences per rank and step")
    parser.add_argument("--steps", type=int, default=6, help="measured steps after --warmup")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="parameters and activations (default: float32 on the CPU, bfloat16 on a GPU)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when torch has it")
    parser.add_argument("-n", "--ranks", type=int, default=1, help="ranks to start on this machine")
    parser.add_argument("--launcher", choices=_ranks.LAUNCHERS, default="local",
                        help="how the ranks start (auto: mpirun when installed)")
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp", help="with several ranks")
    parser.add_argument("--attention", choices=ATTENTION, default="hal", help="the baseline's attention")
    parser.add_argument("--collectives", choices=COLLECTIVES, default="hal", help="the baseline's collectives")
    parser.add_argument("--compile", action="store_true", help="the baseline uses torch.compile")
    parser.add_argument("--checkpoint", choices=CHECKPOINT, default="none", help="the baseline's checkpointing")
    parser.add_argument("--memory-budget", help="the plan cell's budget, e.g. 2GiB (default: hal.torch.memory's, "
                                                "the device's free memory less 10%%)")
    parser.add_argument("--ablate", nargs="*", choices=AXES + ("all",), default=None,
                        help="axes to vary from the baseline one at a time (no value: all)")
    parser.add_argument("--loss-rtol", type=float, default=2e-3, help="a cell's losses against the baseline's")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON (schema hal.bench.train/1); "
                                                       "- prints it instead of the table")
    parser.add_argument("--html", metavar="FILE", help="write an HTML report with charts")
    parser.add_argument("--compare", metavar="OLD_JSON", help="show what changed against an earlier report")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # a rank of one cell (JSON), started by the run
    parser.add_argument("--cell-result", help=argparse.SUPPRESS)


# ------------------------------------------------------------------ configuration

def _device(args) -> str:
    if args.device:
        return args.device
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def _config(args):
    """The model config actually run, and the sequence length; ValueError naming what is wrong."""
    from hal.torch.models import CONFIGS

    if args.model not in CONFIGS:
        raise ValueError(f"--model {args.model}: unknown; choose one of {', '.join(sorted(CONFIGS))}")
    base = CONFIGS[args.model]
    small = _device(args) == "cpu"
    hidden = args.hidden or (256 if small else None)
    config = base.scaled(layers=args.layers or (2 if small else None), hidden=hidden, heads=args.heads,
                         vocab=args.vocab or (2048 if small else None))
    if config == dataclasses.replace(base, name=config.name):
        config = base
    config.check()
    if args.hf:  # the shape of the named model, built by transformers
        config = dataclasses.replace(config, name=f"transformers {args.hf}, the shape of {config.name}")
    seq = args.seq or (128 if small else 8192)
    for name in ("batch", "steps", "ranks"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} is {getattr(args, name)}; it must be >= 1")
    if seq < 2:
        raise ValueError(f"--seq {seq}: at least 2 tokens")
    if args.warmup < 1:
        raise ValueError(f"--warmup {args.warmup}: at least one step (compilation and allocation happen there)")
    if args.ranks > 1 and args.parallel == "fsdp" and config.hidden % args.ranks:
        raise ValueError(f"--parallel fsdp over {args.ranks} ranks: hidden size {config.hidden} does not shard "
                         f"evenly; use a rank count that divides it")
    return config, seq


def _cells(args) -> List[Cell]:
    baseline = Cell(args.attention, args.collectives if args.ranks > 1 else "none", args.compile, args.checkpoint)
    cells = [baseline]
    axes = AXES if args.ablate == [] or (args.ablate and "all" in args.ablate) else (args.ablate or ())
    choices = {"attention": ATTENTION, "collectives": COLLECTIVES if args.ranks > 1 else (), "compile": (False, True),
               "checkpoint": CHECKPOINT}
    for axis in axes:
        for value in choices[axis]:
            cell = dataclasses.replace(baseline, **{axis: value})
            if cell not in cells:
                cells.append(cell)
    return cells


def flops_per_step(config, tokens_per_sequence: int, sequences: int, causal: bool = True) -> float:
    """Training FLOPs of one step over `sequences` sequences (docs/bench-train.md)."""
    per_block = (config.hidden * config.heads * config.head_dim + 2 * config.hidden * config.kv_heads * config.head_dim
                 + config.heads * config.head_dim * config.hidden + 3 * config.hidden * config.ffn)
    non_embedding = config.layers * per_block + config.hidden * config.vocab  # the output head is a matmul
    tokens = tokens_per_sequence * sequences
    attention = 12 * config.layers * sequences * tokens_per_sequence ** 2 * config.heads * config.head_dim
    return 6 * non_embedding * tokens + attention * (0.5 if causal else 1.0)


# ------------------------------------------------------------------ the run

def run(args: argparse.Namespace) -> int:
    if args.cell:
        return _cell_rank(args)
    try:
        config, seq = _config(args)
        _ranks.resolve(args.launcher)
        if args.compare and not Path(args.compare).is_file():
            raise ValueError(f"--compare {args.compare}: no such file")
    except ValueError as error:
        print(f"hal.bench train: {error}", file=sys.stderr)
        return 2
    cells = _cells(args)
    if args.memory_budget:
        from hal.torch.memory import parse_bytes
        try:
            parse_bytes(args.memory_budget)
        except ValueError as error:
            print(f"hal.bench train: --memory-budget: {error}", file=sys.stderr)
            return 2
    if not args.quiet and args.json != "-":
        print(f"model {config.name}: {config.layers} layers, hidden {config.hidden}, heads {config.heads}/"
              f"{config.kv_heads}, ffn {config.ffn}, vocab {config.vocab}; seq {seq}, batch {args.batch} x "
              f"{args.ranks} rank(s); {len(cells)} cell(s)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="hal-bench-train-") as work:
        for index, cell in enumerate(cells):
            result_file = Path(work) / f"cell{index}.json"
            arguments = ["train"] + args.argv + ["--cell", json.dumps(dataclasses.asdict(cell)),
                                                 "--cell-result", str(result_file)]
            if not args.quiet and args.json != "-":
                print(f"[{index + 1}/{len(cells)}] {cell.name}", flush=True)
            environment = cell.environment()
            if args.memory_budget and cell.checkpoint == "plan":
                environment["HAL_MEMORY_BUDGET"] = args.memory_budget
            launcher = "mpirun" if cell.collectives == "hal-mpi" else args.launcher
            try:
                code = _ranks.run(arguments, args.ranks, launcher, environment) if args.ranks > 1 else \
                    _run_single(arguments, environment)
            except ValueError as error:  # hal-mpi without mpirun: not runnable here
                code, result = 2, {"error": f"unavailable: {error}"}
            else:
                result = json.loads(result_file.read_text()) if result_file.is_file() else \
                    {"error": f"the cell's ranks exited with status {code} and wrote no result"}
            result["cell"] = dataclasses.asdict(cell)
            result["name"] = cell.name
            results.append(result)
    from .train_report import build_report, check_losses, print_table, write_html, print_comparison
    report = build_report(args, config, seq, results)
    wrong = check_losses(report, args.loss_rtol)
    if args.json == "-":
        print(json.dumps(report, indent=1))
    else:
        print_table(report)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    if args.html:
        write_html(report, args.html)
    if args.compare:
        print_comparison(json.loads(Path(args.compare).read_text()), report)
    failed = any(not r.get("error", "unavailable").startswith("unavailable") for r in report["cells"])
    return 1 if wrong or failed else 0


def _run_single(arguments: List[str], environment: Dict[str, str]) -> int:
    import subprocess
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(environment)
    return subprocess.run([sys.executable, "-m", "hal.bench"] + arguments, env=env).returncode


# ------------------------------------------------------------------ one rank of one cell

def _matmul_peak_flops(device: str, dtype) -> float:
    """The best rate torch's matmul reaches on this device in this process: MFU's denominator."""
    import torch
    size = 2048 if device == "cpu" else 8192
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = math.inf
    for _ in range(3):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def _cell_rank(args: argparse.Namespace) -> int:
    """One rank of one cell; a failure is written as the cell's result (rank 0's), so the table can say why."""
    try:
        return _measure_cell(args)
    except Exception as error:  # noqa: BLE001 (the report names it; the exit status says it failed)
        if int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))) == 0:
            Path(args.cell_result).write_text(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        raise


def _measure_cell(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import hal.torch as ht
    from hal.torch import memory
    from hal.torch.models import synthetic_batches

    cell = Cell(**json.loads(args.cell))
    config, seq = _config(args)
    device = _device(args)
    dtype = getattr(torch, args.dtype or ("float32" if device == "cpu" else "bfloat16"))
    world, rank = 1, 0
    if _ranks.launched() and int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) > 1:
        dist.init_process_group("gloo" if cell.collectives == "gloo" else "hal",
                                timeout=datetime.timedelta(seconds=600))
        world, rank = dist.get_world_size(), dist.get_rank()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    peak_flops = _matmul_peak_flops(device, dtype)

    torch.manual_seed(args.seed)
    model = _build_model(args, config, seq, cell).to(device=device, dtype=dtype)
    tokens_all = list(synthetic_batches(config.vocab, args.batch, seq, args.warmup + args.steps,
                                        seed=args.seed + 1000 * rank))
    def loss_of(m, tokens):
        logits = m(tokens[:, :-1])
        logits = getattr(logits, "logits", logits)  # a transformers model returns an output object
        return F.cross_entropy(logits.reshape(-1, config.vocab).float(), tokens[:, 1:].reshape(-1))

    plan_text = ""
    if cell.checkpoint == "all":
        memory.apply(model, checkpoint=memory.find_blocks(model))
    elif cell.checkpoint == "plan":  # CHECKPOINT_OPTIMIZATION=true is in the cell's environment
        plan = memory.auto(model, tokens_all[0].to(device), step=loss_of, optimizer="adamw", world_size=world,
                           fsdp=world > 1 and args.parallel == "fsdp", device="cuda" if device == "cuda" else "cpu")
        plan_text = str(plan)
    if world > 1:
        if args.parallel == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard
            core = model
            for block in _blocks(core):
                fully_shard(block)
            fully_shard(core)
    step_model = torch.compile(model) if cell.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(tokens):
        loss = loss_of(step_model, tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    losses, times = [], []
    resident_before = status_bytes("VmRSS")  # libraries, the model and its inputs: what the steps add is above it
    reset_peak_resident()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for index, tokens in enumerate(tokens_all):
        tokens = tokens.to(device)
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        loss = step(tokens)
        value = loss.item()  # waits for the step
        elapsed = time.perf_counter() - start
        losses.append(value)
        if index >= args.warmup:
            times.append(elapsed)
        if rank == 0 and not args.quiet and args.json != "-" and sys.stdout.isatty():
            print(f"\r  step {index + 1}/{len(tokens_all)} loss {value:.4f} {elapsed * 1e3:.0f} ms",
                  end="", flush=True)
    if rank == 0 and not args.quiet and args.json != "-" and sys.stdout.isatty():
        print()
    split = _profile_split(step, tokens_all[-1].to(device), world)
    peak_resident = status_bytes("VmHWM")
    memory = {"peak_resident_bytes": peak_resident, "steps_resident_bytes": max(0, peak_resident - resident_before)}
    if device == "cuda":
        memory.update(max_allocated_bytes=torch.cuda.max_memory_allocated(),
                      max_reserved_bytes=torch.cuda.max_memory_reserved())
    if world > 1:  # the slowest rank's step and the largest memory
        gathered = [None] * world
        dist.all_gather_object(gathered, {"times": times, "memory": memory})
        times = [max(values) for values in zip(*(g["times"] for g in gathered))]
        memory = {key: max(g["memory"][key] for g in gathered) for key in memory}
        description = ht.distributed.describe() if cell.collectives != "gloo" else "torch's gloo"
    else:
        description = ""
    if rank == 0:
        p50 = statistics.median(times)
        p90 = sorted(times)[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)]
        tokens_per_step = args.batch * seq * world
        flops = flops_per_step(config, seq, args.batch)  # per device
        result = {"losses": losses, "step_seconds": times, "step_p50_s": p50, "step_p90_s": p90,
                  "tokens_per_s": tokens_per_step / p50, "tokens_per_s_per_device": tokens_per_step / p50 / world,
                  "model_tflops_per_device": flops / p50 / 1e12, "peak_tflops_per_device": peak_flops / 1e12,
                  "mfu": flops / p50 / peak_flops, "memory": memory, "time_split": split,
                  "world_size": world, "collectives_engine": description, "plan": plan_text}
        Path(args.cell_result).write_text(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()
    return 0


def _build_model(args, config, seq: int, cell: Cell):
    """hal's Llama (hal.torch.models) or, with --hf, a Hugging Face transformers model of the same shape, with the
    cell's attention."""
    import hal.torch as ht
    from hal.torch.models import Llama

    if not args.hf:
        return Llama(config, max_seq=seq, sdpa=ht._torch_sdpa if cell.attention == "torch" else
                     ht.scaled_dot_product_attention)
    import transformers

    import hal.transformers  # noqa: F401  (registers "hal")

    shape = dict(vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=config.ffn,
                 num_hidden_layers=config.layers, num_attention_heads=config.heads,
                 num_key_value_heads=config.kv_heads, max_position_embeddings=seq, rope_theta=config.rope_theta,
                 rms_norm_eps=config.norm_eps)
    classes = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config}
    hf_config = classes[args.hf](**shape)
    return transformers.AutoModelForCausalLM.from_config(
        hf_config, attn_implementation="sdpa" if cell.attention == "torch" else "hal")


def _blocks(model):
    """The repeated blocks: hal's Llama's .blocks, a transformers model's decoder layers."""
    return model.blocks if hasattr(model, "blocks") else model.model.layers




def _profile_split(step, tokens, world) -> Dict[str, float]:
    """Milliseconds of one step in attention (hal's and torch's SDPA ops), in collectives (torch's c10d and hal's
    process group) and the whole step, from torch.profiler's self times and hal's process group's clock."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hal.torch.distributed import ProcessGroupHal

    group = torch.distributed.distributed_c10d._get_default_group() if world > 1 else None
    hal_group = group if isinstance(group, ProcessGroupHal) else None
    hal_before = hal_group.seconds_in_collectives if hal_group else 0.0
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if tokens.device.type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        step(tokens)
    wall = time.perf_counter() - start
    # hal's process group runs CPU collectives on a thread of its own, which the profiler does not follow: its
    # own clock counts them.
    collectives = (hal_group.seconds_in_collectives - hal_before) * 1e3 if hal_group else 0.0
    attention = 0.0
    for event in prof.key_averages():
        name = event.key.lower()
        self_ms = (event.self_cpu_time_total + getattr(event, "self_device_time_total", 0)) / 1e3
        if "sdpa" in name or "scaled_dot_product" in name or "flash_attention" in name:
            attention += self_ms
        elif any(word in name for word in ("c10d", "gloo", "nccl", "hal.torch.distributed", "allreduce",
                                           "all_reduce", "all_gather", "reduce_scatter", "broadcast")):
            collectives += self_ms
    return {"attention_ms": attention, "collectives_ms": collectives, "step_ms": wall * 1e3,
            "other_ms": max(0.0, wall * 1e3 - attention - collectives)}
