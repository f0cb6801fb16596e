// Device, pinned host and managed memory; copies and fills, synchronous
// (stream == NULL) or ordered on a stream.
#include <cstring>

#include "memory_plans.hpp"
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

const char* kind_name(hal_memory_kind kind) {
  switch (kind) {
    case HAL_MEMORY_DEVICE: return "device";
    case HAL_MEMORY_HOST_PINNED: return "pinned host";
    case HAL_MEMORY_MANAGED: return "managed";
  }
  return "unknown";
}

void* offset_address(void* base, std::uint64_t offset) { return static_cast<char*>(base) + offset; }

hipError_t run_memset(const shims::HipRuntimeApi& api, const backend::MemsetPiece& piece, hipStream_t stream) {
  const auto address = reinterpret_cast<hipDeviceptr_t>(static_cast<std::uintptr_t>(piece.address));
  const auto count = static_cast<std::size_t>(piece.count);
  const bool async = stream != nullptr;
  switch (piece.element_size) {
    case 1: {
      const auto value = static_cast<unsigned char>(piece.value);
      return async ? api.hipMemsetD8Async(address, value, count, stream) : api.hipMemsetD8(address, value, count);
    }
    case 2: {
      const auto value = static_cast<unsigned short>(piece.value);
      return async ? api.hipMemsetD16Async(address, value, count, stream) : api.hipMemsetD16(address, value, count);
    }
    default:
      return async ? api.hipMemsetD32Async(address, piece.value, count, stream)
                   : api.hipMemsetD32(address, piece.value, count);
  }
}

// One copy, synchronous or on the stream. The device of the calling thread
// is the stream's (or the buffer's): HIP orders work by it.
hal_status copy(hal_stream* stream, const Context& context, std::uint32_t buffer_device, void* destination,
                const void* source, std::uint64_t size, hipMemcpyKind kind, const std::string& what) {
  if (hal_status status = context.make_current(stream != nullptr ? stream->device : buffer_device); status != HAL_OK)
    return status;
  const auto& api = context.api();
  const auto bytes = static_cast<std::size_t>(size);
  const hipError_t error = stream != nullptr ? api.hipMemcpyAsync(destination, source, bytes, kind, stream->handle)
                                             : api.hipMemcpy(destination, source, bytes, kind);
  if (hal_status status = context.check(error, "copying " + std::to_string(size) + " bytes " + what);
      status != HAL_OK)
    return status;
  return succeed();
}

std::string device_name(std::uint32_t device) { return "rocm:" + std::to_string(device); }

}  // namespace

hal_status buffer_allocate(hal_backend_context* backend, std::uint32_t device, hal_memory_kind kind,
                           std::uint64_t size, std::uint64_t alignment, hal_buffer** out) {
  if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate needs a context and out");
  const Context& context = backend->rocm;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (size == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate size is 0; allocate at least one byte");
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "alignment " + std::to_string(alignment) + " is not a power of two");
  if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST_PINNED && kind != HAL_MEMORY_MANAGED)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory kind " + std::to_string(static_cast<int>(kind)) + " is not device, host_pinned or managed");
  if (kind == HAL_MEMORY_MANAGED && !context.devices[device]->managed_memory)
    return fail(HAL_ERROR_UNSUPPORTED, device_name(device) +
                                           " does not support managed memory (hipDeviceAttributeManagedMemory is 0); "
                                           "allocate device memory and copy instead");

  // HIP aligns device allocations to 256 bytes and host ones to a page; a
  // larger alignment is met by allocating more and rounding up.
  const auto plan =
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
  const auto bytes = static_cast<std::size_t>(plan->bytes);
  hipError_t error = hipSuccess;
  void* device_base = nullptr;
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      error = api.hipMalloc(&buffer->base, bytes);
      device_base = buffer->base;
      break;
    case HAL_MEMORY_MANAGED:
      error = api.hipMallocManaged(&buffer->base, bytes, hipMemAttachGlobal);
      device_base = buffer->base;
      break;
    case HAL_MEMORY_HOST_PINNED:
      error = api.hipHostMalloc(&buffer->base, bytes, hipHostMallocPortable | hipHostMallocMapped);
      if (error == hipSuccess) {
        error = api.hipHostGetDevicePointer(&device_base, buffer->base, 0);
        if (error != hipSuccess) (void)api.hipHostFree(buffer->base);
      }
      break;
  }
  if (error != hipSuccess)
    return context.check(error, "allocating " + std::to_string(size) + " bytes of " + kind_name(kind) +
                                    " memory on " + device_name(device));
  const std::uint64_t shift =
      backend::alignment_shift(reinterpret_cast<std::uintptr_t>(device_base), plan->alignment);
  buffer->address = offset_address(device_base, shift);
  if (kind != HAL_MEMORY_DEVICE) buffer->host_address = offset_address(buffer->base, shift);
  *out = buffer.release();
  return succeed();
}

