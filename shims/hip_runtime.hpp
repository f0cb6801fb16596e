// The HIP runtime (libamdhip64.so), resolved at run time. hip_runtime_api.h
// supplies the types only: nothing here links against any ROCm library.
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "library_loader.hpp"

namespace hal::shims {

// The prototype of each function; in C++ the header overloads a few with
// templates, so those are spelled out.
using HipMallocPrototype = hipError_t (*)(void**, std::size_t);
using HipHostMallocPrototype = hipError_t (*)(void**, std::size_t, unsigned int);
using HipMallocManagedPrototype = hipError_t (*)(void**, std::size_t, unsigned int);

// X(function, required). Optional functions disable only what needs them.
#define HAL_HIP_RUNTIME_FUNCTIONS(X)  \
  X(hipInit, true)                    \
  X(hipDriverGetVersion, true)        \
  X(hipRuntimeGetVersion, true)       \
  X(hipGetErrorName, true)            \
  X(hipGetErrorString, true)          \
  X(hipGetDeviceCount, true)          \
  X(hipSetDevice, true)               \
  X(hipGetDevice, true)               \
  X(hipDeviceGetName, true)           \
  X(hipDeviceGetPCIBusId, true)       \
  X(hipDeviceTotalMem, true)          \
  X(hipDeviceGetAttribute, true)      \
  X(hipMemGetInfo, true)              \
  X(hipFree, true)                    \
  X(hipHostFree, true)                \
  X(hipHostGetDevicePointer, true)    \
  X(hipMemcpy, true)                  \
  X(hipMemcpyAsync, true)             \
  X(hipMemsetD8, true)                \
  X(hipMemsetD16, true)               \
  X(hipMemsetD32, true)               \
  X(hipMemsetD8Async, true)           \
  X(hipMemsetD16Async, true)          \
  X(hipMemsetD32Async, true)          \
  X(hipStreamCreateWithFlags, true)   \
  X(hipStreamDestroy, true)           \
  X(hipStreamSynchronize, true)       \
  X(hipStreamQuery, true)             \
  X(hipStreamWaitEvent, true)         \
  X(hipStreamAddCallback, true)       \
  X(hipThreadExchangeStreamCaptureMode, false) \
  X(hipEventCreateWithFlags, true)    \
  X(hipEventDestroy, true)            \
  X(hipEventRecord, true)             \
  X(hipEventQuery, true)              \
  X(hipEventSynchronize, true)        \
  X(hipEventElapsedTime, true)        \
  X(hipDeviceGetUuid, false)          \
  X(hipDeviceCanAccessPeer, false)    \
  X(hipModuleLoadData, false)         \
  X(hipModuleUnload, false)           \
  X(hipModuleGetFunction, false)      \
  X(hipModuleLaunchKernel, false)      \
  /* Interop: checking and registering memory other code allocated. */ \
  X(hipPointerGetAttributes, false)    \
  X(hipMemGetAddressRange, false)      \
  X(hipHostRegister, false)            \
  X(hipHostUnregister, false)          \
  X(hipDeviceSynchronize, false)

struct HipRuntimeApi {
#define HAL_HIP_RUNTIME_FIELD(function, required) decltype(&::function) function = nullptr;
  HAL_HIP_RUNTIME_FUNCTIONS(HAL_HIP_RUNTIME_FIELD)
#undef HAL_HIP_RUNTIME_FIELD
  HipMallocPrototype hipMalloc = nullptr;
  HipHostMallocPrototype hipHostMalloc = nullptr;
  HipMallocManagedPrototype hipMallocManaged = nullptr;
  // ROCm 6 changed hipDeviceProp_t and renamed the new layout's function;
  // this pointer always takes the layout of the headers hal is built with
  // (R0000: ROCm 5), resolved as hipGetDevicePropertiesR0000 or, before
  // ROCm 6, hipGetDeviceProperties.
  hipError_t (*hipGetDevicePropertiesR0000)(hipDeviceProp_t* properties, int device) = nullptr;
};

// The loaded runtime: library, function table and how it was found.
class HipRuntime {
 public:
  struct LoadResult {
    std::unique_ptr<HipRuntime> runtime;  // null on failure
    bool library_missing = false;         // true: no library; false with no runtime: unusable library
    std::string message;                  // why it failed, every path tried included
  };
  // configured_path: the backend's `runtime` option ("" when unset).
  static LoadResult load(const std::string& configured_path);
  // The search: HAL_HIP_RUNTIME, the configured path, $ROCM_PATH/lib,
  // /opt/rocm/lib, then the system's library path.
  static LibraryRequest library_request(const std::string& configured_path);
  // Where load() would look, without loading anything: "$ROCM_PATH/lib,
  // /opt/rocm/lib, then libamdhip64.so.6, ... on the system library path".
  static std::string search_description();

  const HipRuntimeApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  // "[HAL_HIP_RUNTIME] ...: not found; [system] libamdhip64.so.6: loaded ..."
  const std::string& attempts() const { return attempts_; }
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  bool has_module_api() const {
    return api_.hipModuleLoadData && api_.hipModuleUnload && api_.hipModuleGetFunction && api_.hipModuleLaunchKernel;
  }

  // "hipErrorOutOfMemory (out of memory)" from the runtime itself.
  std::string describe(hipError_t error) const;
  // 50221153 -> "5.2.21153" (HIP_VERSION: major * 10^7 + minor * 10^5 + patch).
  static std::string format_version(int version);

 private:
  SharedLibrary library_;
  HipRuntimeApi api_;
  std::string attempts_;
  std::vector<std::string> missing_optional_;
};

}  // namespace hal::shims
