#include "hal/device.hpp"

#include <bit>
#include <sstream>
#include <type_traits>

#include "hal/event.hpp"
#include "hal/memory.hpp"
#include "hal/stream.hpp"
#include "abi.hpp"
#include "loaded_backend.hpp"

namespace hal {

std::string_view to_string(DeviceType type) {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::gpu: return "gpu";
    case DeviceType::accelerator: return "accelerator";
  }
  return "unknown";
}

std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::device: return "device";
    case MemoryKind::host_pinned: return "host_pinned";
    case MemoryKind::managed: return "managed";
  }
  return "unknown";
}

std::string Capability::value_string() const {
  struct Visitor {
    std::string operator()(bool flag) const { return flag ? "true" : "false"; }
    std::string operator()(std::int64_t number) const { return std::to_string(number); }
    std::string operator()(double number) const {
      std::ostringstream out;
      out << number;
      return out.str();
    }
    std::string operator()(const std::string& text) const { return text; }
  };
  return std::visit(Visitor{}, value);
}

const Capability* DeviceInfo::find_capability(std::string_view key) const {
  for (const auto& capability : capabilities)
    if (capability.key == key) return &capability;
  return nullptr;
}

std::optional<std::string> DeviceInfo::version(std::string_view axis) const {
  for (const auto& [name, value] : version_axes)
    if (name == axis) return value;
  return std::nullopt;
}

Device::Device(std::shared_ptr<detail::LoadedBackend> backend, std::uint32_t index, DeviceInfo info)
    : backend_(std::move(backend)), index_(index), info_(std::make_shared<const DeviceInfo>(std::move(info))) {}

std::string Device::id() const { return info_->backend + ":" + std::to_string(index_); }

std::uint64_t Device::free_memory() const {
  hal_device_info_v1 raw{};
  raw.struct_size = sizeof(raw);
  backend_->check(backend_->table->device_info(backend_->context, index_, &raw), "reading free memory of " + id());
  return raw.free_memory;
}

bool Device::supports(std::string_view capability_key) const {
  const Capability* capability = info_->find_capability(capability_key);
  if (capability == nullptr) return false;
  const bool* flag = std::get_if<bool>(&capability->value);
  return flag != nullptr && *flag;
}

Buffer Device::allocate(std::uint64_t size, MemoryKind kind, std::uint64_t alignment) const {
  if (size == 0)
    throw Error(StatusCode::invalid_argument, "allocation size on " + id() + " is 0: ask for at least 1 byte");
  if (alignment != 0 && !std::has_single_bit(alignment))
    throw Error(StatusCode::invalid_argument, "alignment " + std::to_string(alignment) + " for an allocation on " +
                                                  id() + " is not a power of two");
  hal_buffer* handle = nullptr;
  const hal_status code = backend_->table->buffer_allocate(backend_->context, index_,
                                                           detail::to_abi(kind), size, alignment, &handle);
  if (code != HAL_OK)
    throw Error(backend_->error(code, "allocating " + std::to_string(size) + " bytes of " +
                                          std::string(to_string(kind)) + " memory on " + id()));
  return detail::Access::buffer(std::make_shared<detail::BufferState>(*this, handle, size, kind));
}

Stream Device::create_stream() const {
  hal_stream* handle = nullptr;
  backend_->check(backend_->table->stream_create(backend_->context, index_, &handle), "creating a stream on " + id());
  return detail::Access::stream(std::make_shared<detail::StreamState>(*this, handle));
}

Event Device::create_event() const {
  hal_event* handle = nullptr;
  backend_->check(backend_->table->event_create(backend_->context, index_, &handle), "creating an event on " + id());
  return detail::Access::event(std::make_shared<detail::EventState>(*this, handle));
}

}  // namespace hal
