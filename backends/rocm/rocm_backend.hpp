// Internal types of the ROCm backend: the HIP runtime through shims/, the
// device current per calling thread, and the ABI's opaque handles.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "current_device.hpp"
#include "device_description.hpp"
#include "gpu_attention.hpp"
#include "gpu_telemetry.hpp"
#include "gpu_vendor.hpp"
#include "imported_memory.hpp"
#include "hal/backend_abi.h"
#include "hip_runtime.hpp"
#include "kernel_functions.hpp"
#include "last_error.hpp"
#include "nccl.hpp"
#include "nccl_collectives.hpp"

namespace hal::rocm {

using backend::fail;
using backend::succeed;

// The hal_status a hipError_t stands for.
hal_status status_of(hipError_t error);

struct RocmDevice : backend::GpuDevice {
  int ordinal = 0;
  std::string gcn_arch_name;
  // The embedded kernels loaded for this device on first use, or null with the reason.
  std::once_flag kernels_once;
  hipModule_t kernel_module = nullptr;
  std::string kernel_status;
  backend::KernelFunctions<hipFunction_t> kernel_functions;  // by name, from kernel_module
};

struct Context {
  void (*log)(void*, hal_log_level, const char*) = nullptr;
  void* log_user_data = nullptr;
  std::unique_ptr<shims::HipRuntime> runtime;
  int runtime_version = 0, driver_version = 0;
  std::vector<std::unique_ptr<RocmDevice>> devices;
  std::unique_ptr<backend::GpuAttention> attention;
  std::unique_ptr<shims::Nccl> rccl;  // optional: collectives need it
  std::string rccl_status;            // where it was found, or why not
  // AMD SMI or rocm_smi, opened on the first snapshot (telemetry.cpp).
  std::unique_ptr<backend::LazyTelemetry> telemetry;
  // Imported memory freed while work on it may still run (gpu_memory.hpp).
  mutable backend::PendingReleases pending_releases;
  // Collectives on `rccl`; last, so it goes before what it uses.
  std::unique_ptr<backend::NcclCollectives> collectives;

  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  const shims::HipRuntimeApi& api() const { return runtime->api(); }
  std::string backend_name() const { return "rocm"; }
  void log_message(hal_log_level level, const std::string& message) const {
    if (log != nullptr) log(log_user_data, level, message.c_str());
  }
  // HAL_OK for hipSuccess; otherwise records "<operation> failed: NAME
  // (text)" with the hipError_t as native code and returns the mapped status.
  hal_status check(hipError_t error, std::string_view operation) const;
  // Makes the device current on the calling thread (HIP's current device is
  // per thread) until the returned scope ends, which puts back the thread's
  // previous device (nothing to do when it was this one).
  backend::CurrentDevice current_device(std::uint32_t device) const;
  std::string device_id(std::uint32_t device) const { return "rocm:" + std::to_string(device); }
  hal_status check_device(std::uint32_t device) const;
  // As the CUDA core's: graph capture on other threads tolerates this thread's queries.
  void relax_capture_mode() const;
};

// Discovers the devices and their identity; the kernels load on first use.
hal_status discover_devices(Context& context);
// Why the device can never have the embedded kernels (none built, no
// module API, no code object for its architecture), known without loading.
std::string kernels_missing(const Context& context, const RocmDevice& device);
// Loads the embedded code object on the device the first time it is asked
// (thread-safe); then whether it loaded, kernel_status saying why not.
bool kernels_usable(const Context& context, std::uint32_t device);
// The named kernel of the device's code object (loaded if need be), resolved once; fails
// with the device's kernel_status when it has none.
hal_status find_kernel(const Context& context, std::uint32_t device, const char* name, hipFunction_t* function);
// "gfx90a:sramecc+:xnack-" -> "gfx90a"
std::string base_architecture(std::string_view gcn_arch_name);
// The architectures this plugin carries code objects for ("" when built without hipcc).
std::string embedded_architectures();
// Telemetry (telemetry.cpp): AMD SMI or rocm_smi, not opened until the first snapshot.
// amd_smi, rocm_smi: the libraries' configured paths ("" when unset).
std::unique_ptr<backend::LazyTelemetry> make_telemetry(const shims::ConfiguredPath& amd_smi,
                                                       const shims::ConfiguredPath& rocm_smi);

}  // namespace hal::rocm

struct hal_buffer : hal::backend::GpuBuffer<hal::rocm::Context, void*> {
  void* base = nullptr;  // what the runtime returned; freed
};

struct hal_stream : hal::backend::GpuStream<hal::rocm::Context, hipStream_t> {};
struct hal_event : hal::backend::GpuEvent<hal::rocm::Context, hipEvent_t> {};

struct hal_backend_context {
  hal::rocm::Context rocm;
};
