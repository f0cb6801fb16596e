// The CUDA backend's plugin table: initialization and the C entry points.
#include <map>

#include "backend_options.hpp"
#include "attention.hpp"
#include "gpu_plugin.hpp"
#include "cuda_backend.hpp"
#include "cudnn_attention.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::cuda {
namespace {

void get_last_error(hal_error_info_v1* out) { read_last_error(out); }

// Optional libraries: a missing one disables its features, with the reason kept.
void load_optional_libraries(Context& context, const std::map<std::string, std::string>& options) {
  auto option = [&](const char* key) {
    const auto found = options.find(key);
    return found != options.end() ? found->second : std::string();
  };
  shims::Cudnn::LoadResult cudnn = shims::Cudnn::load(option("cudnn"));
  context.cudnn = std::move(cudnn.library);
  context.cudnn_status = context.cudnn ? "loaded " + context.cudnn->path() : cudnn.message;
  shims::Nccl::LoadResult nccl = shims::Nccl::load(shims::Nccl::nvidia_request(option("nccl")));
  context.nccl = std::move(nccl.library);
  context.nccl_status = context.nccl ? "loaded " + context.nccl->path() : nccl.message;
  for (const auto& [name, status] : {std::pair{"cuDNN", &context.cudnn_status}, std::pair{"NCCL", &context.nccl_status}})
    context.log_message(HAL_LOG_INFO, std::string(name) + ": " + *status);
}

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  return backend::guarded_initialize(init, out, "cuda", [&] {
    auto backend = std::make_unique<hal_backend_context>();
    Context& context = backend->cuda;
    context.log = init->log;
    context.log_user_data = init->log_user_data;
    // Each option is a path to one vendor library.
    auto options = backend::read_backend_options(*init, "cuda", {"driver", "cudnn", "nccl", "cublas"},
                                                 "driver, cudnn, nccl and cublas (paths to those libraries)");

    shims::CudaDriver::LoadResult driver = shims::CudaDriver::load(options["driver"]);
    if (!driver.driver) return fail(driver.library_missing ? HAL_ERROR_NOT_PRESENT : HAL_ERROR_UNSUPPORTED, driver.message);
    context.driver = std::move(driver.driver);
    context.log_message(HAL_LOG_INFO, "CUDA driver " + context.driver->path() + " (symbols through " +
                                          context.driver->resolution_method() + ")");
    for (const auto& missing : context.driver->missing_optional())
      context.log_message(HAL_LOG_INFO, "the CUDA driver lacks optional " + missing);
    load_optional_libraries(context, options);
    load_cublas(context, options["cublas"]);
    context.log_message(HAL_LOG_INFO, "cuBLAS: " + context.cublas_status);
    context.fused_attention = make_cudnn_attention(context);
    create_attention(context);
    create_collectives(*backend);
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
  table.name = "cuda";
  table.version = HAL_VERSION_STRING;
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = backend::device_count<&hal_backend_context::cuda>;
  table.device_info = backend::device_info<&hal_backend_context::cuda, fill_device_info>;
  fill_gpu_entry_points(table);
  table.attention = &attention_table;
  table.collectives = &collectives_table.v1;
  return table;
}

constexpr hal_backend_v1 cuda_table = make_table();

}  // namespace
}  // namespace hal::cuda

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  return host_max_abi_version >= 1 ? &hal::cuda::cuda_table : nullptr;
}
