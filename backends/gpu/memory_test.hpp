// The device memory test's sub-table (hal_memory_test_v1) on the GPU
// backends: the launch of backends/gpu/kernels/memory_test.cu through their
// GpuPlatform (gpu_plugin.hpp fills the sub-table). The checks of a call and
// the host's march are hal/abi/memory_test_element.hpp.
#pragma once

#include <cstdint>

#include "gpu_attention.hpp"
#include "hal/backend_abi.h"
#include "memory_test_element.hpp"

namespace hal::backend {

// Checks the call and launches the kernel on the stream.
hal_status run_gpu_memory_test_element(GpuPlatform& platform, hal_stream* stream, const hal_tensor_ref_v1& tested,
                                       std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                       const hal_tensor_ref_v1& report, std::uint32_t capacity);

}  // namespace hal::backend
