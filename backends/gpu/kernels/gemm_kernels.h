/* The by-value argument of hal_gemm_f32_strided_batched (gemm.cu), shared
 * with the host code that launches it. Row-major f32:
 *   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, `batch` times;
 * transpose_a means A is stored [k, m] (likewise B: [n, k]); leading
 * dimensions are the stored row lengths, strides in elements. Launch with
 * block (HAL_GEMM_TILE, HAL_GEMM_TILE) and grid (ceil(n / tile),
 * ceil(m / tile), min(batch, 65535)); the kernel loops over the rest. */
#ifndef HAL_KERNELS_GEMM_KERNELS_H
#define HAL_KERNELS_GEMM_KERNELS_H

#include <stdint.h>

#define HAL_GEMM_TILE 16

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hal_gemm_kernel_args {
  uint64_t a, b, c;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int32_t m, n, k, batch;
  int32_t transpose_a, transpose_b;
  float alpha, beta;
} hal_gemm_kernel_args;

#ifdef __cplusplus
}
#endif

#endif /* HAL_KERNELS_GEMM_KERNELS_H */
