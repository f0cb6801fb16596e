// The device code embedded in the plugin (backends/gpu/kernels, built with
// hipcc), loaded per device with the module API. A device without a
// matching code object gets no kernels, and the reason is kept for every
// capability that needs them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "vendor.hpp"

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

std::string device_name(const RocmDevice& device) {
  return "rocm:" + std::to_string(device.ordinal) + " (" + device.gcn_arch_name + ")";
}

std::string built_for() { return "the plugin carries code objects for " + embedded_architectures(); }

}  // namespace

std::string embedded_architectures() { return HAL_ROCM_CODE_OBJECT_ARCHITECTURES; }

std::string kernels_missing(const Context& context, const RocmDevice& device) {
#if !HAL_ROCM_HAS_CODE_OBJECT
  (void)context;
  (void)device;
  return "this plugin was built without hipcc and carries no device code; install hipcc and rebuild";
#else
  if (!context.runtime->has_module_api())
    return "the HIP runtime at " + context.runtime->path() +
           " lacks the module API (hipModuleLoadData, hipModuleGetFunction, hipModuleLaunchKernel)";
  const std::string architecture = base_architecture(device.gcn_arch_name);
  if (!carries_architecture(architecture))
    return "no code object for " + device_name(device) + "; " + built_for() +
           " (rebuild with HAL_ROCM_ARCHITECTURES including " + architecture + " and a hipcc that knows it)";
  return {};
#endif
}

namespace {

// Loads the embedded code object on the device; sets kernel_module or kernel_status.
void load_kernels(const Context& context, std::uint32_t index) {
  RocmDevice& device = *context.devices[index];
  if (std::string missing = kernels_missing(context, device); !missing.empty()) {
    device.kernel_status = std::move(missing);
    return;
  }
#if HAL_ROCM_HAS_CODE_OBJECT
  const std::string which = device_name(device);
  const backend::CurrentDevice scope = context.current_device(index);
  if (!scope) {
    device.kernel_status = "cannot make " + which + " current to load its kernels: " + backend::last_error_message();
    return;
  }
  const auto& api = context.api();
  hipModule_t module = nullptr;
  if (const hipError_t error = api.hipModuleLoadData(&module, hal_rocm_code_object); error != hipSuccess) {
    device.kernel_status = "hipModuleLoadData failed on " + which + ": " + context.runtime->describe(error) + "; " +
                           built_for() + " (" + std::to_string(hal_rocm_code_object_size) + " bytes)";
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
  device.kernel_status = "code object for " + base_architecture(device.gcn_arch_name) + " loaded on " + which +
                         "; hal_gemm_f32 is a scalar tiled GEMM (no matrix-core path yet)";
#endif
}

}  // namespace

bool kernels_usable(const Context& context, std::uint32_t index) {
  RocmDevice& device = *context.devices[index];
  std::call_once(device.kernels_once, [&] { load_kernels(context, index); });
  return device.kernel_module != nullptr;
}

hal_status find_kernel(const Context& context, std::uint32_t index, const char* name, hipFunction_t* function) {
  RocmDevice& device = *context.devices[index];
  const bool usable = kernels_usable(context, index);
  return backend::find_kernel(context.device_id(index), usable, device.kernel_status, device.kernel_functions, name,
                              "hipModuleGetFunction",
                              [&](const char* kernel, hipFunction_t* out) {
                                const hipError_t error = context.api().hipModuleGetFunction(out, device.kernel_module, kernel);
                                return error == hipSuccess ? std::string() : context.runtime->describe(error);
                              },
                              function);
}

std::string RocmVendor::kernels_missing(const Context& context, std::uint32_t device) {
  return rocm::kernels_missing(context, *context.devices[device]);
}

std::string RocmVendor::kernels_unusable(const Context& context, std::uint32_t device) {
  return kernels_usable(context, device) ? std::string() : context.devices[device]->kernel_status;
}

hal_status RocmVendor::launch(const Context& context, hal_stream& stream, const hal_kernel_launch& launch,
                              const void* arguments) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  hipFunction_t function = nullptr;
  if (hal_status status = find_kernel(context, stream.device, launch.kernel, &function); status != HAL_OK) return status;
  // The kernel's one parameter is the struct `arguments` points to.
  void* parameters[] = {const_cast<void*>(arguments)};
  return context.check(context.api().hipModuleLaunchKernel(function, launch.grid[0], launch.grid[1], launch.grid[2],
                                                           launch.block[0], launch.block[1], launch.block[2],
                                                           launch.shared_bytes, stream.handle, parameters, nullptr),
                       std::string("hipModuleLaunchKernel(") + launch.kernel + ")");
}

}  // namespace hal::rocm
