// Buffer: device, host-pinned or managed memory owned by one device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hal/device.hpp"

namespace hal {

namespace detail {
struct BufferState;
}

// Copies of a Buffer share one allocation. free() releases it at once; any
// later use of any copy is an error (never a dangling access). The memory is
// released when the last copy goes away otherwise.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::shared_ptr<detail::BufferState> state) : state_(std::move(state)) {}

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

  void free();

  const std::shared_ptr<detail::BufferState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::BufferState> state_;
};

}  // namespace hal
