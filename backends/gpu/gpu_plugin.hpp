// A GPU plugin's table made from its Vendor (gpu_vendor.hpp): every engine
// instantiated over V and every entry point and sub-table filled from them.
// Include it where the plugin's hal_backend_context, hal_buffer, hal_stream
// and hal_event are complete (the backend's table file).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "gpu_attention.hpp"
#include "gpu_memory.hpp"
#include "gpu_streams.hpp"
#include "gpu_telemetry.hpp"
#include "gpu_vendor.hpp"
#include "hal/backend_abi.h"
#include "last_error.hpp"
#include "memory_test.hpp"
#include "nccl_collectives.hpp"

namespace hal::backend {

// Checks init and out, then runs create() (which fills *out and returns
// a status), turning a thrown exception into the ABI status that says what
// went wrong; `backend` names the plugin in those messages.
template <typename Create>
hal_status guarded_initialize(const hal_backend_init_v1* init, hal_backend_context** out, const char* backend,
                              Create&& create) {
  if (init == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "initialize needs init and out");
  if (init->struct_size < HAL_BACKEND_INIT_V1_MIN_SIZE)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "init struct_size " + std::to_string(init->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    return create();
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY,
                std::string("out of host memory while initializing the ") + backend + " backend");
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("initializing the ") + backend + " backend failed: " + error.what());
  }
}

// Work queued on the stream used the tensor (GpuMemory::note_use); a
// borrowed address is the caller's to keep alive.
template <GpuVendor V>
hal_status used_on(hal_stream* stream, const hal_tensor_ref_v1& tensor) {
  if (tensor.buffer == nullptr) return HAL_OK;
  return GpuMemory<V>::note_use(*static_cast<const typename V::Buffer*>(tensor.buffer),
                                static_cast<typename V::Stream*>(stream)->handle);
}

// The attention engine's and the memory test's view of the vendor.
template <GpuVendor V>
class VendorPlatform final : public GpuPlatform {
 public:
  explicit VendorPlatform(const typename V::Context& context) : context_(context) {}

  std::string backend_name() const override { return context_.backend_name(); }
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }
  std::string kernels_missing(std::uint32_t device) const override { return V::kernels_missing(context_, device); }
  std::string kernels_unusable(std::uint32_t device) const override { return V::kernels_unusable(context_, device); }
  GpuDeviceLimits limits(std::uint32_t device) const override {
    const GpuDevice& found = *context_.devices[device];
    return {found.max_shared_bytes, found.warp_size, V::flash_paths(context_, device)};
  }
  std::uint32_t stream_device(hal_stream* stream) const override { return of(stream).device; }
  hal_status launch(hal_stream* stream, const hal_kernel_launch& launch, const void* arguments, std::size_t) override {
    return V::launch(context_, of(stream), launch, arguments);
  }
  hal_status allocate_workspace(hal_stream* stream, std::uint64_t bytes, std::uint64_t* address) override {
    return V::allocate_workspace(context_, of(stream), bytes, address);
  }
  hal_status free_workspace(hal_stream* stream, std::uint64_t address) override {
    return V::free_workspace(context_, of(stream), address);
  }
  hal_status device_address(hal_stream* stream, const hal_tensor_ref_v1& tensor, std::uint64_t* address) override {
    if (tensor.buffer == nullptr) {  // borrowed: the offset is the device address
      *address = tensor.offset;
      return HAL_OK;
    }
    const auto* buffer = static_cast<const typename V::Buffer*>(tensor.buffer);
    if (buffer == nullptr || buffer->device != of(stream).device)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "a tensor is not in a buffer of " + context_.device_id(of(stream).device) + ", the stream's device");
    *address = static_cast<std::uint64_t>(address_value(buffer->address)) + tensor.offset;
    return HAL_OK;
  }
  hal_status note_use(hal_stream* stream, const hal_tensor_ref_v1& tensor) override {
    return used_on<V>(stream, tensor);
  }
  std::string gemm_unavailable(std::uint32_t device) const override { return V::gemm_unavailable(context_, device); }
  hal_status strided_batched_gemm(hal_stream* stream, const StridedBatchedGemm& gemm) override {
    return V::strided_batched_gemm(context_, of(stream), gemm);
  }
  FusedAttention* fused_attention() override { return V::fused_attention(context_); }
  std::string fused_unavailable() const override { return V::fused_unavailable(context_); }

 private:
  // The plugin's own stream type (the same hal_stream, named through V so
  // that it need be complete only where the template is instantiated).
  static typename V::Stream& of(hal_stream* stream) { return *static_cast<typename V::Stream*>(stream); }
  const typename V::Context& context_;
};

// The attention engine of a context; made before discovery, which asks it
// what each device can run.
template <GpuVendor V>
std::unique_ptr<GpuAttention> make_gpu_attention(const typename V::Context& context) {
  return std::make_unique<GpuAttention>(std::make_unique<VendorPlatform<V>>(context));
}

