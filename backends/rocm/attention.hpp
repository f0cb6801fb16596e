// Attention on the ROCm backend: the shared GPU engine (backends/gpu)
// over RocmVendor, with the kernels' own tiled GEMM for math.
#pragma once

#include "rocm_backend.hpp"

namespace hal::rocm {

// Before discover_devices: the devices' capabilities are described by it.
void create_attention(Context& context);

}  // namespace hal::rocm
