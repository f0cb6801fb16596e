#include "attention/fma_peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "attention/attention_internal.hpp"

namespace hal::host {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FmaPeak measure_fma_peak(ThreadPool& pool, FlashIsa isa, double seconds_per_measurement) {
  const flash::KernelTable& kernels = flash_kernel_table(isa);

  // Calibrate: grow the iteration count until a run takes a measurable time.
  std::int64_t iterations = 1 << 16;
  double elapsed = 0.0;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    kernels.fma_chains(iterations);
    elapsed = seconds_since(start);
    if (elapsed > 0.02) break;
    iterations *= 4;
  }
  const std::int64_t timed_iterations =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(iterations * seconds_per_measurement / elapsed));

  FmaPeak peak{flash_isa_name(isa), pool.thread_count(), 0.0, 0.0};
  {
    const auto start = std::chrono::steady_clock::now();
    const double flops = kernels.fma_chains(timed_iterations);
    peak.per_thread_gflops = flops / seconds_since(start) * 1e-9;
  }
  {
    // Many small units so that a thread that wakes late still gets its share.
    const std::int64_t units = static_cast<std::int64_t>(pool.thread_count()) * 16;
    const std::int64_t unit_iterations = std::max<std::int64_t>(1, timed_iterations / 16);
    std::atomic<double> flops{0.0};
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(units, [&](std::int64_t begin, std::int64_t end) {
      double done = 0.0;
      for (std::int64_t unit = begin; unit < end; ++unit) done += kernels.fma_chains(unit_iterations);
      flops.fetch_add(done);
    });
    peak.all_threads_gflops = flops.load() / seconds_since(start) * 1e-9;
  }
  return peak;
}

FmaPeak measure_fma_peak(ThreadPool& pool) { return measure_fma_peak(pool, flash_selected_isa()); }

}  // namespace hal::host
