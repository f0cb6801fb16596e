// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream: CudaVendor's memory calls, under
// backends/gpu/gpu_memory.hpp; and the scratch pool attention uses.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vendor.hpp"

namespace hal::cuda {

CUresult CudaVendor::allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
                              backend::VendorAllocation& where) {
  const auto& api = context.api();
  CUresult result = CUDA_SUCCESS;
  switch (kind) {
    case HAL_MEMORY_DEVICE: result = api.cuMemAlloc(&buffer.base, bytes); break;
    case HAL_MEMORY_MANAGED:
      result = api.cuMemAllocManaged(&buffer.base, bytes, CU_MEM_ATTACH_GLOBAL);
      where.host_base = reinterpret_cast<void*>(static_cast<std::uintptr_t>(buffer.base));
      break;
    case HAL_MEMORY_HOST_PINNED:
      result = api.cuMemHostAlloc(&buffer.host_base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      if (result == CUDA_SUCCESS) {
        result = api.cuMemHostGetDevicePointer(&buffer.base, buffer.host_base, 0);
        if (result != CUDA_SUCCESS) api.cuMemFreeHost(buffer.host_base);
      }
      where.host_base = buffer.host_base;
      break;
  }
  where.device_base = static_cast<std::uintptr_t>(buffer.base);
  return result;
}

CUresult CudaVendor::release(const Context& context, const hal_buffer& buffer) {
  return buffer.kind == HAL_MEMORY_HOST_PINNED ? context.api().cuMemFreeHost(buffer.host_base)
                                               : context.api().cuMemFree(buffer.base);
}

CUresult CudaVendor::copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                         std::size_t size, CUstream stream) {
  const auto& api = context.api();
  return backend::OrderedCall{api.cuMemcpyHtoDAsync, api.cuMemcpyHtoD}(stream, target, source, size);
}

CUresult CudaVendor::copy_device_to_host(const Context& context, void* target, std::uintptr_t source, std::size_t size,
                                         CUstream stream) {
  const auto& api = context.api();
  return backend::OrderedCall{api.cuMemcpyDtoHAsync, api.cuMemcpyDtoH}(stream, target, source, size);
}

CUresult CudaVendor::copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                           std::size_t size, CUstream stream) {
  const auto& api = context.api();
  return backend::OrderedCall{api.cuMemcpyDtoDAsync, api.cuMemcpyDtoD}(stream, target, source, size);
}

CUresult CudaVendor::memset(const Context& context, std::uintptr_t address, std::uint32_t value,
                            std::uint32_t element_size, std::size_t count, CUstream stream) {
  const auto& api = context.api();
  return backend::memset_elements(stream, address, value, element_size, count,
                                  backend::OrderedCall{api.cuMemsetD8Async, api.cuMemsetD8},
                                  backend::OrderedCall{api.cuMemsetD16Async, api.cuMemsetD16},
                                  backend::OrderedCall{api.cuMemsetD32Async, api.cuMemsetD32});
}

CUresult CudaVendor::synchronize_null_stream(const Context& context) {
  return context.api().cuStreamSynchronize(CU_STREAM_LEGACY);
}

bool CudaVendor::can_query_pointers(const Context& context) { return context.api().cuPointerGetAttributes != nullptr; }

bool CudaVendor::can_register_host(const Context& context) {
  return context.api().cuMemHostRegister != nullptr && context.api().cuMemHostUnregister != nullptr;
}

CUresult CudaVendor::query_pointer(const Context& context, std::uintptr_t address, backend::PointerFacts& facts) {
  unsigned int memory_type = 0;
  int ordinal = -1;
  std::uint64_t managed = 0;  // a bool the driver writes into the first byte
  CUdeviceptr start = 0;
  std::size_t size = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&memory_type, &ordinal, &managed, &start, &size};
  // Memory the driver does not know is not an error here: every attribute reads as zero.
  const CUresult result = context.api().cuPointerGetAttributes(5, attributes, data, address);
  if (result != CUDA_SUCCESS) return result;
  using Memory = backend::PointerFacts::Memory;
  facts.memory = (managed & 0xff) != 0                 ? Memory::managed
                 : memory_type == CU_MEMORYTYPE_DEVICE ? Memory::device
                 : memory_type == CU_MEMORYTYPE_HOST   ? Memory::host
                                                       : Memory::unknown;
  facts.ordinal = ordinal;
  facts.range_start = static_cast<std::uintptr_t>(start);
  facts.range_size = size;
  return CUDA_SUCCESS;
}

