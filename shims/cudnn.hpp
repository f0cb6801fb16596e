// cuDNN (libcudnn.so.9), resolved at run time: its presence and version. The
// fused attention (backends/cuda/cudnn_attention.cpp) drives cuDNN's graph API
// through the cuDNN frontend, which resolves its own symbols on native_handle().
#pragma once

#include <cstddef>
#include <string>

#include "vendor_library.hpp"

namespace hal::shims {

// X(field, type, requirement, names...), as symbol_table.hpp lists functions.
#define HAL_CUDNN_FUNCTIONS(X)                                                                                         \
  X(cudnnGetVersion, std::size_t (*)(), required)                                                                      \
  X(cudnnGetCudartVersion, std::size_t (*)(), optional)                                                                \
  X(cudnnGetErrorString, const char* (*)(int status), optional)

struct CudnnApi {
  HAL_SYMBOL_FIELDS(HAL_CUDNN_FUNCTIONS)
};

class Cudnn : public VendorLibrary {
 public:
  // NVIDIA's defaults: libcudnn.so.9, HAL_CUDNN, the `cudnn` backend option.
  static LibraryRequest nvidia_request(const ConfiguredPath& configured);
  static LoadResult<Cudnn> load(const ConfiguredPath& configured);
  // Any cuDNN-compatible library (a CUDA-compatible SDK's own).
  static LoadResult<Cudnn> load(const LibraryRequest& request);

  const CudnnApi& api() const { return api_; }
  // "9.19.0"
  std::string version() const;
  // cudnnGetVersion's number in cuDNN's encoding (9.x: 91900, 8.x: 8907).
  static std::string format_version(std::size_t encoded);

 private:
  CudnnApi api_;
};

}  // namespace hal::shims
