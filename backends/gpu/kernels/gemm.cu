// Device kernels written once for CUDA (nvcc) and HIP (hipcc -x hip): the
// language subset both accept (__global__, __shared__, blockIdx, threadIdx,
// __syncthreads), extern "C" so the module API finds them by plain name.
//
// hal_gemm_f32: C = alpha * A * B + beta * C, row-major, f32, 16x16 tiles
// staged through shared memory. hal_gemm_f32_strided_batched: the same over
// a batch of matrices, either operand optionally transposed (the math
// attention path's GEMMs on ROCm; see gemm_kernels.h). A scalar path on purpose: it is the correct
// baseline every architecture runs; matrix-core paths (MFMA on gfx908/90a,
// tensor cores on NVIDIA) come with a device to verify them on.

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#endif

#include "gemm_kernels.h"

extern "C" __global__ void hal_gemm_f32(int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                                        int ldb, float beta, float* c, int ldc) {
  __shared__ float a_tile[HAL_GEMM_TILE][HAL_GEMM_TILE];
  __shared__ float b_tile[HAL_GEMM_TILE][HAL_GEMM_TILE + 1];  // +1: no bank conflicts on the column reads
  const int row = blockIdx.y * HAL_GEMM_TILE + threadIdx.y;
  const int column = blockIdx.x * HAL_GEMM_TILE + threadIdx.x;
  float sum = 0.0f;
  for (int base = 0; base < k; base += HAL_GEMM_TILE) {
    const int a_column = base + threadIdx.x;
    const int b_row = base + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] = (row < m && a_column < k) ? a[row * lda + a_column] : 0.0f;
    b_tile[threadIdx.y][threadIdx.x] = (b_row < k && column < n) ? b[b_row * ldb + column] : 0.0f;
    __syncthreads();
    for (int i = 0; i < HAL_GEMM_TILE; ++i) sum += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && column < n) {
    float* out = c + row * ldc + column;
    // beta == 0 must not read C: it may hold NaN from an uninitialized buffer.
    *out = beta == 0.0f ? alpha * sum : alpha * sum + beta * *out;
  }
}

extern "C" __global__ void hal_gemm_f32_strided_batched(hal_gemm_kernel_args args) {
  __shared__ float a_tile[HAL_GEMM_TILE][HAL_GEMM_TILE];
  __shared__ float b_tile[HAL_GEMM_TILE][HAL_GEMM_TILE + 1];
  const int row = blockIdx.y * HAL_GEMM_TILE + threadIdx.y;
  const int column = blockIdx.x * HAL_GEMM_TILE + threadIdx.x;
  for (int matrix = blockIdx.z; matrix < args.batch; matrix += gridDim.z) {
    const float* a = reinterpret_cast<const float*>(args.a) + matrix * args.stride_a;
    const float* b = reinterpret_cast<const float*>(args.b) + matrix * args.stride_b;
    float sum = 0.0f;
    for (int base = 0; base < args.k; base += HAL_GEMM_TILE) {
      // op(A)[row, base + x] and op(B)[base + y, column], zero outside.
      const int a_column = base + threadIdx.x;
      const int b_row = base + threadIdx.y;
      float a_value = 0.0f, b_value = 0.0f;
      if (row < args.m && a_column < args.k)
        a_value = args.transpose_a ? a[a_column * args.lda + row] : a[row * args.lda + a_column];
      if (b_row < args.k && column < args.n)
        b_value = args.transpose_b ? b[column * args.ldb + b_row] : b[b_row * args.ldb + column];
      a_tile[threadIdx.y][threadIdx.x] = a_value;
      b_tile[threadIdx.y][threadIdx.x] = b_value;
      __syncthreads();
      for (int i = 0; i < HAL_GEMM_TILE; ++i) sum += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
      __syncthreads();
    }
    if (row < args.m && column < args.n) {
      float* out = reinterpret_cast<float*>(args.c) + matrix * args.stride_c + row * args.ldc + column;
      *out = args.beta == 0.0f ? args.alpha * sum : args.alpha * sum + args.beta * *out;
    }
  }
}
