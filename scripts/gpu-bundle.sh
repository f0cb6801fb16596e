#!/usr/bin/env bash
# Builds hal here and packs what scripts/gpu-check.sh needs on a GPU machine
# that cannot build all of hal itself (it has nvcc, CMake, ninja and PyTorch
# but no package registry, so no hwloc, Boost, toml++ or doctest headers):
# the tools, libhal, the plugins (kernels embedded), the test binaries, the
# fake driver, and the shared libraries they need beyond glibc, libstdc++
# and libgcc. The result goes to build-gpu-bundle/ (ignored by git), which
# the device tool carries along: carry ["build-gpu-bundle"].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
bundle="${HAL_GPU_BUNDLE:-$root/build-gpu-bundle}"

# RelWithDebInfo (-O2), as CI builds; the debug info is stripped below.
BUILD_DIR="$build" "$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAL_WITH_CUDA=ON -DHAL_CUDA_KERNELS=ON

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/hal/backends" "$bundle/lib/deps" "$bundle/fakes"
for tool in halinfo halbench halconform halrun hal_cuda_tests hal_core_tests hal_gpu_attention_numerics; do
  if [ -x "$build/bin/$tool" ]; then cp "$build/bin/$tool" "$bundle/bin/"; fi
done
cp -P "$build"/lib/libhal.so* "$bundle/lib/"
cp "$build"/lib/hal/backends/*.so "$bundle/lib/hal/backends/"
cp "$build/tests/fakes/fake_cuda_driver/libcuda.so.1" "$bundle/fakes/"
# Shipped data (quirks, conformance profiles) beside lib/, where libhal looks.
mkdir -p "$bundle/share"
cp -r "$build/share/hal" "$bundle/share/"

# Libraries outside the base system (hwloc, ...), resolved here.
for binary in "$bundle"/bin/* "$bundle"/lib/libhal.so.*.*.* "$bundle"/lib/hal/backends/*.so; do
  ldd "$binary" | awk '/=> \// {print $3}' |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -v "^$build" || true
done | sort -u | while read -r library; do cp -L "$library" "$bundle/lib/deps/"; done

strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/libhal.so.*.*.* "$bundle"/lib/hal/backends/*.so \
  "$bundle"/fakes/libcuda.so.1 "$bundle"/lib/deps/* 2>/dev/null || true

{
  echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "compiler: $(c++ --version | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
  echo "needs glibc: $(objdump -T "$bundle"/bin/* "$bundle"/lib/*.so* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
  echo "needs libstdc++: $(objdump -T "$bundle"/bin/* "$bundle"/lib/*.so* "$bundle"/lib/hal/backends/*.so 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1)"
  echo "carried libraries: $(cd "$bundle/lib/deps" && ls | tr '\n' ' ')"
} > "$bundle/MANIFEST"
cat "$bundle/MANIFEST"
du -sh "$bundle"
