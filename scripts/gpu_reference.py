#!/usr/bin/env python3
"""PyTorch reference figures on the GPU, for ratios against hal's own.

Writes one JSON document to the path given (or stdout): device-to-device
copy bandwidth, the cost of a 1 MiB copy, and scaled_dot_product_attention
forward times with the flash and cuDNN backends. Each part that fails is
recorded with its error instead of stopping the rest.
"""
import os
import json
import sys
import time


def timed(torch, function, iterations, warmup=3):
    for _ in range(warmup):
        function()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        function()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iterations  # milliseconds per call


def copy_figures(torch):
    figures = {}
    size = 1 << 30
    source = torch.empty(size, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    milliseconds = timed(torch, lambda: target.copy_(source), 20)
    figures["d2d_1GiB_ms"] = milliseconds
    # Both conventions, so nobody compares the wrong one: bytes copied per
    # second, and bytes moved (read + write) per second.
    figures["d2d_1GiB_copied_TBps"] = size / (milliseconds * 1e-3) / 1e12
    figures["d2d_1GiB_moved_TBps"] = 2 * size / (milliseconds * 1e-3) / 1e12
    small_source, small_target = source[: 1 << 20], target[: 1 << 20]
    figures["d2d_1MiB_enqueued_us"] = timed(torch, lambda: small_target.copy_(small_source), 1000) * 1e3
    started = time.perf_counter()
    for _ in range(1000):
        small_target.copy_(small_source)
        torch.cuda.synchronize()
    figures["d2d_1MiB_synchronous_us"] = (time.perf_counter() - started) / 1000 * 1e6
    return figures


def attention_figures(torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as functional

    figures = {}
    # The shape halbench attn measures in scripts/gpu-check.sh.
    batch, heads, sequence, head_dim = (int(x) for x in os.environ.get("HAL_GPU_REFERENCE_SHAPE", "2,16,2048,128").split(","))
    for dtype_name in ("bfloat16", "float16"):
        dtype = getattr(torch, dtype_name)
        q, k, v = (torch.randn(batch, heads, sequence, head_dim, device="cuda", dtype=dtype) for _ in range(3))
        for backend_name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            for causal in (False, True):
                key = f"sdpa_{backend_name}_{dtype_name}_b{batch}_h{heads}_s{sequence}_d{head_dim}_{'causal' if causal else 'full'}"
                try:
                    with sdpa_kernel(backend):
                        milliseconds = timed(torch, lambda: functional.scaled_dot_product_attention(q, k, v, is_causal=causal), 10)
                    flops = 4 * batch * heads * sequence * sequence * head_dim / (2 if causal else 1)
                    figures[key] = {"ms": milliseconds, "TFLOPs": flops / (milliseconds * 1e-3) / 1e12}
                    # Forward plus backward, as halbench attn --backward runs them.
                    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                    grad = torch.randn_like(q)

                    def forward_backward():
                        functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(grad)

                    with sdpa_kernel(backend):
                        both = timed(torch, forward_backward, 10)
                    figures[key]["forward_backward_ms"] = both
                except Exception as error:  # a backend this build or device lacks
                    figures[key] = {"error": str(error).splitlines()[0]}
    return figures


def main():
    result = {"schema": "hal.gpu_reference/1"}
    try:
        import torch

        result["torch"] = torch.__version__
        result["torch_cuda"] = torch.version.cuda
        result["cudnn"] = torch.backends.cudnn.version()
        try:
            result["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as error:  # a build without NCCL
            result["nccl"] = f"unknown ({type(error).__name__}: {error})"
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no CUDA device (torch.cuda.is_available() is False)")
        result["device"] = torch.cuda.get_device_name(0)
    except Exception as error:  # no torch, or no GPU: nothing below can run
        result["error"] = f"{type(error).__name__}: {error}"
    else:
        for part, figures in (("copy", copy_figures), ("attention", attention_figures)):
            try:
                result[part] = figures(torch)
            except Exception as error:
                result[part] = {"error": f"{type(error).__name__}: {error}"}
                result.setdefault("failed_parts", []).append(part)
    text = json.dumps(result, indent=2)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(text + "\n")
    print(text)
    return 0 if "error" not in result and "failed_parts" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
