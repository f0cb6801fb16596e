#include "nvml.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {

LibraryRequest Nvml::nvidia_request(const ConfiguredPath& configured) {
  // The driver installs it: a toolkit's stubs/libnvidia-ml.so only links. Kept
  // mapped: it starts threads of its own.
  return {.display_name = "NVML (libnvidia-ml.so.1)",
          .sonames = {"libnvidia-ml.so.1"},
          .configured = configured,
          .environment_variable = "HAL_NVML",
          .search_toolkit = false,
          .search_python_packages = false,
          .never_unload = true};
}

LibraryRequest Nvml::hgml_request(const ConfiguredPath& configured, const std::string& sdk_root) {
  LibraryRequest request{.display_name = "HGML (libhgml.so), the PPU SDK's management library",
                         .sonames = {"libhgml.so", "libhgml.so.1"},
                         .configured = configured,
                         .environment_variable = "HAL_HGML",
                         .search_toolkit = false,
                         .search_python_packages = false,
                         .never_unload = true};
  if (!sdk_root.empty()) {
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib64");
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib");
  }
  return request;
}

LoadResult<Nvml> Nvml::load(const LibraryRequest& request, const std::string& prefix) {
  auto nvml = std::unique_ptr<Nvml>(new Nvml());
  nvml->prefix_ = prefix;
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_NVML_FUNCTIONS, nvml->api_, prefix);
  LoadResult<Nvml> load = open_vendor_library(std::move(nvml), request, symbols);
  if (!load.library) return load;
  if (const NvmlReturn result = load.library->api_.Init(); result != nvml_success) {
    std::string message = request.display_name + " at " + load.library->path() + ": " + prefix + "Init failed: " +
                          load.library->error_text(result) + " (is the driver loaded?)";
    return {nullptr, std::move(message), false};
  }
  load.library->initialized_ = true;
  return load;
}

Nvml::~Nvml() {
  if (initialized_) api_.Shutdown();
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
