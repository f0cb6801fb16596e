// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream: the HIP calls under
// backends/common/gpu_memory.hpp.
#include "gpu_memory.hpp"
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

void* pointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct MemoryOps {
  using Context = rocm::Context;
  using Result = hipError_t;
  static constexpr Result success = hipSuccess;
  static constexpr auto context_member = &hal_backend_context::rocm;
  static constexpr const char* managed_memory_attribute = "hipDeviceAttributeManagedMemory";

  // Imported memory.
  static constexpr std::int32_t dlpack_device_type = HAL_DLPACK_ROCM;
  static constexpr const char* query_function = "hipPointerGetAttributes";
  static constexpr const char* register_function = "hipHostRegister";
  static bool can_query_pointers(const Context& context) { return context.api().hipPointerGetAttributes != nullptr; }
  static bool can_register_host(const Context& context) {
    return context.api().hipHostRegister != nullptr && context.api().hipHostUnregister != nullptr;
  }
  static hipError_t query_pointer(const Context& context, std::uintptr_t address, backend::PointerFacts& facts) {
    hipPointerAttribute_t attributes{};
    const hipError_t error = context.api().hipPointerGetAttributes(&attributes, reinterpret_cast<void*>(address));
    using Memory = backend::PointerFacts::Memory;
    // ROCm 5 answers memory it does not know with an error; ROCm 6 with "unregistered".
    if (error == hipErrorInvalidValue) {
      facts.memory = Memory::unknown;
      return hipSuccess;
    }
    if (error != hipSuccess) return error;
    // ROCm 6 renumbered hipMemoryType (0 unregistered, 1 host, 2 device, 3 managed);
    // ROCm 5 had 0 host, 1 device and flagged managed memory separately.
    const bool rocm6 = context.runtime_version >= 60000000;
    const int type = static_cast<int>(attributes.memoryType);
    const int host = rocm6 ? 1 : 0, device = rocm6 ? 2 : 1, managed = rocm6 ? 3 : -1;
    facts.memory = attributes.isManaged != 0 || type == managed ? Memory::managed
                   : type == device                             ? Memory::device
                   : type == host                               ? Memory::host
                                                                : Memory::unknown;
    facts.ordinal = attributes.device;
    hipDeviceptr_t start = nullptr;
    std::size_t size = 0;
    if (facts.memory == Memory::device && context.api().hipMemGetAddressRange != nullptr &&
        context.api().hipMemGetAddressRange(&start, &size, reinterpret_cast<hipDeviceptr_t>(address)) == hipSuccess) {
      facts.range_start = reinterpret_cast<std::uintptr_t>(start);
      facts.range_size = size;
    }
    return hipSuccess;
  }
  static hipError_t register_host(const Context& context, void* address, std::size_t size) {
    return context.api().hipHostRegister(address, size, hipHostRegisterPortable | hipHostRegisterMapped);
  }
  static hipError_t unregister_host(const Context& context, void* address) {
    return context.api().hipHostUnregister(address);
  }
  static hipError_t host_device_pointer(const Context& context, void* host, std::uintptr_t& device_address) {
    void* address = nullptr;
    const hipError_t error = context.api().hipHostGetDevicePointer(&address, host, 0);
    device_address = reinterpret_cast<std::uintptr_t>(address);
    return error;
  }
  static hipError_t synchronize_device(const Context& context) {
    return context.api().hipDeviceSynchronize != nullptr ? context.api().hipDeviceSynchronize()
                                                         : hipErrorNotSupported;
  }
  // The null stream: the device's default stream, which the synchronous calls use.
  static hipError_t synchronize_null_stream(const Context& context) { return context.api().hipStreamSynchronize(nullptr); }
  static int ordinal(const Context& context, std::uint32_t device) { return context.devices[device]->ordinal; }

  static hipError_t allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
                             backend::VendorAllocation& where) {
    const auto& api = context.api();
    hipError_t error = hipSuccess;
    void* device_base = nullptr;
    switch (kind) {
      case HAL_MEMORY_DEVICE:
        error = api.hipMalloc(&buffer.base, bytes);
        device_base = buffer.base;
        break;
      case HAL_MEMORY_MANAGED:
        error = api.hipMallocManaged(&buffer.base, bytes, hipMemAttachGlobal);
        device_base = buffer.base;
        where.host_base = buffer.base;
        break;
      case HAL_MEMORY_HOST_PINNED:
        // Mapped: the device reaches it at its own address, which may differ.
        error = api.hipHostMalloc(&buffer.base, bytes, hipHostMallocPortable | hipHostMallocMapped);
        if (error == hipSuccess) {
          error = api.hipHostGetDevicePointer(&device_base, buffer.base, 0);
          if (error != hipSuccess) (void)api.hipHostFree(buffer.base);
        }
        where.host_base = buffer.base;
        break;
    }
    where.device_base = reinterpret_cast<std::uintptr_t>(device_base);
    return error;
  }
  static hipError_t release(const Context& context, const hal_buffer& buffer) {
    return buffer.kind == HAL_MEMORY_HOST_PINNED ? context.api().hipHostFree(buffer.base)
                                                 : context.api().hipFree(buffer.base);
  }

  static hipError_t copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                        std::size_t size, hipStream_t stream) {
    return copy(context, pointer(target), source, size, hipMemcpyHostToDevice, stream);
  }
  static hipError_t copy_device_to_host(const Context& context, void* target, std::uintptr_t source, std::size_t size,
                                        hipStream_t stream) {
    return copy(context, target, pointer(source), size, hipMemcpyDeviceToHost, stream);
  }
  static hipError_t copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                          std::size_t size, hipStream_t stream) {
    return copy(context, pointer(target), pointer(source), size, hipMemcpyDeviceToDevice, stream);
  }
  static hipError_t copy(const Context& context, void* target, const void* source, std::size_t size,
                         hipMemcpyKind kind, hipStream_t stream) {
    return stream != nullptr ? context.api().hipMemcpyAsync(target, source, size, kind, stream)
                             : context.api().hipMemcpy(target, source, size, kind);
  }

  // hipMemsetD8/16/32, by the value's width.
  static hipError_t memset(const Context& context, std::uintptr_t address, std::uint8_t value, std::size_t count,
                           hipStream_t stream) {
    const auto target = reinterpret_cast<hipDeviceptr_t>(address);
    return stream != nullptr ? context.api().hipMemsetD8Async(target, value, count, stream)
                             : context.api().hipMemsetD8(target, value, count);
  }
  static hipError_t memset(const Context& context, std::uintptr_t address, std::uint16_t value, std::size_t count,
                           hipStream_t stream) {
    const auto target = reinterpret_cast<hipDeviceptr_t>(address);
    return stream != nullptr ? context.api().hipMemsetD16Async(target, value, count, stream)
                             : context.api().hipMemsetD16(target, value, count);
  }
  static hipError_t memset(const Context& context, std::uintptr_t address, std::uint32_t value, std::size_t count,
                           hipStream_t stream) {
    const auto target = reinterpret_cast<hipDeviceptr_t>(address);
    return stream != nullptr ? context.api().hipMemsetD32Async(target, value, count, stream)
                             : context.api().hipMemsetD32(target, value, count);
  }
};

}  // namespace

void fill_memory_entry_points(hal_backend_v1& table) { backend::GpuMemory<MemoryOps>::fill_table(table); }
void fill_memory_interop(hal_interop_v1& table) {
  table.native_device = backend::GpuMemory<MemoryOps>::native_device;
  table.buffer_import = backend::GpuMemory<MemoryOps>::buffer_import;
}

}  // namespace hal::rocm
