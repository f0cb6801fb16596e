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

#include "gemm_launch.hpp"
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
  const hal_gemm_kernel_args args = backend::gemm_kernel_arguments(gemm);
  const hal_kernel_launch launch = backend::gemm_kernel_launch(gemm, max_grid_z);
  return RocmVendor::launch(context, stream, launch, &args);
}

void create_attention(Context& context) { context.attention = backend::make_gpu_attention<RocmVendor>(context); }

}  // namespace hal::rocm
