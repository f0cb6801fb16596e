// The ROCm backend's plugin table: initialization and the C entry points.
#include <new>

#include "backend_options.hpp"
#include "rocm_backend.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::rocm {
namespace {

void get_last_error(hal_error_info_v1* out) { backend::read_last_error(out); }

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  if (init == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "initialize needs init and out");
  if (init->struct_size < sizeof(hal_backend_init_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "init struct_size " + std::to_string(init->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    auto backend = std::make_unique<hal_backend_context>();
    Context& context = backend->rocm;
    context.log = init->log;
    context.log_user_data = init->log_user_data;
    auto options = backend::read_backend_options(*init, "rocm", {"runtime"}, "runtime (a path to libamdhip64.so)");

    shims::HipRuntime::LoadResult runtime = shims::HipRuntime::load(options["runtime"]);
    if (!runtime.runtime)
      return fail(runtime.library_missing ? HAL_ERROR_NOT_PRESENT : HAL_ERROR_UNSUPPORTED, runtime.message);
    context.runtime = std::move(runtime.runtime);
    context.log_message(HAL_LOG_INFO, "HIP runtime " + context.runtime->path());
    for (const auto& missing : context.runtime->missing_optional())
      context.log_message(HAL_LOG_INFO, "the HIP runtime lacks optional " + missing);
    if (hal_status status = discover_devices(context); status != HAL_OK) return status;
    *out = backend.release();
    return succeed();
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, "out of host memory while initializing the rocm backend");
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("initializing the rocm backend failed: ") + error.what());
  }
}

void shutdown(hal_backend_context* context) { delete context; }

hal_status device_count(hal_backend_context* context, std::uint32_t* count) {
  if (context == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_count needs out");
  *count = static_cast<std::uint32_t>(context->rocm.devices.size());
  return succeed();
}

hal_status device_info(hal_backend_context* context, std::uint32_t device, hal_device_info_v1* info) {
  if (context == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  if (hal_status status = context->rocm.check_device(device); status != HAL_OK) return status;
  if (info == nullptr || info->struct_size < sizeof(hal_device_info_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_info needs a v1 hal_device_info_v1 with struct_size set");
  fill_device_info(context->rocm, device, *info);
  return succeed();
}

constexpr hal_backend_v1 make_table() {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = 1;
  table.name = "rocm";
  table.version = HAL_VERSION_STRING;
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = device_count;
  table.device_info = device_info;
  table.buffer_allocate = buffer_allocate;
  table.buffer_free = buffer_free;
  table.buffer_host_address = buffer_host_address;
  table.buffer_device_address = buffer_device_address;
  table.copy_host_to_device = copy_host_to_device;
  table.copy_device_to_host = copy_device_to_host;
  table.copy_device_to_device = copy_device_to_device;
  table.fill = fill;
  table.stream_create = stream_create;
  table.stream_destroy = stream_destroy;
  table.stream_synchronize = stream_synchronize;
  table.stream_query = stream_query;
  table.stream_wait_event = stream_wait_event;
  table.stream_host_callback = stream_host_callback;
  table.event_create = event_create;
  table.event_destroy = event_destroy;
  table.event_record = event_record;
  table.event_query = event_query;
  table.event_synchronize = event_synchronize;
  table.event_elapsed_milliseconds = event_elapsed_milliseconds;
  table.attention = nullptr;
  table.collectives = nullptr;
  return table;
}

constexpr hal_backend_v1 rocm_table = make_table();

}  // namespace
}  // namespace hal::rocm

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  return host_max_abi_version >= 1 ? &hal::rocm::rocm_table : nullptr;
}
