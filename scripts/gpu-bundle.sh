#!/usr/bin/env bash
# Builds hal here and packs what scripts/gpu-check.sh needs on a GPU machine
# that cannot build all of hal itself (it has nvcc, CMake, ninja and PyTorch
# but no package registry, so no hwloc, Boost, toml++ or doctest headers):
# the tools, libhal, the plugins (kernels embedded), the test binaries, the
# fake driver, nanobind (for hal's Python extension, built there), and the
# shared libraries they need beyond glibc, libstdc++ and libgcc. The result goes to build-gpu-bundle/ (ignored by git), which
# the device tool carries along: carry ["build-gpu-bundle"].
#
# --reuse-build: pack from the build tree $BUILD_DIR as it is, without
# building, and without the nvcc-built flash kernel check (gpu-check.sh
# builds that on the GPU machine when missing). For the fake-driver dry run
# (scripts/gpu-check-dry-run.sh), never for a bundle meant for a GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
bundle="${HAL_GPU_BUNDLE:-$root/build-gpu-bundle}"
reuse_build=0
case "${1:-}" in
  "") ;;
  --reuse-build) reuse_build=1 ;;
  *) echo "gpu-bundle: unknown argument '$1' (allowed: --reuse-build)" >&2; exit 2 ;;
esac

if [ "$reuse_build" = 0 ]; then
  # RelWithDebInfo (-O2), as CI builds; the debug info is stripped below.
  BUILD_DIR="$build" "$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAL_WITH_CUDA=ON -DHAL_CUDA_KERNELS=ON
fi
# Fused attention on the GPU needs the CUDA backend built with cuDNN's
# frontend headers (scripts/install-cudnn-frontend.sh, run by install-deps.sh).
frontend="$(sed -n 's/^HAL_CUDNN_FRONTEND_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)"
if [ -z "$frontend" ] || [ ! -f "$frontend/cudnn_frontend.h" ]; then
  echo "gpu-bundle: $build was configured without the cuDNN frontend headers (HAL_CUDNN_FRONTEND_INCLUDE_DIR='$frontend'):" \
    "the bundle would have no fused attention; run scripts/install-cudnn-frontend.sh and rebuild" >&2
  exit 1
fi

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/hal/backends" "$bundle/lib/deps" "$bundle/fakes"
# All of them: gpu-check.sh reports a missing one only on the GPU machine.
for tool in halinfo halbench halconform halrun hal_cuda_tests hal_core_tests hal_gpu_attention_numerics; do
  if [ ! -x "$build/bin/$tool" ]; then
    echo "gpu-bundle: $build/bin/$tool was not built (configure with -DHAL_WITH_CUDA=ON and tests on)" >&2
    exit 1
  fi
  cp "$build/bin/$tool" "$bundle/bin/"
done
# The flash kernels' own check (tests/gpu), built here for the GPUs the
# plugin's fatbin serves, so the GPU machine spends no time compiling it.
nvcc="$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")"
if [ "$reuse_build" = 0 ]; then
  "$nvcc" -O2 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_90,code=compute_90 -I"$root/backends/gpu/kernels" -I"$root/backends/host" -I"$root/tests/simt" \
    "$root/tests/gpu/flash_attention_gpu_check.cu" "$root/backends/gpu/kernels/attention_plan.cpp" \
    -o "$bundle/bin/flash_attention_gpu_check"
fi
cp -P "$build"/lib/libhal.so* "$bundle/lib/"
cp "$build"/lib/hal/backends/*.so "$bundle/lib/hal/backends/"
# The fakes of the dry run (HAL_GPU_CHECK_FAKE_DRIVER=1): the driver runs
# hal's kernels in the SIMT emulator; cuBLAS, NCCL and NVML beside it.
cp "$build/tests/fakes/fake_cuda_driver/libcuda.so.1" "$build/tests/fakes/fake_cublas/libcublas.so.13" \
  "$build/tests/fakes/fake_nccl/nccl/libnccl.so.2" "$build/tests/fakes/fake_nvml/nvml/libnvidia-ml.so.1" "$bundle/fakes/"
# nanobind (its CMake package and sources) from the Python test environment,
# for hal's Python extension, which gpu-check.sh builds there against this
# libhal for that machine's Python (scripts/gpu-python/).
venv="${HAL_PYTHON_VENV:-$root/.venv-python}"
HAL_PYTHON_NO_TORCH=1 "$root/scripts/install-python-deps.sh" >/dev/null
mkdir -p "$bundle/python"
cp -r "$("$venv/bin/python" -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))')" "$bundle/python/"
rm -rf "$bundle/python/nanobind/__pycache__"
# Shipped data (quirks, conformance profiles) beside lib/, where libhal looks.
mkdir -p "$bundle/share"
cp -r "$build/share/hal" "$bundle/share/"

# Libraries outside the base system (hwloc, ...), resolved here.
for binary in "$bundle"/bin/* "$bundle"/lib/libhal.so.*.*.* "$bundle"/lib/hal/backends/*.so; do
  ldd "$binary" | awk '/=> \// {print $3}' |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -v "^$build" || true
done | sort -u | while read -r library; do cp -L "$library" "$bundle/lib/deps/"; done

# libstdc++ and libgcc_s as built against, used by gpu-check.sh only where
# the machine's libstdc++ is older than the bundle needs.
mkdir -p "$bundle/lib/fallback"
for library in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(c++ -print-file-name="$library")" "$bundle/lib/fallback/"
done

strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/libhal.so.*.*.* "$bundle"/lib/hal/backends/*.so \
  "$bundle"/fakes/*.so.* "$bundle"/lib/deps/* \
  "$bundle"/lib/fallback/* 2>/dev/null || true

{
  echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "compiler: $(c++ --version | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
  echo "needs glibc: $(objdump -T "$bundle"/bin/* "$bundle"/lib/*.so* "$bundle"/lib/hal/backends/*.so "$bundle"/lib/deps/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
  echo "needs libstdc++: $(objdump -T "$bundle"/bin/* "$bundle"/lib/*.so* "$bundle"/lib/hal/backends/*.so 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1)"
  echo "carried libraries: $(cd "$bundle/lib/deps" && ls | tr '\n' ' ')"
  echo "nanobind: $("$venv/bin/python" -c 'import nanobind; print(nanobind.__version__)')"
} > "$bundle/MANIFEST"
cat "$bundle/MANIFEST"
du -sh "$bundle"
