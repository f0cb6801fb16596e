#!/usr/bin/env bash
# One prepared run on the lent GPU machine (NVIDIA H200: nvcc 13, CMake,
# ninja, PyTorch with cuDNN and NCCL; no package registry). Everything it
# learns goes under $OUT; summary.txt lists each step with its exit status,
# its time, and where its JSON is (with how many figures it holds).
#
# Prepare here with scripts/gpu-bundle.sh, then run through the device tool
# with carry ["build-gpu-bundle"] and a timeout of about 360 s
# (docs/backends/cuda.md, "GPU check"):
#   scripts/gpu-check.sh
# The whole run keeps within GPU_CHECK_BUDGET_S (default 300 s, so that a
# second run fits in the 15 minutes a machine is lent for): a step gets
# at most what is left, and is skipped when less than 5 s is left.
#
# Without a GPU (no device listed by nvidia-smi), the steps that need one are
# listed as "skipped: needs a GPU". HAL_GPU_CHECK_FAKE_DRIVER=1 runs hal's GPU
# steps on the bundle's fakes instead (the driver runs hal's kernels in the
# SIMT emulator; cuBLAS, NCCL and NVML beside it; no cuDNN), on small shapes,
# to check the plumbing (options, paths, JSON) on a machine without a GPU:
# scripts/gpu-check-dry-run.sh does that in CI. Its figures mean nothing.
#
# Steps:
#  1. environment: GPU, driver, toolkit, PyTorch and its cuDNN/NCCL; the
#     flash attention kernels (tests/gpu) checked against their f64
#     reference (built by gpu-bundle.sh, or here with nvcc when missing);
#  2. the carried CUDA backend when it loads there, else one built there
#     from source (nvcc fatbin + g++, needing only the CUDA headers);
#  3. halinfo -v and --json; the "cuda semantics" and "cuda memory test" unit tests on the GPU;
#  4. attention on cuda:0: numerics against the host backend (flash, math,
#     fused where eligible), and halbench attn for each implementation;
#  5. halconform on cuda:0; halbench mem and dispatch on cuda:0;
#  6. halbench coll on cuda:0 through NCCL, world size 1;
#  7. PyTorch reference figures (copy bandwidth, 1 MiB copy cost, SDPA with
#     its flash and cuDNN backends on the shape halbench attn measured);
#  8. the PyTorch path: hal's Python extension built there against the
#     bundle (scripts/gpu-python/), hal.torch's SDPA against torch's on CUDA
#     tensors, its per-call cost, torch.distributed's "hal" backend on one
#     GPU against "nccl" (scripts/gpu_torch_distributed.py), and a 2-layer
#     Llama-3-8B-shaped hal.bench train with each attention;
#  9. whether all of hal configures there (it needs hwloc, Boost, toml++ and
#     doctest headers the machine may lack): recorded, not required.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
bundle="${HAL_GPU_BUNDLE:-$root/build-gpu-bundle}"
budget="${GPU_CHECK_BUDGET_S:-300}"
deadline=$((SECONDS + budget))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

note() { echo "$*" | tee -a "$summary"; }

# What a JSON document holds, in a few words: results and skipped entries of
# hal.bench/1 (for coll: sizes and #wrong), devices of halinfo, errors of the
# PyTorch reference. "nothing measured" when a benchmark wrote no result at all.
describe_json() {
  python3 - "$1" <<'EOF' 2>&1
import json, sys
try:
    with open(sys.argv[1]) as file:
        text = file.read()
    if not text.strip():
        print("no JSON written")
        sys.exit()
    document = json.loads(text)
except Exception as error:
    print(f"not valid JSON ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'empty'})")
    sys.exit()
parts = []
results = document.get("results")
if isinstance(results, list) and not results:
    parts.append("NOTHING MEASURED")
elif isinstance(results, list) and document.get("benchmark") == "coll":  # one result per size
    wrong = sum(row.get(place, {}).get("wrong", 0) for row in results for place in ("out_of_place", "in_place"))
    parts.append(f"{len(results)} sizes, {wrong} wrong")
elif isinstance(results, list):
    parts.append(f"{len(results)} results")
if document.get("skipped"):
    parts.append(f"{len(document['skipped'])} skipped, first: {document['skipped'][0].get('reason', '?')[:160]}")
if isinstance(document.get("devices"), list):
    parts.append("devices: " + ", ".join(str(d.get("id")) for d in document["devices"]))
for key in ("rows", "cells"):  # hal.bench attention's and hal.bench train's figures
    if isinstance(document.get(key), list):
        parts.append(f"{len(document[key])} {key}" if document[key] else f"NOTHING MEASURED (no {key})")
if isinstance(document.get("errors"), list) and document["errors"]:
    parts.append(f"{len(document['errors'])} errors, first: {str(document['errors'][0])[:160]}")
if "error" in document:
    parts.append(f"error: {document['error']}")
for section in ("copy", "attention"):
    if isinstance(document.get(section), dict) and "error" in document[section]:
        parts.append(f"{section}: failed: {document[section]['error'][:160]}")
    elif isinstance(document.get(section), dict):
        failed = sum(1 for value in document[section].values() if isinstance(value, dict) and "error" in value)
        parts.append(f"{section}: {len(document[section]) - failed} figures, {failed} failed")
print("; ".join(parts) if parts else "no figures found")
EOF
}

