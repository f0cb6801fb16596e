// The launch of the embedded GEMM kernel (kernels/gemm.cu) for one
// StridedBatchedGemm: the ROCm backend's math-path GEMMs run it, and the
// SIMT test runs it in the emulator the same way.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gemm_kernels.h"
#include "gpu_attention.hpp"
#include "hal/backend_abi.h"

namespace hal::backend {

inline hal_gemm_kernel_args gemm_kernel_arguments(const StridedBatchedGemm& gemm) {
  hal_gemm_kernel_args args{};
  args.a = gemm.a, args.b = gemm.b, args.c = gemm.c;
  args.lda = gemm.lda, args.ldb = gemm.ldb, args.ldc = gemm.ldc;
  args.stride_a = gemm.stride_a, args.stride_b = gemm.stride_b, args.stride_c = gemm.stride_c;
  args.m = static_cast<std::int32_t>(gemm.m), args.n = static_cast<std::int32_t>(gemm.n);
  args.k = static_cast<std::int32_t>(gemm.k), args.batch = static_cast<std::int32_t>(gemm.batch);
  args.transpose_a = gemm.transpose_a ? 1 : 0, args.transpose_b = gemm.transpose_b ? 1 : 0;
  args.alpha = gemm.alpha, args.beta = gemm.beta;
  return args;
}

// One thread a C element in HAL_GEMM_TILE square blocks; at most max_grid_z
// matrices side by side, the kernel loops over the rest.
inline hal_kernel_launch gemm_kernel_launch(const StridedBatchedGemm& gemm, std::int64_t max_grid_z) {
  const auto tiles = [](std::int64_t extent) {
    return static_cast<std::uint32_t>((extent + HAL_GEMM_TILE - 1) / HAL_GEMM_TILE);
  };
  return {"hal_gemm_f32_strided_batched",
          {tiles(gemm.n), tiles(gemm.m), static_cast<std::uint32_t>(std::min<std::int64_t>(gemm.batch, max_grid_z))},
          {HAL_GEMM_TILE, HAL_GEMM_TILE, 1},
          0};
}

}  // namespace hal::backend
