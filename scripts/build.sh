#!/usr/bin/env bash
# Configures and builds hal into BUILD_DIR (default build/). Extra arguments go to CMake.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DHAL_WARNINGS_AS_ERRORS=ON "$@"
elif [ $# -gt 0 ]; then
  cmake "$build_dir" "$@"
fi
cmake --build "$build_dir" --parallel "$(nproc)"
