// Timing of one host attention implementation on one problem (for `halbench attn`).
#pragma once

#include <cstdint>

#include "attention/attention_kernels.hpp"
#include "attention/thread_pool.hpp"

namespace hal::host {

struct AttentionBenchResult {
  double seconds_per_call;
  double tflops;                   // attention_flops / seconds_per_call
  std::uint64_t peak_extra_bytes;  // the implementation's workspace for one call
  int iterations;                  // timed calls
};


// Allocates random inputs laid out by params' strides (in params.dtype), runs
// `warmup_calls` untimed calls, then times `iterations` calls. Backward gets O
// and LSE from one forward call of the same implementation first.
// implementation: HAL_ATTENTION_MATH or HAL_ATTENTION_FLASH (flash on flash_selected_isa()).
AttentionBenchResult bench_attention(const hal_attention_params_v1& params,
                                     hal_attention_implementation implementation, bool backward,
                                     ThreadPool& pool, int iterations = 3, int warmup_calls = 1);

}  // namespace hal::host
