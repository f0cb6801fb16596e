// What every plugin built on the CUDA core shares (cuda, ppu): opening a
// profile's libraries, making the engines and listing the devices, and the
// table made from CudaVendor. Each plugin adds only its profile, its
// initialize and hal_backend_query.
#include "attention.hpp"
#include "cudnn_attention.hpp"
#include "gpu_plugin.hpp"
#include "vendor.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::cuda {
namespace {

// Optional libraries: a missing one disables its features, with the reason kept.
void load_optional_libraries(Context& context) {
  const Profile& profile = context.profile;
  if (profile.dnn_absent.empty()) {
    shims::keep_optional(shims::Cudnn::load(profile.dnn), context.cudnn, context.cudnn_status);
  } else {
    context.cudnn_status = profile.dnn_absent;
  }
  load_runtime_compiler(context);
  if (profile.collectives_absent.empty()) {
    shims::keep_optional(shims::Nccl::load(profile.collectives), context.nccl, context.nccl_status);
  } else {
    context.nccl_status = profile.collectives_absent;
  }
  if (profile.blas_absent.empty())
    load_cublas(context);
  else
    context.cublas_status = profile.blas_absent;
  for (const auto& [name, status] : {std::pair{"cuDNN", &context.cudnn_status}, std::pair{"NVRTC", &context.nvrtc_status},
                                     std::pair{"NCCL", &context.nccl_status}, std::pair{"cuBLAS", &context.cublas_status}})
    context.log_message(HAL_LOG_INFO, std::string(name) + ": " + *status);
}

}  // namespace

void load_runtime_compiler(Context& context) {
  const Profile& profile = context.profile;
  if (!profile.runtime_compiler_absent.empty()) {
    context.nvrtc_status = profile.runtime_compiler_absent;
    return;
  }
  if (!context.cudnn) {
    context.nvrtc_status = "not looked for: cuDNN is not loaded";
    return;
  }
  const shims::CudnnApi& cudnn = context.cudnn->api();
  const int cuda_major = cudnn.cudnnGetCudartVersion != nullptr ? static_cast<int>(cudnn.cudnnGetCudartVersion() / 1000) : 0;
  shims::keep_optional(shims::Nvrtc::load(shims::Nvrtc::nvidia_request(profile.runtime_compiler, cuda_major)),
                       context.nvrtc, context.nvrtc_status);
}

hal_status open_context(hal_backend_context& backend, const hal_backend_init_v1& init) {
  Context& context = backend.cuda;
  context.log = init.log;
  context.log_user_data = init.log_user_data;
  shims::LoadResult<shims::CudaDriver> driver = shims::CudaDriver::load(context.profile.driver);
  if (!driver.library) return fail(driver.library_missing ? HAL_ERROR_NOT_PRESENT : HAL_ERROR_UNSUPPORTED, driver.message);
  context.driver = std::move(driver.library);
  context.log_message(HAL_LOG_INFO, "CUDA driver " + context.driver->path() + " (symbols through " +
                                        context.driver->resolution_method() + ")");
  for (const auto& missing : context.driver->missing_optional())
    context.log_message(HAL_LOG_INFO, "the CUDA driver lacks optional " + missing);
  load_optional_libraries(context);
  context.fused_attention = make_cudnn_attention(context);
  create_attention(context);  // before discovery: it declares the devices' attention capabilities
  context.collectives = backend::make_nccl_collectives<CudaVendor>(backend, context.nccl.get(), context.nccl_status);
  context.telemetry = make_telemetry(context.profile);
  return discover_devices(context);
}

hal_status open_backend(Profile profile, const hal_backend_init_v1& init, hal_backend_context** out) {
  auto backend = std::make_unique<hal_backend_context>();
  backend->cuda.profile = std::move(profile);
  if (hal_status status = open_context(*backend, init); status != HAL_OK) return status;
  *out = backend.release();
  return succeed();
}

hal_backend_v1 make_table(const char* name, backend::InitializeFunction initialize) {
  return backend::gpu_plugin_table<CudaVendor>(name, HAL_VERSION_STRING, initialize);
}

}  // namespace hal::cuda
