// hipError_t -> hal_status, and the device current on the calling thread.
#include "rocm_backend.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hal::rocm {
namespace {

// What the user can do about a failure of this kind.
constexpr backend::VendorHints hints{
    "free device memory or allocate less",
    "the HIP context is unusable after this error; restart the process and check the device (rocm-smi, dmesg for "
    "amdgpu errors)",
    "check the ROCm installation, /dev/kfd access and HIP_VISIBLE_DEVICES", "this device or runtime cannot do it"};

}  // namespace

hal_status status_of(hipError_t error) {
  switch (error) {
    case hipSuccess: return HAL_OK;
    case hipErrorOutOfMemory: return HAL_ERROR_OUT_OF_MEMORY;
    case hipErrorNotReady: return HAL_ERROR_TIMEOUT;
    case hipErrorInvalidValue:
    case hipErrorInvalidDevice:
    case hipErrorInvalidDevicePointer:
    case hipErrorInvalidMemcpyDirection:
    case hipErrorInvalidContext:
    case hipErrorInvalidHandle:
    case hipErrorIllegalState:
    case hipErrorNotFound:
    case hipErrorInvalidSymbol:
    case hipErrorInvalidConfiguration:
      return HAL_ERROR_INVALID_ARGUMENT;
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorNotInitialized:
      return HAL_ERROR_NOT_PRESENT;
    case hipErrorNotSupported:
    case hipErrorNoBinaryForGpu:
    case hipErrorInvalidImage:
    case hipErrorInvalidKernelFile:
    case hipErrorSharedObjectInitFailed:
    case hipErrorSharedObjectSymbolNotFound:
    case hipErrorInvalidDeviceFunction:
    case hipErrorPeerAccessUnsupported:
    case hipErrorLaunchOutOfResources:
      return HAL_ERROR_UNSUPPORTED;
    // Sticky errors: the device's context and everything in it are gone.
    case hipErrorIllegalAddress:
    case hipErrorLaunchFailure:
    case hipErrorLaunchTimeOut:
    case hipErrorAssert:
    case hipErrorECCNotCorrectable:
    case hipErrorContextIsDestroyed:
    case hipErrorPriorLaunchFailure:
      return HAL_ERROR_DEVICE_LOST;
    case hipErrorDeinitialized: return HAL_ERROR_ABORTED;
    default: return HAL_ERROR_INTERNAL;
  }
}

hal_status Context::check(hipError_t error, std::string_view operation) const {
  if (error == hipSuccess) return HAL_OK;
  return backend::fail_vendor_call(status_of(error), operation, runtime->describe(error), error, hints);
}

void Context::relax_capture_mode() const {
  hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
  // A failure leaves the thread's mode as it was: nothing to undo or report.
  if (api().hipThreadExchangeStreamCaptureMode != nullptr)
    static_cast<void>(api().hipThreadExchangeStreamCaptureMode(&mode));
}

hal_status Context::check_device(std::uint32_t device) const {
  if (device >= devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range; there are " +
                                                std::to_string(devices.size()) + " ROCm devices");
  return HAL_OK;
}

backend::CurrentDevice Context::current_device(std::uint32_t index) const {
  const int ordinal = devices[index]->ordinal;
  int previous = -1;
  if (hipError_t error = api().hipGetDevice(&previous); error != hipSuccess)
    return backend::CurrentDevice(check(error, "asking the calling thread's current device"));
  if (previous == ordinal) return backend::CurrentDevice(HAL_OK);
  if (hipError_t error = api().hipSetDevice(ordinal); error != hipSuccess)
    return backend::CurrentDevice(check(error, "making " + device_id(index) + " current on this thread"));
  return backend::CurrentDevice([runtime = &api(), previous] { (void)runtime->hipSetDevice(previous); });
}

Context::~Context() {
  if (!runtime) return;
  attention.reset();  // before the modules it launches from go
  for (std::uint32_t index = 0; index < devices.size(); ++index) {
    if (devices[index]->kernel_module == nullptr) continue;
    // At process exit the runtime may already be torn down; nothing to report then.
    if (const backend::CurrentDevice scope = current_device(index)) (void)api().hipModuleUnload(devices[index]->kernel_module);
  }
}

}  // namespace hal::rocm
