// CudaVendor: the CUDA core's side of the GPU vendor seam
// (backends/gpu/gpu_vendor.hpp), over the driver API. Defined where each
// part lives: memory.cpp (memory, copies, fills, imports), stream.cpp
// (streams, events, host callbacks), device.cpp (device info), kernels.cpp
// (the embedded kernels, launches), attention.cpp (scratch, cuBLAS GEMMs,
// cuDNN), telemetry.cpp (the device NVML is asked about).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cuda_backend.hpp"

namespace hal::cuda {

struct CudaVendor {
  using Context = cuda::Context;
  using Result = CUresult;
  using NativeStream = CUstream;
  using NativeEvent = CUevent;
  using Backend = hal_backend_context;
  using Buffer = hal_buffer;
  using Stream = hal_stream;
  using Event = hal_event;
  static constexpr Result success = CUDA_SUCCESS;
  static Context& context(hal_backend_context& backend) { return backend.cuda; }

  // Memory (memory.cpp).
  static constexpr const char* managed_memory_attribute = "CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY";
  static CUresult allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
                           backend::VendorAllocation& where);
  static CUresult release(const Context& context, const hal_buffer& buffer);
  static CUresult copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                      std::size_t size, CUstream stream);
  static CUresult copy_device_to_host(const Context& context, void* target, std::uintptr_t source, std::size_t size,
                                      CUstream stream);
  static CUresult copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                        std::size_t size, CUstream stream);
  // value's low element_size (1, 2, 4) bytes, count times.
  static CUresult memset(const Context& context, std::uintptr_t address, std::uint32_t value,
                         std::uint32_t element_size, std::size_t count, CUstream stream);
  static CUresult synchronize_null_stream(const Context& context);
  // A PPU in CUDA-compatible mode too: to a framework it is a CUDA device.
  static constexpr std::int32_t dlpack_device_type = HAL_DLPACK_CUDA;
  static constexpr const char* query_function = "cuPointerGetAttributes";
  static constexpr const char* register_function = "cuMemHostRegister";
  static bool can_query_pointers(const Context& context);
  static bool can_register_host(const Context& context);
  static CUresult query_pointer(const Context& context, std::uintptr_t address, backend::PointerFacts& facts);
  static CUresult register_host(const Context& context, void* address, std::size_t size);
  static CUresult unregister_host(const Context& context, void* address);
  static CUresult host_device_pointer(const Context& context, void* host, std::uintptr_t& device_address);
  static int ordinal(const Context& context, std::uint32_t device);

  // Streams and events (stream.cpp).
  static bool not_ready(CUresult result) { return result == CUDA_ERROR_NOT_READY; }
  static hal_status finish(const Context& context, CUresult result, std::string_view operation);
  static CUresult create_stream(const Context& context, CUstream* stream);
  static CUresult destroy_stream(const Context& context, CUstream stream);
  static CUresult synchronize_stream(const Context& context, CUstream stream);
  static CUresult query_stream(const Context& context, CUstream stream);
  static bool stream_capturing(const Context& context, CUstream stream);
  static CUresult wait_event(const Context& context, CUstream stream, CUevent event);
  static CUresult enqueue_host_callback(const Context& context, CUstream stream, backend::HostCallback* callback);
  static CUresult create_event(const Context& context, CUevent* event);
  static CUresult destroy_event(const Context& context, CUevent event);
  static CUresult record_event(const Context& context, CUevent event, CUstream stream);
  static CUresult query_event(const Context& context, CUevent event);
  static CUresult synchronize_event(const Context& context, CUevent event);
  static CUresult elapsed_milliseconds(const Context& context, float* elapsed, CUevent start, CUevent end);
  // The legacy default stream by name, so that work on it is not taken for synchronous calls.
  static CUstream wrapped_null_stream() { return CU_STREAM_LEGACY; }

  // Devices (device.cpp, telemetry.cpp).
  static std::uint64_t free_memory(const Context& context, std::uint32_t device);
  static const char* supersedes(const Context& context) { return context.profile.supersedes.c_str(); }
  static backend::TelemetryDevice telemetry_device(const Context& context, std::uint32_t device);

  // Kernels (kernels.cpp).
  static std::string kernels_missing(const Context& context, std::uint32_t device);
  static std::string kernels_unusable(const Context& context, std::uint32_t device);
  // The CUDA image is built for sm_80 and newer, which have mma.sync.
  static std::uint32_t flash_paths(const Context&, std::uint32_t) { return HAL_FLASH_PATH_TENSOR_CORES; }
  static hal_status launch(const Context& context, hal_stream& stream, const hal_kernel_launch& launch,
                           const void* arguments);

  // Attention's scratch, GEMMs and fused attention (attention.cpp).
  static hal_status allocate_workspace(const Context& context, hal_stream& stream, std::uint64_t bytes,
                                       std::uint64_t* address);
  static hal_status free_workspace(const Context& context, hal_stream& stream, std::uint64_t address);
  static std::string gemm_unavailable(const Context& context, std::uint32_t device);
  static hal_status strided_batched_gemm(const Context& context, hal_stream& stream,
                                         const backend::StridedBatchedGemm& gemm);
  static backend::FusedAttention* fused_attention(const Context& context) { return context.fused_attention.get(); }
  static std::string fused_unavailable(const Context& context);
};

}  // namespace hal::cuda
