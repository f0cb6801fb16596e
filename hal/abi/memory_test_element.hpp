// One march element of the device memory test (hal_memory_test_v1), the
// part every backend shares: the checks of a call and the march over host
// memory (the host backend's stream worker runs it; the GPU backends launch
// the same element as a kernel, backends/gpu/memory_test.cpp).
#pragma once

#include <cstdint>

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

}  // namespace hal::backend
