#include "nccl.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {

LibraryRequest Nccl::nvidia_request(const ConfiguredPath& configured) {
  // Kept mapped: its proxy and bootstrap threads must not outlive their code.
  return {.display_name = "NCCL (libnccl.so.2)",
          .sonames = {"libnccl.so.2"},
          .configured = configured,
          .environment_variable = "HAL_NCCL",
          .never_unload = true};
}

LibraryRequest Nccl::amd_request(const ConfiguredPath& configured) {
  return rocm_library_request("RCCL (librccl.so.1)", {"librccl.so.1", "librccl.so"}, "HAL_RCCL", configured);
}

LoadResult<Nccl> Nccl::load(const LibraryRequest& request) {
  auto nccl = std::unique_ptr<Nccl>(new Nccl());
  const std::vector<SymbolSpec> symbols = HAL_SYMBOL_SPECS(HAL_NCCL_FUNCTIONS, nccl->api_, "");
  return open_vendor_library(std::move(nccl), request, symbols);
}

std::string Nccl::format_version(int encoded) {
  const int major_unit = encoded >= 10000 ? 10000 : 1000;
  return std::to_string(encoded / major_unit) + "." + std::to_string(encoded % major_unit / 100) + "." +
         std::to_string(encoded % 100);
}

std::string Nccl::version() const {
  int encoded = 0;
  if (api_.GetVersion(&encoded) != nccl_success) return "unknown (ncclGetVersion failed)";
  return format_version(encoded);
}

}  // namespace hal::shims
