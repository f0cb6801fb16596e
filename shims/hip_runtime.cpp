#include "hip_runtime.hpp"

#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {

LibraryRequest HipRuntime::library_request(const ConfiguredPath& configured) {
  // The versioned names first: the unversioned link is a development file.
  LibraryRequest request =
      rocm_library_request("the HIP runtime (libamdhip64.so)",
                           {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}, "HAL_HIP_RUNTIME", configured);
  request.not_found_advice = "install ROCm, set ROCM_PATH, or set HAL_HIP_RUNTIME to the library";
  return request;
}

std::string HipRuntime::search_description() {
  const LibraryRequest request = library_request("");
  std::string text;
  for (const auto& [label, directory] : request.install_directories)
    text += directory + (std::filesystem::is_directory(directory) ? " (exists)" : " (no such directory)") + ", ";
  text += "then ";
  for (std::size_t i = 0; i < request.sonames.size(); ++i) text += (i ? ", " : "") + request.sonames[i];
  return text + " on the system library path";
}

LoadResult<HipRuntime> HipRuntime::load(const ConfiguredPath& configured) {
  auto runtime = std::unique_ptr<HipRuntime>(new HipRuntime());
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_HIP_RUNTIME_FUNCTIONS, runtime->api_, "");
  return open_vendor_library(std::move(runtime), library_request(configured), symbols);
}

std::string HipRuntime::describe(hipError_t error) const {
  const char* name = api_.hipGetErrorName(error);
  const char* text = api_.hipGetErrorString(error);
  std::string description = name != nullptr ? name : "hipError " + std::to_string(static_cast<int>(error));
  // ROCm 5 returns the name as the text too; say it once.
  if (text != nullptr && *text != '\0' && description != text) description += std::string(" (") + text + ")";
  return description;
}

std::string HipRuntime::format_version(int version) {
  if (version <= 0) return "unknown";
  return std::to_string(version / 10000000) + "." + std::to_string(version / 100000 % 100) + "." +
         std::to_string(version % 100000);
}

}  // namespace hal::shims
