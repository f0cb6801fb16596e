// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream: RocmVendor's memory calls, under
// backends/gpu/gpu_memory.hpp.
#include "vendor.hpp"

#include <cstddef>
#include <cstdint>

namespace hal::rocm {
namespace {

void* pointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

hipError_t copy(const Context& context, void* target, const void* source, std::size_t size, hipMemcpyKind kind,
                hipStream_t stream) {
  const auto& api = context.api();
  return backend::OrderedCall{api.hipMemcpyAsync, api.hipMemcpy}(stream, target, source, size, kind);
}

}  // namespace

// Imported memory.
bool RocmVendor::can_query_pointers(const Context& context) { return context.api().hipPointerGetAttributes != nullptr; }
bool RocmVendor::can_register_host(const Context& context) {
  return context.api().hipHostRegister != nullptr && context.api().hipHostUnregister != nullptr;
}

hipError_t RocmVendor::query_pointer(const Context& context, std::uintptr_t address, backend::PointerFacts& facts) {
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

hipError_t RocmVendor::register_host(const Context& context, void* address, std::size_t size) {
  return context.api().hipHostRegister(address, size, hipHostRegisterPortable | hipHostRegisterMapped);
}

hipError_t RocmVendor::unregister_host(const Context& context, void* address) {
  return context.api().hipHostUnregister(address);
}

hipError_t RocmVendor::host_device_pointer(const Context& context, void* host, std::uintptr_t& device_address) {
  void* address = nullptr;
  const hipError_t error = context.api().hipHostGetDevicePointer(&address, host, 0);
  device_address = reinterpret_cast<std::uintptr_t>(address);
  return error;
}

// The null stream: the device's default stream, which the synchronous calls use.
hipError_t RocmVendor::synchronize_null_stream(const Context& context) {
  return context.api().hipStreamSynchronize(nullptr);
}

hipError_t RocmVendor::allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
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

hipError_t RocmVendor::release(const Context& context, const hal_buffer& buffer) {
  return buffer.kind == HAL_MEMORY_HOST_PINNED ? context.api().hipHostFree(buffer.base)
                                               : context.api().hipFree(buffer.base);
}

hipError_t RocmVendor::copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                           std::size_t size, hipStream_t stream) {
  return copy(context, pointer(target), source, size, hipMemcpyHostToDevice, stream);
}

hipError_t RocmVendor::copy_device_to_host(const Context& context, void* target, std::uintptr_t source,
                                           std::size_t size, hipStream_t stream) {
  return copy(context, target, pointer(source), size, hipMemcpyDeviceToHost, stream);
}

hipError_t RocmVendor::copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                             std::size_t size, hipStream_t stream) {
  return copy(context, pointer(target), pointer(source), size, hipMemcpyDeviceToDevice, stream);
}

hipError_t RocmVendor::memset(const Context& context, std::uintptr_t address, std::uint32_t value,
                              std::uint32_t element_size, std::size_t count, hipStream_t stream) {
  const auto& api = context.api();
  return backend::memset_elements(stream, reinterpret_cast<hipDeviceptr_t>(address), value, element_size, count,
                                  backend::OrderedCall{api.hipMemsetD8Async, api.hipMemsetD8},
                                  backend::OrderedCall{api.hipMemsetD16Async, api.hipMemsetD16},
                                  backend::OrderedCall{api.hipMemsetD32Async, api.hipMemsetD32});
}

}  // namespace hal::rocm
