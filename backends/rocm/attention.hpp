// Attention on the ROCm backend: the shared GPU engine (backends/common)
// over the HIP module API, with the kernels' own tiled GEMM for math.
#pragma once

#include "rocm_backend.hpp"

namespace hal::rocm {

// Before discover_devices: the devices' capabilities are described by it.
void create_attention(Context& context);
extern const hal_attention_v2 attention_table;
extern const hal_memory_test_v1 memory_test_table;

}  // namespace hal::rocm
