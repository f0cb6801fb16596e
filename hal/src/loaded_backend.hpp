// Internal: a loaded plugin and the shared state behind the API objects.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include <boost/dll/shared_library.hpp>

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "attention_internal.hpp"
#include "hal/attention.hpp"
#include "hal/backend_abi.h"
#include "hal/settings.hpp"
#include "hal/device.hpp"
#include "hal/event.hpp"
#include "hal/memory.hpp"
#include "hal/stream.hpp"
#include "hal/status.hpp"

namespace hal::detail {

// One initialized backend. Every Device, Buffer, Stream and Event holds a
// shared_ptr to it, so the library stays mapped while any object from it lives.
struct LoadedBackend {
  // Declared first so it is destroyed last, after shutdown() ran.
  std::shared_ptr<boost::dll::shared_library> library;
  const hal_backend_v1* table = nullptr;
  hal_backend_context* context = nullptr;
  std::string name;
  std::string path;
  // The runtime's settings, for what calls read (attention order, ...).
  std::shared_ptr<const Settings> settings = std::make_shared<const Settings>();

  // Attention decisions per (device, params, order, settings), which
  // fallbacks were already warned about, so each is explained once, and what
  // calls read of each device. Entries are never removed: callers hold
  // references to them.
  std::mutex attention_mutex;
  std::unordered_map<AttentionDecisionKey, AttentionDecision, AttentionDecisionKeyHash> attention_decisions;
  std::unordered_set<AttentionDecisionKey, AttentionDecisionKeyHash> attention_warned;
  std::map<std::uint32_t, AttentionDeviceFacts> attention_devices;
  // Each device's entry above, published once found (one slot per device,
  // sized when the devices are enumerated): calls read it without the lock.
  std::unique_ptr<std::atomic<const AttentionDeviceFacts*>[]> attention_device_slots;

  LoadedBackend() = default;
  LoadedBackend(const LoadedBackend&) = delete;
  LoadedBackend& operator=(const LoadedBackend&) = delete;
  ~LoadedBackend();

  // The backend's last error on this thread as a Status; call right after
  // the failing call. operation names what hal was doing.
  Status error(hal_status code, std::string_view operation) const;
  void check(hal_status code, std::string_view operation) const {
    if (code != HAL_OK) throw Error(error(code, operation));
  }
  // For hot paths: the description is built only when the call failed.
  template <typename Describe>
    requires std::is_invocable_r_v<std::string, Describe>
  void check(hal_status code, Describe&& describe) const {
    if (code != HAL_OK) throw Error(error(code, describe()));
  }
  // The optional sub-tables, each nullptr when absent or beyond struct_size.
  const hal_attention_v3* attention() const;
  const hal_collectives_v1* collectives() const;
  const hal_interop_v1* interop() const;
  const hal_telemetry_v1* telemetry() const;
  const hal_memory_test_v1* memory_test() const;
  const hal_topology_v1* topology() const;
};

// The API objects' private state, for libhal's own code (the public headers
// name it only as a friend).
struct Access {
  static const std::shared_ptr<LoadedBackend>& backend(const Device& device) { return device.backend_; }
  static const std::shared_ptr<BufferState>& state(const Buffer& buffer) { return buffer.state_; }
  static const std::shared_ptr<StreamState>& state(const Stream& stream) { return stream.state_; }
  static const std::shared_ptr<EventState>& state(const Event& event) { return event.state_; }
  static Device device(std::shared_ptr<LoadedBackend> backend, std::uint32_t index, DeviceInfo info) {
    return Device(std::move(backend), index, std::move(info));
  }
  static Buffer buffer(std::shared_ptr<BufferState> state) { return Buffer(std::move(state)); }
  static Stream stream(std::shared_ptr<StreamState> state) { return Stream(std::move(state)); }
  static Event event(std::shared_ptr<EventState> state) { return Event(std::move(state)); }
};

struct BufferState {
  std::shared_ptr<LoadedBackend> backend;
  Device device;
  hal_buffer* handle = nullptr;  // a view's is the viewed allocation's
  std::uint64_t size = 0;
  MemoryKind kind = MemoryKind::device;
  std::atomic<bool> freed{false};
  // Views (Buffer::view) look into the allocation of `viewed` from byte
  // `base` on; they release nothing themselves.
  std::shared_ptr<BufferState> viewed;
  std::uint64_t base = 0;

  BufferState(Device owner, hal_buffer* buffer, std::uint64_t bytes, MemoryKind memory_kind)
      : backend(Access::backend(owner)), device(std::move(owner)), handle(buffer), size(bytes), kind(memory_kind) {}
  ~BufferState();
  // Throws for a freed buffer (or a view of one) or a range outside [0, size).
  void check_usable(std::string_view operation) const;
  void check_range(std::uint64_t offset, std::uint64_t bytes, std::string_view operation) const;
  // What check_range accepts, without a message: for hot paths that build
  // the message only when it is needed.
  bool fits(std::uint64_t offset, std::uint64_t bytes) const {
    return !freed.load() && !(viewed && viewed->freed.load()) && offset <= size && bytes <= size - offset;
  }
  // The plugin's name for byte `offset` of this buffer.
  hal_tensor_ref_v1 ref(std::uint64_t offset) const { return {handle, base + offset}; }
  std::string describe() const;
};

// The state behind a Buffer, or an error naming the operation when the
// Buffer is empty or freed.
const BufferState& usable_state(const std::shared_ptr<BufferState>& state, std::string_view operation);
void check_fill_arguments(std::uint64_t offset, std::uint64_t size, std::uint32_t pattern_size,
                          std::string_view operation);

// A plugin's handle of an object made on a device, with the device it was
// made on; the owner destroys it through that device's backend.
template <typename Handle>
struct DeviceObject {
  Device device;
  Handle* handle = nullptr;
  DeviceObject(Device owner, Handle* object) : device(std::move(owner)), handle(object) {}
};

struct StreamState : DeviceObject<hal_stream> {
  using DeviceObject::DeviceObject;
  ~StreamState();
};

// The state behind a Stream, or an error naming the operation when the
// Stream is empty.
const StreamState& usable_stream(const std::shared_ptr<StreamState>& state, std::string_view operation);
// A buffer used on a stream must live on the stream's device.
const BufferState& buffer_on_stream_device(const StreamState& stream, const std::shared_ptr<BufferState>& buffer,
                                           std::string_view operation);

struct EventState : DeviceObject<hal_event> {
  using DeviceObject::DeviceObject;
  ~EventState();
};

// Logging from libhal and from backends, filtered by HAL_LOG_LEVEL / config.
void log_message(hal_log_level level, std::string_view message);
void set_log_level(hal_log_level level);
hal_log_level parse_log_level(std::string_view text, std::string_view source);

}  // namespace hal::detail
