#include "memory_test.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "last_error.hpp"
#include "memory_test_element.hpp"
#include "memory_test_kernels.h"

namespace hal::backend {
namespace {

static_assert(HAL_KERNEL_MEMORY_TEST_NONE == static_cast<std::uint32_t>(HAL_MEMORY_TEST_NONE) &&
                  HAL_KERNEL_MEMORY_TEST_CONSTANT == static_cast<std::uint32_t>(HAL_MEMORY_TEST_CONSTANT) &&
                  HAL_KERNEL_MEMORY_TEST_ADDRESS == static_cast<std::uint32_t>(HAL_MEMORY_TEST_ADDRESS) &&
                  HAL_KERNEL_MEMORY_TEST_ADDRESS_COMPLEMENT ==
                      static_cast<std::uint32_t>(HAL_MEMORY_TEST_ADDRESS_COMPLEMENT),
              "the kernel's word kinds are the ABI's");
static_assert(sizeof(hal_memory_test_kernel_report) == sizeof(hal_memory_test_report_v1) &&
                  offsetof(hal_memory_test_kernel_report, failing_words) ==
                      offsetof(hal_memory_test_report_v1, failing_words),
              "the kernel's report header is the ABI's");
static_assert(sizeof(hal_memory_test_kernel_failure) == sizeof(hal_memory_test_failure_v1) &&
                  offsetof(hal_memory_test_kernel_failure, offset) == offsetof(hal_memory_test_failure_v1, offset) &&
                  offsetof(hal_memory_test_kernel_failure, expected) ==
                      offsetof(hal_memory_test_failure_v1, expected) &&
                  offsetof(hal_memory_test_kernel_failure, found) == offsetof(hal_memory_test_failure_v1, found),
              "the kernel's failure record is the ABI's");
static_assert(sizeof(hal_memory_test_kernel_args) == 64, "the kernel's by-value argument changed size");

}  // namespace

hal_status run_gpu_memory_test_element(GpuPlatform& platform, hal_stream* stream, const hal_tensor_ref_v1& tested,
                                       std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                       const hal_tensor_ref_v1& report, std::uint32_t capacity) {
  hal_memory_test_kernel_args args{};
  if (hal_status status = platform.device_address(stream, tested, &args.words); status != HAL_OK) return status;
  if (hal_status status = platform.device_address(stream, report, &args.report); status != HAL_OK) return status;
  if (hal_status status = check_memory_test_element(reinterpret_cast<const void*>(args.words), bytes, element,
                                                    reinterpret_cast<const void*>(args.report), capacity);
      status != HAL_OK)
    return status;
  const std::uint32_t device = platform.stream_device(stream);
  if (std::string why = platform.kernels_unusable(device); !why.empty())
    return fail(HAL_ERROR_UNSUPPORTED, std::string(platform.backend_name()) + ":" + std::to_string(device) +
                                           " cannot run the memory test kernel: " + why);
  args.word_count = bytes / 8;
  args.region_offset = element->region_offset;
  args.check_word = element->check_word;
  args.write_word = element->write_word;
  args.check = element->check;
  args.write = element->write;
  args.descending = element->descending;
  args.capacity = capacity;
  const std::uint64_t per_block = std::uint64_t{HAL_MEMORY_TEST_BLOCK} * HAL_MEMORY_TEST_WORDS_PER_THREAD;
  const auto blocks = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((args.word_count + per_block - 1) / per_block, 1, HAL_MEMORY_TEST_MAX_BLOCKS));
  const hal_kernel_launch launch{"hal_memory_test_element", {blocks, 1, 1}, {HAL_MEMORY_TEST_BLOCK, 1, 1}, 0};
  return platform.launch(stream, launch, &args, sizeof(args));
}

}  // namespace hal::backend
