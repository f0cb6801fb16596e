// One march element of the device memory test: every thread walks its
// words (grid-strided, ascending or descending), checks what each holds
// against the element's expectation, counts and records the ones that read
// wrong, then writes the next value. Words go through a volatile pointer so
// each check is a real load of the cell and each write a real store, never
// folded with another.
#include "memory_test_kernels.h"

__device__ inline uint64_t hal_memory_test_word(uint32_t kind, uint64_t constant, uint64_t offset) {
  if (kind == HAL_KERNEL_MEMORY_TEST_CONSTANT) return constant;
  if (kind == HAL_KERNEL_MEMORY_TEST_ADDRESS) return offset;
  return ~offset;
}

extern "C" __global__ void hal_memory_test_element(hal_memory_test_kernel_args args) {
  volatile unsigned long long* words = reinterpret_cast<volatile unsigned long long*>(args.words);
  hal_memory_test_kernel_report* report = reinterpret_cast<hal_memory_test_kernel_report*>(args.report);
  unsigned long long* failing_words = reinterpret_cast<unsigned long long*>(&report->failing_words);
  hal_memory_test_kernel_failure* records = reinterpret_cast<hal_memory_test_kernel_failure*>(report + 1);
  const unsigned long long threads = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  const unsigned long long first = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (unsigned long long step = first; step < args.word_count; step += threads) {
    const unsigned long long index = args.descending != 0 ? args.word_count - 1 - step : step;
    const uint64_t offset = args.region_offset + 8 * index;
    if (args.check != HAL_KERNEL_MEMORY_TEST_NONE) {
      const uint64_t found = words[index];
      const uint64_t expected = hal_memory_test_word(args.check, args.check_word, offset);
      if (found != expected) {
        // One counter both counts the failures and hands out record slots.
        const unsigned long long slot = atomicAdd(failing_words, 1ull);
        if (slot < args.capacity) {
          records[slot].offset = offset;
          records[slot].expected = expected;
          records[slot].found = found;
        }
      }
    }
    if (args.write != HAL_KERNEL_MEMORY_TEST_NONE)
      words[index] = hal_memory_test_word(args.write, args.write_word, offset);
  }
}
