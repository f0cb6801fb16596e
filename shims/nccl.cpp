#include "nccl.hpp"

namespace hal::shims {

LibraryRequest Nccl::nvidia_request(const std::string& configured_path) {
  LibraryRequest request;
  request.display_name = "NCCL (libnccl.so.2)";
  request.sonames = {"libnccl.so.2"};
  request.environment_variable = "HAL_NCCL";
  request.configured_path = configured_path;
  request.never_unload = true;  // its proxy and bootstrap threads must not outlive their code
  return request;
}

LibraryRequest Nccl::amd_request(const std::string& configured_path) {
  LibraryRequest request;
  request.display_name = "RCCL (librccl.so.1)";
  request.sonames = {"librccl.so.1", "librccl.so"};
  request.environment_variable = "HAL_RCCL";
  request.configured_path = configured_path;
  request.search_toolkit = false;
  request.search_python_packages = false;
  request.install_directories = rocm_library_directories();
  request.never_unload = true;
  return request;
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
