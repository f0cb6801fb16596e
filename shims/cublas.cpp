#include "cublas.hpp"

#include <memory>
#include <utility>
#include <vector>

#include <library_types.h>

namespace hal::shims {

LoadResult<Cublas> Cublas::load(const ConfiguredPath& configured) {
  // cuBLAS and cuBLASLt keep static state (their own C++ runtime's pools,
  // exit handlers) that must not outlive their code, as the driver's.
  const LibraryRequest request{.display_name = "cuBLAS (libcublas.so.13 or libcublas.so.12)",
                               .sonames = {"libcublas.so.13", "libcublas.so.12"},
                               .configured = configured,
                               .environment_variable = "HAL_CUBLAS",
                               .never_unload = true};
  auto cublas = std::unique_ptr<Cublas>(new Cublas());
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_CUBLAS_FUNCTIONS, cublas->api_, "");
  return open_vendor_library(std::move(cublas), request, symbols);
}

std::string Cublas::version() const {
  if (api_.cublasGetProperty == nullptr) return {};
  int major = 0, minor = 0, patch = 0;
  if (api_.cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      api_.cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      api_.cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return {};
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string Cublas::describe(cublasStatus_t status) const {
  const std::string number = "cuBLAS status " + std::to_string(static_cast<int>(status));
  if (api_.cublasGetStatusString == nullptr) return number;
  const char* text = api_.cublasGetStatusString(status);
  return text != nullptr ? std::string(text) + " (" + number + ")" : number;
}

}  // namespace hal::shims
