// Attention on CUDA devices: the shared engine of backends/common over the
// driver API (kernels from the embedded image, stream-ordered scratch) and
// cuBLAS for the math path's GEMMs. Fused attention comes from a vendor
// FusedAttention set on the context (cuDNN), when one is built in.
#include "attention.hpp"

#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "kernels.hpp"
#include "environment.hpp"
#include "memory_test.hpp"

namespace hal::cuda {
namespace {

// cuLaunchKernel takes up to 48 KiB of dynamic shared memory without asking.
constexpr std::uint32_t default_shared_limit = 48 * 1024;

class CudaPlatform final : public backend::GpuPlatform {
 public:
  explicit CudaPlatform(const Context& context) : context_(context) {
    const char* tf32 = shared::environment("HAL_CUBLAS_TF32");
    allow_tf32_ = tf32 != nullptr && std::string_view(tf32) == "1";
  }
  ~CudaPlatform() override {
    if (!context_.cublas) return;
    for (std::uint32_t device = 0; device < handles_.size(); ++device) {
      if (handles_[device] == nullptr) continue;
      if (const backend::CurrentDevice scope = context_.current_device(device))
        context_.cublas->api().cublasDestroy(handles_[device]);
    }
  }

  const char* backend_name() const override { return "cuda"; }
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }

  std::string kernels_missing(std::uint32_t) const override { return cuda::kernels_missing(context_); }

  std::string kernels_unusable(std::uint32_t device) const override {
    return kernels_usable(context_, device) ? std::string() : context_.devices[device]->kernels_status;
  }

  backend::GpuDeviceLimits limits(std::uint32_t device) const override {
    const CudaDevice& cuda_device = *context_.devices[device];
    // The CUDA image is built for sm_80 and newer, which have mma.sync.
    return {cuda_device.max_shared_bytes_optin, cuda_device.warp_size, HAL_FLASH_PATH_TENSOR_CORES};
  }

  std::uint32_t stream_device(hal_stream* stream) const override { return stream->device; }