// The collectives engine's view of the vendor: the memory and event entry
// points of the plugin's own table, and the context's devices and streams.
template <GpuVendor V>
class VendorCollectivesPort final : public GpuCollectivesPort {
 public:
  VendorCollectivesPort(hal_backend_context& backend, const typename V::Context& context)
      : GpuCollectivesPort(entry_points(), &backend), context_(context) {}
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }
  std::string device_name(std::uint32_t device) const override { return context_.device_id(device); }
  CurrentDevice current_device(std::uint32_t device) const override { return context_.current_device(device); }
  void* native_stream(const hal_stream* stream) const override { return of(stream).handle; }
  std::uint32_t stream_device(const hal_stream* stream) const override { return of(stream).device; }
  bool capturing(const hal_stream* stream) const override { return V::stream_capturing(context_, of(stream).handle); }
  void relax_capture_mode() const override { context_.relax_capture_mode(); }
  hal_status note_use(hal_stream* stream, const hal_tensor_ref_v1& tensor) const override {
    return used_on<V>(stream, tensor);
  }

 private:
  static hal_backend_v1 entry_points() {
    hal_backend_v1 table{};
    GpuMemory<V>::fill_table(table);
    GpuStreams<V>::fill(table);
    return table;
  }
  static const typename V::Stream& of(const hal_stream* stream) {
    return *static_cast<const typename V::Stream*>(stream);
  }
  const typename V::Context& context_;
};

// The collectives engine on `library` (null: collectives are off, `status` says why).
template <GpuVendor V>
std::unique_ptr<NcclCollectives> make_nccl_collectives(hal_backend_context& backend, const shims::Nccl* library,
                                                       const std::string& status) {
  return std::make_unique<NcclCollectives>(std::make_unique<VendorCollectivesPort<V>>(backend, V::context(backend)),
                                           library, status);
}

// Where the entry points find the context's engines.
template <GpuVendor V>
GpuAttention* attention_of_backend(hal_backend_context* backend) {
  return V::context(*backend).attention.get();
}
template <GpuVendor V>
GpuAttention* attention_of_stream(hal_stream* stream) {
  return static_cast<typename V::Stream*>(stream)->context->attention.get();
}
template <GpuVendor V>
NcclCollectives* collectives_of_backend(hal_backend_context* backend) {
  return V::context(*backend).collectives.get();
}

// The device memory test's sub-table: the march kernel through the platform
// the attention engine holds.
template <GpuVendor V>
hal_status run_memory_test_element(hal_stream* stream, hal_tensor_ref_v1 tested, std::uint64_t bytes,
                                   const hal_memory_test_element_v1* element, hal_tensor_ref_v1 report,
                                   std::uint32_t capacity) {
  if (stream == nullptr) return memory_test_needs_stream();
  GpuPlatform& platform = static_cast<typename V::Stream*>(stream)->context->attention->platform();
  return run_gpu_memory_test_element(platform, stream, tested, bytes, element, report, capacity);
}

template <GpuVendor V>
hal_status gpu_device_count(hal_backend_context* backend, std::uint32_t* count) {
  if (backend == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_count needs out");
  *count = static_cast<std::uint32_t>(V::context(*backend).devices.size());
  return succeed();
}

// What every GPU device reports, from its GpuDevice and the vendor's free memory.
template <GpuVendor V>
hal_status gpu_device_info(hal_backend_context* backend, std::uint32_t index, hal_device_info_v1* info) {
  if (backend == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  const typename V::Context& context = V::context(*backend);
  if (hal_status status = context.check_device(index); status != HAL_OK) return status;
  if (info == nullptr || info->struct_size < HAL_DEVICE_INFO_V1_MIN_SIZE)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_info needs a v1 hal_device_info_v1 with struct_size set");
  const GpuDevice& device = *context.devices[index];
  info->type = HAL_DEVICE_TYPE_GPU;
  info->name = device.name.c_str();
  info->vendor = device.vendor.c_str();
  info->uuid = device.uuid.c_str();
  info->pci_bus_id = device.pci_bus_id.c_str();
  info->numa_node = device.numa_node;
  info->total_memory = device.total_memory;
  info->free_memory = V::free_memory(context, index);
  info->compute_units = device.compute_units;
  info->clock_mhz = device.clock_mhz;
  info->memory_clock_mhz = device.memory_clock_mhz;
  device.description.describe(*info);
  if (HAL_DEVICE_INFO_HAS(info, supersedes)) info->supersedes = V::supersedes(context);
  return succeed();
}

// Frees the context a GPU plugin's initialize made.
template <GpuVendor V>
void shutdown_backend(hal_backend_context* context) {
  if (context == nullptr) return;
  GpuMemory<V>::release_passed(V::context(*context), /*wait=*/true);  // imported memory freed with work pending
  delete static_cast<typename V::Backend*>(context);
}

// The plugin's table: its name and initialize; everything else comes from V.
template <GpuVendor V>
hal_backend_v1 gpu_plugin_table(const char* name, const char* version, InitializeFunction initialize) {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = HAL_BACKEND_ABI_VERSION;
  table.name = name;
  table.version = version;
  table.get_last_error = read_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown_backend<V>;
  table.device_count = gpu_device_count<V>;
  table.device_info = gpu_device_info<V>;
  GpuMemory<V>::fill_table(table);
  GpuStreams<V>::fill(table);
  static const hal_interop_v1 interop = [] {
    hal_interop_v1 entries{};
    entries.struct_size = sizeof(entries);
    GpuMemory<V>::fill_interop(entries);
    GpuStreams<V>::fill_interop(entries);
    return entries;
  }();
  table.interop = &interop;
  table.attention = &GpuAttentionTable<attention_of_backend<V>, attention_of_stream<V>>::table;
  static const hal_collectives_v2 collectives = nccl_collectives_table<collectives_of_backend<V>>();
  table.collectives = &collectives.v1;
  table.telemetry = &GpuTelemetryTable<V>::table;
  table.topology = &GpuTelemetryTable<V>::topology;
  static constexpr hal_memory_test_v1 memory_test{sizeof(hal_memory_test_v1), run_memory_test_element<V>};
  table.memory_test = &memory_test;
  return table;
}

}  // namespace hal::backend
