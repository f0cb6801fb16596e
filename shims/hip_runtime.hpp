// The HIP runtime (libamdhip64.so), resolved at run time. hip_runtime_api.h
// supplies the types only: nothing here links against any ROCm library.
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "vendor_library.hpp"

namespace hal::shims {

// The runtime's functions, as symbol_table.hpp lists them: X(field, type,
// requirement, names...). Optional functions disable only what needs them.
#define HAL_HIP_RUNTIME_FUNCTIONS(X)                                                                           \
  X(hipInit, decltype(&::hipInit), required)                                                                   \
  X(hipDriverGetVersion, decltype(&::hipDriverGetVersion), required)                                           \
  X(hipRuntimeGetVersion, decltype(&::hipRuntimeGetVersion), required)                                         \
  X(hipGetErrorName, decltype(&::hipGetErrorName), required)                                                   \
  X(hipGetErrorString, decltype(&::hipGetErrorString), required)                                               \
  X(hipGetDeviceCount, decltype(&::hipGetDeviceCount), required)                                               \
  X(hipSetDevice, decltype(&::hipSetDevice), required)                                                         \
  X(hipGetDevice, decltype(&::hipGetDevice), required)                                                         \
  X(hipDeviceGetName, decltype(&::hipDeviceGetName), required)                                                 \
  X(hipDeviceGetPCIBusId, decltype(&::hipDeviceGetPCIBusId), required)                                         \
  X(hipDeviceTotalMem, decltype(&::hipDeviceTotalMem), required)                                               \
  X(hipDeviceGetAttribute, decltype(&::hipDeviceGetAttribute), required)                                       \
  X(hipMemGetInfo, decltype(&::hipMemGetInfo), required)                                                       \
  X(hipFree, decltype(&::hipFree), required)                                                                   \
  X(hipHostFree, decltype(&::hipHostFree), required)                                                           \
  X(hipHostGetDevicePointer, decltype(&::hipHostGetDevicePointer), required)                                   \
  X(hipMemcpy, decltype(&::hipMemcpy), required)                                                               \
  X(hipMemcpyAsync, decltype(&::hipMemcpyAsync), required)                                                     \
  X(hipMemsetD8, decltype(&::hipMemsetD8), required)                                                           \
  X(hipMemsetD16, decltype(&::hipMemsetD16), required)                                                         \
  X(hipMemsetD32, decltype(&::hipMemsetD32), required)                                                         \
  X(hipMemsetD8Async, decltype(&::hipMemsetD8Async), required)                                                 \
  X(hipMemsetD16Async, decltype(&::hipMemsetD16Async), required)                                               \
  X(hipMemsetD32Async, decltype(&::hipMemsetD32Async), required)                                               \
  X(hipStreamCreateWithFlags, decltype(&::hipStreamCreateWithFlags), required)                                 \
  X(hipStreamDestroy, decltype(&::hipStreamDestroy), required)                                                 \
  X(hipStreamSynchronize, decltype(&::hipStreamSynchronize), required)                                         \
  X(hipStreamQuery, decltype(&::hipStreamQuery), required)                                                     \
  X(hipStreamWaitEvent, decltype(&::hipStreamWaitEvent), required)                                             \
  X(hipStreamAddCallback, decltype(&::hipStreamAddCallback), required)                                         \
  X(hipThreadExchangeStreamCaptureMode, decltype(&::hipThreadExchangeStreamCaptureMode), optional)             \
  X(hipStreamIsCapturing, decltype(&::hipStreamIsCapturing), optional)                                         \
  X(hipEventCreateWithFlags, decltype(&::hipEventCreateWithFlags), required)                                   \
  X(hipEventDestroy, decltype(&::hipEventDestroy), required)                                                   \
  X(hipEventRecord, decltype(&::hipEventRecord), required)                                                     \
  X(hipEventQuery, decltype(&::hipEventQuery), required)                                                       \
  X(hipEventSynchronize, decltype(&::hipEventSynchronize), required)                                           \
  X(hipEventElapsedTime, decltype(&::hipEventElapsedTime), required)                                           \
  X(hipDeviceGetUuid, decltype(&::hipDeviceGetUuid), optional)                                                 \
  X(hipDeviceCanAccessPeer, decltype(&::hipDeviceCanAccessPeer), optional)                                     \
  X(hipModuleLoadData, decltype(&::hipModuleLoadData), optional)                                               \
  X(hipModuleUnload, decltype(&::hipModuleUnload), optional)                                                   \
  X(hipModuleGetFunction, decltype(&::hipModuleGetFunction), optional)                                         \
  X(hipModuleLaunchKernel, decltype(&::hipModuleLaunchKernel), optional)                                       \
  /* Interop: checking and registering memory other code allocated. */                                         \
  X(hipPointerGetAttributes, decltype(&::hipPointerGetAttributes), optional)                                   \
  X(hipMemGetAddressRange, decltype(&::hipMemGetAddressRange), optional)                                       \
  X(hipHostRegister, decltype(&::hipHostRegister), optional)                                                   \
  X(hipHostUnregister, decltype(&::hipHostUnregister), optional)                                               \
  /* The header overloads these with templates in C++, so their prototypes are spelled out. */                 \
  X(hipMalloc, hipError_t (*)(void** pointer, std::size_t size), required)                                     \
  X(hipHostMalloc, hipError_t (*)(void** pointer, std::size_t size, unsigned int flags), required)             \
  X(hipMallocManaged, hipError_t (*)(void** pointer, std::size_t size, unsigned int flags), required)          \
  /* ROCm 6 changed hipDeviceProp_t and renamed the new layout's function; this one takes the layout of the */ \
  /* headers hal is built with (R0000: ROCm 5), exported before ROCm 6 as hipGetDeviceProperties. */           \
  X(hipGetDevicePropertiesR0000, hipError_t (*)(hipDeviceProp_t * properties, int device), required,           \
    "hipGetDevicePropertiesR0000", "hipGetDeviceProperties")

struct HipRuntimeApi {
  HAL_SYMBOL_FIELDS(HAL_HIP_RUNTIME_FUNCTIONS)
};

// The loaded runtime: library, function table and how it was found.
class HipRuntime : public VendorLibrary {
 public:
  // configured: the backend's `runtime` option (HAL_HIP_RUNTIME sets it; "" when unset).
  static LoadResult<HipRuntime> load(const ConfiguredPath& configured);
  // The search: the configured path, else $ROCM_PATH/lib,
  // /opt/rocm/lib, then the system's library path.
  static LibraryRequest library_request(const ConfiguredPath& configured);
  // Where load() would look, without loading anything: "$ROCM_PATH/lib,
  // /opt/rocm/lib, then libamdhip64.so.6, ... on the system library path".
  static std::string search_description();

  const HipRuntimeApi& api() const { return api_; }
  bool has_module_api() const {
    return api_.hipModuleLoadData && api_.hipModuleUnload && api_.hipModuleGetFunction && api_.hipModuleLaunchKernel;
  }

  // "hipErrorOutOfMemory (out of memory)" from the runtime itself.
  std::string describe(hipError_t error) const;
  // 50221153 -> "5.2.21153" (HIP_VERSION: major * 10^7 + minor * 10^5 + patch).
  static std::string format_version(int version);

 private:
  HipRuntimeApi api_;
};

}  // namespace hal::shims
