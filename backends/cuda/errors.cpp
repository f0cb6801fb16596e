// CUresult -> hal_status and the primary context made current per entry point; the last error
// itself lives in backends/gpu.
#include "attention.hpp"
#include "cuda_backend.hpp"
#include "kernels.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hal::cuda {
namespace {

// What the user can do about a failure of this kind.
constexpr backend::VendorHints hints{
    "free device memory or allocate less",
    "the CUDA context is unusable after this error; restart the process and check the device (nvidia-smi, dmesg "
    "for Xid errors)",
    "check the driver installation and CUDA_VISIBLE_DEVICES", "this device or driver cannot do it"};

// CUDA_ERROR_INSUFFICIENT_DRIVER: older drivers return it, CUDA 13's header
// no longer names it.
constexpr CUresult insufficient_driver = static_cast<CUresult>(35);

}  // namespace

hal_status status_of(CUresult result) {
  if (result == insufficient_driver) return HAL_ERROR_NOT_PRESENT;
  switch (result) {
    case CUDA_SUCCESS: return HAL_OK;
    case CUDA_ERROR_OUT_OF_MEMORY: return HAL_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_NOT_READY: return HAL_ERROR_TIMEOUT;
    case CUDA_ERROR_TIMEOUT: return HAL_ERROR_TIMEOUT;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_ILLEGAL_STATE:
      return HAL_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
      return HAL_ERROR_NOT_PRESENT;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return HAL_ERROR_UNSUPPORTED;
    // Sticky errors: the context and everything in it are gone.
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return HAL_ERROR_DEVICE_LOST;
    case CUDA_ERROR_DEINITIALIZED: return HAL_ERROR_ABORTED;
    default: return HAL_ERROR_INTERNAL;
  }
}

hal_status Context::check(CUresult result, std::string_view operation) const {
  if (result == CUDA_SUCCESS) return HAL_OK;
  return backend::fail_vendor_call(status_of(result), operation, driver->describe(result), result, hints);
}

void Context::relax_capture_mode() const {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (api().cuThreadExchangeStreamCaptureMode != nullptr) api().cuThreadExchangeStreamCaptureMode(&mode);
}

hal_status Context::check_device(std::uint32_t device) const {
  if (device >= devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range; the " +
                                                profile.backend + " backend has " + std::to_string(devices.size()) +
                                                " devices");
  return HAL_OK;
}

backend::CurrentDevice Context::current_device(std::uint32_t index) const {
  CudaDevice& device = *devices[index];
  std::call_once(device.context_once, [&] {
    device.context_result = api().cuDevicePrimaryCtxRetain(&device.context, device.handle);
    device.context_held.store(device.context_result == CUDA_SUCCESS, std::memory_order_release);
  });
  if (device.context_result != CUDA_SUCCESS)
    return backend::CurrentDevice(check(device.context_result, "retaining the primary context of " + device_id(index)));
  CUcontext previous = nullptr;
  if (CUresult result = api().cuCtxGetCurrent(&previous); result != CUDA_SUCCESS)
    return backend::CurrentDevice(check(result, "asking the calling thread's current context"));
  if (previous == device.context) return backend::CurrentDevice(HAL_OK);
  if (CUresult result = api().cuCtxSetCurrent(device.context); result != CUDA_SUCCESS)
    return backend::CurrentDevice(check(result, "making the context of " + device_id(index) + " current on this thread"));
  return backend::CurrentDevice([driver = &api(), previous] { driver->cuCtxSetCurrent(previous); });
}

Context::~Context() {
  if (!driver) return;
  destroy_blas_handles(*this);  // cuBLAS handles need the contexts released below
  fused_attention.reset();      // so do the cuDNN handles
  attention.reset();
  for (std::uint32_t index = 0; index < devices.size(); ++index) unload_kernels(*this, index);
  for (const auto& device : devices) {
    destroy_scratch_pool(*this, *device);
    // At process exit the driver may already be torn down; nothing to report then.
    if (device->context != nullptr) api().cuDevicePrimaryCtxRelease(device->handle);
  }
}

}  // namespace hal::cuda
