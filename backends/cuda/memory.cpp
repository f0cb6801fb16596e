// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream: the driver calls under
// backends/common/gpu_memory.hpp.
#include "cuda_backend.hpp"
#include "gpu_memory.hpp"

namespace hal::cuda {
namespace {

struct MemoryOps {
  using Context = cuda::Context;
  using Result = CUresult;
  static constexpr Result success = CUDA_SUCCESS;
  static constexpr auto context_member = &hal_backend_context::cuda;
  static constexpr const char* managed_memory_attribute = "CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY";

  static CUresult allocate(const Context& context, hal_buffer& buffer, hal_memory_kind kind, std::size_t bytes,
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
  static CUresult release(const Context& context, const hal_buffer& buffer) {
    return buffer.kind == HAL_MEMORY_HOST_PINNED ? context.api().cuMemFreeHost(buffer.host_base)
                                                 : context.api().cuMemFree(buffer.base);
  }

  static CUresult copy_host_to_device(const Context& context, std::uintptr_t target, const void* source,
                                      std::size_t size, CUstream stream) {
    return stream != nullptr ? context.api().cuMemcpyHtoDAsync(target, source, size, stream)
                             : context.api().cuMemcpyHtoD(target, source, size);
  }
  static CUresult copy_device_to_host(const Context& context, void* target, std::uintptr_t source, std::size_t size,
                                      CUstream stream) {
    return stream != nullptr ? context.api().cuMemcpyDtoHAsync(target, source, size, stream)
                             : context.api().cuMemcpyDtoH(target, source, size);
  }
  static CUresult copy_device_to_device(const Context& context, std::uintptr_t target, std::uintptr_t source,
                                        std::size_t size, CUstream stream) {
    return stream != nullptr ? context.api().cuMemcpyDtoDAsync(target, source, size, stream)
                             : context.api().cuMemcpyDtoD(target, source, size);
  }

  // cuMemsetD8/16/32, by the value's width.
  static CUresult memset(const Context& context, std::uintptr_t address, std::uint8_t value, std::size_t count,
                         CUstream stream) {
    return stream != nullptr ? context.api().cuMemsetD8Async(address, value, count, stream)
                             : context.api().cuMemsetD8(address, value, count);
  }
  static CUresult memset(const Context& context, std::uintptr_t address, std::uint16_t value, std::size_t count,
                         CUstream stream) {
    return stream != nullptr ? context.api().cuMemsetD16Async(address, value, count, stream)
                             : context.api().cuMemsetD16(address, value, count);
  }
  static CUresult memset(const Context& context, std::uintptr_t address, std::uint32_t value, std::size_t count,
                         CUstream stream) {
    return stream != nullptr ? context.api().cuMemsetD32Async(address, value, count, stream)
                             : context.api().cuMemsetD32(address, value, count);
  }
};

}  // namespace

void fill_memory_entry_points(hal_backend_v1& table) { backend::GpuMemory<MemoryOps>::fill_table(table); }

}  // namespace hal::cuda
