// The memory, copy and fill entry points of a GPU plugin written once:
// argument checks, the alignment arithmetic, the order of calls around the
// vendor's and the wording of errors, over the backend's Vendor
// (gpu_vendor.hpp, GpuVendorMemory). Instantiated where hal_buffer,
// hal_stream and hal_backend_context are complete (gpu_plugin_table).
//
// A native stream of nullptr asks the vendor for the synchronous call, which
// may return before its bytes land (device-side memsets and copies do), so it
// is followed by V::synchronize_null_stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "current_device.hpp"
#include "gpu_vendor.hpp"
#include "hal/backend_abi.h"
#include "imported_memory.hpp"
#include "last_error.hpp"
#include "memory_plans.hpp"

namespace hal::backend {

// Device addresses are integers in the CUDA driver API and pointers in HIP.
template <typename Address>
Address address_from(std::uintptr_t value) {
  if constexpr (std::is_pointer_v<Address>)
    return reinterpret_cast<Address>(value);
  else
    return static_cast<Address>(value);
}
template <typename Address>
std::uintptr_t address_value(Address address) {
  if constexpr (std::is_pointer_v<Address>)
    return reinterpret_cast<std::uintptr_t>(address);
  else
    return static_cast<std::uintptr_t>(address);
}

inline const char* memory_kind_name(hal_memory_kind kind) {
  switch (kind) {
    case HAL_MEMORY_DEVICE: return "device";
    case HAL_MEMORY_HOST_PINNED: return "pinned host";
    case HAL_MEMORY_MANAGED: return "managed";
  }
  return "unknown";
}

// Buffer and Stream are the plugin's hal_buffer and hal_stream, as
// parameters so that they need to be complete only where the template is
// instantiated.
template <typename V, typename Buffer = hal_buffer, typename Stream = hal_stream>
requires GpuVendorMemory<V, Buffer> && GpuVendorStreams<V>
struct GpuMemory {
  using Context = typename V::Context;
  using Result = typename V::Result;

  // The memory, copy and fill fields of the plugin's table.
  static constexpr void fill_table(hal_backend_v1& table) {
    table.buffer_allocate = buffer_allocate;
    table.buffer_free = buffer_free;
    table.buffer_host_address = buffer_host_address;
    table.buffer_device_address = buffer_device_address;
    table.copy_host_to_device = copy_host_to_device;
    table.copy_device_to_host = copy_device_to_host;
    table.copy_device_to_device = copy_device_to_device;
    table.fill = fill;
  }

  static hal_status buffer_allocate(hal_backend_context* backend, std::uint32_t device, hal_memory_kind kind,
                                    std::uint64_t size, std::uint64_t alignment, Buffer** out) {
    if (backend == nullptr || out == nullptr)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate needs a context and out");
    const Context& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    if (size == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate size is 0; allocate at least one byte");
    if (alignment != 0 && (alignment & (alignment - 1)) != 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "alignment " + std::to_string(alignment) + " is not a power of two");
    if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST_PINNED && kind != HAL_MEMORY_MANAGED)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "memory kind " + std::to_string(static_cast<int>(kind)) + " is not device, host_pinned or managed");
    if (kind == HAL_MEMORY_MANAGED && !context.devices[device]->managed_memory)
      return fail(HAL_ERROR_UNSUPPORTED, context.device_id(device) + " does not support managed memory (" +
                                             V::managed_memory_attribute +
                                             " is 0); allocate device memory and copy instead");

    // The vendors align device allocations to 256 bytes and host ones to a
    // page; a larger alignment is met by allocating more and rounding up.
    const std::optional<AlignedAllocation> plan =
        plan_aligned_allocation(size, alignment, kind == HAL_MEMORY_HOST_PINNED ? 4096 : 256);
    if (!plan)
      return fail(HAL_ERROR_OUT_OF_MEMORY,
                  "cannot allocate " + std::to_string(size) + " bytes aligned to " + std::to_string(alignment));
    const CurrentDevice scope = context.current_device(device);
    if (!scope) return scope.status();

