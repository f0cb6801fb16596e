// The device code embedded in the plugin (backends/kernels, built with
// hipcc), loaded per device with the module API. A device without a
// matching code object gets no kernels, and the reason is kept for every
// capability that needs them.
#include <cstddef>
#include <sstream>

#include "rocm_backend.hpp"

#ifndef HAL_ROCM_CODE_OBJECT_ARCHITECTURES
#define HAL_ROCM_CODE_OBJECT_ARCHITECTURES ""
#endif

#if HAL_ROCM_HAS_CODE_OBJECT
extern const unsigned char hal_rocm_code_object[];
extern const std::size_t hal_rocm_code_object_size;
#endif

namespace hal::rocm {
namespace {

// The kernels every user of the module needs; all must resolve.
constexpr const char* kernel_names[] = {"hal_gemm_f32",
                                        "hal_gemm_f32_strided_batched",
                                        "hal_math_attention_pack_inputs",
                                        "hal_math_attention_softmax_forward",
                                        "hal_math_attention_softmax_backward",
                                        "hal_math_attention_store_outputs"};

bool carries_architecture(const std::string& architecture) {
  std::istringstream list(HAL_ROCM_CODE_OBJECT_ARCHITECTURES);
  std::string built;
  while (std::getline(list, built, ','))
    if (built == architecture) return true;
  return false;
}

}  // namespace

std::string embedded_architectures() { return HAL_ROCM_CODE_OBJECT_ARCHITECTURES; }

void load_kernels(const Context& context, RocmDevice& device) {
  const std::string which = "rocm:" + std::to_string(device.ordinal) + " (" + device.gcn_arch_name + ")";
#if !HAL_ROCM_HAS_CODE_OBJECT
  device.kernel_status = "this plugin was built without hipcc and carries no device code; install hipcc and rebuild";
  return;
#else
  const std::string built_for = "the plugin carries code objects for " + embedded_architectures();
  if (!context.runtime->has_module_api()) {
    device.kernel_status = "the HIP runtime at " + context.runtime->path() +
                           " lacks the module API (hipModuleLoadData, hipModuleGetFunction, hipModuleLaunchKernel)";
    return;
  }
  const std::string architecture = base_architecture(device.gcn_arch_name);
  if (!carries_architecture(architecture)) {
    device.kernel_status = "no code object for " + which + "; " + built_for +
                           " (rebuild with HAL_ROCM_ARCHITECTURES including " + architecture +
                           " and a hipcc that knows it)";
    return;
  }
  const auto& api = context.api();
  if (api.hipSetDevice(device.ordinal) != hipSuccess) {
    device.kernel_status = "cannot make " + which + " current to load its kernels";
    return;
  }
  hipModule_t module = nullptr;
  if (const hipError_t error = api.hipModuleLoadData(&module, hal_rocm_code_object); error != hipSuccess) {
    device.kernel_status = "hipModuleLoadData failed on " + which + ": " + context.runtime->describe(error) + "; " +
                           built_for + " (" + std::to_string(hal_rocm_code_object_size) + " bytes)";
    return;
  }
  for (const char* name : kernel_names) {
    hipFunction_t function = nullptr;
    if (const hipError_t error = api.hipModuleGetFunction(&function, module, name); error != hipSuccess) {
      (void)api.hipModuleUnload(module);
      device.kernel_status = "the code object loaded on " + which + " lacks " + name + ": " +
                             context.runtime->describe(error);
      return;
    }
  }
  device.kernel_module = module;
  device.kernel_status = "code object for " + architecture + " loaded on " + which +
                         "; hal_gemm_f32 is a scalar tiled GEMM (no matrix-core path yet)";
#endif
}

hal_status find_kernel(const Context& context, std::uint32_t index, const char* name, hipFunction_t* function) {
  RocmDevice& device = *context.devices[index];
  if (device.kernel_module == nullptr)
    return fail(HAL_ERROR_UNSUPPORTED, "rocm:" + std::to_string(index) + " has no usable kernels: " + device.kernel_status);
  auto [found, problem] = device.kernel_functions.find(name, [&](const char* kernel, hipFunction_t* out) {
    const hipError_t error = context.api().hipModuleGetFunction(out, device.kernel_module, kernel);
    return error == hipSuccess ? std::string() : context.runtime->describe(error);
  });
  if (!problem.empty())
    return fail(HAL_ERROR_INTERNAL, "the code object loaded on rocm:" + std::to_string(index) + " lacks " + name +
                                        " (hipModuleGetFunction: " + problem + "); the plugin was built from "
                                        "mismatched sources, rebuild it");
  *function = found;
  return HAL_OK;
}

}  // namespace hal::rocm
