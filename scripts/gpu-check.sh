#!/usr/bin/env bash
# One prepared run on the lent GPU machine (NVIDIA H200: nvcc 13, CMake,
# ninja, PyTorch with cuDNN and NCCL; no package registry). Everything it
# learns goes under $OUT; summary.txt lists each step with its exit status.
#
# Prepare here with scripts/gpu-bundle.sh, then run through the device tool
# with carry ["build-gpu-bundle"] and a timeout of about 540 s:
#   scripts/gpu-check.sh
#
# Steps:
#  1. environment: GPU, driver, toolkit, PyTorch and its cuDNN/NCCL; the
#     flash attention kernels (tests/gpu) built with nvcc and checked;
#  2. whether all of hal configures there (it needs hwloc, Boost, toml++ and
#     doctest headers the machine may lack) — recorded, not required;
#  3. the carried CUDA backend when it loads there, else one built there
#     from source (nvcc fatbin + g++, needing only the CUDA headers);
#  4. halinfo -v and --json; the "cuda semantics" unit tests on the GPU;
#  5. attention on cuda:0: numerics against the host backend (flash, math,
#     fused where eligible), and halbench attn for each implementation;
#  6. halconform on cuda:0; halbench mem and dispatch on cuda:0;
#  7. halbench coll on cuda:0 through NCCL, world size 1;
#  8. PyTorch reference figures (copy bandwidth, 1 MiB copy cost, SDPA with
#     its flash and cuDNN backends on the shape halbench attn measured).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
bundle="${HAL_GPU_BUNDLE:-$root/build-gpu-bundle}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

# step NAME SECONDS COMMAND...: runs with a time limit, output to NAME.log.
step() {
  local name="$1" limit="$2"
  shift 2
  local started=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "$name: exit $status in $((SECONDS - started)) s" | tee -a "$summary"
  return $status
}

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
nvcc="$(command -v nvcc || echo "$cuda_home/bin/nvcc")"

step environment 60 bash -c '
  nvidia-smi; nvidia-smi -q | head -40
  echo "== nvcc"; '"$nvcc"' --version
  echo "== cmake"; cmake --version | head -1; ninja --version
  echo "== compilers"; c++ --version | head -1
  echo "== glibc"; ldd --version | head -1
  echo "== libcuda"; ldconfig -p | grep -E "libcuda\.so|libnccl|libcudnn" || true
  echo "== python"; python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
  echo "== hal bundle"; cat "'"$bundle"'/MANIFEST" 2>/dev/null || echo "no bundle at '"$bundle"'"'

# The flash attention kernels against their f64 reference (needs only nvcc;
# the one run of their tensor-core PTX).
step flash-kernels 300 bash -c '"$0" -O2 -std=c++17 -arch=native -I"$1/backends/kernels" -I"$1/backends/host" \
  -I"$1/tests/simt" "$1/tests/gpu/flash_attention_gpu_check.cu" "$1/backends/kernels/attention_plan.cpp" \
  -o "$2/flash_check" || exit $?; "$2/flash_check"' "$nvcc" "$root" "$work"

if [ ! -d "$bundle/lib/hal/backends" ]; then
  echo "no bundle at $bundle: run scripts/gpu-bundle.sh here and carry build-gpu-bundle" | tee -a "$summary"
  exit 1
fi

# 2. Does the whole project configure here? Only recorded.
step configure-probe 120 cmake -S "$root" -B "$work/probe" -G Ninja -DHAL_BUILD_TESTS=OFF

# 3. The carried CUDA backend (built here with its kernels and cuDNN's
#    frontend) when it loads on this machine; otherwise one built from
#    source there, with nothing but the CUDA headers (no fused attention:
#    the frontend headers are not on that machine).
cuda_plugin="$bundle/lib/hal/backends/libhal_backend_cuda.so"
mkdir -p "$work/cuda"
if step carried-cuda-backend-loads 30 python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$cuda_plugin"; then
  echo "using the carried CUDA backend: $cuda_plugin" | tee -a "$summary"
