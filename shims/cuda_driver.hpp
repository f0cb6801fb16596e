// The CUDA driver API (libcuda.so.1), resolved at run time. cuda.h supplies
// the types and prototypes only: nothing here links against the driver.
#pragma once

#include <cuda.h>

#include <string>

#include "vendor_library.hpp"

namespace hal::shims {

// The driver's functions, as symbol_table.hpp lists them. The header maps
// some names to versioned ones (cuMemAlloc -> cuMemAlloc_v2); the field takes
// that prototype, cuGetProcAddress is asked for the base name (the field's)
// at the CUDA version whose ABI matches it, and the exported name is the
// fallback for drivers older than 11.3 that lack cuGetProcAddress. A second
// name is an earlier entry point of the same prototype, tried when the first
// is not found. Optional functions disable only the features that need them.
#define HAL_CUDA_DRIVER_FUNCTIONS(X)                                                                                   \
  X(cuDriverGetVersion, decltype(&::cuDriverGetVersion), required, {"cuDriverGetVersion", 2020})                       \
  X(cuDeviceGetCount, decltype(&::cuDeviceGetCount), required, {"cuDeviceGetCount", 2000})                             \
  X(cuDeviceGet, decltype(&::cuDeviceGet), required, {"cuDeviceGet", 2000})                                            \
  X(cuDeviceGetName, decltype(&::cuDeviceGetName), required, {"cuDeviceGetName", 2000})                                \
  /* _v2 (11.4: adds MIG instance UUIDs) or, where a CUDA-compatible SDK's libcuda stops at 11.3, the original. */     \
  X(cuDeviceGetUuid, decltype(&::cuDeviceGetUuid), required, {"cuDeviceGetUuid_v2", 11040}, {"cuDeviceGetUuid", 9020}) \
  X(cuDeviceTotalMem, decltype(&::cuDeviceTotalMem), required, {"cuDeviceTotalMem_v2", 3020})                          \
  X(cuDeviceGetAttribute, decltype(&::cuDeviceGetAttribute), required, {"cuDeviceGetAttribute", 2000})                 \
  X(cuDeviceGetPCIBusId, decltype(&::cuDeviceGetPCIBusId), required, {"cuDeviceGetPCIBusId", 4010})                    \
  X(cuDevicePrimaryCtxRetain, decltype(&::cuDevicePrimaryCtxRetain), required, {"cuDevicePrimaryCtxRetain", 7000})     \
  X(cuDevicePrimaryCtxRelease, decltype(&::cuDevicePrimaryCtxRelease), required,                                       \
    {"cuDevicePrimaryCtxRelease_v2", 11000})                                                                           \
  X(cuCtxGetCurrent, decltype(&::cuCtxGetCurrent), required, {"cuCtxGetCurrent", 4000})                                \
  X(cuCtxSetCurrent, decltype(&::cuCtxSetCurrent), required, {"cuCtxSetCurrent", 4000})                                \
  X(cuMemGetInfo, decltype(&::cuMemGetInfo), required, {"cuMemGetInfo_v2", 3020})                                      \
  X(cuMemAlloc, decltype(&::cuMemAlloc), required, {"cuMemAlloc_v2", 3020})                                            \
  X(cuMemFree, decltype(&::cuMemFree), required, {"cuMemFree_v2", 3020})                                               \
  X(cuMemHostAlloc, decltype(&::cuMemHostAlloc), required, {"cuMemHostAlloc", 2020})                                   \
  X(cuMemFreeHost, decltype(&::cuMemFreeHost), required, {"cuMemFreeHost", 2000})                                      \
  X(cuMemHostGetDevicePointer, decltype(&::cuMemHostGetDevicePointer), required,                                       \
    {"cuMemHostGetDevicePointer_v2", 3020})                                                                            \
  X(cuMemAllocManaged, decltype(&::cuMemAllocManaged), required, {"cuMemAllocManaged", 6000})                          \
  X(cuMemcpyHtoD, decltype(&::cuMemcpyHtoD), required, {"cuMemcpyHtoD_v2", 3020})                                      \
  X(cuMemcpyDtoH, decltype(&::cuMemcpyDtoH), required, {"cuMemcpyDtoH_v2", 3020})                                      \
  X(cuMemcpyDtoD, decltype(&::cuMemcpyDtoD), required, {"cuMemcpyDtoD_v2", 3020})                                      \
  X(cuMemcpyHtoDAsync, decltype(&::cuMemcpyHtoDAsync), required, {"cuMemcpyHtoDAsync_v2", 3020})                       \
  X(cuMemcpyDtoHAsync, decltype(&::cuMemcpyDtoHAsync), required, {"cuMemcpyDtoHAsync_v2", 3020})                       \
  X(cuMemcpyDtoDAsync, decltype(&::cuMemcpyDtoDAsync), required, {"cuMemcpyDtoDAsync_v2", 3020})                       \
  X(cuMemsetD8, decltype(&::cuMemsetD8), required, {"cuMemsetD8_v2", 3020})                                            \
  X(cuMemsetD16, decltype(&::cuMemsetD16), required, {"cuMemsetD16_v2", 3020})                                         \
  X(cuMemsetD32, decltype(&::cuMemsetD32), required, {"cuMemsetD32_v2", 3020})                                         \
  X(cuMemsetD8Async, decltype(&::cuMemsetD8Async), required, {"cuMemsetD8Async", 3020})                                \
  X(cuMemsetD16Async, decltype(&::cuMemsetD16Async), required, {"cuMemsetD16Async", 3020})                             \
  X(cuMemsetD32Async, decltype(&::cuMemsetD32Async), required, {"cuMemsetD32Async", 3020})                             \
  X(cuStreamCreate, decltype(&::cuStreamCreate), required, {"cuStreamCreate", 2000})                                   \
  X(cuStreamDestroy, decltype(&::cuStreamDestroy), required, {"cuStreamDestroy_v2", 4000})                             \
  X(cuStreamSynchronize, decltype(&::cuStreamSynchronize), required, {"cuStreamSynchronize", 2000})                    \
  X(cuStreamQuery, decltype(&::cuStreamQuery), required, {"cuStreamQuery", 2000})                                      \
  X(cuStreamWaitEvent, decltype(&::cuStreamWaitEvent), required, {"cuStreamWaitEvent", 3020})                          \
  X(cuLaunchHostFunc, decltype(&::cuLaunchHostFunc), required, {"cuLaunchHostFunc", 10000})                            \
  X(cuStreamAddCallback, decltype(&::cuStreamAddCallback), optional, {"cuStreamAddCallback", 5000})                    \
  X(cuThreadExchangeStreamCaptureMode, decltype(&::cuThreadExchangeStreamCaptureMode), optional,                       \
    {"cuThreadExchangeStreamCaptureMode", 10010})                                                                      \
  X(cuStreamIsCapturing, decltype(&::cuStreamIsCapturing), optional, {"cuStreamIsCapturing", 10000})                   \
  X(cuEventCreate, decltype(&::cuEventCreate), required, {"cuEventCreate", 2000})                                      \
  X(cuEventDestroy, decltype(&::cuEventDestroy), required, {"cuEventDestroy_v2", 4000})                                \
  X(cuEventRecord, decltype(&::cuEventRecord), required, {"cuEventRecord", 2000})                                      \
  X(cuEventQuery, decltype(&::cuEventQuery), required, {"cuEventQuery", 2000})                                         \
  X(cuEventSynchronize, decltype(&::cuEventSynchronize), required, {"cuEventSynchronize", 2000})                       \
  /* The 12.8 _v2 has the same prototype; the original is in every driver. */                                          \
  X(cuEventElapsedTime, decltype(&::cuEventElapsedTime), required, {"cuEventElapsedTime", 2000})                       \
  X(cuGetErrorName, decltype(&::cuGetErrorName), required, {"cuGetErrorName", 6000})                                   \
  X(cuGetErrorString, decltype(&::cuGetErrorString), required, {"cuGetErrorString", 6000})                             \
  X(cuDeviceCanAccessPeer, decltype(&::cuDeviceCanAccessPeer), optional, {"cuDeviceCanAccessPeer", 4000})              \
  X(cuModuleLoadData, decltype(&::cuModuleLoadData), optional, {"cuModuleLoadData", 2000})                             \
  X(cuModuleUnload, decltype(&::cuModuleUnload), optional, {"cuModuleUnload", 2000})                                   \
  X(cuModuleGetFunction, decltype(&::cuModuleGetFunction), optional, {"cuModuleGetFunction", 2000})                    \
  X(cuLaunchKernel, decltype(&::cuLaunchKernel), optional, {"cuLaunchKernel", 4000})                                   \
  X(cuMemAllocAsync, decltype(&::cuMemAllocAsync), optional, {"cuMemAllocAsync", 11020})                               \
  X(cuMemFreeAsync, decltype(&::cuMemFreeAsync), optional, {"cuMemFreeAsync", 11020})                                  \
  /* hal's own pool for workspaces, with a release threshold of its own. */                                            \
  X(cuMemPoolCreate, decltype(&::cuMemPoolCreate), optional, {"cuMemPoolCreate", 11020})                               \
  X(cuMemPoolDestroy, decltype(&::cuMemPoolDestroy), optional, {"cuMemPoolDestroy", 11020})                            \
  X(cuMemPoolSetAttribute, decltype(&::cuMemPoolSetAttribute), optional, {"cuMemPoolSetAttribute", 11020})             \
  X(cuMemAllocFromPoolAsync, decltype(&::cuMemAllocFromPoolAsync), optional, {"cuMemAllocFromPoolAsync", 11020})       \
  /* Kernels that ask for more than 48 KiB of dynamic shared memory. */                                                \
  X(cuFuncSetAttribute, decltype(&::cuFuncSetAttribute), optional, {"cuFuncSetAttribute", 9000})                       \
  /* Interop: checking and registering memory other code allocated. */                                                 \
  X(cuPointerGetAttributes, decltype(&::cuPointerGetAttributes), optional, {"cuPointerGetAttributes", 7000})           \
  X(cuMemHostRegister, decltype(&::cuMemHostRegister), optional, {"cuMemHostRegister_v2", 6050})                       \
  X(cuMemHostUnregister, decltype(&::cuMemHostUnregister), optional, {"cuMemHostUnregister", 4000})

struct CudaDriverApi {
  // Found by plain dlsym, with cuGetProcAddress: they are how the rest is found.
  decltype(&::cuInit) cuInit = nullptr;
  HAL_SYMBOL_FIELDS(HAL_CUDA_DRIVER_FUNCTIONS)
};

// The loaded driver: library, function table and how it was found.
class CudaDriver : public VendorLibrary {
 public:
  // NVIDIA's defaults: libcuda.so.1 from the `driver` option (HAL_CUDA_DRIVER
  // sets it; "" when unset), else the usual search.
  static LibraryRequest nvidia_request(const ConfiguredPath& configured);
  static LoadResult<CudaDriver> load(const ConfiguredPath& configured);
  // Any CUDA driver API library (a CUDA-compatible SDK's own libcuda).
  static LoadResult<CudaDriver> load(const LibraryRequest& request);

  const CudaDriverApi& api() const { return api_; }
  // "cuGetProcAddress_v2", "cuGetProcAddress" or "dlsym": how symbols were found.
  const std::string& resolution_method() const { return resolution_method_; }
  bool has_module_api() const {
    return api_.cuModuleLoadData && api_.cuModuleUnload && api_.cuModuleGetFunction && api_.cuLaunchKernel;
  }

  // "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" from the driver itself.
  std::string describe(CUresult result) const;

 private:
  CudaDriverApi api_;
  std::string resolution_method_;
};

}  // namespace hal::shims