# doctest's count line, so that a filter matching nothing is not a pass.
describe_doctest() {
  local counts
  counts="$(grep -E '^\[doctest\] test cases:' "$1" | tail -1 | sed 's/^\[doctest\] //')"
  if [ -z "$counts" ]; then echo "no doctest summary"; return; fi
  case "$counts" in
    *"cases:  0 |"* | *"cases: 0 |"*) echo "NO TEST RAN ($counts)" ;;
    *) echo "$counts" ;;
  esac
}

# The line of a failed step's log most worth a look: halconform's verdict,
# else the first error, else the last line.
first_error() {
  local found
  found="$(grep '^halconform: ' "$1" | tail -1)"
  [ -n "$found" ] || found="$(grep -m1 -E 'ERROR|error:' "$1")"
  [ -n "$found" ] || found="$(grep -v '^[[:space:]]*$' "$1" | tail -1)"
  echo "$found" | cut -c1-200
}

# step NAME LIMIT NEEDS JSON COMMAND...
#   NEEDS: - (nothing), gpu (a real GPU), hal-gpu (a GPU, or the fake driver
#   when HAL_GPU_CHECK_FAKE_DRIVER=1). JSON: - or the file the command's
#   stdout goes to (its stderr then goes to NAME.log). Without JSON, stdout
#   and stderr go to NAME.log.
step() {
  local name="$1" limit="$2" needs="$3" json="$4"
  shift 4
  if [ "$needs" = gpu ] && [ "$gpu_count" -eq 0 ]; then
    note "$name: skipped: needs a GPU ($gpu_reason)"
    return 3
  fi
  if [ "$needs" = hal-gpu ] && [ "$gpu_count" -eq 0 ] && [ -z "$fake_driver" ]; then
    note "$name: skipped: needs a GPU ($gpu_reason)"
    return 3
  fi
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 5 ]; then
    note "$name: skipped: under 5 s left of the ${budget} s budget"
    return 3
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local started=$SECONDS status
  if [ "$json" = - ]; then
    timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
    status=$?
  else
    timeout -k 5 "$limit" "$@" > "$json" 2> "$out/$name.log"
    status=$?
  fi
  local line="$name: exit $status in $((SECONDS - started)) s (limit $limit s)"
  case "$status" in
    124 | 137) line+=", TIMED OUT" ;;
    77) line+=", nothing eligible (see $name.log)" ;;
    126 | 127) line+=", COMMAND NOT RUN" ;;
  esac
  if grep -q '^\[doctest\]' "$out/$name.log" 2>/dev/null; then
    line+="; $(describe_doctest "$out/$name.log")"
  fi
  if [ "$json" != - ]; then
    line+="; json: ${json#"$out/"} ($(describe_json "$json"))"
  fi
  if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] && [ -s "$out/$name.log" ]; then
    line+="; first error: $(first_error "$out/$name.log")"
  fi
  note "$line"
  return $status
}

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
nvcc="$(command -v nvcc || echo "$cuda_home/bin/nvcc")"
gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
gpu_count="${gpu_count:-0}"
gpu_reason="nvidia-smi lists no GPU on $(uname -n)"
fake_driver=""
if [ "${HAL_GPU_CHECK_FAKE_DRIVER:-0}" = 1 ]; then
  fake_driver="$bundle/fakes/libcuda.so.1"
  note "FAKE DRIVER ($fake_driver): hal's GPU steps run on host memory; a plumbing check, figures mean nothing"
fi
note "gpu-check on $(uname -n) at $(date -u +%Y-%m-%dT%H:%M:%SZ): $gpu_count GPU, budget $budget s, output in $out"

