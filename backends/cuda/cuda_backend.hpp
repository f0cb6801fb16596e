// Internal types of the CUDA core (hal_cuda_core): the driver API through
// shims/, one primary context per device, and the ABI's opaque handles. Two
// plugins are built on it, cuda and ppu; a Profile says what differs. The
// engines reach all of it through CudaVendor (vendor.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cublas.hpp"
#include "cuda_driver.hpp"
#include "cudnn.hpp"
#include "current_device.hpp"
#include "fused_attention.hpp"
#include "gpu_attention.hpp"
#include "gpu_telemetry.hpp"
#include "gpu_vendor.hpp"
#include "hal/backend_abi.h"
#include "kernel_functions.hpp"
#include "last_error.hpp"
#include "nccl.hpp"
#include "nccl_collectives.hpp"
#include "nvrtc.hpp"

namespace hal::cuda {

using backend::fail;
using backend::read_last_error;
using backend::succeed;
// The hal_status a CUresult stands for.
hal_status status_of(CUresult result);

struct CudaDevice : backend::GpuDevice {
  CudaDevice() { warp_size = 32; }
  CUdevice handle = 0;
  int compute_major = 0, compute_minor = 0;
  // Stream-ordered allocation (cuMemAllocFromPoolAsync): the driver has it
  // and the device says CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED (some don't).
  bool memory_pools = false;
  // Scratch comes from a pool of hal's own, made on first use: the default
  // pool's release threshold (0) belongs to the whole process, and at 0 a
  // workspace is unmapped at every synchronize and mapped again by the next
  // call. This pool's threshold is the largest scratch asked of it, so
  // repeated calls reuse one reservation and hold no more than a call needs.
  std::mutex scratch_pool_mutex;
  CUmemoryPool scratch_pool = nullptr;
  std::uint64_t scratch_pool_threshold = 0;

  // Kernels from the embedded image (kernels.cpp), loaded on first use (so
  // discovery needs no context); usable only when loaded and verified.
  std::once_flag kernels_once;
  CUmodule kernel_module = nullptr;
  CUfunction softmax_rows_f32 = nullptr;
  bool kernels_usable = false;
  std::string kernels_status;
  backend::KernelFunctions<CUfunction> kernel_functions;  // by name, from kernel_module