    auto buffer = new_buffer(context, device, kind, size);
    VendorAllocation where;
    const Result result = V::allocate(context, *buffer, kind, static_cast<std::size_t>(plan->bytes), where);
    if (result != V::success)
      return context.check(result, "allocating " + std::to_string(size) + " bytes of " + memory_kind_name(kind) +
                                       " memory on " + context.device_id(device));
    const std::uint64_t shift = alignment_shift(where.device_base, plan->alignment);
    buffer->address = address_from<decltype(buffer->address)>(where.device_base + shift);
    if (where.host_base != nullptr) buffer->host_address = static_cast<char*>(where.host_base) + shift;
    *out = buffer.release();
    return succeed();
  }

  static hal_status buffer_free(Buffer* buffer) {
    if (buffer == nullptr) return succeed();
    std::unique_ptr<Buffer> owned(buffer);
    const Context& context = *buffer->context;
    release_passed(context);
    const CurrentDevice scope = context.current_device(buffer->device);
    if (!scope) return scope.status();
    if (buffer->imported.active) return release_imported(context, *buffer);
    // The vendors' free calls wait for work on the device that may still use the memory.
    if (hal_status status =
            context.check(V::release(context, *buffer), "freeing a " + std::string(memory_kind_name(buffer->kind)) +
                                                            " buffer of " + context.device_id(buffer->device));
        status != HAL_OK)
      return status;
    return succeed();
  }

  // Work queued on native_stream uses the buffer. Imported memory with
  // something to undo or an owner to tell gets an event after that work (one
  // per stream, recorded again on each use), which its release waits for;
  // hal's own allocations need none (the vendors' frees wait for the device).
  // Work captured into a graph runs when the graph is launched, which hal
  // cannot see: it gets no event (querying a captured one would break the
  // capture), and the memory is the graph owner's to keep alive, as for any
  // captured kernel.
  template <typename NativeStream>
  static hal_status note_use(const Buffer& buffer, NativeStream native_stream) {
    const ImportedMemory& imported = buffer.imported;
    if ((imported.release == nullptr && imported.registered == nullptr) || native_stream == nullptr) return HAL_OK;
    const Context& context = *buffer.context;
    if (V::stream_capturing(context, native_stream)) return HAL_OK;
    std::lock_guard lock(imported.uses_mutex);
    auto use = std::find_if(imported.uses.begin(), imported.uses.end(),
                            [&](const ImportedMemory::StreamUse& each) { return each.stream == native_stream; });
    if (use == imported.uses.end()) {
      typename V::NativeEvent event = nullptr;
      if (hal_status status = context.check(
              V::create_event(context, &event),
              "creating the event that orders the release of imported memory of " + context.device_id(buffer.device));
          status != HAL_OK)
        return status;
      use = imported.uses.insert(imported.uses.end(), {native_stream, event});
    }
    return context.check(
        V::record_event(context, native_event(use->event), native_stream),
        "recording the event that orders the release of imported memory of " + context.device_id(buffer.device));
  }

  // Releases the imported memory freed earlier whose work has passed; with
  // `wait` (at shutdown), all of it once its work is done.
  static void release_passed(const Context& context, bool wait = false) {
    std::vector<PendingRelease> done = context.pending_releases.take([&](const PendingRelease& pending) {
      const CurrentDevice scope = context.current_device(pending.device);
      if (wait)
        for (void* event : pending.events) (void)V::synchronize_event(context, native_event(event));
      return wait || passed(context, pending);
    });
    for (PendingRelease& pending : done) {
      const CurrentDevice scope = context.current_device(pending.device);
      if (finish_release(context, pending) != HAL_OK)
        context.log_message(HAL_LOG_WARNING, "imported memory of " + context.device_id(pending.device) +
                                                 " was released, but " + last_error_message());
    }
  }

