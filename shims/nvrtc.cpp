#include "nvrtc.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {

LibraryRequest Nvrtc::nvidia_request(const ConfiguredPath& configured, int cuda_major) {
  std::vector<std::string> sonames = {"libnvrtc.so.13", "libnvrtc.so.12"};
  const std::string wanted = "libnvrtc.so." + std::to_string(cuda_major);
  if (const auto found = std::find(sonames.begin(), sonames.end(), wanted); found != sonames.end())
    std::rotate(sonames.begin(), found, found + 1);
  return {.display_name = "NVRTC (" + sonames.front() + ")",
          .sonames = sonames,
          .configured = configured,
          .environment_variable = "HAL_NVRTC",
          // cuDNN keeps what it compiled, and the code NVRTC's builtins library holds, for the process's life.
          .never_unload = true};
}

LoadResult<Nvrtc> Nvrtc::load(const LibraryRequest& request) {
  auto nvrtc = std::unique_ptr<Nvrtc>(new Nvrtc());
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_NVRTC_FUNCTIONS, nvrtc->api_, "");
  return open_vendor_library(std::move(nvrtc), request, symbols);
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  if (api_.nvrtcVersion(&major, &minor) != 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace hal::shims
