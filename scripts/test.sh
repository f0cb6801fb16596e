#!/usr/bin/env bash
# Builds hal and runs every test: the unit and tool tests, the unit tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and a consumer built
# against the installed tree, and the Python package (python/) with its tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"

echo "== build and test (build/)"
BUILD_DIR="$root/build" "$root/scripts/build.sh"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

echo "== the GPU check's dry run on the fakes (scripts/gpu-check-dry-run.sh)"
if grep -q '^HAL_CUDA_KERNELS:BOOL=ON' "$root/build/CMakeCache.txt" &&
   grep -q '^HAL_CUDNN_FRONTEND_INCLUDE_DIR:PATH=/' "$root/build/CMakeCache.txt"; then
  BUILD_DIR="$root/build" "$root/scripts/gpu-check-dry-run.sh"
else
  echo "skipped: this build has no CUDA kernels or no cuDNN frontend (no nvcc, or install-deps.sh not run), so there is no bundle to check"
fi

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/)"
BUILD_DIR="$root/build-sanitize" "$root/scripts/build.sh" -DHAL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-sanitize" --output-on-failure -j "$jobs" -L unit

echo "== install and build the example consumer against the installed tree"
install_dir="$(mktemp -d)"
trap 'rm -rf "$install_dir"' EXIT
cmake --install "$root/build" --prefix "$install_dir/hal" >/dev/null
mv "$install_dir/hal" "$install_dir/moved"  # the tree must be relocatable
cmake -S "$root/examples/consumer" -B "$install_dir/consumer" -DCMAKE_PREFIX_PATH="$install_dir/moved" >/dev/null
cmake --build "$install_dir/consumer" >/dev/null
"$install_dir/consumer/hal_consumer"
"$install_dir/moved/bin/halinfo" --require 0 >/dev/null

echo "== Python package: wheel, a fresh venv, pytest (scripts/test-python.sh)"
"$root/scripts/test-python.sh"
echo "all tests passed"
