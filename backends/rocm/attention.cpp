// Attention on AMD GPUs: RocmVendor's scratch (hipMalloc and a
// synchronizing free) and the kernels' own GEMM, under the shared engine of
// backends/gpu. The math path's GEMMs are hal_gemm_f32_strided_batched
// (scalar tiles; no rocBLAS/hipBLAS needed). No fused attention library is
// wired in.
#include "attention.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "gemm_kernels.h"
#include "gpu_plugin.hpp"
#include "vendor.hpp"

namespace hal::rocm {
namespace {

constexpr std::uint32_t max_grid_z = 65535;

}  // namespace

// hipMalloc and a synchronizing free: the shim does not require the
// stream-ordered allocator, which ROCm 5 runtimes may lack.
hal_status RocmVendor::allocate_workspace(const Context& context, hal_stream& stream, std::uint64_t bytes,
                                          std::uint64_t* address) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  void* pointer = nullptr;
  const hal_status status = context.check(context.api().hipMalloc(&pointer, bytes),
                                          "allocating " + std::to_string(bytes) + " bytes of attention workspace");
  *address = status == HAL_OK ? reinterpret_cast<std::uint64_t>(pointer) : 0;
  return status;
}

hal_status RocmVendor::free_workspace(const Context& context, hal_stream& stream, std::uint64_t address) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  if (hal_status status = context.check(context.api().hipStreamSynchronize(stream.handle), "hipStreamSynchronize");
      status != HAL_OK)
    return status;
  return context.check(context.api().hipFree(reinterpret_cast<void*>(address)), "freeing the attention workspace");
}

hal_status RocmVendor::strided_batched_gemm(const Context& context, hal_stream& stream,
                                            const backend::StridedBatchedGemm& gemm) {
  hal_gemm_kernel_args args{};
  args.a = gemm.a, args.b = gemm.b, args.c = gemm.c;
  args.lda = gemm.lda, args.ldb = gemm.ldb, args.ldc = gemm.ldc;
  args.stride_a = gemm.stride_a, args.stride_b = gemm.stride_b, args.stride_c = gemm.stride_c;
  args.m = static_cast<std::int32_t>(gemm.m), args.n = static_cast<std::int32_t>(gemm.n);
  args.k = static_cast<std::int32_t>(gemm.k), args.batch = static_cast<std::int32_t>(gemm.batch);
  args.transpose_a = gemm.transpose_a ? 1 : 0, args.transpose_b = gemm.transpose_b ? 1 : 0;
  args.alpha = gemm.alpha, args.beta = gemm.beta;
  const auto tiles = [](std::int64_t extent) {
    return static_cast<std::uint32_t>((extent + HAL_GEMM_TILE - 1) / HAL_GEMM_TILE);
  };
  const hal_kernel_launch launch{
      "hal_gemm_f32_strided_batched",
      {tiles(gemm.n), tiles(gemm.m), static_cast<std::uint32_t>(std::min<std::int64_t>(gemm.batch, max_grid_z))},
      {HAL_GEMM_TILE, HAL_GEMM_TILE, 1},
      0};
  return RocmVendor::launch(context, stream, launch, &args);
}

void create_attention(Context& context) { context.attention = backend::make_gpu_attention<RocmVendor>(context); }

}  // namespace hal::rocm