elif step build-cuda-backend 300 bash -c '
    set -e
    "'"$nvcc"'" --fatbin -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      -gencode arch=compute_90,code=compute_90 -I"'"$root"'/backends/kernels" -o "'"$work"'/cuda/kernels.fatbin" \
      "'"$root"'"/backends/kernels/cuda_kernels.cu
    shims="cuda_driver cudnn nccl cublas library_loader"
    c++ -std=c++20 -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
      -I"'"$root"'/hal/include" -I"'"$root"'/shims" -I"'"$root"'/backends/common" -I"'"$root"'/backends/kernels" \
      -isystem "'"$cuda_home"'/include" \
      -DHAL_VERSION_STRING="\"built-on-gpu-machine\"" -DHAL_CUDA_KERNEL_FATBIN="\"'"$work"'/cuda/kernels.fatbin\"" \
      "'"$root"'"/backends/cuda/*.cpp "'"$root"'"/backends/common/*.cpp "'"$root"'"/backends/kernels/attention_plan.cpp \
      $(for shim in $shims; do echo "'"$root"'/shims/$shim.cpp"; done) -ldl -pthread \
      -o "'"$work"'/cuda/libhal_backend_cuda.so"
    readelf -d "'"$work"'/cuda/libhal_backend_cuda.so" | grep NEEDED'; then
  cuda_plugin="$work/cuda/libhal_backend_cuda.so"
  echo "using the CUDA backend built here: $cuda_plugin" | tee -a "$summary"
else
  echo "no CUDA backend loads on this machine" | tee -a "$summary"
fi
# The carried libraries serve hal's binaries only; the compilers and Python
# keep the machine's own (the bundle may carry another libcrypto, say).
system_library_path="${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$bundle/lib:$bundle/lib/deps${system_library_path:+:$system_library_path}"
export HAL_BACKENDS_FORCE="$bundle/lib/hal/backends/libhal_backend_host.so:$cuda_plugin"
export HAL_CONFIG=""

# 4. What hal sees, and the unit tests on the GPU.
step halinfo 60 "$bundle/bin/halinfo" -v
step halinfo-json 60 bash -c '"'"$bundle"'/bin/halinfo" --json > "'"$out"'/halinfo.json"'
step unit-tests-gpu 180 env HAL_TEST_CUDA_DRIVER=system HAL_BACKENDS=host,cuda \
  "$bundle/bin/hal_cuda_tests" "--test-suite=cuda semantics,no driver" --duration=true
step unit-tests-gpu-junit 180 env HAL_TEST_CUDA_DRIVER=system HAL_BACKENDS=host,cuda \
  "$bundle/bin/hal_cuda_tests" "--test-suite=cuda semantics" --reporters=junit "--out=$out/unit-tests-gpu.xml"
if [ -x "$bundle/bin/hal_core_tests" ]; then
  step core-tests-host 120 env HAL_BACKENDS=host "$bundle/bin/hal_core_tests"
fi

# 5. Attention on the GPU: numerics against the host (exit 77: nothing was
# eligible, the output says why), then halbench attn per implementation on
# the shape gpu_reference.py gives PyTorch SDPA (flash and cuDNN backends).
if [ -x "$bundle/bin/hal_gpu_attention_numerics" ]; then
  step attention-numerics 150 env HAL_BACKENDS=host,cuda "$bundle/bin/hal_gpu_attention_numerics"
fi
if [ -x "$bundle/bin/halbench" ]; then
  for dtype in bf16; do  # f16 runs the same kernels; kept out to hold the check near 8 minutes
    for mask in full causal; do
      causal_flag=""
      [ "$mask" = causal ] && causal_flag="--causal"
      for implementation in flash math fused; do
        name="halbench-attn-$implementation-$dtype-$mask"
        step "$name" 60 bash -c '"'"$bundle"'/bin/halbench" attn --device cuda:0 --impl '"$implementation"' \
          --batch 4 --heads-q 16 --heads-kv 16 --head-dim 128 --seq 4096 --dtype '"$dtype"' '"$causal_flag"' \
          --backward --iters 10 --max-workspace 32G --json > "'"$out/$name"'.json"'
      done
    done
  done
fi

# 6. Conformance on the GPU, then halbench.
if [ -x "$bundle/bin/halconform" ]; then
  step halconform 240 "$bundle/bin/halconform" --device cuda:0 --timeout 60 --report-dir "$out/conformance"
fi
if [ -x "$bundle/bin/halbench" ]; then
  step halbench-mem 120 bash -c '"'"$bundle"'/bin/halbench" mem --device cuda:0 --json > "'"$out"'/halbench-mem.json"'
  step halbench-dispatch 120 bash -c '"'"$bundle"'/bin/halbench" dispatch --device cuda:0 --json > "'"$out"'/halbench-dispatch.json"'
else
  echo "halbench: not in this build; mem/dispatch figures not taken" | tee -a "$summary"
fi

# 7. Collectives on cuda:0 through the NCCL engine (NCCL from PyTorch's
#     wheel or the system), one rank (RANK=0, WORLD_SIZE=1, a FileStore),
#     nccl-tests columns. NCCL puts one rank per GPU, so with one GPU only
#     world size 1 is measured: the engine's path end to end, no data
#     crossing between GPUs.
if [ -x "$bundle/bin/halbench" ]; then
  gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  if [ "${gpu_count:-0}" -le 1 ]; then
    echo "halbench-coll: ${gpu_count:-0} GPU on this machine: world size 1 only, no multi-GPU figures" | tee -a "$summary"
  fi
  mkdir -p "$work/coll-store" "$work/coll-store-json"
  step halbench-coll 120 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 HAL_STORE_DIR="$work/coll-store" \
    "$bundle/bin/halbench" coll --device cuda:0 -b 8 -e 64M -f 8 -n 20 -w 5 --no-gloo --no-mpi
  step halbench-coll-json 120 bash -c 'RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 HAL_STORE_DIR="'"$work"'/coll-store-json" \
    "'"$bundle"'/bin/halbench" coll --device cuda:0 -b 1M -e 64M -f 4 --no-gloo --no-mpi --json \
    > "'"$out"'/halbench-coll.json"'
fi

# 8. PyTorch on the same device, for ratios.
step torch-reference 180 env LD_LIBRARY_PATH="$system_library_path" python3 "$root/scripts/gpu_reference.py" \
  "$out/torch-reference.json"

echo "results in $out" | tee -a "$summary"
