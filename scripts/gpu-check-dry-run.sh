#!/usr/bin/env bash
# The GPU check's plumbing, proven here before GPU time is spent on it: packs
# a bundle from the build tree (gpu-bundle.sh --reuse-build), runs
# gpu-check.sh on its fakes (HAL_GPU_CHECK_FAKE_DRIVER=1: the fake driver runs
# hal's kernels in the SIMT emulator), and fails unless every step that can
# run without a GPU ran and passed, with the JSON it should write. Called by
# scripts/test.sh; BUILD_DIR names the build tree (default build/).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bundle="$work/bundle" out="$work/out"

if ! BUILD_DIR="$build" HAL_GPU_BUNDLE="$bundle" "$root/scripts/gpu-bundle.sh" --reuse-build > "$work/bundle.log" 2>&1; then
  cat "$work/bundle.log"
  echo "gpu-check-dry-run: packing the bundle from $build failed" >&2
  exit 1
fi
# PATH without nvidia-smi: this machine has no GPU, whatever is installed.
# Python: the test environment's, which gpu-bundle.sh made sure of; 600 s:
# building the Python extension on 2 cores takes what a GPU machine's 16 do
# in a fraction.
HAL_GPU_CHECK_FAKE_DRIVER=1 HAL_GPU_BUNDLE="$bundle" OUT="$out" GPU_CHECK_BUDGET_S=600 \
  HAL_GPU_CHECK_PYTHON="${HAL_PYTHON_VENV:-$root/.venv-python}/bin/python" \
  "$root/scripts/gpu-check.sh" > "$work/check.log" 2>&1
check_status=$?
summary="$out/summary.txt"

# Each step that needs no GPU, or runs on the fakes, must have exited 0; its
# JSON, where it writes one, must hold figures.
required=(halinfo halinfo-json core-tests-host unit-tests-gpu attention-numerics
  halbench-attn-flash-bf16-full halbench-attn-flash-bf16-causal halconform halbench-mem halbench-dispatch
  halbench-coll python-package python-import)
problems=()
[ "$check_status" -eq 0 ] || problems+=("gpu-check.sh exited $check_status")
for name in "${required[@]}"; do
  line="$(grep -m1 -E "^$name: (exit|skipped)" "$summary" 2>/dev/null)"
  if [ -z "$line" ]; then
    problems+=("$name: no line in the summary")
  elif [[ "$line" != "$name: exit 0 in"* ]]; then
    problems+=("$line")
  elif [[ "$line" == *"NOTHING MEASURED"* || "$line" == *"NO TEST RAN"* || "$line" == *"not valid JSON"* ||
          "$line" == *"no JSON written"* ]]; then
    problems+=("$line")
  fi
done
# The steps that need a real GPU say so rather than fail.
for name in flash-kernels torch-reference torch-hal-attention torch-hal-distributed torch-hal-train; do
  grep -q "^$name: skipped: needs a GPU" "$summary" 2>/dev/null || problems+=("$name: not skipped for want of a GPU")
done
# On the fakes, fused attention is not eligible (no cuDNN): its steps may fail, and only they.
grep -q "^attention-numerics: exit 0" "$summary" && ! grep -q "FAIL" "$out/attention-numerics.log" ||
  problems+=("attention-numerics: a comparison failed (see its log)")

cat "$summary"
if [ "${#problems[@]}" -ne 0 ]; then
  echo "gpu-check-dry-run: FAILED:" >&2
  printf '  %s\n' "${problems[@]}" >&2
  for log in "$out"/*.log; do
    echo "== $log (last lines)" >&2
    tail -5 "$log" >&2
  done
  exit 1
fi
echo "gpu-check-dry-run: every step that can run without a GPU ran and passed on the fakes"
