// The ppu plugin: finds T-Head PPUs and their software from sysfs and files
// (discovery.*), checks what the backend needs, then runs work through the
// CUDA core (backends/cuda, hal_cuda_core) with a PPU profile: the SDK's own
// CUDA-compatible libraries by path, ACCL-P by install path, vendor T-Head,
// and the reported compute capability flagged as a compatibility value.
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend_options.hpp"
#include "cuda_backend.hpp"
#include "discovery.hpp"
#include "gpu_plugin.hpp"
#include "nvml.hpp"

namespace hal::ppu {
namespace {
using backend::fail;

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : "; ") + item;
  return text;
}

// What discovery found; the profile's identify reads it for every device.
struct Software {
  std::string sysfs_root;
  std::vector<PciDevice> pci;
  DriverVersion driver;
  Sdk sdk;
  LibraryFile runtime, dnn, blas, collectives_library;
  Collectives collectives;
};

void identify_ppu(const Software& software, const cuda::Context& context, cuda::CudaDevice& device) {
  const PciDevice* found = nullptr;
  for (const auto& candidate : software.pci)
    if (candidate.bus_id == device.pci_bus_id) found = &candidate;
  device.vendor = "T-Head";
  device.numa_node = found != nullptr ? found->numa_node : -1;
  if (device.name.empty() && found != nullptr) device.name = found->name;

  auto& description = device.description;
  description.add_version("sdk", software.sdk.version ? software.sdk.version->to_string() : "unknown");
  description.add_version("driver", software.driver.version->to_string());
  description.add_version("runtime", software.runtime.version.empty() ? "unknown" : software.runtime.version);
  description.add_version("cuda_api", cuda::format_cuda_version(context.driver_version));
  description.add_version("dnn", software.dnn.version.empty() ? (software.dnn.path.empty() ? "not found" : "unknown")
                                                              : software.dnn.version);
  description.add_version("collectives", software.collectives.root.empty() ? "not found"
                                         : software.collectives.version.empty()
                                             ? "unknown"
                                             : "ACCL-P " + software.collectives.version);
  const bool named_by_sysfs = found != nullptr && !found->name.empty();
  const std::string model = model_from_name(named_by_sysfs ? found->name : device.name);
  description.add_string("ppu.model", model,
                         named_by_sysfs ? "from the sysfs product name" : "from the driver's device name");
  const std::string generation = isa_generation(model);
  description.add_string("ppu.isa_generation", generation.empty() ? "unknown" : generation,
                         generation.empty() ? "model not in hal's table" : "from the model");
  description.add_string("ppu.sdk_root", software.sdk.root, "found through " + software.sdk.source);
  description.add_string("ppu.runtime_library", software.runtime.path, "the SDK's CUDA-compatible driver library");
  description.add_string("ppu.collectives_root",
                         software.collectives.root.empty() ? "not found" : software.collectives.root,
                         "ACCL-P, found by install path: " + join(software.collectives.tried));
  if (found == nullptr)
    description.add_string("ppu.sysfs", "not found",
                           "the SDK lists this device at PCI " + device.pci_bus_id + ", which is not a vendor " +
                               std::string(pci_vendor_id) + " device under " + software.sysfs_root +
                               "/bus/pci/devices");
  description.add_string("cuda.compute_capability.meaning", "compatibility",
                         "a PPU reports a compute capability so CUDA code runs; it is not an NVIDIA architecture and "
                         "hal derives nothing from it");
}