hal_status buffer_free(hal_buffer* buffer) {
  if (buffer == nullptr) return succeed();
  std::unique_ptr<hal_buffer> owned(buffer);
  const Context& context = *buffer->context;
  if (hal_status status = context.make_current(buffer->device); status != HAL_OK) return status;
  // Both calls wait for work on the device that may still use the memory.
  const hipError_t error = buffer->kind == HAL_MEMORY_HOST_PINNED ? context.api().hipHostFree(buffer->base)
                                                                  : context.api().hipFree(buffer->base);
  if (hal_status status = context.check(error, "freeing a " + std::string(kind_name(buffer->kind)) +
                                                   " buffer of " + device_name(buffer->device));
      status != HAL_OK)
    return status;
  return succeed();
}

void* buffer_host_address(hal_buffer* buffer) { return buffer != nullptr ? buffer->host_address : nullptr; }

void* buffer_device_address(hal_buffer* buffer) { return buffer != nullptr ? buffer->address : nullptr; }

hal_status copy_host_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                               const void* source, std::uint64_t size) {
  return copy(stream, *destination->context, destination->device,
              offset_address(destination->address, destination_offset), source, size, hipMemcpyHostToDevice,
              "host to " + device_name(destination->device));
}

hal_status copy_device_to_host(hal_stream* stream, void* destination, hal_buffer* source, std::uint64_t source_offset,
                               std::uint64_t size) {
  return copy(stream, *source->context, source->device, destination, offset_address(source->address, source_offset),
              size, hipMemcpyDeviceToHost, device_name(source->device) + " to host");
}

hal_status copy_device_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                                 hal_buffer* source, std::uint64_t source_offset, std::uint64_t size) {
  // With unified addressing the runtime finds both devices from the pointers.
  return copy(stream, *destination->context, destination->device,
              offset_address(destination->address, destination_offset),
              offset_address(source->address, source_offset), size, hipMemcpyDeviceToDevice,
              device_name(source->device) + " to " + device_name(destination->device));
}

hal_status fill(hal_stream* stream, hal_buffer* destination, std::uint64_t offset, std::uint64_t size,
                const void* pattern, std::uint32_t pattern_size) {
  if (pattern == nullptr || (pattern_size != 1 && pattern_size != 2 && pattern_size != 4))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "fill pattern_size " + std::to_string(pattern_size) + " is not 1, 2 or 4");
  if (size % pattern_size != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "fill size " + std::to_string(size) + " is not a multiple of pattern_size " +
                                                std::to_string(pattern_size));
  const Context& context = *destination->context;
  if (hal_status status = context.make_current(stream != nullptr ? stream->device : destination->device);
      status != HAL_OK)
    return status;
  std::uint8_t bytes[4] = {};
  std::memcpy(bytes, pattern, pattern_size);
  const auto start = reinterpret_cast<std::uintptr_t>(offset_address(destination->address, offset));
  for (const backend::MemsetPiece& piece : backend::plan_fill(start, size, bytes, pattern_size)) {
    if (hal_status status = context.check(run_memset(context.api(), piece, stream != nullptr ? stream->handle : nullptr),
                                          "filling " + std::to_string(size) + " bytes on " +
                                              device_name(destination->device));
        status != HAL_OK)
      return status;
  }
  return succeed();
}

}  // namespace hal::rocm
