// Interop: imported memory, wrapped native streams, native handles and
// DLPack tensors, over each backend's optional interop sub-table.
#include "hal/interop.hpp"

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "abi.hpp"
#include "hal/event.hpp"
#include "loaded_backend.hpp"

namespace hal {
namespace {

const hal_interop_v1& interop_of(const Device& device, std::string_view operation) {
  const hal_interop_v1* interop = detail::Access::backend(device)->interop();
  if (interop == nullptr)
    throw Error(StatusCode::unsupported, std::string(operation) + ": the " + device.backend_name() +
                                             " backend's plugin offers no interop (it predates it); update the plugin");
  return *interop;
}

// Owns the caller's release callback across the C boundary; the backend calls
// run() exactly once.
struct ReleaseCallback {
  std::function<void()> release;
  static void run(void* user_data) {
    std::unique_ptr<ReleaseCallback> self(static_cast<ReleaseCallback*>(user_data));
    try {
      self->release();
    } catch (const std::exception& error) {
      detail::log_message(HAL_LOG_ERROR, std::string("an imported buffer's release callback threw: ") + error.what());
    } catch (...) {
      detail::log_message(HAL_LOG_ERROR, "an imported buffer's release callback threw a non-standard exception");
    }
  }
};

std::string hex(const void* address) {
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof(text), "%p", address);
  return text;
}

}  // namespace

Buffer Device::import_memory(const ExternalMemory& memory) const {
  constexpr std::string_view operation = "Device::import_memory";
  const hal_interop_v1& interop = interop_of(*this, operation);
  if (memory.address == nullptr && memory.size != 0)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the address is null but size is " +
                                                  std::to_string(memory.size) + "; null is allowed only with size 0");
  if (memory.register_host_memory && memory.kind != MemoryKind::host_pinned)
    throw Error(StatusCode::invalid_argument,
                std::string(operation) + ": register_host_memory needs kind host_pinned, not " +
                    std::string(to_string(memory.kind)) + "; only host memory can be page-locked");
  hal_external_memory_v1 external{};
  external.struct_size = sizeof(external);
  external.address = memory.address;
  external.size = memory.size;
  external.kind = detail::to_abi(memory.kind);
  external.flags = memory.register_host_memory ? HAL_EXTERNAL_MEMORY_REGISTER_HOST : 0u;
  std::unique_ptr<ReleaseCallback> release;
  if (memory.release) {
    release = std::make_unique<ReleaseCallback>(ReleaseCallback{memory.release});
    external.release = &ReleaseCallback::run;
    external.release_user_data = release.get();
  }
  hal_buffer* handle = nullptr;
  const auto& backend = detail::Access::backend(*this);
  backend->check(interop.buffer_import(backend->context, index(), &external, &handle), [&] {
    return "importing " + std::to_string(memory.size) + " bytes of " + std::string(to_string(memory.kind)) +
           " memory at " + hex(memory.address) + " into " + id();
  });
  (void)release.release();  // the backend calls it now
  return detail::Access::buffer(std::make_shared<detail::BufferState>(*this, handle, memory.size, memory.kind));
}

Stream Device::wrap_native_stream(const NativeStream& stream) const {
  constexpr std::string_view operation = "Device::wrap_native_stream";
  const hal_interop_v1& interop = interop_of(*this, operation);
  if (interop.stream_wrap == nullptr)
    throw Error(StatusCode::unsupported, std::string(operation) + ": the " + backend_name() +
                                             " backend has no native streams (its streams are hal's own); create "
                                             "one with Device::create_stream");
  hal_stream* handle = nullptr;
  const auto& backend = detail::Access::backend(*this);
  backend->check(interop.stream_wrap(backend->context, index(), stream.handle, stream.owned ? 1 : 0, &handle),
                 [&] { return "wrapping the native stream " + hex(stream.handle) + " of " + id(); });
  return detail::Access::stream(std::make_shared<detail::StreamState>(*this, handle));
}

namespace {

// The vendor handle behind a stream or event, through the interop table.
template <typename State>
void* native_handle_of(const std::shared_ptr<State>& state, const char* operation, const char* what,
                       hal_status (*hal_interop_v1::*entry)(decltype(State::handle), void**)) {
  if (!state) throw Error(StatusCode::invalid_argument, std::string(operation) + ": the " + what + " is empty");
  const Device& device = state->device;
  const hal_interop_v1& interop = interop_of(device, operation);
  if (interop.*entry == nullptr)
    throw Error(StatusCode::unsupported, std::string(operation) + ": the " + device.backend_name() + " backend's " +
                                             what + "s are hal's own; there is no native " + what);
  void* native = nullptr;
  detail::Access::backend(device)->check((interop.*entry)(state->handle, &native), [&] {
    return std::string("reading the native handle of a ") + what + " of " + device.id();
  });
  return native;
}

}  // namespace

void* Stream::native_handle() const {
  return native_handle_of(state_, "Stream::native_handle", "stream", &hal_interop_v1::stream_native_handle);
}

void* Event::native_handle() const {
  return native_handle_of(state_, "Event::native_handle", "event", &hal_interop_v1::event_native_handle);
}

NativeDevice native_device(const Device& device) {
  const hal_interop_v1& interop = interop_of(device, "native_device");
  hal_native_device_v1 out{};
  out.struct_size = sizeof(out);
  const auto& backend = detail::Access::backend(device);
  backend->check(interop.native_device(backend->context, device.index(), &out),
                 [&] { return "asking the native name of " + device.id(); });
  return {static_cast<dlpack::DLDeviceType>(out.dlpack_device_type), out.ordinal};
}

}  // namespace hal
