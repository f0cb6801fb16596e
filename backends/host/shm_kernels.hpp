// The element-wise kernels of the shared-memory collectives engine, compiled
// once per instruction set (shm_kernels_{scalar,avx2,avx512}.cpp) from the
// plain loops of shm_kernels_impl.hpp, which the compiler vectorises for each.
#pragma once

#include <cstddef>

#include "hal/backend_abi.h"

namespace hal::host {

struct ShmKernels {
  const char* isa;  // "baseline", "avx2" or "avx512"
  // out[i] = a[i] op b[i] for f32, f64, i8, u8, i32 and i64 (avg sums);
  // integers wrap. out is a, b, or disjoint from both.
  void (*combine)(hal_dtype type, hal_reduce_op op, void* out, const void* a, const void* b, std::size_t n);
  // f16/bf16 <-> f32; narrowing rounds to nearest even.
  void (*widen)(hal_dtype half, const void* in, float* out, std::size_t n);
  void (*narrow)(hal_dtype half, const float* in, void* out, std::size_t n);
};

// The widest set this CPU runs, at most the `isa` option's limit, as for attention.
const ShmKernels& shm_kernels();

extern const ShmKernels shm_kernels_scalar;
#if defined(HAL_HOST_X86_UNITS)
extern const ShmKernels shm_kernels_avx2;
extern const ShmKernels shm_kernels_avx512;
#endif

}  // namespace hal::host
