// The ROCm backend's plugin table: initialization and the C entry points.
#include "backend_options.hpp"
#include "gpu_plugin.hpp"
#include "rocm_backend.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::rocm {
namespace {

void get_last_error(hal_error_info_v1* out) { backend::read_last_error(out); }

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  return backend::guarded_initialize(init, out, "rocm", [&] {
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
  });
}

void shutdown(hal_backend_context* context) { delete context; }

constexpr hal_backend_v1 make_table() {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = 1;
  table.name = "rocm";
  table.version = HAL_VERSION_STRING;
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = backend::device_count<&hal_backend_context::rocm>;
  table.device_info = backend::device_info<&hal_backend_context::rocm, fill_device_info>;
  fill_gpu_entry_points(table);
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
