#include "cudnn.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {

LibraryRequest Cudnn::nvidia_request(const ConfiguredPath& configured) {
  return {.display_name = "cuDNN (libcudnn.so.9)",
          .sonames = {"libcudnn.so.9"},
          .configured = configured,
          .environment_variable = "HAL_CUDNN"};
}

LoadResult<Cudnn> Cudnn::load(const ConfiguredPath& configured) { return load(nvidia_request(configured)); }

LoadResult<Cudnn> Cudnn::load(const LibraryRequest& requested) {
  // The cuDNN frontend keeps the function pointers it resolves for the life of
  // the process; the library must stay mapped for them, whoever's it is.
  LibraryRequest request = requested;
  request.never_unload = true;
  auto cudnn = std::unique_ptr<Cudnn>(new Cudnn());
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_CUDNN_FUNCTIONS, cudnn->api_, "");
  return open_vendor_library(std::move(cudnn), request, symbols);
}

std::string Cudnn::format_version(std::size_t encoded) {
  // cuDNN 9 moved to major * 10000 + minor * 100 + patch; before it was major * 1000.
  const std::size_t major_unit = encoded >= 90000 ? 10000 : 1000;
  return std::to_string(encoded / major_unit) + "." + std::to_string(encoded % major_unit / 100) + "." +
         std::to_string(encoded % 100);
}

std::string Cudnn::version() const { return format_version(api_.cudnnGetVersion()); }

}  // namespace hal::shims
