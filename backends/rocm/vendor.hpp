// RocmVendor: the ROCm backend's side of the GPU vendor seam
// (backends/gpu/gpu_vendor.hpp), over the HIP runtime. Defined where each
// part lives: memory.cpp (memory, copies, fills, imports), stream.cpp
// (streams, events, host callbacks), device.cpp (device info), kernels.cpp
// (the embedded code object, launches), attention.cpp (scratch, the kernels'
// own GEMM), telemetry.cpp (the device AMD SMI is asked about).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rocm_backend.hpp"

namespace hal::rocm {

struct RocmVendor {
  using Context = rocm::Context;
  using Result = hipError_t;
  using NativeStream = hipStream_t;
  using NativeEvent = hipEvent_t;
  using Backend = hal_backend_context;
  using Buffer = hal_buffer;
  using Stream = hal_stream;
  using Event = hal_event;
  static constexpr Result success = hipSuccess;
  static Context& context(hal_backend_context& backend) { return backend.rocm; }

  // Memory (memory.cpp).
  static constexpr const char* managed_memory_attribute = "hipDeviceAttributeManagedMemory";
  static hipError_t allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
                             backend::VendorAllocation& where);
  static hipError_t release(const Context& context, const hal_buffer& buffer);
  static hipError_t copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                        std::size_t size, hipStream_t stream);
  static hipError_t copy_device_to_host(const Context& context, void* target, std::uintptr_t source, std::size_t size,
                                        hipStream_t stream);
  static hipError_t copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                          std::size_t size, hipStream_t stream);
  // value's low element_size (1, 2, 4) bytes, count times.
  static hipError_t memset(const Context& context, std::uintptr_t address, std::uint32_t value,
                           std::uint32_t element_size, std::size_t count, hipStream_t stream);
  static hipError_t synchronize_null_stream(const Context& context);
  static constexpr std::int32_t dlpack_device_type = HAL_DLPACK_ROCM;
  static constexpr const char* query_function = "hipPointerGetAttributes";
  static constexpr const char* register_function = "hipHostRegister";
  static bool can_query_pointers(const Context& context);
  static bool can_register_host(const Context& context);
  static hipError_t query_pointer(const Context& context, std::uintptr_t address, backend::PointerFacts& facts);
  static hipError_t register_host(const Context& context, void* address, std::size_t size);
  static hipError_t unregister_host(const Context& context, void* address);
  static hipError_t host_device_pointer(const Context& context, void* host, std::uintptr_t& device_address);
  static int ordinal(const Context& context, std::uint32_t device) { return context.devices[device]->ordinal; }

  // Streams and events (stream.cpp).
  static bool not_ready(hipError_t error) { return error == hipErrorNotReady; }
  static hal_status finish(const Context& context, hipError_t error, std::string_view operation);
  static hipError_t create_stream(const Context& context, hipStream_t* stream);
  static hipError_t destroy_stream(const Context& context, hipStream_t stream);
  static hipError_t synchronize_stream(const Context& context, hipStream_t stream);
  static hipError_t query_stream(const Context& context, hipStream_t stream);
  static bool stream_capturing(const Context& context, hipStream_t stream);
  static hipError_t wait_event(const Context& context, hipStream_t stream, hipEvent_t event);
  static hipError_t enqueue_host_callback(const Context& context, hipStream_t stream, backend::HostCallback* callback);
  static hipError_t create_event(const Context& context, hipEvent_t* event);
  static hipError_t destroy_event(const Context& context, hipEvent_t event);
  static hipError_t record_event(const Context& context, hipEvent_t event, hipStream_t stream);
  static hipError_t query_event(const Context& context, hipEvent_t event);
  static hipError_t synchronize_event(const Context& context, hipEvent_t event);
  static hipError_t elapsed_milliseconds(const Context& context, float* elapsed, hipEvent_t start, hipEvent_t end);
  // HIP's null stream is the legacy default stream; hal's synchronous calls run on it too.
  static hipStream_t wrapped_null_stream() { return nullptr; }

  // Devices (device.cpp, telemetry.cpp).
  static std::uint64_t free_memory(const Context& context, std::uint32_t device);
  static const char* supersedes(const Context&) { return ""; }
  static backend::TelemetryDevice telemetry_device(const Context& context, std::uint32_t device);

  // Kernels (kernels.cpp).
  static std::string kernels_missing(const Context& context, std::uint32_t device);
  static std::string kernels_unusable(const Context& context, std::uint32_t device);
  // The HIP image has no tensor-core kernels, also for RDNA's 32-wide wavefronts.
  static std::uint32_t flash_paths(const Context&, std::uint32_t) { return 0; }
  static hal_status launch(const Context& context, hal_stream& stream, const hal_kernel_launch& launch,
                           const void* arguments);

  // Attention's scratch and GEMMs (attention.cpp); no fused attention library is wired in.
  static hal_status allocate_workspace(const Context& context, hal_stream& stream, std::uint64_t bytes,
                                       std::uint64_t* address);
  static hal_status free_workspace(const Context& context, hal_stream& stream, std::uint64_t address);
  // The GEMM is a kernel of the same image: usable whenever the kernels are.
  static std::string gemm_unavailable(const Context&, std::uint32_t) { return {}; }
  static hal_status strided_batched_gemm(const Context& context, hal_stream& stream,
                                         const backend::StridedBatchedGemm& gemm);
  static backend::FusedAttention* fused_attention(const Context&) { return nullptr; }
  static std::string fused_unavailable(const Context&) {
    return "no fused attention library (MIOpen, composable_kernel) is wired into the ROCm backend";
  }
};

}  // namespace hal::rocm
