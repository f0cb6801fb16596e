// Attention on CUDA devices: CudaVendor's scratch (the stream-ordered pool
// of memory.cpp) and cuBLAS for the math path's GEMMs, under the shared
// engine of backends/gpu. Fused attention comes from a vendor
// FusedAttention set on the context (cuDNN), when one is built in.
#include "attention.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu_plugin.hpp"
#include "vendor.hpp"

namespace hal::cuda {

hal_status CudaVendor::allocate_workspace(const Context& context, hal_stream& stream, std::uint64_t bytes,
                                          std::uint64_t* address) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  CUdeviceptr pointer = 0;
  const hal_status status = allocate_scratch(context, stream.device, stream.handle, static_cast<std::size_t>(bytes),
                                             &pointer, "attention workspace");
  *address = status == HAL_OK ? static_cast<std::uint64_t>(pointer) : 0;
  return status;
}

hal_status CudaVendor::free_workspace(const Context& context, hal_stream& stream, std::uint64_t address) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  return release_scratch(context, stream.device, stream.handle, static_cast<CUdeviceptr>(address),
                         "the attention workspace");
}

std::string CudaVendor::gemm_unavailable(const Context& context, std::uint32_t) {
  return context.cublas ? std::string() : "math needs cuBLAS for its GEMMs: " + context.cublas_status;
}

hal_status CudaVendor::strided_batched_gemm(const Context& context, hal_stream& stream,
                                            const backend::StridedBatchedGemm& gemm) {
  if (!context.cublas) return fail(HAL_ERROR_NOT_PRESENT, gemm_unavailable(context, stream.device));
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  const shims::Cublas& cublas = *context.cublas;
  const auto& api = cublas.api();
  BlasHandles& handles = context.blas_handles;
  std::lock_guard lock(handles.mutex);
  if (handles.per_device.size() <= stream.device) handles.per_device.resize(context.devices.size(), nullptr);
  cublasHandle_t& handle = handles.per_device[stream.device];
  if (handle == nullptr)
    if (cublasStatus_t status = api.cublasCreate(&handle); status != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return fail(HAL_ERROR_INTERNAL, "cublasCreate on " + context.device_id(stream.device) +
                                          " failed: " + cublas.describe(status) + " (" + cublas.path() + ")");
    }
  if (cublasStatus_t status = api.cublasSetStream(handle, reinterpret_cast<cudaStream_t>(stream.handle));
      status != CUBLAS_STATUS_SUCCESS)
    return fail(HAL_ERROR_INTERNAL, "cublasSetStream failed: " + cublas.describe(status));
  // cuBLAS is column-major: the row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T.
  const cublasOperation_t operation_a = gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t operation_b = gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasStatus_t status = api.cublasGemmStridedBatchedEx(
      handle, operation_b, operation_a, static_cast<int>(gemm.n), static_cast<int>(gemm.m), static_cast<int>(gemm.k),
      &gemm.alpha, reinterpret_cast<const void*>(gemm.b), CUDA_R_32F, static_cast<int>(gemm.ldb), gemm.stride_b,
      reinterpret_cast<const void*>(gemm.a), CUDA_R_32F, static_cast<int>(gemm.lda), gemm.stride_a, &gemm.beta,
      reinterpret_cast<void*>(gemm.c), CUDA_R_32F, static_cast<int>(gemm.ldc), gemm.stride_c,
      static_cast<int>(gemm.batch), handles.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS)
    return fail(HAL_ERROR_INTERNAL, "cublasGemmStridedBatchedEx (" + std::to_string(gemm.m) + "x" +
                                        std::to_string(gemm.n) + "x" + std::to_string(gemm.k) + ", batch " +
                                        std::to_string(gemm.batch) + ") failed: " + cublas.describe(status));
  return HAL_OK;
}

std::string CudaVendor::fused_unavailable(const Context& context) {
  return "no fused attention was set up for this context; cuDNN: " + context.cudnn_status;
}

void load_cublas(Context& context) {
  shims::keep_optional(shims::Cublas::load(context.profile.blas), context.cublas, context.cublas_status);
  context.blas_handles.allow_tf32 = context.profile.blas_allows_tf32;
}

void destroy_blas_handles(const Context& context) {
  BlasHandles& handles = context.blas_handles;
  if (!context.cublas) return;
  for (std::uint32_t device = 0; device < handles.per_device.size(); ++device) {
    if (handles.per_device[device] == nullptr) continue;
    if (const backend::CurrentDevice scope = context.current_device(device))
      context.cublas->api().cublasDestroy(handles.per_device[device]);
  }
  handles.per_device.clear();
}

void create_attention(Context& context) { context.attention = backend::make_gpu_attention<CudaVendor>(context); }

}  // namespace hal::cuda
