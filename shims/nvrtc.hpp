// NVRTC (libnvrtc.so.13 or .12), the CUDA runtime compiler, resolved at run
// time: cuDNN compiles some of its engines (the SDPA ones among them) with it
// when a graph is built, opening it by its soname. hal finds it as it finds
// the other vendor libraries and keeps it mapped, so cuDNN's dlopen of the
// same soname gets hal's copy, and a missing one is a reported reason
// (fused attention declines) instead of a failure in the middle of a call.
#pragma once

#include <string>

#include "vendor_library.hpp"

namespace hal::shims {

// X(field, type, requirement, names...), as symbol_table.hpp lists functions.
#define HAL_NVRTC_FUNCTIONS(X) X(nvrtcVersion, int (*)(int* major, int* minor), required)

struct NvrtcApi {
  HAL_SYMBOL_FIELDS(HAL_NVRTC_FUNCTIONS)
};

class Nvrtc : public VendorLibrary {
 public:
  // NVIDIA's defaults: libnvrtc.so.<cuda_major> first (the CUDA release cuDNN
  // was built for; 0: unknown), then the others hal knows; HAL_NVRTC; the
  // `nvrtc` backend option.
  static LibraryRequest nvidia_request(const ConfiguredPath& configured, int cuda_major = 0);
  static LoadResult<Nvrtc> load(const LibraryRequest& request);

  // "13.0"
  std::string version() const;

 private:
  NvrtcApi api_;
};

}  // namespace hal::shims