  hal_status launch(hal_stream* stream, const hal_kernel_launch& launch, const void* arguments,
                    std::size_t) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    CUfunction function = nullptr;
    if (hal_status status = find_kernel(context_, stream->device, launch.kernel, &function); status != HAL_OK)
      return status;
    const auto& api = context_.api();
    if (launch.shared_bytes > default_shared_limit) {
      if (api.cuFuncSetAttribute == nullptr)
        return backend::fail(HAL_ERROR_UNSUPPORTED, std::string(launch.kernel) + " needs " +
                                                        std::to_string(launch.shared_bytes) +
                                                        " bytes of shared memory and the driver lacks cuFuncSetAttribute "
                                                        "to allow more than 48 KiB; update the driver");
      if (hal_status status =
              context_.check(api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    static_cast<int>(launch.shared_bytes)),
                             std::string("cuFuncSetAttribute(") + launch.kernel + ", max dynamic shared memory)");
          status != HAL_OK)
        return status;
    }
    // The kernel's one parameter is the struct `arguments` points to.
    void* parameters[] = {const_cast<void*>(arguments)};
    return context_.check(api.cuLaunchKernel(function, launch.grid[0], launch.grid[1], launch.grid[2],
                                             launch.block[0], launch.block[1], launch.block[2], launch.shared_bytes,
                                             stream->handle, parameters, nullptr),
                          std::string("cuLaunchKernel(") + launch.kernel + ")");
  }

  hal_status allocate_workspace(hal_stream* stream, std::uint64_t bytes, std::uint64_t* address) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    CUdeviceptr pointer = 0;
    const hal_status status = allocate_scratch(context_, stream->device, stream->handle,
                                               static_cast<std::size_t>(bytes), &pointer, "attention workspace");
    *address = status == HAL_OK ? static_cast<std::uint64_t>(pointer) : 0;
    return status;
  }

  hal_status free_workspace(hal_stream* stream, std::uint64_t address) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    return release_scratch(context_, stream->device, stream->handle, static_cast<CUdeviceptr>(address),
                           "the attention workspace");
  }

  hal_status device_address(hal_stream* stream, const hal_tensor_ref_v1& tensor, std::uint64_t* address) override {
    if (tensor.buffer == nullptr || tensor.buffer->device != stream->device)
      return backend::fail(HAL_ERROR_INVALID_ARGUMENT, "a tensor is not in a buffer of cuda:" +
                                                           std::to_string(stream->device) + ", the stream's device");
    *address = static_cast<std::uint64_t>(tensor.buffer->address) + tensor.offset;
    return HAL_OK;
  }

  std::string gemm_unavailable(std::uint32_t) const override {
    return context_.cublas ? std::string() : "math needs cuBLAS for its GEMMs: " + context_.cublas_status;
  }

  hal_status strided_batched_gemm(hal_stream* stream, const backend::StridedBatchedGemm& gemm) override {
    if (!context_.cublas) return backend::fail(HAL_ERROR_NOT_PRESENT, gemm_unavailable(stream->device));
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    const shims::Cublas& cublas = *context_.cublas;
    const auto& api = cublas.api();
    std::lock_guard lock(mutex_);  // a handle's stream is state shared by its callers
    if (handles_.size() <= stream->device) handles_.resize(context_.devices.size(), nullptr);
    cublasHandle_t& handle = handles_[stream->device];
    if (handle == nullptr)
      if (cublasStatus_t status = api.cublasCreate(&handle); status != CUBLAS_STATUS_SUCCESS) {
        handle = nullptr;
        return backend::fail(HAL_ERROR_INTERNAL, "cublasCreate on cuda:" + std::to_string(stream->device) +
                                                     " failed: " + cublas.describe(status) + " (" + cublas.path() + ")");
      }
    if (cublasStatus_t status = api.cublasSetStream(handle, reinterpret_cast<cudaStream_t>(stream->handle));
        status != CUBLAS_STATUS_SUCCESS)
      return backend::fail(HAL_ERROR_INTERNAL, "cublasSetStream failed: " + cublas.describe(status));
    // cuBLAS is column-major: the row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T.
    const cublasOperation_t operation_a = gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t operation_b = gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t status = api.cublasGemmStridedBatchedEx(
        handle, operation_b, operation_a, static_cast<int>(gemm.n), static_cast<int>(gemm.m),
        static_cast<int>(gemm.k), &gemm.alpha, reinterpret_cast<const void*>(gemm.b), CUDA_R_32F,
        static_cast<int>(gemm.ldb), gemm.stride_b, reinterpret_cast<const void*>(gemm.a), CUDA_R_32F,
        static_cast<int>(gemm.lda), gemm.stride_a, &gemm.beta, reinterpret_cast<void*>(gemm.c), CUDA_R_32F,
        static_cast<int>(gemm.ldc), gemm.stride_c, static_cast<int>(gemm.batch),
        allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS)
      return backend::fail(HAL_ERROR_INTERNAL, "cublasGemmStridedBatchedEx (" + std::to_string(gemm.m) + "x" +
                                                   std::to_string(gemm.n) + "x" + std::to_string(gemm.k) + ", batch " +
                                                   std::to_string(gemm.batch) + ") failed: " + cublas.describe(status));
    return HAL_OK;
  }

  backend::FusedAttention* fused_attention() override { return context_.fused_attention.get(); }
  std::string fused_unavailable() const override {
    return "no fused attention was set up for this context; cuDNN: " + context_.cudnn_status;
  }

 private:
  const Context& context_;
  std::mutex mutex_;
  std::vector<cublasHandle_t> handles_;  // per device, created on first use
  bool allow_tf32_ = false;
};

// The engine behind the table's entry points.
backend::GpuAttention* attention_of_context(hal_backend_context* backend) { return backend->cuda.attention.get(); }
backend::GpuAttention* attention_of_stream(hal_stream* stream) { return stream->context->attention.get(); }

}  // namespace

void load_cublas(Context& context, const std::string& configured_path) {
  shims::LoadResult<shims::Cublas> cublas = shims::Cublas::load(configured_path);
  context.cublas = std::move(cublas.library);
  context.cublas_status = context.cublas ? "loaded " + context.cublas->path() : cublas.message;
}

void create_attention(Context& context) {
  context.attention = std::make_unique<backend::GpuAttention>(std::make_unique<CudaPlatform>(context));
}

const hal_attention_v2 attention_table = backend::GpuAttentionTable<attention_of_context, attention_of_stream>::table;

namespace {
backend::GpuPlatform* platform_of_stream(hal_stream* stream) { return &stream->context->attention->platform(); }
}  // namespace

// The memory test's kernel runs through the platform the attention engine holds.
const hal_memory_test_v1 memory_test_table = backend::GpuMemoryTestTable<platform_of_stream>::table;

}  // namespace hal::cuda
