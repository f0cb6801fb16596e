// Interop on the host: memory other code allocated becomes a buffer without a
// copy. Host streams are hal's own worker threads, so there is no native
// stream to wrap or hand out.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include "host_backend.hpp"

namespace hal::host {
namespace {

hal_status native_device(hal_backend_context* context, std::uint32_t device, hal_native_device_v1* out) {
  if (context == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "native_device needs out");
  if (device >= context->host.devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range");
  out->dlpack_device_type = HAL_DLPACK_CPU;
  out->ordinal = 0;  // DLPack and frameworks name the whole CPU device 0
  return succeed();
}

hal_status buffer_import(hal_backend_context* context, std::uint32_t device, const hal_external_memory_v1* memory,
                         hal_buffer** out) {
  if (context == nullptr || memory == nullptr || out == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_import needs a context, the memory and out");
  if (device >= context->host.devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range");
  if (memory->address == nullptr && memory->size != 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "imported memory of " + std::to_string(memory->size) + " bytes has a NULL address");
  auto allocation = std::make_shared<Allocation>();
  allocation->data = memory->address;
  allocation->size = memory->size;
  allocation->kind = memory->kind;
  allocation->owned = false;
  if ((memory->flags & HAL_EXTERNAL_MEMORY_REGISTER_HOST) != 0 && memory->size != 0) {
    if (mlock(memory->address, memory->size) != 0) {
      const int error = errno;
      return fail(HAL_ERROR_OUT_OF_MEMORY,
                  "cannot page-lock " + std::to_string(memory->size) + " imported bytes: " + std::strerror(error) +
                      "; raise the locked-memory limit (ulimit -l) or import without registration",
                  error);
    }
    allocation->locked = true;
  }
  // Set last: a failed import never calls the owner's release.
  allocation->release = memory->release;
  allocation->release_user_data = memory->release_user_data;
  *out = new hal_buffer{std::move(allocation), device};
  return succeed();
}

}  // namespace

const hal_interop_v1 interop_table = {
    sizeof(hal_interop_v1), native_device, buffer_import,
    nullptr,  // stream_wrap: no native streams
    nullptr,  // stream_native_handle
    nullptr,  // event_native_handle
};

}  // namespace hal::host
