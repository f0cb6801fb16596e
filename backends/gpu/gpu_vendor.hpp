// The one seam between hal's GPU engines and a vendor API.
//
// A GPU backend implements one Vendor type: a struct of type names and
// static functions over its vendor context (CudaVendor in backends/cuda,
// RocmVendor in backends/rocm). Every engine takes that type as its template
// parameter and nothing else from the backend:
//
//   GpuMemory<V>       memory, copies, fills, imports        (gpu_memory.hpp)
//   GpuStreams<V>      streams, events, host callbacks        (gpu_streams.hpp)
//   GpuAttention       flash, math and fused attention, over VendorPlatform<V>
//   memory test        the march kernel, over VendorPlatform<V>
//   NcclCollectives    collectives, over VendorCollectivesPort<V>
//   telemetry          the vendor's management library, through V::Context::telemetry
//
// and gpu_plugin_table<V> (gpu_plugin.hpp) assembles the plugin's whole
// table from them. The concepts below list what a Vendor provides; a missing
// or mistyped member is a compile error naming the requirement.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention_kernels.h"
#include "current_device.hpp"
#include "device_description.hpp"
#include "hal/backend_abi.h"
#include "imported_memory.hpp"
#include "kernel_functions.hpp"

namespace hal::backend {

class FusedAttention;
class GpuAttention;
class LazyTelemetry;
class NcclCollectives;
struct HostCallback;
struct StridedBatchedGemm;
struct TelemetryDevice;
struct GpuDeviceLimits;

// What every GPU device is, whatever the vendor; a backend's device type
// derives from it and adds its handles.
struct GpuDevice {
  std::string name, vendor, uuid, pci_bus_id;  // the bus id normalised ("0000:3b:00.0")
  int numa_node = -1;
  std::uint64_t total_memory = 0;
  std::uint32_t compute_units = 0, clock_mhz = 0, memory_clock_mhz = 0;
  bool managed_memory = false;
  backend::DeviceDescription description;
  // Kernel limits, read at discovery.
  std::uint32_t max_shared_bytes = 0, warp_size = 0;
};

// The members of a GPU plugin's hal_buffer, hal_stream and hal_event, which
// derive from these with the vendor's context and native types.
template <typename Context, typename Address>
struct GpuBuffer {
  const Context* context = nullptr;
  std::uint32_t device = 0;
  hal_memory_kind kind = HAL_MEMORY_DEVICE;
  Address address{};             // device address, the allocation rounded up to the requested alignment
  void* host_address = nullptr;  // pinned host and managed memory
  std::uint64_t size = 0;
  ImportedMemory imported;  // memory other code allocated: never freed here
};

template <typename Context, typename NativeStream>
struct GpuStream {
  const Context* context = nullptr;
  std::uint32_t device = 0;
  NativeStream handle = nullptr;
  bool owned = true;  // false for a wrapped stream that other code owns: never destroyed here
};

template <typename Context, typename NativeEvent>
struct GpuEvent {
  const Context* context = nullptr;
  std::uint32_t device = 0;
  NativeEvent handle = nullptr;
  std::atomic<bool> recorded{false};  // elapsed time needs two recorded events
};

using InitializeFunction = hal_status (*)(const hal_backend_init_v1*, hal_backend_context**);

// A vendor call in its Async form and its synchronous one: called with a
// native stream, the Async form on it, or the synchronous form for none.
template <typename Async, typename Synchronous>
struct OrderedCall {
  Async async;
  Synchronous synchronous;
  template <typename NativeStream, typename... Arguments>
  auto operator()(NativeStream stream, Arguments... arguments) const {
    return stream != nullptr ? async(arguments..., stream) : synchronous(arguments...);
  }
};

// A memset of value's low element_size bytes (1, 2 or 4), count times, by
// the vendor's 8-, 16- or 32-bit memset (OrderedCalls).
template <typename NativeStream, typename Target, typename Set8, typename Set16, typename Set32>
auto memset_elements(NativeStream stream, Target target, std::uint32_t value, std::uint32_t element_size,
                     std::size_t count, const Set8& set8, const Set16& set16, const Set32& set32) {
  switch (element_size) {
    case 1: return set8(stream, target, static_cast<unsigned char>(value), count);
    case 2: return set16(stream, target, static_cast<unsigned short>(value), count);
    default: return set32(stream, target, value, count);
  }
}

// Where a vendor allocation landed, before alignment.
struct VendorAllocation {
  std::uintptr_t device_base = 0;
  void* host_base = nullptr;  // pinned host and managed memory; null for device memory
};

// The vendor context every engine reaches through the handles: its devices
// (derived from GpuDevice), how it names and checks them, how it makes one
// current, its vendor results turned into recorded errors, and the engines
// it owns.
template <typename Context, typename Result>
concept GpuVendorContext = requires(const Context& context, Result result, std::uint32_t device) {
  { *context.devices[device] } -> std::convertible_to<const GpuDevice&>;
  { context.devices.size() } -> std::convertible_to<std::size_t>;
  { context.device_id(device) } -> std::convertible_to<std::string>;
  { context.check_device(device) } -> std::same_as<hal_status>;
  // HAL_OK for success; otherwise records "<operation> failed: ..." and returns the mapped status.
  { context.check(result, std::string_view()) } -> std::same_as<hal_status>;
  { context.current_device(device) } -> std::same_as<CurrentDevice>;
  // Graph capture on other threads tolerates this thread's queries (the collectives watchdog).
  context.relax_capture_mode();
  { context.attention.get() } -> std::convertible_to<GpuAttention*>;
  { context.collectives.get() } -> std::convertible_to<NcclCollectives*>;
  { context.telemetry.get() } -> std::convertible_to<LazyTelemetry*>;
  { context.pending_releases } -> std::convertible_to<PendingReleases&>;
  context.log_message(hal_log_level{}, std::string());
};

// Memory: allocation and release, synchronous (native stream null) and
// stream-ordered copies and memsets of 1-, 2- or 4-byte elements, and what
// imports need.
template <typename V, typename Buffer>
concept GpuVendorMemory = requires(const typename V::Context& context, Buffer& buffer, const Buffer& held,
                                   hal_memory_kind kind, std::size_t bytes, VendorAllocation& where,
                                   std::uintptr_t address, const void* source, void* target,
                                   typename V::NativeStream stream, PointerFacts& facts, std::uint32_t device) {
  { V::managed_memory_attribute } -> std::convertible_to<const char*>;  // named when a device lacks managed memory
  { V::allocate(context, buffer, kind, bytes, where) } -> std::same_as<typename V::Result>;
  { V::release(context, held) } -> std::same_as<typename V::Result>;
  { V::copy_host_to_device(context, address, source, bytes, stream) } -> std::same_as<typename V::Result>;
  { V::copy_device_to_host(context, target, address, bytes, stream) } -> std::same_as<typename V::Result>;
  { V::copy_device_to_device(context, address, address, bytes, stream) } -> std::same_as<typename V::Result>;
  // value's low element_size bytes, count times.
  { V::memset(context, address, std::uint32_t{}, std::uint32_t{}, bytes, stream) } -> std::same_as<typename V::Result>;
  // The synchronous calls may return before their bytes land; this waits for them.
  { V::synchronize_null_stream(context) } -> std::same_as<typename V::Result>;
  // Imports (hal_interop_v1.buffer_import).
  { V::dlpack_device_type } -> std::convertible_to<std::int32_t>;
  { V::query_function } -> std::convertible_to<const char*>;
  { V::register_function } -> std::convertible_to<const char*>;
  { V::can_query_pointers(context) } -> std::same_as<bool>;
  { V::can_register_host(context) } -> std::same_as<bool>;
  { V::query_pointer(context, address, facts) } -> std::same_as<typename V::Result>;
  { V::register_host(context, target, bytes) } -> std::same_as<typename V::Result>;
  { V::unregister_host(context, target) } -> std::same_as<typename V::Result>;
  { V::host_device_pointer(context, target, address) } -> std::same_as<typename V::Result>;
  { V::ordinal(context, device) } -> std::same_as<int>;  // the vendor's ordinal of hal's device
};

// Streams and events.
template <typename V>
concept GpuVendorStreams = requires(const typename V::Context& context, typename V::Result result,
                                    typename V::NativeStream stream, typename V::NativeStream* stream_out,
                                    typename V::NativeEvent event, typename V::NativeEvent* event_out,
                                    HostCallback* callback, float* elapsed) {
  { V::not_ready(result) } -> std::same_as<bool>;  // work still pending
  // HAL_OK or the recorded error of a call that may wait on device work.
  { V::finish(context, result, std::string_view()) } -> std::same_as<hal_status>;
  { V::create_stream(context, stream_out) } -> std::same_as<typename V::Result>;
  { V::destroy_stream(context, stream) } -> std::same_as<typename V::Result>;
  { V::synchronize_stream(context, stream) } -> std::same_as<typename V::Result>;
  { V::query_stream(context, stream) } -> std::same_as<typename V::Result>;
  // Whether the stream is capturing a graph: its work runs only when the graph is launched.
  { V::stream_capturing(context, stream) } -> std::same_as<bool>;
  { V::wait_event(context, stream, event) } -> std::same_as<typename V::Result>;
  // Runs HostCallback::run_with_status (or ::run) once earlier work is done, also after an error.
  { V::enqueue_host_callback(context, stream, callback) } -> std::same_as<typename V::Result>;
  { V::create_event(context, event_out) } -> std::same_as<typename V::Result>;
  { V::destroy_event(context, event) } -> std::same_as<typename V::Result>;
  { V::record_event(context, event, stream) } -> std::same_as<typename V::Result>;
  { V::query_event(context, event) } -> std::same_as<typename V::Result>;
  { V::synchronize_event(context, event) } -> std::same_as<typename V::Result>;
  { V::elapsed_milliseconds(context, elapsed, event, event) } -> std::same_as<typename V::Result>;
  // What a wrapped NULL stream becomes (CUDA's legacy default stream by name).
  { V::wrapped_null_stream() } -> std::same_as<typename V::NativeStream>;
};

// Devices, kernels and what attention needs beyond them.
template <typename V, typename Stream>
concept GpuVendorKernels = requires(const typename V::Context& context, std::uint32_t device, Stream& stream,
                                    const hal_kernel_launch& launch, const void* arguments, std::uint64_t bytes,
                                    std::uint64_t* address, std::uint64_t workspace, const StridedBatchedGemm& gemm) {
  { V::free_memory(context, device) } -> std::same_as<std::uint64_t>;  // 0 where it cannot be read without cost
  { V::supersedes(context) } -> std::convertible_to<const char*>;      // hal_device_info_v1::supersedes
  { V::telemetry_device(context, device) } -> std::same_as<TelemetryDevice>;
  // Why the device can never have the embedded kernels, known without loading them; "" when they may load.
  { V::kernels_missing(context, device) } -> std::same_as<std::string>;
  // "" once the device loaded the embedded kernels (loading them the first time); otherwise why not.
  { V::kernels_unusable(context, device) } -> std::same_as<std::string>;
  { V::flash_paths(context, device) } -> std::same_as<std::uint32_t>;  // HAL_FLASH_PATH_* in the device's image
  // Launches the named kernel with `arguments` as its only by-value parameter.
  { V::launch(context, stream, launch, arguments) } -> std::same_as<hal_status>;
  // Scratch for work on the stream: stream-ordered where the API allows it.
  { V::allocate_workspace(context, stream, bytes, address) } -> std::same_as<hal_status>;
  { V::free_workspace(context, stream, workspace) } -> std::same_as<hal_status>;
  { V::gemm_unavailable(context, device) } -> std::same_as<std::string>;  // "" when GEMMs can run
  { V::strided_batched_gemm(context, stream, gemm) } -> std::same_as<hal_status>;
  // The vendor library's fused attention, or null with fused_unavailable() saying why.
  { V::fused_attention(context) } -> std::same_as<FusedAttention*>;
  { V::fused_unavailable(context) } -> std::same_as<std::string>;
};

// The whole seam. V::Backend, V::Buffer, V::Stream and V::Event name the
// plugin's own hal_backend_context, hal_buffer, hal_stream and hal_event
// (the last three derived from GpuBuffer, GpuStream and GpuEvent), so that
// they need be complete only where the engines are instantiated;
// V::context(backend) is the vendor context inside the backend context.
template <typename V>
concept GpuVendor = requires(hal_backend_context& backend) {
  typename V::Context;
  typename V::Result;
  typename V::NativeStream;
  typename V::NativeEvent;
  requires std::same_as<typename V::Backend, hal_backend_context>;
  requires std::derived_from<typename V::Buffer, GpuBuffer<typename V::Context, decltype(V::Buffer::address)>>;
  requires std::derived_from<typename V::Stream, GpuStream<typename V::Context, typename V::NativeStream>>;
  requires std::derived_from<typename V::Event, GpuEvent<typename V::Context, typename V::NativeEvent>>;
  { V::success } -> std::convertible_to<typename V::Result>;
  { V::context(backend) } -> std::same_as<typename V::Context&>;
}
&&GpuVendorContext<typename V::Context, typename V::Result>&& GpuVendorMemory<V, hal_buffer>&& GpuVendorStreams<V>&&
    GpuVendorKernels<V, hal_stream>;

}  // namespace hal::backend
