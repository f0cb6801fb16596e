// Memory a GPU plugin did not allocate (hal_interop_v1.buffer_import): what
// the driver says it is, and whether that is what the caller imports it as.
// Vendor-neutral: each backend's Ops translates its pointer attributes into
// PointerFacts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hal/backend_abi.h"

namespace hal::backend {

struct PointerFacts {
  // unknown: memory the driver does not know, such as ordinary host memory.
  enum class Memory { unknown, host, device, managed } memory = Memory::unknown;
  int ordinal = -1;                // the device it was allocated on or registered with
  std::uintptr_t range_start = 0;  // the allocation the address lies in, when the driver tells
  std::uint64_t range_size = 0;    // 0: the driver cannot tell
};

// What an imported buffer must undo and tell its owner when it is freed.
struct ImportedMemory {
  bool active = false;         // the buffer wraps memory it did not allocate
  void* registered = nullptr;  // host memory this import page-locked, to unregister
  void (*release)(void* user_data) = nullptr;
  void* release_user_data = nullptr;
};

// "" when memory of `facts` may be imported as `kind` into the device of
// `ordinal` over [address, address + size); otherwise what it really is and
// what to do, e.g. "the memory at 0x7f.. is device memory of cuda:1, not of
// cuda:0". device_name(ordinal) names a device as hal does.
std::string imported_memory_mismatch(const PointerFacts& facts, hal_memory_kind kind, int ordinal,
                                     std::uintptr_t address, std::uint64_t size,
                                     const std::function<std::string(int ordinal)>& device_name);

std::string describe_pointer(std::uintptr_t address);

}  // namespace hal::backend
