#include "cuda_driver.hpp"

#include <memory>
#include <utility>
#include <vector>

namespace hal::shims {
namespace {

// cuGetProcAddress before CUDA 12 took four arguments; _v2 added the status.
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

}  // namespace

LibraryRequest CudaDriver::nvidia_request(const ConfiguredPath& configured) {
  return {.display_name = "CUDA driver (libcuda.so.1)",
          .sonames = {"libcuda.so.1"},
          .configured = configured,
          .environment_variable = "HAL_CUDA_DRIVER",
          .never_unload = true};
}

LoadResult<CudaDriver> CudaDriver::load(const ConfiguredPath& configured) { return load(nvidia_request(configured)); }

LoadResult<CudaDriver> CudaDriver::load(const LibraryRequest& request) {
  LibraryLoad load = load_library(request);
  if (!load.loaded()) {
    const std::string remedy = request.environment_variable.empty()
                                   ? ""
                                   : "; install the driver or set " + request.environment_variable + " to its path";
    return {nullptr,
            "the " + request.display_name + " was not found or could not be opened" + remedy +
                ". Tried: " + load.describe_attempts(),
            true};
  }

  auto driver = std::unique_ptr<CudaDriver>(new CudaDriver());
  driver->adopt(std::move(load.library), request.display_name, load.describe_attempts());
  CudaDriverApi& api = driver->api_;

  // cuInit and cuGetProcAddress come from plain dlsym: they are how the rest is found.
  api.cuInit = reinterpret_cast<decltype(api.cuInit)>(driver->find("cuInit"));
  if (api.cuInit == nullptr)
    return {nullptr, driver->path() + " does not export cuInit; it is not a CUDA driver", false};
  const auto get_proc_v2 = reinterpret_cast<GetProcAddressV2>(driver->find("cuGetProcAddress_v2"));
  const auto get_proc_v1 =
      get_proc_v2 == nullptr ? reinterpret_cast<GetProcAddressV1>(driver->find("cuGetProcAddress")) : nullptr;
  driver->resolution_method_ = get_proc_v2 ? "cuGetProcAddress_v2" : get_proc_v1 ? "cuGetProcAddress" : "dlsym";

  // Each alternative at its ABI version: cuGetProcAddress for the base name
  // (the field's), then the exported name.
  const auto find = [&](const SymbolSpec& spec, const SymbolName& name) -> void* {
    void* address = nullptr;
    if (get_proc_v2 != nullptr) {
      CUdriverProcAddressQueryResult status{};
      if (get_proc_v2(spec.field, &address, name.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) !=
              CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS)
        address = nullptr;
    } else if (get_proc_v1 != nullptr) {
      if (get_proc_v1(spec.field, &address, name.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM) != CUDA_SUCCESS)
        address = nullptr;
    }
    // A driver without cuGetProcAddress, or one that does not list a symbol there.
    return address != nullptr ? address : driver->find(name.name.c_str());
  };
  const SymbolResolution resolution = resolve_symbols(HAL_SYMBOL_SPECS(HAL_CUDA_DRIVER_FUNCTIONS, api, ""), find);
  if (!resolution.complete()) {
    return {nullptr,
            "the CUDA driver at " + driver->path() + " lacks required functions (" +
                SymbolResolution::join(resolution.missing_required) +
                "); it is too old or not a CUDA driver: update the NVIDIA driver",
            false};
  }
  driver->missing_optional_ = resolution.missing_optional;
  return {std::move(driver), {}, false};
}

std::string CudaDriver::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_.cuGetErrorName == nullptr || api_.cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (api_.cuGetErrorString == nullptr || api_.cuGetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
  std::string description = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text != nullptr) description += std::string(" (") + text + ")";
  return description;
}

}  // namespace hal::shims
