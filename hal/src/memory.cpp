#include "hal/memory.hpp"

#include <atomic>
#include <string>
#include <string_view>

#include "loaded_backend.hpp"

namespace hal {
namespace detail {

BufferState::~BufferState() {
  if (!viewed && !freed.exchange(true)) backend->table->buffer_free(handle);
}

std::string BufferState::describe() const {
  const std::string what = "buffer of " + std::to_string(size) + " bytes (" + std::string(to_string(kind)) + ") on " + device.id();
  if (!viewed) return what;
  return "view (bytes " + std::to_string(base) + " to " + std::to_string(base + size) + ") of a " + viewed->describe();
}

void BufferState::check_usable(std::string_view operation) const {
  if (freed.load())
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the " + describe() +
                                                  " was freed; allocate a new buffer instead of reusing a freed one");
  if (viewed && viewed->freed.load())
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the " + describe() +
                                                  " is a view of a buffer that was freed");
}

void BufferState::check_range(std::uint64_t offset, std::uint64_t bytes, std::string_view operation) const {
  check_usable(operation);
  // Written so that offset + bytes cannot overflow.
  if (offset > size || bytes > size - offset)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": range [" + std::to_string(offset) + ", " +
                                                  std::to_string(offset) + " + " + std::to_string(bytes) +
                                                  ") is outside the " + describe() +
                                                  "; offset + size must be at most " + std::to_string(size));
}

void check_fill_arguments(std::uint64_t offset, std::uint64_t size, std::uint32_t pattern_size,
                          std::string_view operation) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": pattern_size " +
                                                  std::to_string(pattern_size) + " is not allowed; use 1, 2 or 4");
  if (size % pattern_size != 0 || offset % pattern_size != 0)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": offset " + std::to_string(offset) +
                                                  " and size " + std::to_string(size) +
                                                  " must be multiples of pattern_size " + std::to_string(pattern_size));
}

const BufferState& usable_state(const std::shared_ptr<BufferState>& state, std::string_view operation) {
  if (!state)
    throw Error(StatusCode::invalid_argument,
                std::string(operation) + ": the buffer is empty (default-constructed or moved from)");
  state->check_usable(operation);
  return *state;
}

}  // namespace detail

using detail::usable_state;

bool Buffer::valid() const { return state_ && !state_->freed.load(); }
std::uint64_t Buffer::size() const { return usable_state(state_, "Buffer::size").size; }
MemoryKind Buffer::kind() const { return usable_state(state_, "Buffer::kind").kind; }
Device Buffer::device() const { return usable_state(state_, "Buffer::device").device; }

void* Buffer::host_address() const {
  const auto& state = usable_state(state_, "Buffer::host_address");
  auto* address = static_cast<char*>(state.backend->table->buffer_host_address(state.handle));
  if (address == nullptr)
    throw Error(StatusCode::unsupported, "the " + state.describe() +
                                             " is not mapped into host memory; copy it with read() or use "
                                             "host_pinned/managed memory");
  return address + state.base;
}

void* Buffer::device_address() const {
  const auto& state = usable_state(state_, "Buffer::device_address");
  return static_cast<char*>(state.backend->table->buffer_device_address(state.handle)) + state.base;
}

void Buffer::write(std::uint64_t offset, const void* source, std::uint64_t size) const {
  const auto& state = usable_state(state_, "Buffer::write");
  state.check_range(offset, size, "Buffer::write");
  if (size == 0) return;
  if (source == nullptr) throw Error(StatusCode::invalid_argument, "Buffer::write: source pointer is null");
  state.backend->check(state.backend->table->copy_host_to_device(nullptr, state.handle, state.base + offset, source, size),
                       [&] { return "writing " + std::to_string(size) + " bytes to the " + state.describe(); });
}

void Buffer::read(std::uint64_t offset, void* destination, std::uint64_t size) const {
  const auto& state = usable_state(state_, "Buffer::read");
  state.check_range(offset, size, "Buffer::read");
  if (size == 0) return;
  if (destination == nullptr) throw Error(StatusCode::invalid_argument, "Buffer::read: destination pointer is null");
  state.backend->check(state.backend->table->copy_device_to_host(nullptr, destination, state.handle, state.base + offset, size),
                       [&] { return "reading " + std::to_string(size) + " bytes from the " + state.describe(); });
}

void Buffer::copy_from(std::uint64_t offset, const Buffer& source, std::uint64_t source_offset,
                       std::uint64_t size) const {
  const auto& destination_state = usable_state(state_, "Buffer::copy_from");
  const auto& source_state = usable_state(source.state_, "Buffer::copy_from");
  destination_state.check_range(offset, size, "Buffer::copy_from (destination)");
  source_state.check_range(source_offset, size, "Buffer::copy_from (source)");
  if (destination_state.backend != source_state.backend)
    throw Error(StatusCode::unsupported, "Buffer::copy_from: the source is on " + source_state.device.id() +
                                             " and the destination on " + destination_state.device.id() +
                                             "; copies between backends go through host memory (read, then write)");
  if (size == 0) return;
  destination_state.backend->check(
      destination_state.backend->table->copy_device_to_device(nullptr, destination_state.handle, destination_state.base + offset,
                                                              source_state.handle, source_state.base + source_offset, size),
      [&] {
        return "copying " + std::to_string(size) + " bytes from the " + source_state.describe() + " to the " +
               destination_state.describe();
      });
}

void Buffer::fill(std::uint64_t offset, std::uint64_t size, std::uint32_t pattern, std::uint32_t pattern_size) const {
  const auto& state = usable_state(state_, "Buffer::fill");
  state.check_range(offset, size, "Buffer::fill");
  detail::check_fill_arguments(offset, size, pattern_size, "Buffer::fill");
  if (size == 0) return;
  state.backend->check(state.backend->table->fill(nullptr, state.handle, state.base + offset, size, &pattern, pattern_size),
                       [&] { return "filling " + std::to_string(size) + " bytes of the " + state.describe(); });
}

Buffer Buffer::view(std::uint64_t offset, std::uint64_t size) const {
  const auto& state = usable_state(state_, "Buffer::view");
  state.check_range(offset, size, "Buffer::view");
  auto view = std::make_shared<detail::BufferState>(state.device, state.handle, size, state.kind);
  view->viewed = state.viewed ? state.viewed : state_;
  view->base = state.base + offset;
  return detail::Access::buffer(std::move(view));
}

void Buffer::free() {
  const auto& state = usable_state(state_, "Buffer::free");
  if (state_->freed.exchange(true))
    throw Error(StatusCode::invalid_argument, "Buffer::free: the " + state.describe() + " was already freed");
  if (state.viewed) return;  // a view owns nothing; it is just unusable from now on
  state.backend->check(state.backend->table->buffer_free(state.handle),
                       [&] { return "freeing the " + state.describe(); });
}

}  // namespace hal
