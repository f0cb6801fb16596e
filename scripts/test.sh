#!/usr/bin/env bash
# Builds hal and runs every test: the unit and tool tests, the unit tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and a consumer built
# against the installed tree, and the Python package (python/) with its tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"

# The Python test environment downloads torch and its kin (network and disk,
# little CPU): fetched while the C++ builds run, waited for before the Python step.
python_deps_log="$(mktemp)"
"$root/scripts/install-python-deps.sh" >"$python_deps_log" 2>&1 &
python_deps_pid=$!
install_dir="$(mktemp -d)"
trap 'kill "$python_deps_pid" 2>/dev/null || true; rm -rf "$install_dir" "$python_deps_log"' EXIT

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
cmake --install "$root/build" --prefix "$install_dir/hal" >/dev/null
mv "$install_dir/hal" "$install_dir/moved"  # the tree must be relocatable
cmake -S "$root/examples/consumer" -B "$install_dir/consumer" -DCMAKE_PREFIX_PATH="$install_dir/moved" >/dev/null
cmake --build "$install_dir/consumer" >/dev/null
"$install_dir/consumer/hal_consumer"
"$install_dir/moved/bin/halinfo" --require 0 >/dev/null

echo "== Python package: wheel, a fresh venv, pytest (scripts/test-python.sh)"
python_deps_status=0
wait "$python_deps_pid" || python_deps_status=$?
cat "$python_deps_log"
if [ "$python_deps_status" -ne 0 ]; then
  echo "scripts/install-python-deps.sh failed (exit status $python_deps_status); its output is above" >&2
  exit 1
fi
"$root/scripts/test-python.sh"
echo "all tests passed"
