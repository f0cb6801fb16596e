// Attention on the CUDA core: the shared GPU engine (backends/gpu) over
// CudaVendor; cuBLAS for the math path's GEMMs.
#pragma once

#include "cuda_backend.hpp"

namespace hal::cuda {

// Before discover_devices: the devices' capabilities are described by it.
void create_attention(Context& context);
// At teardown, while the devices' contexts are still held.
void destroy_blas_handles(const Context& context);

}  // namespace hal::cuda
