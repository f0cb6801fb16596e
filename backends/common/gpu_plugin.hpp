// The lifecycle entry points of a GPU plugin that do not depend on the vendor:
// argument checks, the exception guard around initialization, device count
// and device info. Templates over where the vendor context sits in the
// plugin's hal_backend_context, instantiated where that type is complete.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "hal/backend_abi.h"
#include "last_error.hpp"

namespace hal::backend {

// Checks init and out, then runs create() (which fills *out and returns
// a status), turning a thrown exception into the ABI status that says what
// went wrong; `backend` names the plugin in those messages.
template <typename Create>
hal_status guarded_initialize(const hal_backend_init_v1* init, hal_backend_context** out, const char* backend,
                              Create&& create) {
  if (init == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "initialize needs init and out");
  if (init->struct_size < sizeof(hal_backend_init_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "init struct_size " + std::to_string(init->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    return create();
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, std::string("out of host memory while initializing the ") + backend +
                                             " backend");
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("initializing the ") + backend + " backend failed: " + error.what());
  }
}

// VendorContext: the member of hal_backend_context holding the vendor's
// context, which has `devices` and `check_device(index)`.
template <auto VendorContext>
hal_status device_count(hal_backend_context* context, std::uint32_t* count) {
  if (context == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_count needs out");
  *count = static_cast<std::uint32_t>((context->*VendorContext).devices.size());
  return succeed();
}

// FillDeviceInfo(vendor_context, index, info) fills what the vendor knows.
template <auto VendorContext, auto FillDeviceInfo>
hal_status device_info(hal_backend_context* context, std::uint32_t device, hal_device_info_v1* info) {
  if (context == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  if (hal_status status = (context->*VendorContext).check_device(device); status != HAL_OK) return status;
  if (info == nullptr || info->struct_size < HAL_DEVICE_INFO_V1_MIN_SIZE)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_info needs a v1 hal_device_info_v1 with struct_size set");
  FillDeviceInfo(context->*VendorContext, device, *info);
  return succeed();
}

// Frees the context a GPU plugin's initialize made. Backend is the plugin's
// hal_backend_context, complete where the table is made.
template <typename Backend = hal_backend_context>
void shutdown_backend(hal_backend_context* context) {
  delete static_cast<Backend*>(context);
}

// The identity and lifecycle fields of a GPU plugin's table; the plugin adds
// its entry points and sub-tables.
template <auto VendorContext, auto FillDeviceInfo>
hal_backend_v1 gpu_table(const char* name, const char* version,
                         hal_status (*initialize)(const hal_backend_init_v1*, hal_backend_context**)) {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = 1;
  table.name = name;
  table.version = version;
  table.get_last_error = read_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown_backend<>;
  table.device_count = device_count<VendorContext>;
  table.device_info = device_info<VendorContext, FillDeviceInfo>;
  return table;
}

}  // namespace hal::backend
