// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream.
#include <cstring>
#include <optional>

#include "cuda_backend.hpp"
#include "memory_plans.hpp"

namespace hal::cuda {
namespace {

const char* kind_name(hal_memory_kind kind) {
  switch (kind) {
    case HAL_MEMORY_DEVICE: return "device";
    case HAL_MEMORY_HOST_PINNED: return "pinned host";
    case HAL_MEMORY_MANAGED: return "managed";
  }
  return "unknown";
}

// One cuMemsetD8/16/32 call.
CUresult run_memset(const shims::CudaDriverApi& api, const backend::MemsetPiece& piece, CUstream stream) {
  const auto count = static_cast<std::size_t>(piece.count);
  const bool async = stream != nullptr;
  switch (piece.element_size) {
    case 1: {
      const auto value = static_cast<unsigned char>(piece.value);
      return async ? api.cuMemsetD8Async(piece.address, value, count, stream)
                   : api.cuMemsetD8(piece.address, value, count);
    }
    case 2: {
      const auto value = static_cast<unsigned short>(piece.value);
      return async ? api.cuMemsetD16Async(piece.address, value, count, stream)
                   : api.cuMemsetD16(piece.address, value, count);
    }
    default:
      return async ? api.cuMemsetD32Async(piece.address, piece.value, count, stream)
                   : api.cuMemsetD32(piece.address, piece.value, count);
  }
}

}  // namespace

hal_status buffer_allocate(hal_backend_context* backend, std::uint32_t device, hal_memory_kind kind,
                           std::uint64_t size, std::uint64_t alignment, hal_buffer** out) {
  if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate needs a context and out");
  const Context& context = backend->cuda;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (size == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate size is 0; allocate at least one byte");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "alignment " + std::to_string(alignment) + " is not a power of two");
  if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST_PINNED && kind != HAL_MEMORY_MANAGED)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory kind " + std::to_string(static_cast<int>(kind)) + " is not device, host_pinned or managed");
  const CudaDevice& info = *context.devices[device];
  if (kind == HAL_MEMORY_MANAGED && !info.managed_memory)
    return fail(HAL_ERROR_UNSUPPORTED, "" + context.device_id(device) +
                                           " does not support managed memory (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is "
                                           "0); allocate device memory and copy instead");

  // The driver aligns device allocations to 256 bytes and host ones to a
  // page; a larger alignment is met by allocating more and rounding up.
  const std::optional<backend::AlignedAllocation> plan =
      backend::plan_aligned_allocation(size, alignment, kind == HAL_MEMORY_HOST_PINNED ? 4096 : 256);
  if (!plan)
    return fail(HAL_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(size) + " bytes aligned to " +
                                             std::to_string(alignment));
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;

  const auto& api = context.api();
  auto buffer = std::make_unique<hal_buffer>();
  buffer->context = &context;
  buffer->device = device;
  buffer->kind = kind;
  buffer->size = size;
  const std::size_t bytes = static_cast<std::size_t>(plan->bytes);
  const std::string what = "allocating " + std::to_string(size) + " bytes of " + kind_name(kind) + " memory on " +
                           context.device_id(device);
  CUresult result = CUDA_SUCCESS;
  switch (kind) {
    case HAL_MEMORY_DEVICE: result = api.cuMemAlloc(&buffer->base, bytes); break;
    case HAL_MEMORY_MANAGED: result = api.cuMemAllocManaged(&buffer->base, bytes, CU_MEM_ATTACH_GLOBAL); break;
    case HAL_MEMORY_HOST_PINNED:
      result = api.cuMemHostAlloc(&buffer->host_base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      if (result == CUDA_SUCCESS) {
        result = api.cuMemHostGetDevicePointer(&buffer->base, buffer->host_base, 0);
        if (result != CUDA_SUCCESS) api.cuMemFreeHost(buffer->host_base);
      }
      break;
  }
  if (result != CUDA_SUCCESS) return context.check(result, what);
  const std::uint64_t shift = backend::alignment_shift(buffer->base, plan->alignment);
  buffer->address = buffer->base + shift;
  if (kind == HAL_MEMORY_HOST_PINNED)
    buffer->host_address = static_cast<char*>(buffer->host_base) + shift;
  else if (kind == HAL_MEMORY_MANAGED)
    buffer->host_address = reinterpret_cast<void*>(static_cast<std::uintptr_t>(buffer->address));
  *out = buffer.release();
  return succeed();
}

hal_status buffer_free(hal_buffer* buffer) {
  if (buffer == nullptr) return succeed();
  std::unique_ptr<hal_buffer> owned(buffer);
  const Context& context = *buffer->context;
  if (hal_status status = context.make_current(buffer->device); status != HAL_OK) return status;
  // Both calls wait for work on the device that may still use the memory.
  const CUresult result = buffer->kind == HAL_MEMORY_HOST_PINNED ? context.api().cuMemFreeHost(buffer->host_base)
                                                                 : context.api().cuMemFree(buffer->base);
  if (hal_status status = context.check(result, "freeing a " + std::string(kind_name(buffer->kind)) +
                                                    " buffer of " + context.device_id(buffer->device));
      status != HAL_OK)
    return status;
  return succeed();
}

void* buffer_host_address(hal_buffer* buffer) { return buffer != nullptr ? buffer->host_address : nullptr; }

void* buffer_device_address(hal_buffer* buffer) {
  return buffer != nullptr ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(buffer->address)) : nullptr;
}

hal_status copy_host_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                               const void* source, std::uint64_t size) {
  const Context& context = *destination->context;
  const std::uint32_t device = stream != nullptr ? stream->device : destination->device;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  const CUdeviceptr target = destination->address + destination_offset;
  const auto& api = context.api();
  const CUresult result = stream != nullptr ? api.cuMemcpyHtoDAsync(target, source, size, stream->handle)
                                            : api.cuMemcpyHtoD(target, source, size);
  if (hal_status status = context.check(result, "copying " + std::to_string(size) + " bytes host to " +
                                                    context.device_id(destination->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status copy_device_to_host(hal_stream* stream, void* destination, hal_buffer* source, std::uint64_t source_offset,
                               std::uint64_t size) {
  const Context& context = *source->context;
  const std::uint32_t device = stream != nullptr ? stream->device : source->device;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  const CUdeviceptr from = source->address + source_offset;
  const auto& api = context.api();
  const CUresult result = stream != nullptr ? api.cuMemcpyDtoHAsync(destination, from, size, stream->handle)
                                            : api.cuMemcpyDtoH(destination, from, size);
  if (hal_status status = context.check(result, "copying " + std::to_string(size) + " bytes " +
                                                    context.device_id(source->device) + " to host");
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status copy_device_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                                 hal_buffer* source, std::uint64_t source_offset, std::uint64_t size) {
  const Context& context = *destination->context;
  const std::uint32_t device = stream != nullptr ? stream->device : destination->device;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  const CUdeviceptr target = destination->address + destination_offset;
  const CUdeviceptr from = source->address + source_offset;
  const auto& api = context.api();
  // With unified addressing the driver finds both devices from the pointers.
  const CUresult result = stream != nullptr ? api.cuMemcpyDtoDAsync(target, from, size, stream->handle)
                                            : api.cuMemcpyDtoD(target, from, size);
  if (hal_status status = context.check(result, "copying " + std::to_string(size) + " bytes " +
                                                    context.device_id(source->device) + " to " +
                                                    context.device_id(destination->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status fill(hal_stream* stream, hal_buffer* destination, std::uint64_t offset, std::uint64_t size,
                const void* pattern, std::uint32_t pattern_size) {
  if (pattern == nullptr || (pattern_size != 1 && pattern_size != 2 && pattern_size != 4))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "fill pattern_size " + std::to_string(pattern_size) + " is not 1, 2 or 4");
  if (size % pattern_size != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "fill size " + std::to_string(size) + " is not a multiple of pattern_size " +
                                                std::to_string(pattern_size));
  const Context& context = *destination->context;
  const std::uint32_t device = stream != nullptr ? stream->device : destination->device;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  std::uint8_t bytes[4] = {};
  std::memcpy(bytes, pattern, pattern_size);
  for (const backend::MemsetPiece& piece : backend::plan_fill(destination->address + offset, size, bytes, pattern_size)) {
    if (hal_status status = context.check(run_memset(context.api(), piece, stream != nullptr ? stream->handle : nullptr),
                                          "filling " + std::to_string(size) + " bytes on " +
                                              context.device_id(destination->device));
        status != HAL_OK)
      return status;
  }
  return succeed();
}

}  // namespace hal::cuda