step environment 15 - - bash -c '
  nvidia-smi; nvidia-smi -q | head -40
  echo "== nvcc"; "$0" --version
  echo "== cmake"; cmake --version | head -1; ninja --version
  echo "== compilers"; c++ --version | head -1
  echo "== glibc"; ldd --version | head -1
  echo "== libstdc++"; ldconfig -p | grep "libstdc++.so.6 "
  echo "== libcuda"; ldconfig -p | grep -E "libcuda\.so|libnccl|libcudnn" || true
  echo "== python"; python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
  echo "== hal bundle"; cat "$1/MANIFEST" 2>/dev/null || echo "no bundle at $1"' "$nvcc" "$bundle"

# The flash attention kernels against their f64 reference: the one run of
# their tensor-core PTX. gpu-bundle.sh builds the check; without it, nvcc
# here builds it for this GPU.
if [ -x "$bundle/bin/flash_attention_gpu_check" ]; then
  step flash-kernels 30 gpu - "$bundle/bin/flash_attention_gpu_check"
else
  step flash-kernels 150 gpu - bash -c '"$0" -O2 -std=c++17 -arch=native -I"$1/backends/gpu/kernels" \
    -I"$1/backends/host" -I"$1/tests/simt" "$1/tests/gpu/flash_attention_gpu_check.cu" \
    "$1/backends/gpu/kernels/attention_plan.cpp" -o "$2/flash_check" || exit $?; "$2/flash_check"' "$nvcc" "$root" "$work"
fi

if [ ! -d "$bundle/lib/hal/backends" ]; then
  note "no bundle at $bundle: run scripts/gpu-bundle.sh here and carry build-gpu-bundle"
  exit 1
fi

# The bundle is built against this libstdc++ (GLIBCXX_x); a machine with an
# older one gets the carried copy, kept apart in lib/fallback for that case.
needed_glibcxx="$(sed -n 's/^needs libstdc++: //p' "$bundle/MANIFEST")"
system_libstdcxx="$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
fallback_path=""
if [ -n "$needed_glibcxx" ] && ! grep -aq "$needed_glibcxx" "${system_libstdcxx:-/nonexistent}" 2>/dev/null; then
  fallback_path="$bundle/lib/fallback"
  note "libstdc++: ${system_libstdcxx:-none found} lacks $needed_glibcxx; using the carried one in $fallback_path"
fi
# The carried libraries serve hal's binaries only; the compilers and Python
# keep the machine's own (the bundle may carry another libcrypto, say).
system_library_path="${LD_LIBRARY_PATH:-}"
hal_library_path="$bundle/lib:$bundle/lib/deps${fallback_path:+:$fallback_path}${system_library_path:+:$system_library_path}"

# 2. The carried CUDA backend (built with its kernels and cuDNN's frontend)
#    when it loads on this machine; otherwise one built from source there,
#    with nothing but the CUDA headers (no fused attention: the frontend
#    headers are not on that machine).
cuda_plugin="$bundle/lib/hal/backends/libhal_backend_cuda.so"
if step carried-cuda-backend-loads 15 - - env LD_LIBRARY_PATH="$hal_library_path" \
    python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1]); print("loaded", sys.argv[1])' "$cuda_plugin"; then
  note "using the carried CUDA backend: $cuda_plugin"
