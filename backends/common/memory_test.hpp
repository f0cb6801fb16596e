// The device memory test's sub-table (hal_memory_test_v1), written once:
// argument checks for every backend, the host's march over host memory, and
// the GPU backends' launch of backends/kernels/memory_test.cu through their
// GpuPlatform (gpu_plugin.hpp fills the sub-table).
#pragma once

#include <cstdint>

#include "gpu_attention.hpp"
#include "hal/backend_abi.h"

namespace hal::backend {

// HAL_OK, or HAL_ERROR_INVALID_ARGUMENT naming what is wrong with the call
// (addresses are those the element will touch).
hal_status check_memory_test_element(const void* tested, std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                     const void* report, std::uint32_t capacity);

// Runs the element at once over host memory (the host backend's stream
// worker calls it in stream order).
void run_host_memory_test_element(void* tested, std::uint64_t bytes, const hal_memory_test_element_v1& element,
                                  void* report, std::uint32_t capacity);

// The refusal of a call without a stream: the test is stream-ordered work.
hal_status memory_test_needs_stream();

// Checks the call and launches the kernel on the stream.
hal_status run_gpu_memory_test_element(GpuPlatform& platform, hal_stream* stream, const hal_tensor_ref_v1& tested,
                                       std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                       const hal_tensor_ref_v1& report, std::uint32_t capacity);

}  // namespace hal::backend
