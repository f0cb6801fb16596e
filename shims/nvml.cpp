#include "nvml.hpp"

namespace hal::shims {

LibraryRequest Nvml::nvidia_request(const std::string& configured_path) {
  LibraryRequest request;
  request.display_name = "NVML (libnvidia-ml.so.1)";
  request.sonames = {"libnvidia-ml.so.1"};
  request.environment_variable = "HAL_NVML";
  request.configured_path = configured_path;
  // The driver installs it; a toolkit's stubs/libnvidia-ml.so only links.
  request.search_toolkit = false;
  request.search_python_packages = false;
  request.never_unload = true;  // it starts threads of its own
  return request;
}

LibraryRequest Nvml::hgml_request(const std::string& configured_path, const std::string& sdk_root) {
  LibraryRequest request;
  request.display_name = "HGML (libhgml.so), the PPU SDK's management library";
  request.sonames = {"libhgml.so", "libhgml.so.1"};
  request.environment_variable = "HAL_HGML";
  request.configured_path = configured_path;
  request.search_toolkit = false;
  request.search_python_packages = false;
  if (!sdk_root.empty()) {
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib64");
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib");
  }
  request.never_unload = true;
  return request;
}

Nvml::LoadResult Nvml::load(const LibraryRequest& request, const std::string& prefix) {
  auto nvml = std::unique_ptr<Nvml>(new Nvml());
  VendorLibraryLoad load = open_vendor_library(request, HAL_SYMBOL_SPECS(HAL_NVML_FUNCTIONS, nvml->api_, prefix));
  if (!load.ok()) return {nullptr, load.error, load.library_missing};
  nvml->library_ = std::move(load.library);
  nvml->prefix_ = prefix;
  if (const NvmlReturn result = nvml->api_.Init(); result != nvml_success) {
    std::string message = request.display_name + " at " + nvml->library_.path() + ": " + prefix + "Init failed: " +
                          nvml->error_text(result) + " (is the driver loaded?)";
    nvml->api_.Shutdown = nullptr;  // nothing to shut down
    return {nullptr, std::move(message), false};
  }
  return {std::move(nvml), {}, false};
}

Nvml::~Nvml() {
  if (api_.Shutdown != nullptr) api_.Shutdown();
}

std::string Nvml::describe() const {
  char version[96] = {};
  if (api_.SystemGetDriverVersion != nullptr &&
      api_.SystemGetDriverVersion(version, sizeof(version)) == nvml_success && version[0] != '\0')
    return prefix_ + " " + version;
  return prefix_;
}

std::string Nvml::error_text(NvmlReturn result) const {
  const char* text = api_.ErrorString != nullptr ? api_.ErrorString(result) : nullptr;
  return (text != nullptr ? std::string(text) : std::string("error")) + " (" + std::to_string(result) + ")";
}

}  // namespace hal::shims