CUresult CudaVendor::register_host(const Context& context, void* address, std::size_t size) {
  return context.api().cuMemHostRegister(address, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
}

CUresult CudaVendor::unregister_host(const Context& context, void* address) {
  return context.api().cuMemHostUnregister(address);
}

CUresult CudaVendor::host_device_pointer(const Context& context, void* host, std::uintptr_t& device_address) {
  CUdeviceptr address = 0;
  const CUresult result = context.api().cuMemHostGetDevicePointer(&address, host, 0);
  device_address = static_cast<std::uintptr_t>(address);
  return result;
}

int CudaVendor::ordinal(const Context& context, std::uint32_t device) { return context.devices[device]->handle; }

namespace {

// The device's scratch pool, made on first use, with its release threshold
// raised to `bytes` when that is the largest scratch asked of it yet.
hal_status scratch_pool(const Context& context, std::uint32_t index, std::size_t bytes, CUmemoryPool* pool) {
  const auto& api = context.api();
  CudaDevice& device = *context.devices[index];
  std::lock_guard lock(device.scratch_pool_mutex);
  if (device.scratch_pool == nullptr) {
    CUmemPoolProps properties{};
    properties.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    properties.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    properties.location.id = device.handle;
    if (hal_status status =
            context.check(api.cuMemPoolCreate(&device.scratch_pool, &properties),
                          "creating the scratch memory pool of " + context.device_id(index) + " (cuMemPoolCreate)");
        status != HAL_OK)
      return status;
  }
  if (bytes > device.scratch_pool_threshold) {
    cuuint64_t threshold = bytes;
    if (hal_status status =
            context.check(api.cuMemPoolSetAttribute(device.scratch_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
                          "raising the release threshold of the scratch pool of " + context.device_id(index) + " to " +
                              std::to_string(bytes) + " bytes");
        status != HAL_OK)
      return status;
    device.scratch_pool_threshold = bytes;
  }
  *pool = device.scratch_pool;
  return HAL_OK;
}

}  // namespace

hal_status allocate_scratch(const Context& context, std::uint32_t device, CUstream stream, std::size_t bytes,
                            CUdeviceptr* address, std::string_view what) {
  const auto& api = context.api();
  const std::string allocating = "allocating " + std::to_string(bytes) + " bytes of " + std::string(what);
  if (!context.devices[device]->memory_pools) {
    // cuMemAlloc is not stream-ordered: a capture refuses it and is broken by it, and the free after the
    // work would wait for a stream whose work runs only when the graph is launched.
    if (CudaVendor::stream_capturing(context, stream))
      return fail(HAL_ERROR_UNSUPPORTED, allocating +
                                             " on a stream that is capturing a graph: " + context.device_id(device) +
                                             " has no stream-ordered memory pools, so the graph cannot allocate it; "
                                             "pass a workspace of your own (attention_workspace_size says how much)");
    return context.check(api.cuMemAlloc(address, bytes), allocating + " (cuMemAlloc)");
  }
  CUmemoryPool pool = nullptr;
  if (hal_status status = scratch_pool(context, device, bytes, &pool); status != HAL_OK) return status;
  return context.check(api.cuMemAllocFromPoolAsync(address, bytes, pool, stream),
                       allocating + " (cuMemAllocFromPoolAsync)");
}

void destroy_scratch_pool(const Context& context, CudaDevice& device) {
  std::lock_guard lock(device.scratch_pool_mutex);
  // Blocks still in use go back to the driver when they are freed.
  if (device.scratch_pool != nullptr) context.api().cuMemPoolDestroy(std::exchange(device.scratch_pool, nullptr));
  device.scratch_pool_threshold = 0;
}

hal_status release_scratch(const Context& context, std::uint32_t device, CUstream stream, CUdeviceptr address,
                           std::string_view what) {
  const auto& api = context.api();
  const std::string freeing = "freeing " + std::string(what);
  if (context.devices[device]->memory_pools)
    return context.check(api.cuMemFreeAsync(address, stream), freeing + " (cuMemFreeAsync)");
  // Without stream-ordered frees the work must finish before its scratch goes.
  const hal_status synchronized =
      context.check(api.cuStreamSynchronize(stream), "waiting for the stream before " + freeing);
  const hal_status freed = context.check(api.cuMemFree(address), freeing + " (cuMemFree)");
  return synchronized != HAL_OK ? synchronized : freed;
}

}  // namespace hal::cuda