  // The interop sub-table's memory entries.
  static void fill_interop(hal_interop_v1& table) {
    table.native_device = native_device;
    table.buffer_import = buffer_import;
  }

  // How frameworks name the device: DLPack's type and the vendor's ordinal,
  // which an import's pointer facts are checked against too.
  static hal_status native_device(hal_backend_context* backend, std::uint32_t device, hal_native_device_v1* out) {
    if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "native_device needs out");
    const Context& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    out->dlpack_device_type = V::dlpack_device_type;
    out->ordinal = V::ordinal(context, device);
    return succeed();
  }

  // Wraps memory the plugin did not allocate, after checking with the
  // driver that it is what the caller says it is.
  static hal_status buffer_import(hal_backend_context* backend, std::uint32_t device,
                                  const hal_external_memory_v1* memory, Buffer** out) {
    if (backend == nullptr || memory == nullptr || out == nullptr)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_import needs a context, the memory and out");
    const Context& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    release_passed(context);
    const hal_memory_kind kind = memory->kind;
    if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST_PINNED && kind != HAL_MEMORY_MANAGED)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "memory kind " + std::to_string(static_cast<int>(kind)) + " is not device, host_pinned or managed");
    const auto address = reinterpret_cast<std::uintptr_t>(memory->address);
    if (address == 0 && memory->size != 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "imported memory of " + std::to_string(memory->size) + " bytes has a NULL address");
    const bool register_host = (memory->flags & HAL_EXTERNAL_MEMORY_REGISTER_HOST) != 0;
    if (register_host && kind != HAL_MEMORY_HOST_PINNED)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "only host_pinned memory can be registered for the device");
    const CurrentDevice scope = context.current_device(device);
    if (!scope) return scope.status();

    auto buffer = new_buffer(context, device, kind, memory->size);
    buffer->imported.active = true;
    buffer->address = address_from<decltype(buffer->address)>(address);
    if (kind != HAL_MEMORY_DEVICE) buffer->host_address = memory->address;
    if (memory->size != 0) {
      if (register_host) {
        if (!V::can_register_host(context))
          return fail(HAL_ERROR_UNSUPPORTED, std::string("the driver lacks ") + V::register_function +
                                                 ", so host memory cannot be registered; import pinned memory instead");
        if (hal_status status =
                context.check(V::register_host(context, memory->address, memory->size),
                              "registering " + std::to_string(memory->size) + " bytes of host memory at " +
                                  describe_pointer(address) + " with " + context.device_id(device));
            status != HAL_OK)
          return status;
        buffer->imported.registered = memory->address;
      }
      // A refused import leaves the memory as it found it.
      auto refuse = [&](hal_status status) {
        if (buffer->imported.registered != nullptr) (void)V::unregister_host(context, buffer->imported.registered);
        return status;
      };
      if (hal_status status = check_imported(context, device, kind, address, memory->size); status != HAL_OK)
        return refuse(status);
      if (kind == HAL_MEMORY_HOST_PINNED) {
        std::uintptr_t device_address = 0;
        if (hal_status status =
                context.check(V::host_device_pointer(context, memory->address, device_address),
                              "finding the device address of host memory at " + describe_pointer(address));
            status != HAL_OK)
          return refuse(status);
        buffer->address = address_from<decltype(buffer->address)>(device_address);
      }
    }
    // Set last: a failed import never calls the owner's release.
    buffer->imported.release = memory->release;
    buffer->imported.release_user_data = memory->release_user_data;
    *out = buffer.release();
    return succeed();
  }

  static void* buffer_host_address(Buffer* buffer) { return buffer != nullptr ? buffer->host_address : nullptr; }

  static void* buffer_device_address(Buffer* buffer) {
    return buffer != nullptr ? reinterpret_cast<void*>(address_value(buffer->address)) : nullptr;
  }

  static hal_status copy_host_to_device(Stream* stream, Buffer* destination, std::uint64_t destination_offset,
                                        const void* source, std::uint64_t size) {
    const Context& context = *destination->context;
    return on_device(stream, *destination, size, "host to " + context.device_id(destination->device),
                     [&](const auto native_stream) {
                       return V::copy_host_to_device(context, device_address(*destination, destination_offset), source,
                                                     static_cast<std::size_t>(size), native_stream);
                     });
  }

  static hal_status copy_device_to_host(Stream* stream, void* destination, Buffer* source, std::uint64_t source_offset,
                                        std::uint64_t size) {
    const Context& context = *source->context;
    return on_device(stream, *source, size, context.device_id(source->device) + " to host",
                     [&](const auto native_stream) {
                       return V::copy_device_to_host(context, destination, device_address(*source, source_offset),
                                                     static_cast<std::size_t>(size), native_stream);
                     });
  }

  static hal_status copy_device_to_device(Stream* stream, Buffer* destination, std::uint64_t destination_offset,
                                          Buffer* source, std::uint64_t source_offset, std::uint64_t size) {
    const Context& context = *destination->context;
    // With unified addressing the vendor finds both devices from the addresses.
    return on_device(
        stream, *destination, size, context.device_id(source->device) + " to " + context.device_id(destination->device),
        [&](const auto native_stream) {
          return V::copy_device_to_device(context, device_address(*destination, destination_offset),
                                          device_address(*source, source_offset), static_cast<std::size_t>(size),
                                          native_stream);
        },
        source);
  }

  static hal_status fill(Stream* stream, Buffer* destination, std::uint64_t offset, std::uint64_t size,
                         const void* pattern, std::uint32_t pattern_size) {
    if (pattern == nullptr || (pattern_size != 1 && pattern_size != 2 && pattern_size != 4))
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "fill pattern_size " + std::to_string(pattern_size) + " is not 1, 2 or 4");
    if (size % pattern_size != 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "fill size " + std::to_string(size) +
                                                  " is not a multiple of pattern_size " + std::to_string(pattern_size));
    const Context& context = *destination->context;
    const CurrentDevice scope = context.current_device(stream != nullptr ? stream->device : destination->device);
    if (!scope) return scope.status();
    std::uint8_t bytes[4] = {};
    std::memcpy(bytes, pattern, pattern_size);
    const auto native_stream = stream != nullptr ? stream->handle : nullptr;
    for (const MemsetPiece& piece : plan_fill(device_address(*destination, offset), size, bytes, pattern_size)) {
      if (hal_status status =
              context.check(memset(context, piece, native_stream),
                            "filling " + std::to_string(size) + " bytes on " + context.device_id(destination->device));
          status != HAL_OK)
        return status;
    }
    if (native_stream == nullptr)
      return wait_for_synchronous_work(
          context, "filling " + std::to_string(size) + " bytes on " + context.device_id(destination->device));
    if (hal_status status = note_use(*destination, native_stream); status != HAL_OK) return status;
    return succeed();
  }

 private:
  static std::unique_ptr<Buffer> new_buffer(const Context& context, std::uint32_t device, hal_memory_kind kind,
                                            std::uint64_t size) {
    auto buffer = std::make_unique<Buffer>();
    buffer->context = &context;
    buffer->device = device;
    buffer->kind = kind;
    buffer->size = size;
    return buffer;
  }

  // The driver's word on the memory against what the import says it is.
  static hal_status check_imported(const Context& context, std::uint32_t device, hal_memory_kind kind,
                                   std::uintptr_t address, std::uint64_t size) {
    if (!V::can_query_pointers(context)) return HAL_OK;  // an old driver cannot tell: the caller's word stands
    PointerFacts facts;
    if (hal_status status = context.check(V::query_pointer(context, address, facts),
                                          std::string(V::query_function) + " on " + describe_pointer(address));
        status != HAL_OK)
      return status;
    auto device_name = [&](int ordinal) {
      for (std::uint32_t index = 0; index < context.devices.size(); ++index)
        if (V::ordinal(context, index) == ordinal) return context.device_id(index);
      return "the device of ordinal " + std::to_string(ordinal) + " (not one hal lists)";
    };
    const std::string mismatch =
        imported_memory_mismatch(facts, kind, V::ordinal(context, device), address, size, device_name);
    if (!mismatch.empty()) return fail(HAL_ERROR_INVALID_ARGUMENT, mismatch);
    return HAL_OK;
  }

  // Undoes a registration and tells the owner once the work hal queued on
  // the memory has passed: now when it has (or never ran), else later
  // (release_passed); never by waiting for the device.
  static hal_status release_imported(const Context& context, Buffer& buffer) {
    const ImportedMemory& imported = buffer.imported;
    PendingRelease pending{buffer.device, {}, imported.registered, imported.release, imported.release_user_data};
    {
      std::lock_guard lock(imported.uses_mutex);
      for (const ImportedMemory::StreamUse& use : imported.uses) pending.events.push_back(use.event);
      imported.uses.clear();
    }
    if (!passed(context, pending)) {
      context.pending_releases.add(std::move(pending));
      return succeed();
    }
    const hal_status status = finish_release(context, pending);
    return status == HAL_OK ? succeed() : status;
  }

  // Whether the work each event follows is done; an error ends the wait as
  // well (that work will not run on).
  static bool passed(const Context& context, const PendingRelease& pending) {
    for (void* event : pending.events)
      if (V::not_ready(V::query_event(context, native_event(event)))) return false;
    return true;
  }

  // Destroys the events, unregisters host memory and tells the owner
  // (exactly once, even after an error).
  static hal_status finish_release(const Context& context, PendingRelease& pending) {
    for (void* event : pending.events) (void)V::destroy_event(context, native_event(event));
    hal_status status = HAL_OK;
    if (pending.registered != nullptr)
      status = context.check(V::unregister_host(context, pending.registered),
                             "unregistering imported host memory of " + context.device_id(pending.device));
    if (pending.release != nullptr) pending.release(pending.release_user_data);
    return status;
  }

  static typename V::NativeEvent native_event(void* event) { return static_cast<typename V::NativeEvent>(event); }

  template <typename NativeStream>
  static Result memset(const Context& context, const MemsetPiece& piece, NativeStream native_stream) {
    return V::memset(context, static_cast<std::uintptr_t>(piece.address), piece.value, piece.element_size,
                     static_cast<std::size_t>(piece.count), native_stream);
  }

  static std::uintptr_t device_address(const Buffer& buffer, std::uint64_t offset) {
    return address_value(buffer.address) + static_cast<std::uintptr_t>(offset);
  }

  // One copy, synchronous or on the stream, with the stream's device (or
  // the buffer's) current: the vendors order work by it.
  template <typename Copy>
  static hal_status on_device(const Stream* stream, const Buffer& buffer, std::uint64_t size, const std::string& route,
                              Copy&& copy, const Buffer* also_used = nullptr) {
    const Context& context = *buffer.context;
    const CurrentDevice scope = context.current_device(stream != nullptr ? stream->device : buffer.device);
    if (!scope) return scope.status();
    const Result result = copy(stream != nullptr ? stream->handle : nullptr);
    if (hal_status status = context.check(result, "copying " + std::to_string(size) + " bytes " + route);
        status != HAL_OK)
      return status;
    if (stream == nullptr)
      return wait_for_synchronous_work(context, "copying " + std::to_string(size) + " bytes " + route);
    for (const Buffer* used : {&buffer, also_used})
      if (used != nullptr)
        if (hal_status status = note_use(*used, stream->handle); status != HAL_OK) return status;
    return succeed();
  }

  // The ABI promises a call without a stream returns when the bytes are in
  // place; the vendors' synchronous memsets and device copies do not wait.
  static hal_status wait_for_synchronous_work(const Context& context, const std::string& what) {
    if (hal_status status = context.check(V::synchronize_null_stream(context), "waiting for " + what); status != HAL_OK)
      return status;
    return succeed();
  }
};

}  // namespace hal::backend