  // The primary context, retained on the first entry point that works on the
  // device: creating one costs time and device memory, so discovery and
  // device info never do.
  std::once_flag context_once;
  CUcontext context = nullptr;
  CUresult context_result = CUDA_SUCCESS;
  std::atomic<bool> context_held{false};  // retained: free memory can be read without creating it
};

// The math path's cuBLAS handles, one per device, made on first use; a
// handle's stream is state shared by its callers, hence the lock.
struct BlasHandles {
  std::mutex mutex;
  std::vector<cublasHandle_t> per_device;
  bool allow_tf32 = false;  // HAL_CUBLAS_TF32=1: TF32 tensor cores for the f32 GEMMs
};

struct Context;

// What differs between the plugins built on this core: where the vendor
// libraries are searched and how a device is identified and reported. Data,
// plus the one step that differs in code (identify).
struct Profile {
  std::string backend;  // the plugin's name: "cuda", "ppu"; device ids in messages are "<backend>:<index>"
  shims::LibraryRequest driver;  // the CUDA driver API (libcuda)
  shims::LibraryRequest dnn;     // a cuDNN-compatible library
  shims::LibraryRequest collectives;  // an NCCL-compatible library
  shims::ConfiguredPath blas;         // a cuBLAS-compatible library's path; empty: the usual search
  // NVRTC's path (the `nvrtc` option); empty: the usual search. Looked for once the DNN library is loaded,
  // for the CUDA release that library was built for.
  shims::ConfiguredPath runtime_compiler;
  // The math path lets cuBLAS use TF32 for float32 GEMMs (the `cublas_tf32` option is "1").
  bool blas_allows_tf32 = false;
  // When set, that library is not looked for and this is the reason.
  std::string dnn_absent, collectives_absent, blas_absent, runtime_compiler_absent;
  // The NVML-family management library telemetry reads, opened on the
  // first snapshot, and its exported names' prefix ("nvml", "hgml").
  shims::LibraryRequest telemetry;
  std::string telemetry_prefix = "nvml";
  // Backends whose view of these same devices is not listed (hal_device_info_v1::supersedes).
  std::string supersedes;
  // Sets the device's vendor and NUMA node and adds its version axes and
  // identity capabilities (model, what its compute capability means). Runs
  // once the driver's identity, PCI bus id and attributes are read.
  std::function<void(const Context&, CudaDevice&)> identify;
};

struct Context {
  Profile profile;
  void (*log)(void*, hal_log_level, const char*) = nullptr;
  void* log_user_data = nullptr;
  std::unique_ptr<shims::CudaDriver> driver;
  std::unique_ptr<shims::Cudnn> cudnn;
  std::string cudnn_status;  // where it was found, or why not
  // NVRTC, which cuDNN compiles its SDPA engines with; fused attention declines without it.
  std::unique_ptr<shims::Nvrtc> nvrtc;
  std::string nvrtc_status;
  std::unique_ptr<shims::Nccl> nccl;
  std::string nccl_status;
  std::unique_ptr<shims::Cublas> cublas;  // the math attention path's GEMMs
  std::string cublas_status;
  mutable BlasHandles blas_handles;
  // cuDNN's SDPA (cudnn_attention.cpp); it says itself when it cannot run.
  std::unique_ptr<backend::FusedAttention> fused_attention;
  std::unique_ptr<backend::GpuAttention> attention;
  int driver_version = 0;
  std::vector<std::unique_ptr<CudaDevice>> devices;
  std::unique_ptr<backend::LazyTelemetry> telemetry;  // profile.telemetry, opened when first read
  // Imported memory freed while work on it may still run (gpu_memory.hpp).
  mutable backend::PendingReleases pending_releases;
  // Collectives on `nccl`; last, so it goes before what it uses.
  std::unique_ptr<backend::NcclCollectives> collectives;

  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  const shims::CudaDriverApi& api() const { return driver->api(); }
  const std::string& backend_name() const { return profile.backend; }
  void log_message(hal_log_level level, const std::string& message) const {
    if (log != nullptr) log(log_user_data, level, message.c_str());
  }
  // HAL_OK for CUDA_SUCCESS; otherwise records "<operation> failed: NAME
  // (text)" with the CUresult as native code and returns the mapped status.
  hal_status check(CUresult result, std::string_view operation) const;
  // Retains the device's primary context if needed and makes it current on
  // the calling thread until the returned scope ends, which puts back the
  // thread's previous context (nothing to do when it was this one).
  backend::CurrentDevice current_device(std::uint32_t device) const;
  hal_status check_device(std::uint32_t device) const;
  // Lets graph capture on other threads tolerate this thread's queries (a
  // watchdog's cuEventQuery would otherwise invalidate a global-mode
  // capture); a driver without capture modes has nothing to relax.
  void relax_capture_mode() const;
  // "cuda:0", "ppu:1": how messages name a device.
  std::string device_id(std::uint32_t device) const { return profile.backend + ":" + std::to_string(device); }
};

// Scratch memory for work on a stream (attention workspaces): in stream
// order from hal's scratch pool (CudaDevice::scratch_pool) where the device
// has memory pools, else cuMemAlloc, freed once the stream has finished the
// work that uses it. The device's context must be current.
hal_status allocate_scratch(const Context& context, std::uint32_t device, CUstream stream, std::size_t bytes,
                            CUdeviceptr* address, std::string_view what);
hal_status release_scratch(const Context& context, std::uint32_t device, CUstream stream, CUdeviceptr address,
                           std::string_view what);
// At teardown, before the device's context is released.
void destroy_scratch_pool(const Context& context, CudaDevice& device);

// Discovers the devices and their identity; fills context.devices.
hal_status discover_devices(Context& context);
// 12040 -> "12.4"
std::string format_cuda_version(int version);

// Opens context.profile's driver and optional libraries, makes the engines
// and lists the devices (core.cpp). HAL_ERROR_NOT_PRESENT when the driver is
// missing.
hal_status open_context(hal_backend_context& backend, const hal_backend_init_v1& init);
// A plugin's initialize after it made its profile: a backend context with
// that profile, opened, handed to *out.
hal_status open_backend(Profile profile, const hal_backend_init_v1& init, hal_backend_context** out);
// The table of a plugin built on this core (core.cpp): its name and
// initialize differ, everything else comes from CudaVendor.
hal_backend_v1 make_table(const char* name, backend::InitializeFunction initialize);
// telemetry.cpp: snapshots, health events and NVLink peers through profile.telemetry.
std::unique_ptr<backend::LazyTelemetry> make_telemetry(const Profile& profile);
// cuBLAS (the profile's path, else the usual search); a missing one is kept
// as the math path's reason.
void load_cublas(Context& context);
// Loads NVRTC for a loaded cuDNN, for the CUDA release cuDNN was built for (its libnvrtc.so.<major> is the soname
// cuDNN opens), from the profile's path or the usual search; sets nvrtc_status either way.
void load_runtime_compiler(Context& context);

}  // namespace hal::cuda

struct hal_buffer : hal::backend::GpuBuffer<hal::cuda::Context, CUdeviceptr> {
  CUdeviceptr base = 0;       // what the driver returned; freed
  void* host_base = nullptr;  // pinned host allocations: what cuMemFreeHost takes
};

struct hal_stream : hal::backend::GpuStream<hal::cuda::Context, CUstream> {};
struct hal_event : hal::backend::GpuEvent<hal::cuda::Context, CUevent> {};

struct hal_backend_context {
  hal::cuda::Context cuda;
};
