#!/usr/bin/env bash
# Runs a libFuzzer target for a bounded time over its checked-in seeds:
#   run_fuzzer.sh FUZZER SEEDS WORK SECONDS RUNS
# New inputs go to WORK/corpus (the seeds stay as they are), a failing input
# to WORK/artifacts. With FUZZER empty, the reason in SKIP_REASON is printed
# and the test is skipped (77).
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4 runs=$5
if [ -z "$fuzzer" ]; then
  echo "skipped: ${SKIP_REASON:-no fuzzer was built}"
  exit 77
fi
mkdir -p "$work/corpus" "$work/artifacts"
symbolizer=$(command -v llvm-symbolizer-15 || command -v llvm-symbolizer || true)
export ASAN_OPTIONS="detect_leaks=1${symbolizer:+:external_symbolizer_path=$symbolizer}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
exec "$fuzzer" -max_total_time="$seconds" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
