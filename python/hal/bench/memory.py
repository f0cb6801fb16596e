"""python -m hal.bench memory: hal.torch.memory's predicted peak against the peak measured for real.

Each configuration (a Llama-style model from hal.torch.models, or Hugging
Face transformers' Llama with a tiny config and random weights; hal's or
torch's attention; no, some, all or selective checkpointing; AdamW or SGD)
is predicted in this process (fake tensors, no memory) and run for real, two
training steps, in fresh processes:

- resident: the peak resident memory of the steps above the process's
  resident memory before the model was made (VmHWM from /proc/self/status,
  reset when the steps start; the process first trained one layer of the same
  shapes, so kernels and the math libraries' buffers exist before the
  baseline), with glibc's mmap threshold fixed at 64 KiB
  (MALLOC_MMAP_THRESHOLD_=65536: freed tensors return to the system, so the
  resident peak follows the tensors) and, in a second process, with glibc's
  default (its heap keeps freed blocks: the host's "reserved");
- tracked: the peak of live tensors, counted by torch's own MemTracker on the
  real run (torch.distributed._tools), the storage-tracking measurement.

The anchors in the same table: torch's MemTracker run under FakeTensorMode
(its own prediction) and DeepSpeed's model-states formula (parameters,
gradients and optimizer states: 16 bytes a parameter for fp32 AdamW, no
activations). The goals (issue: predicted within 5% of measured everywhere,
median within 3%, never under by more than 2%) are printed beside the figures.

--budget adds the plan check: plan() under a budget, run for real, measured
peak <= budget, and the step time of the plan against none and every block
checkpointed, alternated in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from ._resident import reset_peak_resident, status_bytes

VOCAB = 4096
THRESHOLD = "65536"


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    model: str = "llama"            # "llama" (hal.torch.models) or "hf-llama" (transformers' LlamaForCausalLM)
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    seq: int = 1024
    batch: int = 2
    attention: str = "hal"          # "hal" or "torch"
    checkpoint: str = "none"        # "none", "half" (the first half of the blocks), "all", "selective"
    optimizer: str = "adamw"

    def label(self) -> str:
        return (f"{self.model} L{self.layers} h{self.hidden} s{self.seq} b{self.batch} {self.attention} "
                f"ckpt={self.checkpoint} {self.optimizer}")


CONFIGS = [
    Config("small", layers=2, seq=256, batch=1),
    Config("base", layers=4, seq=1024, batch=2),
    Config("base-all", layers=4, seq=1024, batch=2, checkpoint="all"),
    Config("base-half", layers=4, seq=1024, batch=2, checkpoint="half"),
    Config("base-selective", layers=4, seq=1024, batch=2, checkpoint="selective"),
    Config("base-torch", layers=4, seq=1024, batch=2, attention="torch"),
    Config("deep-sgd", layers=8, seq=512, batch=4, optimizer="sgd"),
    Config("deep-half-momentum", layers=8, seq=512, batch=4, checkpoint="half", optimizer="sgd-momentum"),
    Config("long", layers=2, seq=4096, batch=1),
    Config("long-all", layers=2, seq=4096, batch=1, checkpoint="all"),
    Config("hf", model="hf-llama", layers=4, seq=512, batch=2),
    Config("hf-all", model="hf-llama", layers=4, seq=512, batch=2, checkpoint="all"),
    Config("hf-torch-selective", model="hf-llama", layers=4, seq=512, batch=2, attention="torch",
           checkpoint="selective"),
]
QUICK = ["small", "base-half", "hf"]


def add_parser(sub) -> None:
    parser = sub.add_parser("memory", help="hal.torch.memory's predicted peak against the measured one")
    parser.add_argument("--configs", nargs="+", choices=[c.name for c in CONFIGS], help="default: all")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--budget", action="store_true", help="also check a plan under a budget, with step times")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one measurement in a fresh process
    parser.add_argument("--worker-config", help=argparse.SUPPRESS)


# ------------------------------------------------------------------ building a configuration


def _build(config: Config, checkpoint: Optional[dict] = None):
    """(model, tokens, step) for the config; checkpoint: hal.torch.memory.apply's arguments (default: the
    config's own)."""
    import torch

    import hal.torch as ht
    from hal.torch import memory
    from hal.torch.models import CONFIGS as MODELS, Llama

    torch.manual_seed(0)
    if config.model == "llama":
        shape = MODELS["llama3-8b"].scaled(layers=config.layers, hidden=config.hidden, heads=config.heads,
                                           kv_heads=config.kv_heads, vocab=VOCAB)
        model = Llama(shape, max_seq=config.seq, sdpa=ht._torch_sdpa if config.attention == "torch" else
                      ht.scaled_dot_product_attention)

        def step(m, tokens):
            return m.loss(tokens)
    else:
        import transformers

        import hal.transformers  # noqa: F401  (registers "hal")
        hf_config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=config.hidden,
                                             intermediate_size=config.hidden * 7 // 2,
                                             num_hidden_layers=config.layers, num_attention_heads=config.heads,
                                             num_key_value_heads=config.kv_heads, max_position_embeddings=config.seq)
        model = transformers.AutoModelForCausalLM.from_config(
            hf_config, attn_implementation="sdpa" if config.attention == "torch" else "hal")

        def step(m, tokens):
            return m(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
    tokens = torch.randint(0, VOCAB, (config.batch, config.seq + 1))
    if checkpoint is None:
        blocks = memory.find_blocks(model)
        checkpoint = {"checkpoint": blocks if config.checkpoint == "all" else
                      blocks[:len(blocks) // 2] if config.checkpoint == "half" else [],
                      "selective": blocks if config.checkpoint == "selective" else []}
    memory.apply(model, **checkpoint)
    return model, tokens, step


def predict(config: Config) -> dict:
    from hal.torch import memory

    model, tokens, step = _build(config, checkpoint={})
    blocks = memory.find_blocks(model)
    start = time.perf_counter()
    est = memory.estimate(model, tokens, step=step, optimizer=config.optimizer,
                          checkpoint=blocks if config.checkpoint == "all" else
                          blocks[:len(blocks) // 2] if config.checkpoint == "half" else (),
                          selective=config.checkpoint == "selective")
    params = sum(p.numel() for p in model.parameters())
    states_per_param = {"adamw": 16, "sgd": 8, "sgd-momentum": 12}[config.optimizer]
    return {"predicted": est.peak_bytes, "predict_seconds": time.perf_counter() - start,
            "moment": est.moment, "deepspeed_model_states": states_per_param * params}


# ------------------------------------------------------------------ the measurements (fresh processes)


def _train(model, tokens, step, optimizer_name: str, steps: int = 2) -> List[float]:
    import torch

    from hal.torch.memory import _make_optimizer

    optimizer = _make_optimizer(optimizer_name, model.parameters())
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(model, tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    del optimizer
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return times


def _memtracker_peak(model, tokens, step, optimizer_name: str) -> int:
    """torch's MemTracker over two steps (it takes one per tracking scope)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from hal.torch.memory import _make_optimizer

    optimizer = _make_optimizer(optimizer_name, model.parameters())
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    peak = 0
    for _ in range(2):
        with tracker:
            step(model, tokens).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peak = max(peak, tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])
        tracker.reset_mod_stats()
    return peak


def _worker(kind: str, config: Config, checkpoint: Optional[dict]) -> dict:
    import gc

    import torch

    torch.manual_seed(0)
    # One layer at the same shapes first: kernels, thread pools and the math libraries' working buffers are made
    # before the baseline (they stay with the process, not with a step).
    _train(*_build(dataclasses.replace(config, layers=1)), config.optimizer)
    gc.collect()
    if kind == "resident":
        baseline = status_bytes("VmRSS")
        if not baseline:
            raise RuntimeError("/proc/self/status has no VmRSS")
        model, tokens, step = _build(config, checkpoint)
        if not reset_peak_resident():
            raise RuntimeError("/proc/self/clear_refs cannot reset this process's peak resident memory")
        times = _train(model, tokens, step, config.optimizer)
        return {"peak": status_bytes("VmHWM") - baseline, "step_seconds": times}
    if kind == "tracked":
        model, tokens, step = _build(config, checkpoint)
        return {"peak": _memtracker_peak(model, tokens, step, config.optimizer)}
    if kind == "memtracker-fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            model, tokens, step = _build(config, checkpoint)
            return {"peak": _memtracker_peak(model, tokens, step, config.optimizer)}
    raise ValueError(f"unknown measurement {kind!r}")


def measure(kind: str, config: Config, checkpoint: Optional[dict] = None, threshold: bool = True) -> dict:
    """One measurement in a fresh process; {"error": ...} when it failed."""
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = THRESHOLD
    command = [sys.executable, "-m", "hal.bench", "memory", "--worker", kind,
               "--worker-config", json.dumps({"config": dataclasses.asdict(config), "checkpoint": checkpoint})]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}
    return json.loads(lines[-1])


# ------------------------------------------------------------------ the report


def _ratio_text(predicted: int, measured: Optional[int]) -> str:
    return f"{(predicted - measured) / measured:+6.1%}" if measured else "   n/a"


def run(args: argparse.Namespace) -> int:
    if args.worker:
        spec = json.loads(args.worker_config)
        result = _worker(args.worker, Config(**spec["config"]), spec["checkpoint"])
        print(json.dumps(result), flush=True)
        return 0
    names = QUICK if args.quick else args.configs or [c.name for c in CONFIGS]
    configs = [c for c in CONFIGS if c.name in names]
    mib = 1 << 20
    print(f"{'configuration':<52} {'predicted':>9} {'resident':>9} {'error':>7} {'glibc':>8} {'tracked':>8} "
          f"{'error':>7} {'MemTr.':>8} {'DS st.':>7}  (MiB; error = predicted vs measured)")
    rows = []
    for config in configs:
        row = {"config": dataclasses.asdict(config), **predict(config)}
        row["resident"] = measure("resident", config)
        row["resident_glibc_default"] = measure("resident", config, threshold=False)
        row["tracked"] = measure("tracked", config)
        row["memtracker_fake"] = measure("memtracker-fake", config)
        rows.append(row)

        def cell(result):
            return f"{result['peak'] / mib:8.1f}" if "peak" in result else f"{'failed':>8}"
        resident = row["resident"].get("peak")
        print(f"{config.label():<52} {row['predicted'] / mib:9.1f} {cell(row['resident']):>9} "
              f"{_ratio_text(row['predicted'], resident):>7} {cell(row['resident_glibc_default'])} "
              f"{cell(row['tracked'])} {_ratio_text(row['predicted'], row['tracked'].get('peak')):>7} "
              f"{cell(row['memtracker_fake'])} {row['deepspeed_model_states'] / mib:7.1f}", flush=True)
    errors = [(r["predicted"] - r["resident"]["peak"]) / r["resident"]["peak"] for r in rows if "peak" in r["resident"]]
    failed = [r["config"]["name"] for r in rows if "peak" not in r["resident"]]
    for row in rows:
        for kind in ("resident", "resident_glibc_default", "tracked", "memtracker_fake"):
            if "error" in row[kind]:
                print(f"  {row['config']['name']} {kind}: {row[kind]['error']}")
    summary = {}
    if errors:
        worst, median, under = max(abs(e) for e in errors), statistics.median(abs(e) for e in errors), min(errors)
        summary = {"worst_abs_error": worst, "median_abs_error": median, "most_under": under}
        print(f"\npredicted against resident (threshold {THRESHOLD}), {len(errors)} configurations:")
        print(f"  worst |error| {worst:.1%}   (goal <= 5%)   {'met' if worst <= 0.05 else 'NOT MET'}")
        print(f"  median |error| {median:.1%}  (goal <= 3%)   {'met' if median <= 0.03 else 'NOT MET'}")
        print(f"  most under {under:+.1%}     (goal >= -2%)  {'met' if under >= -0.02 else 'NOT MET'}")
    if args.budget:
        summary["budget"] = _budget_check()
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 1 if failed else 0


def _budget_check() -> dict:
    """plan() under a budget between the peaks of no and full checkpointing, run for real; step times of the plan,
    of none and of all, each in a fresh process."""
    from hal.torch import memory

    config = Config("budget", layers=6, seq=1024, batch=2)
    model, tokens, step = _build(config, checkpoint={})
    none = memory.estimate(model, tokens, step=step).peak_bytes
    full = memory.estimate(model, tokens, step=step, checkpoint=True).peak_bytes
    budget = int(full + 0.4 * (none - full))
    result = memory.plan(model, tokens, step=step, budget_bytes=budget)
    print(f"\nplan under a budget ({config.label()}):\n{result}")
    plans = {"plan": {"checkpoint": list(result.checkpoint), "selective": list(result.selective)},
             "none": {"checkpoint": [], "selective": []},
             "all": {"checkpoint": list(result.blocks), "selective": []}}
    measured: Dict[str, dict] = {name: {"peak": [], "step": []} for name in plans}
    for _ in range(2):  # ABAB: the machine's noise lands on each
        for name, checkpoint in plans.items():
            outcome = measure("resident", config, checkpoint)
            if "peak" in outcome:
                measured[name]["peak"].append(outcome["peak"])
                measured[name]["step"].append(outcome["step_seconds"][-1])
    mib = 1 << 20
    for name, values in measured.items():
        if values["peak"]:
            print(f"  {name:<5} measured peak {max(values['peak']) / mib:7.1f} MiB  step "
                  f"{statistics.median(values['step']) * 1e3:7.0f} ms")
    plan_peak = max(measured["plan"]["peak"], default=None)
    fits = plan_peak is not None and plan_peak <= budget
    print(f"  budget {budget / mib:.1f} MiB: the plan's measured peak "
          f"{'fits' if fits else 'does NOT fit'} (goal: fits)")
    return {"budget": budget, "plan": str(result), "measured": measured, "fits": fits}
