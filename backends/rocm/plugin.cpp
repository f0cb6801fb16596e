// The ROCm plugin: initialization (the HIP runtime, RCCL, the engines, the
// devices) and the table made from RocmVendor.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "attention.hpp"
#include "backend_options.hpp"
#include "gpu_plugin.hpp"
#include "vendor.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::rocm {
namespace {

constexpr const char* kfd_device_node = "/dev/kfd";

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  return backend::guarded_initialize(init, out, "rocm", [&] {
    auto backend = std::make_unique<hal_backend_context>();
    Context& context = backend->rocm;
    context.log = init->log;
    context.log_user_data = init->log_user_data;
    const auto options = backend::read_backend_options(*init, "rocm", {"runtime", "rccl", "amd_smi", "rocm_smi"},
                                                       "runtime, rccl, amd_smi and rocm_smi (paths to libamdhip64.so, "
                                                       "librccl.so, libamd_smi.so and librocm_smi64.so)");
    auto option = [&](const char* key) { return shims::ConfiguredPath(options.value(key), options.source(key)); };

    // Loading libamdhip64 costs about 100 ms, which every hal process would
    // pay on machines without an AMD GPU; the kernel driver's device node
    // tells cheaply. An explicit runtime path is always loaded.
    const bool runtime_named = !options.value("runtime").empty();
    if (!runtime_named && !std::filesystem::exists(kfd_device_node))
      return fail(HAL_ERROR_NOT_PRESENT,
                  std::string("no AMD GPU driver: ") + kfd_device_node +
                      " (the amdgpu kernel driver's compute interface) does not exist, so the HIP runtime was not "
                      "loaded; load the amdgpu driver, or set HAL_HIP_RUNTIME (or [backend.rocm] runtime) to a "
                      "libamdhip64.so to load it anyway. It would be searched in: " +
                      shims::HipRuntime::search_description());
    shims::LoadResult<shims::HipRuntime> runtime = shims::HipRuntime::load(option("runtime"));
    if (!runtime.library)
      return fail(runtime.library_missing ? HAL_ERROR_NOT_PRESENT : HAL_ERROR_UNSUPPORTED, runtime.message);
    context.runtime = std::move(runtime.library);
    context.log_message(HAL_LOG_INFO, "HIP runtime " + context.runtime->path());
    for (const auto& missing : context.runtime->missing_optional())
      context.log_message(HAL_LOG_INFO, "the HIP runtime lacks optional " + missing);
    // RCCL is optional: without it the backend has no collectives, and says why.
    shims::keep_optional(shims::Nccl::load(shims::Nccl::amd_request(option("rccl"))), context.rccl,
                         context.rccl_status);
    context.log_message(HAL_LOG_INFO, "RCCL: " + context.rccl_status);
    context.telemetry = make_telemetry(option("amd_smi"), option("rocm_smi"));
    create_attention(context);
    context.collectives = backend::make_nccl_collectives<RocmVendor>(*backend, context.rccl.get(), context.rccl_status);
    if (hal_status status = discover_devices(context); status != HAL_OK) return status;
    *out = backend.release();
    return succeed();
  });
}

}  // namespace
}  // namespace hal::rocm

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  static const hal_backend_v1 rocm_table =
      hal::backend::gpu_plugin_table<hal::rocm::RocmVendor>("rocm", HAL_VERSION_STRING, hal::rocm::initialize);
  return hal_backend_offer(&rocm_table, host_max_abi_version);
}
