#!/usr/bin/env python3
"""torch.distributed's "hal" backend on one GPU, for scripts/gpu-check.sh.

One rank (world size 1, a FileStore): all_reduce (SUM, float32) of CUDA
tensors from 8 B to 64 MiB through backend "hal" (hal's NCCL-family engine)
and through torch's "nccl" in a second group of the same process, taking
turns size by size (ABAB), each result checked. With one rank no data
crosses between GPUs: this is the cost of the path from torch to the engine
and back. Writes one JSON document to stdout; exits 1 when a result is
wrong or a backend fails.
"""
import json
import os
import statistics
import sys
import tempfile


def main() -> int:
    import torch
    import torch.distributed as dist

    import hal.torch  # noqa: F401  (registers backend "hal")

    torch.cuda.set_device(0)
    store_file = tempfile.NamedTemporaryFile(prefix="hal-gpu-store-", delete=False).name
    dist.init_process_group("hal", init_method=f"file://{store_file}", rank=0, world_size=1)
    groups = {"hal": dist.group.WORLD, "nccl": dist.new_group(backend="nccl")}
    document = {"benchmark": "torch-distributed-gpu", "world_size": 1, "device": torch.cuda.get_device_name(0),
                "results": [], "errors": []}
    size = 8
    while size <= 64 << 20:
        count = size // 4
        row = {"bytes": size}
        for _round in range(2):
            for name, group in groups.items():
                data = torch.arange(count, device="cuda", dtype=torch.float32) % 97
                expected = data.clone()
                try:
                    for _ in range(3):  # warm-up
                        dist.all_reduce(data.copy_(expected), group=group)
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    times = []
                    for _ in range(10):
                        data.copy_(expected)
                        start.record()
                        dist.all_reduce(data, group=group)
                        end.record()
                        end.synchronize()
                        times.append(start.elapsed_time(end) * 1e3)
                    if not torch.equal(data, expected):  # one rank: the sum is the input
                        document["errors"].append(f"{name} {size} B: wrong result "
                                                  f"(max diff {(data - expected).abs().max().item()})")
                    row.setdefault(f"{name}_us", []).append(statistics.median(times))
                except Exception as error:  # recorded, the rest still measured
                    document["errors"].append(f"{name} {size} B: {type(error).__name__}: {error}")
        for name in groups:
            if f"{name}_us" in row:
                row[f"{name}_us"] = min(row[f"{name}_us"])
        if "hal_us" in row and "nccl_us" in row:
            row["nccl_over_hal"] = row["nccl_us"] / row["hal_us"]
        document["results"].append(row)
        size *= 64
    dist.destroy_process_group()
    os.unlink(store_file)
    print(json.dumps(document, indent=1))
    return 1 if document["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
