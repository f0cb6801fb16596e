// Buffer: device, host-pinned or managed memory owned by one device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "hal/device.hpp"

namespace hal {

namespace detail {
struct BufferState;
struct Access;
}

// Copies of a Buffer share one allocation. free() releases it at once; any
// later use of any copy (or view) is an error, never a dangling access. The
// memory is released when the last copy and view go away otherwise. A Buffer
// may also wrap memory hal did not allocate (Device::import_memory).
class Buffer {
 public:
  Buffer() = default;

  bool valid() const;  // allocated and not freed
  std::uint64_t size() const;
  MemoryKind kind() const;
  Device device() const;
  // Host-usable address; throws unsupported for device memory the host cannot map.
  void* host_address() const;
  // Address for kernels on the owning device.
  void* device_address() const;

  // Synchronous transfers: return when the bytes are in place.
  void write(std::uint64_t offset, const void* source, std::uint64_t size) const;
  void read(std::uint64_t offset, void* destination, std::uint64_t size) const;
  void copy_from(std::uint64_t offset, const Buffer& source, std::uint64_t source_offset, std::uint64_t size) const;
  // pattern_size 1, 2 or 4 bytes; size must be a multiple of it.
  void fill(std::uint64_t offset, std::uint64_t size, std::uint32_t pattern, std::uint32_t pattern_size = 1) const;

  // Bytes [offset, offset + size) of this buffer as a Buffer of their own,
  // sharing the allocation (which it keeps alive): a tensor at a byte offset
  // needs no copy. Every Buffer operation takes it; freeing a view releases
  // nothing, freeing the viewed buffer makes its views unusable.
  Buffer view(std::uint64_t offset, std::uint64_t size) const;

  void free();

 private:
  friend struct detail::Access;
  explicit Buffer(std::shared_ptr<detail::BufferState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::BufferState> state_;
};

}  // namespace hal
