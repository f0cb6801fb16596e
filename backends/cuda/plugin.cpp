// The cuda plugin: the CUDA core with NVIDIA's profile. Libraries are searched
// the NVIDIA way (HAL_CUDA_DRIVER / HAL_CUDNN / HAL_NCCL, the [backend.cuda]
// options, CUDA_HOME, pip wheels, the system); the vendor comes from PCI.
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <utility>

#include "backend_options.hpp"
#include "gpu_plugin.hpp"
#include "nvml.hpp"
#include "vendor.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::cuda {
namespace {

// The PCI vendor as sysfs knows it: the driver API cannot tell an NVIDIA GPU
// from a CUDA-compatible device of another vendor.
std::string vendor_from_sysfs(const std::string& pci_bus_id) {
  const std::string id = backend::read_pci_sysfs(pci_bus_id, "vendor");
  if (id == "0x10de") return "NVIDIA";
  if (id == "0x1ded") return "T-Head";
  return id.empty() ? "unknown" : "unknown (PCI vendor " + id + ")";
}

void identify_nvidia_device(const Context& context, CudaDevice& device) {
  device.numa_node = backend::numa_node_from_sysfs(device.pci_bus_id);
  device.vendor = vendor_from_sysfs(device.pci_bus_id);
  backend::DeviceDescription& description = device.description;
  description.add_version("backend", HAL_VERSION_STRING);
  description.add_version("driver", format_cuda_version(context.driver_version));
  description.add_version("cuda_headers", format_cuda_version(CUDA_VERSION));
  if (context.cudnn) description.add_version("cudnn", context.cudnn->version());
  if (context.nvrtc) description.add_version("nvrtc", context.nvrtc->version());
  if (context.nccl) description.add_version("nccl", context.nccl->version());
  // Only an NVIDIA GPU's compute capability names its architecture.
  if (device.vendor == "NVIDIA")
    description.add_string("cuda.compute_capability.meaning", "architecture",
                           "an NVIDIA GPU (PCI vendor 0x10de): the compute capability names its architecture");
  else
    description.add_string("cuda.compute_capability.meaning", "compatibility",
                           "vendor " + device.vendor +
                               ": a CUDA-compatible device reports a compute capability for compatibility, not as "
                               "its architecture");
}

Profile nvidia_profile(const backend::BackendOptions& options) {
  auto option = [&](const char* key) { return shims::ConfiguredPath(options.value(key), options.source(key)); };
  Profile profile;
  profile.backend = "cuda";
  profile.driver = shims::CudaDriver::nvidia_request(option("driver"));
  profile.dnn = shims::Cudnn::nvidia_request(option("cudnn"));
  profile.collectives = shims::Nccl::nvidia_request(option("nccl"));
  profile.blas = option("cublas");
  profile.runtime_compiler = option("nvrtc");
  profile.telemetry = shims::Nvml::nvidia_request(option("nvml"));
  profile.blas_allows_tf32 = options.value("cublas_tf32") == "1";
  profile.identify = identify_nvidia_device;
  return profile;
}

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  return backend::guarded_initialize(init, out, "cuda", [&] {
    // Each option but cublas_tf32 is a path to one vendor library.
    const auto options = backend::read_backend_options(
        *init, "cuda", {"driver", "cudnn", "nvrtc", "nccl", "cublas", "nvml", "cublas_tf32"},
        "driver, cudnn, nvrtc, nccl, cublas and nvml (paths to those libraries) and cublas_tf32 (1 or 0)");
    return open_backend(nvidia_profile(options), *init, out);
  });
}

}  // namespace
}  // namespace hal::cuda

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  static const hal_backend_v1 cuda_table = hal::cuda::make_table("cuda", hal::cuda::initialize);
  return hal_backend_offer(&cuda_table, host_max_abi_version);
}