elif mkdir -p "$work/cuda" && step build-cuda-backend 120 - - bash -c '
    set -e
    nvcc="$0" root="$1" cuda_home="$2" work="$3"
    "$nvcc" --fatbin -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
      -gencode arch=compute_90,code=compute_90 -I"$root/backends/gpu/kernels" -o "$work/cuda/kernels.fatbin" \
      "$root/backends/gpu/kernels/cuda_kernels.cu"
    sources=("$root"/backends/cuda/*.cpp "$root"/backends/gpu/*.cpp "$root/backends/gpu/kernels/attention_plan.cpp")
    for shim in cuda_driver cudnn nvrtc nccl cublas library_loader; do sources+=("$root/shims/$shim.cpp"); done
    c++ -std=c++20 -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
      -I"$root/hal/include" -I"$root/shims" -I"$root/backends/gpu" -I"$root/backends/gpu/kernels" \
      -isystem "$cuda_home/include" \
      -DHAL_VERSION_STRING="\"built-on-gpu-machine\"" -DHAL_CUDA_KERNEL_FATBIN="\"$work/cuda/kernels.fatbin\"" \
      "${sources[@]}" -ldl -pthread -o "$work/cuda/libhal_backend_cuda.so"
    readelf -d "$work/cuda/libhal_backend_cuda.so" | grep NEEDED' "$nvcc" "$root" "$cuda_home" "$work"; then
  cuda_plugin="$work/cuda/libhal_backend_cuda.so"
  note "using the CUDA backend built here: $cuda_plugin"
else
  note "no CUDA backend loads on this machine"
fi
export LD_LIBRARY_PATH="$hal_library_path"
export HAL_BACKENDS_FORCE="$bundle/lib/hal/backends/libhal_backend_host.so:$cuda_plugin"
export HAL_CONFIG=""
# Probe results of this run only, kept with its output.
export HAL_PROBE_CACHE="$out/probes.json"
# Where libhal finds the quirks and conformance data, whatever the layout.
export HAL_DATA_DIR="$bundle/share/hal"
unit_test_driver=system
# The attention shape for hal and PyTorch, sized so that the scalar f32
# flash backward (the slowest kernel) runs its 5 iterations within a step;
# the numerics' own shapes (--small on the fakes).
attn_batch=2 attn_heads=16 attn_seq=2048 attn_head_dim=128
numerics_arguments=()
# halconform's time per case and for the whole step, in seconds.
conform_case_timeout=15 conform_step_limit=30
if [ -n "$fake_driver" ]; then
  # The real cuDNN, cuBLAS or NCCL would call into the fake driver: the fakes
  # stand in for cuBLAS and NCCL, and cuDNN is left out (fused: not eligible).
  export HAL_CUDA_DRIVER="$fake_driver" HAL_FAKE_CUDA_IDENTITY=h100 HAL_FAKE_CUDA_MEMORY=80G \
    HAL_CUBLAS="$bundle/fakes/libcublas.so.13" HAL_NCCL="$bundle/fakes/libnccl.so.2" \
    HAL_NVML="$bundle/fakes/libnvidia-ml.so.1" HAL_CUDNN="$bundle/fakes/no-cudnn-in-the-dry-run"
  unit_test_driver=fake
  attn_batch=1 attn_heads=2 attn_seq=64 attn_head_dim=64
  numerics_arguments=(--small --require flash,math)
  # The fake driver runs every kernel in the CPU emulator and the fake cuBLAS
  # its GEMMs on the CPU: the math backward cases take 15-25 s each, four at a
  # time on 2 cores (an AVX2-only EPYC), where a GPU takes milliseconds.
  conform_case_timeout=60 conform_step_limit=90
fi

# 3. What hal sees, and the unit tests on the GPU ("no driver" checks that
#    the driver is found with no hint; "cuda semantics" and the memory test kernel run on it).
step halinfo 5 - - "$bundle/bin/halinfo" -v
step halinfo-json 5 - "$out/halinfo.json" "$bundle/bin/halinfo" --json
step core-tests-host 5 - - env HAL_BACKENDS=host "$bundle/bin/hal_core_tests"
step unit-tests-gpu 30 hal-gpu - env HAL_TEST_CUDA_DRIVER="$unit_test_driver" \
  HAL_TEST_FAKE_CUDA_DRIVER="$bundle/fakes/libcuda.so.1" HAL_BACKENDS=host,cuda \
  "$bundle/bin/hal_cuda_tests" "--test-suite=cuda semantics,cuda memory test,no driver" --duration=true

# 4. Attention on the GPU: numerics against the host (exit 77: nothing was
# eligible, the output says why), then halbench attn per implementation on
# the shape gpu_reference.py gives PyTorch SDPA (flash and cuDNN backends).
# One process per implementation, so that a crash in one costs only its own.
step attention-numerics 35 hal-gpu - env HAL_BACKENDS=host,cuda "$bundle/bin/hal_gpu_attention_numerics" \
  "${numerics_arguments[@]}"
for dtype in bf16; do  # f16 runs the same kernels; kept out to hold the check within its budget
  for mask in full causal; do
    causal_flag=()
    [ "$mask" = causal ] && causal_flag=(--causal)
    for implementation in flash fused; do  # math: checked by attention-numerics, not timed (budget)
      name="halbench-attn-$implementation-$dtype-$mask"
      step "$name" 10 hal-gpu "$out/$name.json" "$bundle/bin/halbench" attn --device cuda:0 \
        --impl "$implementation" --batch "$attn_batch" --heads-q "$attn_heads" --heads-kv "$attn_heads" \
        --head-dim "$attn_head_dim" --seq "$attn_seq" --dtype "$dtype" "${causal_flag[@]}" --backward --iters 5 \
        --max-workspace 32G --json
    done
  done
done

# 5. Conformance on the GPU (each case in its own process, four at a time),
#    then halbench.
step halconform "$conform_step_limit" hal-gpu - "$bundle/bin/halconform" --device cuda:0 --jobs 4 \
  --timeout "$conform_case_timeout" \
  --report-dir "$out/conformance"
[ -f "$out/conformance/conformance.json" ] && note "halconform report: conformance/conformance.json (and .html, .junit.xml)"
step halbench-mem 20 hal-gpu "$out/halbench-mem.json" "$bundle/bin/halbench" mem --device cuda:0 --json
step halbench-dispatch 10 hal-gpu "$out/halbench-dispatch.json" "$bundle/bin/halbench" dispatch --device cuda:0 --json

# 6. Collectives on cuda:0 through the NCCL engine (NCCL from PyTorch's
#    wheel or the system), one rank (RANK=0, WORLD_SIZE=1, a FileStore),
#    nccl-tests columns in its hal.bench/1 results. NCCL puts one rank per
#    GPU, so with one GPU only world size 1 is measured: the engine's path
#    end to end, no data crossing between GPUs.
if [ "$gpu_count" -le 1 ]; then
  note "halbench-coll: $gpu_count GPU on this machine: world size 1 only, no multi-GPU figures"
fi
mkdir -p "$work/coll-store"
step halbench-coll 20 hal-gpu "$out/halbench-coll.json" env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
  HAL_STORE_DIR="$work/coll-store" "$bundle/bin/halbench" coll --device cuda:0 -b 8 -e 64M -f 8 -n 20 -w 5 \
  --no-gloo --no-mpi --json

# 7. PyTorch on the same device, for ratios (the machine's own libraries).
step torch-reference 30 gpu "$out/torch-reference.json" env LD_LIBRARY_PATH="$system_library_path" \
  HAL_GPU_REFERENCE_SHAPE="$attn_batch,$attn_heads,$attn_seq,$attn_head_dim" python3 "$root/scripts/gpu_reference.py"

# 8. The PyTorch path: hal's Python package with its extension built here
#    against the bundle's libhal for this machine's Python (scripts/gpu-python/,
#    the bundle's nanobind), then on CUDA tensors: hal.torch's SDPA against
#    torch's at the Llama-3-8B shape, forward and backward, and the per-call
#    cost at a tiny shape against torch's floor (its "overhead"); torch.distributed's "hal" backend
#    on one GPU against "nccl"; a 2-layer Llama-3-8B-shaped hal.bench train
#    with each attention.
python="${HAL_GPU_CHECK_PYTHON:-python3}"
package="$work/python-package"
# The machine's libraries first (PyTorch's own CUDA libraries must win), the
# bundle's after them for what libhal needs that the machine lacks.
python_env=(env LD_LIBRARY_PATH="${system_library_path:+$system_library_path:}$bundle/lib:$bundle/lib/deps" "$python")
if step python-package 150 - - bash -c '
    set -e
    python="$0" root="$1" bundle="$2" work="$3"
    cmake -S "$root/scripts/gpu-python" -B "$work/python-build" -G Ninja -DHAL_BUNDLE="$bundle" \
      -DPython_EXECUTABLE="$(command -v "$python")" -Dnanobind_ROOT="$bundle/python/nanobind/cmake"
    cmake --build "$work/python-build" -j "$(nproc)"
    mkdir -p "$4"
    cp -r "$root/python/hal" "$4/"
    cp "$work"/python-build/_hal*.so "$4/hal/"' "$python" "$root" "$bundle" "$work" "$package"; then
  export PYTHONPATH="$package${PYTHONPATH:+:$PYTHONPATH}"
  step python-import 20 hal-gpu - "${python_env[@]}" -c '
import sys, hal
devices = [str(device) for device in hal.runtime().devices]
print("hal", hal.__version__, "from", hal.__file__, "devices:", ", ".join(devices))
sys.exit(0 if any("cuda:" in device for device in devices) else 1)'
  step torch-hal-attention 60 gpu "$out/torch-hal-attention.json" "${python_env[@]}" -m hal.bench attention --device cuda \
    --dtype bfloat16 --batch 1 --heads 32 --kv-heads 8 --head-dim 128 --seq 2048 8192 --repeats 3 --overhead-calls 2000 --json
  step torch-hal-distributed 40 gpu "$out/torch-hal-distributed.json" "${python_env[@]}" "$root/scripts/gpu_torch_distributed.py"
  step torch-hal-train 120 gpu "$out/torch-hal-train.json" "${python_env[@]}" -m hal.bench train --device cuda \
    --model llama3-8b --layers 2 --seq 2048 --batch 1 --steps 4 --warmup 2 --ablate attention --quiet --json -
fi

# 9. Does the whole project configure here? Only recorded.
step configure-probe 10 - - env LD_LIBRARY_PATH="$system_library_path" \
  cmake -S "$root" -B "$work/probe" -G Ninja -DHAL_BUILD_TESTS=OFF

note "done in $SECONDS s; results in $out"
