/* The contract between the memory test kernel (memory_test.cu) and its
 * launcher (backends/gpu/memory_test.cpp). Plain C with fixed-size
 * fields: the same bytes are the kernel's by-value argument and the host's
 * launch argument. The word kinds and the report layout are the plugin
 * ABI's (hal_memory_test_word, hal_memory_test_report_v1 followed by
 * hal_memory_test_failure_v1 records); the launcher pins that they agree. */
#ifndef HAL_KERNELS_MEMORY_TEST_KERNELS_H
#define HAL_KERNELS_MEMORY_TEST_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAL_KERNEL_MEMORY_TEST_NONE 0u
#define HAL_KERNEL_MEMORY_TEST_CONSTANT 1u
#define HAL_KERNEL_MEMORY_TEST_ADDRESS 2u
#define HAL_KERNEL_MEMORY_TEST_ADDRESS_COMPLEMENT 3u

typedef struct hal_memory_test_kernel_failure {
  uint64_t offset, expected, found;
} hal_memory_test_kernel_failure;

/* The report's header; `capacity` failure records follow it. */
typedef struct hal_memory_test_kernel_report {
  uint64_t failing_words;
} hal_memory_test_kernel_report;

typedef struct hal_memory_test_kernel_args {
  uint64_t words; /* device address of the first tested word, 8-byte aligned */
  uint64_t word_count;
  uint64_t region_offset; /* the first word's region offset: what ADDRESS words hold */
  uint64_t check_word;    /* CONSTANT values */
  uint64_t write_word;
  uint64_t report;       /* device address of a hal_memory_test_kernel_report */
  uint32_t check, write; /* HAL_KERNEL_MEMORY_TEST_* */
  uint32_t descending;
  uint32_t capacity; /* records the report holds */
} hal_memory_test_kernel_args;

/* Threads per block of hal_memory_test_element, the words each thread
 * visits before the grid grows another block, and the most blocks. */
#define HAL_MEMORY_TEST_BLOCK 256
#define HAL_MEMORY_TEST_WORDS_PER_THREAD 64
#define HAL_MEMORY_TEST_MAX_BLOCKS 8192

#ifdef __cplusplus
}
#endif

#endif /* HAL_KERNELS_MEMORY_TEST_KERNELS_H */
