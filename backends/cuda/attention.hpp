// Attention on the CUDA backend: the shared GPU engine (backends/common)
// over the driver API and cuBLAS.
#pragma once

#include <string>

#include "cuda_backend.hpp"

namespace hal::cuda {

// Opens cuBLAS (HAL_CUBLAS, then the `cublas` option, then the usual
// search); a missing one is kept as the math path's reason.
void load_cublas(Context& context, const std::string& configured_path);
// Before discover_devices: the devices' capabilities are described by it.
void create_attention(Context& context);
extern const hal_attention_v2 attention_table;
extern const hal_memory_test_v1 memory_test_table;

}  // namespace hal::cuda
