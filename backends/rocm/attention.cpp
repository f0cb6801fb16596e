// Attention on AMD GPUs: the shared engine of backends/common over the HIP
// module API. The math path's GEMMs are the kernels' own
// hal_gemm_f32_strided_batched (scalar tiles; no rocBLAS/hipBLAS needed).
// No fused attention library is wired in.
#include "attention.hpp"

#include <algorithm>

#include "gemm_kernels.h"
#include "memory_test.hpp"

namespace hal::rocm {
namespace {

constexpr std::uint32_t max_grid_z = 65535;

class RocmPlatform final : public backend::GpuPlatform {
 public:
  explicit RocmPlatform(const Context& context) : context_(context) {}

  const char* backend_name() const override { return "rocm"; }
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }

  std::string kernels_missing(std::uint32_t device) const override {
    return rocm::kernels_missing(context_, *context_.devices[device]);
  }

  std::string kernels_unusable(std::uint32_t device) const override {
    return kernels_usable(context_, device) ? std::string() : context_.devices[device]->kernel_status;
  }

  backend::GpuDeviceLimits limits(std::uint32_t device) const override {
    const RocmDevice& rocm_device = *context_.devices[device];
    // The HIP image has no tensor-core kernels, also for RDNA's 32-wide wavefronts.
    return {rocm_device.max_shared_bytes, rocm_device.warp_size, 0};
  }

  std::uint32_t stream_device(hal_stream* stream) const override { return stream->device; }

  hal_status launch(hal_stream* stream, const hal_kernel_launch& launch, const void* arguments,
                    std::size_t) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    hipFunction_t function = nullptr;
    if (hal_status status = find_kernel(context_, stream->device, launch.kernel, &function); status != HAL_OK)
      return status;
    // The kernel's one parameter is the struct `arguments` points to.
    void* parameters[] = {const_cast<void*>(arguments)};
    return context_.check(context_.api().hipModuleLaunchKernel(function, launch.grid[0], launch.grid[1],
                                                               launch.grid[2], launch.block[0], launch.block[1],
                                                               launch.block[2], launch.shared_bytes, stream->handle,
                                                               parameters, nullptr),
                          std::string("hipModuleLaunchKernel(") + launch.kernel + ")");
  }

  // hipMalloc and a synchronizing free: the shim does not require the
  // stream-ordered allocator, which ROCm 5 runtimes may lack.
  hal_status allocate_workspace(hal_stream* stream, std::uint64_t bytes, std::uint64_t* address) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    void* pointer = nullptr;
    const hal_status status = context_.check(context_.api().hipMalloc(&pointer, bytes),
                                             "allocating " + std::to_string(bytes) + " bytes of attention workspace");
    *address = status == HAL_OK ? reinterpret_cast<std::uint64_t>(pointer) : 0;
    return status;
  }

  hal_status free_workspace(hal_stream* stream, std::uint64_t address) override {
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    if (hal_status status = context_.check(context_.api().hipStreamSynchronize(stream->handle), "hipStreamSynchronize");
        status != HAL_OK)
      return status;
    return context_.check(context_.api().hipFree(reinterpret_cast<void*>(address)), "freeing the attention workspace");
  }

  hal_status device_address(hal_stream* stream, const hal_tensor_ref_v1& tensor, std::uint64_t* address) override {
    if (tensor.buffer == nullptr || tensor.buffer->device != stream->device)
      return backend::fail(HAL_ERROR_INVALID_ARGUMENT, "a tensor is not in a buffer of rocm:" +
                                                           std::to_string(stream->device) + ", the stream's device");
    *address = reinterpret_cast<std::uint64_t>(tensor.buffer->address) + tensor.offset;
    return HAL_OK;
  }

  // The GEMM is a kernel of the same image: usable whenever the kernels are.
  std::string gemm_unavailable(std::uint32_t) const override { return {}; }

  hal_status strided_batched_gemm(hal_stream* stream, const backend::StridedBatchedGemm& gemm) override {
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
    const hal_kernel_launch launch{"hal_gemm_f32_strided_batched",
                                   {tiles(gemm.n), tiles(gemm.m),
                                    static_cast<std::uint32_t>(std::min<std::int64_t>(gemm.batch, max_grid_z))},
                                   {HAL_GEMM_TILE, HAL_GEMM_TILE, 1},
                                   0};
    return this->launch(stream, launch, &args, sizeof(args));
  }

  std::string fused_unavailable() const override {
    return "no fused attention library (MIOpen, composable_kernel) is wired into the ROCm backend";
  }

 private:
  const Context& context_;
};

backend::GpuAttention* attention_of_context(hal_backend_context* backend) { return backend->rocm.attention.get(); }
backend::GpuAttention* attention_of_stream(hal_stream* stream) { return stream->context->attention.get(); }

}  // namespace

void create_attention(Context& context) {
  context.attention = std::make_unique<backend::GpuAttention>(std::make_unique<RocmPlatform>(context));
}

const hal_attention_v2 attention_table = backend::GpuAttentionTable<attention_of_context, attention_of_stream>::table;

namespace {
backend::GpuPlatform* platform_of_stream(hal_stream* stream) { return &stream->context->attention->platform(); }
}  // namespace

// The memory test's kernel runs through the platform the attention engine holds.
const hal_memory_test_v1 memory_test_table = backend::GpuMemoryTestTable<platform_of_stream>::table;

}  // namespace hal::rocm
