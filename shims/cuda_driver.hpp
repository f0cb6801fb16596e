// The CUDA driver API (libcuda.so.1), resolved at run time. cuda.h supplies
// the types and prototypes only: nothing here links against the driver.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "library_loader.hpp"
#include "symbol_table.hpp"

namespace hal::shims {

// X(function, exported name, CUDA version, required). The header maps some
// names to versioned ones (cuMemAlloc -> cuMemAlloc_v2); the field takes that
// prototype, cuGetProcAddress is asked for the base name at the CUDA version
// whose ABI matches it, and the exported name is the fallback for drivers
// older than 11.3 that lack cuGetProcAddress. Optional functions disable
// only the features that need them. older_names (cuda_driver.cpp) lists the
// earlier entry points of the same prototype tried when one is not found.
#define HAL_CUDA_DRIVER_FUNCTIONS(X)                                                   \
  X(cuDriverGetVersion, "cuDriverGetVersion", 2020, true)                              \
  X(cuDeviceGetCount, "cuDeviceGetCount", 2000, true)                                  \
  X(cuDeviceGet, "cuDeviceGet", 2000, true)                                            \
  X(cuDeviceGetName, "cuDeviceGetName", 2000, true)                                    \
  /* _v2 or, where a CUDA-compatible SDK's libcuda lacks it, the original. */        \
  X(cuDeviceGetUuid, "cuDeviceGetUuid_v2", 11040, true)                                \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 3020, true)                               \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000, true)                          \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010, true)                            \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, true)                  \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 11000, true)            \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, true)                                    \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, true)                                    \
  X(cuMemGetInfo, "cuMemGetInfo_v2", 3020, true)                                       \
  X(cuMemAlloc, "cuMemAlloc_v2", 3020, true)                                           \
  X(cuMemFree, "cuMemFree_v2", 3020, true)                                             \
  X(cuMemHostAlloc, "cuMemHostAlloc", 2020, true)                                      \
  X(cuMemFreeHost, "cuMemFreeHost", 2000, true)                                        \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 3020, true)             \
  X(cuMemAllocManaged, "cuMemAllocManaged", 6000, true)                                \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 3020, true)                                       \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", 3020, true)                                       \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", 3020, true)                                       \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 3020, true)                             \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 3020, true)                             \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 3020, true)                             \
  X(cuMemsetD8, "cuMemsetD8_v2", 3020, true)                                           \
  X(cuMemsetD16, "cuMemsetD16_v2", 3020, true)                                         \
  X(cuMemsetD32, "cuMemsetD32_v2", 3020, true)                                         \
  X(cuMemsetD8Async, "cuMemsetD8Async", 3020, true)                                    \
  X(cuMemsetD16Async, "cuMemsetD16Async", 3020, true)                                  \
  X(cuMemsetD32Async, "cuMemsetD32Async", 3020, true)                                  \
  X(cuStreamCreate, "cuStreamCreate", 2000, true)                                      \
  X(cuStreamDestroy, "cuStreamDestroy_v2", 4000, true)                                 \
  X(cuStreamSynchronize, "cuStreamSynchronize", 2000, true)                            \
  X(cuStreamQuery, "cuStreamQuery", 2000, true)                                        \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, true)                                \
  X(cuLaunchHostFunc, "cuLaunchHostFunc", 10000, true)                                 \
  X(cuStreamAddCallback, "cuStreamAddCallback", 5000, false)                           \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, false) \
  X(cuEventCreate, "cuEventCreate", 2000, true)                                        \
  X(cuEventDestroy, "cuEventDestroy_v2", 4000, true)                                   \
  X(cuEventRecord, "cuEventRecord", 2000, true)                                        \
  X(cuEventQuery, "cuEventQuery", 2000, true)                                          \
  X(cuEventSynchronize, "cuEventSynchronize", 2000, true)                              \
  /* The 12.8 _v2 has the same prototype; the original is in every driver. */          \
  X(cuEventElapsedTime, "cuEventElapsedTime", 2000, true)                              \
  X(cuGetErrorName, "cuGetErrorName", 6000, true)                                      \
  X(cuGetErrorString, "cuGetErrorString", 6000, true)                                  \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 4000, false)                       \
  X(cuModuleLoadData, "cuModuleLoadData", 2000, false)                                 \
  X(cuModuleUnload, "cuModuleUnload", 2000, false)                                     \
  X(cuModuleGetFunction, "cuModuleGetFunction", 2000, false)                           \
  X(cuLaunchKernel, "cuLaunchKernel", 4000, false)                                     \
  X(cuMemAllocAsync, "cuMemAllocAsync", 11020, false)                                  \
  X(cuMemFreeAsync, "cuMemFreeAsync", 11020, false)                                    \
  /* hal's own pool for workspaces, with a release threshold of its own. */             \
  X(cuMemPoolCreate, "cuMemPoolCreate", 11020, false)                                  \
  X(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, false)                                \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, false)                      \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false)                  \
  /* Kernels that ask for more than 48 KiB of dynamic shared memory. */                \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", 9000, false)                             \
  /* Interop: checking and registering memory other code allocated. */                 \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, false)                     \
  X(cuMemHostRegister, "cuMemHostRegister_v2", 6050, false)                            \
  X(cuMemHostUnregister, "cuMemHostUnregister", 4000, false)                           \
  X(cuCtxSynchronize, "cuCtxSynchronize", 2000, false)

struct CudaDriverApi {
  decltype(&::cuInit) cuInit = nullptr;
#define HAL_CUDA_DRIVER_FIELD(function, exported, version, required) decltype(&::function) function = nullptr;
  HAL_CUDA_DRIVER_FUNCTIONS(HAL_CUDA_DRIVER_FIELD)
#undef HAL_CUDA_DRIVER_FIELD
};

// The loaded driver: library, function table and how it was found.
class CudaDriver {
 public:
  struct LoadResult {
    std::unique_ptr<CudaDriver> driver;  // null on failure
    bool library_missing = false;        // true: no library; false with no driver: unusable library
    std::string message;                 // why it failed, every path tried included
  };
  // NVIDIA's defaults: libcuda.so.1, HAL_CUDA_DRIVER, then the `driver`
  // option (configured_path, "" when unset), then the usual search.
  static LibraryRequest nvidia_request(const std::string& configured_path);
  static LoadResult load(const std::string& configured_path);
  // Any CUDA driver API library (a CUDA-compatible SDK's own libcuda).
  static LoadResult load(const LibraryRequest& request);

  const CudaDriverApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  // "cuGetProcAddress_v2", "cuGetProcAddress" or "dlsym": how symbols were found.
  const std::string& resolution_method() const { return resolution_method_; }
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  bool has_module_api() const {
    return api_.cuModuleLoadData && api_.cuModuleUnload && api_.cuModuleGetFunction && api_.cuLaunchKernel;
  }

  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" from the driver itself.
  std::string describe(CUresult result) const;

 private:
  SharedLibrary library_;
  CudaDriverApi api_;
  std::string resolution_method_;
  std::vector<std::string> missing_optional_;
};

}  // namespace hal::shims
