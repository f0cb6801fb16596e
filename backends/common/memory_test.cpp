#include "memory_test.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "last_error.hpp"
#include "memory_test_kernels.h"

namespace hal::backend {
namespace {

static_assert(HAL_KERNEL_MEMORY_TEST_NONE == static_cast<std::uint32_t>(HAL_MEMORY_TEST_NONE) &&
              HAL_KERNEL_MEMORY_TEST_CONSTANT == static_cast<std::uint32_t>(HAL_MEMORY_TEST_CONSTANT) &&
              HAL_KERNEL_MEMORY_TEST_ADDRESS == static_cast<std::uint32_t>(HAL_MEMORY_TEST_ADDRESS) &&
              HAL_KERNEL_MEMORY_TEST_ADDRESS_COMPLEMENT == static_cast<std::uint32_t>(HAL_MEMORY_TEST_ADDRESS_COMPLEMENT),
              "the kernel's word kinds are the ABI's");
static_assert(sizeof(hal_memory_test_kernel_report) == sizeof(hal_memory_test_report_v1) &&
                  offsetof(hal_memory_test_kernel_report, failing_words) ==
                      offsetof(hal_memory_test_report_v1, failing_words),
              "the kernel's report header is the ABI's");
static_assert(sizeof(hal_memory_test_kernel_failure) == sizeof(hal_memory_test_failure_v1) &&
                  offsetof(hal_memory_test_kernel_failure, offset) == offsetof(hal_memory_test_failure_v1, offset) &&
                  offsetof(hal_memory_test_kernel_failure, expected) == offsetof(hal_memory_test_failure_v1, expected) &&
                  offsetof(hal_memory_test_kernel_failure, found) == offsetof(hal_memory_test_failure_v1, found),
              "the kernel's failure record is the ABI's");
static_assert(sizeof(hal_memory_test_kernel_args) == 64, "the kernel's by-value argument changed size");

std::uint64_t word_of(std::uint32_t kind, std::uint64_t constant, std::uint64_t offset) {
  if (kind == HAL_MEMORY_TEST_CONSTANT) return constant;
  if (kind == HAL_MEMORY_TEST_ADDRESS) return offset;
  return ~offset;
}

}  // namespace

hal_status check_memory_test_element(const void* tested, std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                     const void* report, std::uint32_t capacity) {
  if (element == nullptr || element->struct_size < sizeof(hal_memory_test_element_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: the element is null or its struct_size is below the v1 struct");
  for (const std::uint32_t kind : {element->check, element->write})
    if (kind > HAL_MEMORY_TEST_ADDRESS_COMPLEMENT)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: word kind " + std::to_string(kind) +
                                                  " is not none (0), constant (1), address (2) or address complement (3)");
  if (bytes == 0 || bytes % 8 != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory test: " + std::to_string(bytes) + " bytes is not a positive multiple of the 8-byte word");
  if (reinterpret_cast<std::uintptr_t>(tested) % 8 != 0 || element->region_offset % 8 != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: the tested range and its region offset must be 8-byte aligned");
  if (report == nullptr || reinterpret_cast<std::uintptr_t>(report) % 8 != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: the report is missing or not 8-byte aligned");
  if (capacity == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: the report holds no failure (capacity 0)");
  return HAL_OK;
}

void run_host_memory_test_element(void* tested, std::uint64_t bytes, const hal_memory_test_element_v1& element,
                                  void* report, std::uint32_t capacity) {
  // volatile: each check is a real load of the cell, each write a real store.
  volatile std::uint64_t* words = static_cast<volatile std::uint64_t*>(tested);
  auto* header = static_cast<hal_memory_test_report_v1*>(report);
  auto* records = reinterpret_cast<hal_memory_test_failure_v1*>(header + 1);
  const std::uint64_t count = bytes / 8;
  for (std::uint64_t step = 0; step < count; ++step) {
    const std::uint64_t index = element.descending != 0 ? count - 1 - step : step;
    const std::uint64_t offset = element.region_offset + 8 * index;
    if (element.check != HAL_MEMORY_TEST_NONE) {
      const std::uint64_t found = words[index];
      const std::uint64_t expected = word_of(element.check, element.check_word, offset);
      if (found != expected) {
        if (header->failing_words < capacity) records[header->failing_words] = {offset, expected, found};
        ++header->failing_words;
      }
    }
    if (element.write != HAL_MEMORY_TEST_NONE) words[index] = word_of(element.write, element.write_word, offset);
  }
}

hal_status memory_test_needs_stream() {
  return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: run_element needs a stream (it is stream-ordered work)");
}

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