// The SDK's libraries by the paths discovery found: nothing else is
// searched, so NVIDIA's libraries on the same machine are never picked up.
cuda::Profile ppu_profile(const Software& software, const shims::ConfiguredPath& hgml) {
  cuda::Profile profile;
  profile.backend = "ppu";
  profile.driver.display_name = "CUDA-compatible driver of the PPU SDK at " + software.sdk.root;
  profile.driver.configured = {software.runtime.path, "PPU SDK"};
  profile.driver.never_unload = true;
  if (software.dnn.path.empty()) {
    profile.dnn_absent = "no libcudnn.so* in the PPU SDK: " + join(software.dnn.tried);
  } else {
    profile.dnn.display_name = "cuDNN-compatible library of the PPU SDK";
    profile.dnn.configured = {software.dnn.path, "PPU SDK"};
  }
  // The SDK's DNN library is not known to compile engines with NVRTC, and
  // NVIDIA's NVRTC on the same machine must never be picked up for it.
  profile.runtime_compiler_absent = "not looked for: the PPU SDK's DNN library does not use NVIDIA's NVRTC";
  if (software.blas.path.empty()) {
    profile.blas_absent = "no libcublas.so* in the PPU SDK: " + join(software.blas.tried);
  } else {
    profile.blas = {software.blas.path, "PPU SDK"};
  }
  if (software.collectives.root.empty()) {
    profile.collectives_absent = "ACCL-P not found: " + join(software.collectives.tried);
  } else if (software.collectives_library.path.empty()) {
    profile.collectives_absent =
        "no libpccl.so* under ACCL-P at " + software.collectives.root + ": " + join(software.collectives_library.tried);
  } else {
    profile.collectives.display_name = "ACCL-P (" + software.collectives.root + ")";
    profile.collectives.configured = {software.collectives_library.path, "ACCL-P"};
  }
  // HGML: NVML's API with an hgml prefix, from the SDK (HAL_HGML overrides).
  profile.telemetry = shims::Nvml::hgml_request(hgml, software.sdk.root);
  profile.telemetry_prefix = "hgml";
  // In CUDA-compatible mode the cuda backend sees the same PPUs; they are this backend's.
  profile.supersedes = "cuda";
  profile.identify = [software](const cuda::Context& context, cuda::CudaDevice& device) {
    identify_ppu(software, context, device);
  };
  return profile;
}

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  return backend::guarded_initialize(init, out, "ppu", [&] {
    const auto options = backend::read_backend_options(
        *init, "ppu", {"sdk", "sysfs_root", "dev_root", "accl", "hgml"},
        "sdk (the PPU SDK root), sysfs_root, dev_root (where to look for devices), accl (the ACCL-P root) and hgml "
        "(a path to libhgml.so)");
    const Roots roots = choose_roots(options);
    Software software;
    software.sysfs_root = roots.sysfs;
    software.pci = find_pci_devices(roots.sysfs);
    const std::vector<std::string> nodes = find_device_nodes(roots.dev);
    if (software.pci.empty())
      return fail(HAL_ERROR_NOT_PRESENT,
                  "no T-Head PPU found: no PCI device with vendor " + std::string(pci_vendor_id) + " under " +
                      roots.sysfs + "/bus/pci/devices" +
                      (nodes.empty() ? ", no " + roots.dev + "/alixpu* device node"
                                     : "; " + std::to_string(nodes.size()) + " " + roots.dev +
                                           "/alixpu* node(s) exist, so the driver may be loaded without its PCI "
                                           "devices visible here"));
    const std::string found_ppus = "found " + std::to_string(software.pci.size()) + " PPU(s)";

    software.driver = read_driver_version(roots.sysfs);
    const DriverVersion& driver = software.driver;
    const auto minimum = parse_version(minimum_driver_version);
    if (!driver.version)
      return fail(HAL_ERROR_UNSUPPORTED, found_ppus + " but no readable driver version at " + driver.path +
                                             (driver.text.empty() ? "" : " (it reads '" + driver.text + "')") +
                                             "; the ppu backend needs the alixpu driver " +
                                             std::string(minimum_driver_version) + " or later");
    if (*driver.version < *minimum)
      return fail(HAL_ERROR_UNSUPPORTED, "the PPU driver is " + driver.version->to_string() + " (" + driver.path +
                                             "); the ppu backend needs " + std::string(minimum_driver_version) +
                                             " or later: upgrade the alixpu driver");

    software.sdk = find_sdk(options.value("sdk"));
    const Sdk& sdk = software.sdk;
    if (sdk.root.empty())
      return fail(HAL_ERROR_NOT_PRESENT, found_ppus + " but no PPU SDK; looked at " +
                                             (sdk.tried.empty() ? std::string("nothing") : join(sdk.tried)) +
                                             " (set PPU_SDK or [backend.ppu] sdk)");
    const std::vector<std::string> library_dirs = {sdk.root + "/lib64", sdk.root + "/lib"};
    software.runtime = find_library(library_dirs, "libcuda.so");
    if (software.runtime.path.empty())
      return fail(HAL_ERROR_NOT_PRESENT, found_ppus + " and the SDK at " + sdk.root +
                                             " but not its CUDA-compatible runtime library; tried " +
                                             join(software.runtime.tried));
    software.dnn = find_library(library_dirs, "libcudnn.so");
    software.blas = find_library(library_dirs, "libcublas.so");
    software.collectives = find_collectives(options.value("accl"), sdk);
    if (!software.collectives.root.empty())
      software.collectives_library =
          find_library({software.collectives.root + "/lib64", software.collectives.root + "/lib"}, "libpccl.so");

    return cuda::open_backend(ppu_profile(software, {options.value("hgml"), options.source("hgml")}), *init, out);
  });
}

}  // namespace
}  // namespace hal::ppu

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  static const hal_backend_v1 ppu_table = hal::cuda::make_table("ppu", hal::ppu::initialize);
  return hal_backend_offer(&ppu_table, host_max_abi_version);
}
