// Measures the f32 FMA rate this machine reaches with independent FMA chains
// on one flash instruction-set path: the ceiling attention efficiency is quoted against.
#pragma once

#include "attention/attention_kernels.hpp"
#include "attention/thread_pool.hpp"

namespace hal::host {

struct FmaPeak {
  const char* isa;
  int threads;
  double per_thread_gflops;   // one thread alone
  double all_threads_gflops;  // every thread of the pool at once
};

// Each figure is timed over about `seconds_per_measurement` seconds.
FmaPeak measure_fma_peak(ThreadPool& pool, FlashIsa isa, double seconds_per_measurement = 0.2);
FmaPeak measure_fma_peak(ThreadPool& pool);  // on flash_selected_isa()

}  // namespace hal::host
