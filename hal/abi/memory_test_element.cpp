#include "memory_test_element.hpp"

#include <string>

#include "last_error.hpp"

namespace hal::backend {
namespace {

std::uint64_t word_of(std::uint32_t kind, std::uint64_t constant, std::uint64_t offset) {
  if (kind == HAL_MEMORY_TEST_CONSTANT) return constant;
  if (kind == HAL_MEMORY_TEST_ADDRESS) return offset;
  return ~offset;
}

}  // namespace

hal_status check_memory_test_element(const void* tested, std::uint64_t bytes, const hal_memory_test_element_v1* element,
                                     const void* report, std::uint32_t capacity) {
  if (element == nullptr || element->struct_size < sizeof(hal_memory_test_element_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory test: the element is null or its struct_size is below the v1 struct");
  for (const std::uint32_t kind : {element->check, element->write})
    if (kind > HAL_MEMORY_TEST_ADDRESS_COMPLEMENT)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "memory test: word kind " + std::to_string(kind) +
                      " is not none (0), constant (1), address (2) or address complement (3)");
  if (bytes == 0 || bytes % 8 != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory test: " + std::to_string(bytes) + " bytes is not a positive multiple of the 8-byte word");
  if (reinterpret_cast<std::uintptr_t>(tested) % 8 != 0 || element->region_offset % 8 != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory test: the tested range and its region offset must be 8-byte aligned");
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

}  // namespace hal::backend
