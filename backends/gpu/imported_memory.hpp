// Memory a GPU plugin did not allocate (hal_interop_v1.buffer_import): what
// the driver says it is, and whether that is what the caller imports it as.
// Vendor-neutral: each backend's Ops translates its pointer attributes into
// PointerFacts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hal/backend_abi.h"

namespace hal::backend {

struct PointerFacts {
  // unknown: memory the driver does not know, such as ordinary host memory.
  enum class Memory { unknown, host, device, managed } memory = Memory::unknown;
  int ordinal = -1;                // the device it was allocated on or registered with
  std::uintptr_t range_start = 0;  // the allocation the address lies in, when the driver tells
  std::uint64_t range_size = 0;    // 0: the driver cannot tell
};

// What an imported buffer must undo and tell its owner when it is freed, and
// when: once the work hal queued on it has passed, never by waiting for the
// whole device (a framework's other streams go on; a graph capture is not
// broken).
struct ImportedMemory {
  bool active = false;         // the buffer wraps memory it did not allocate
  void* registered = nullptr;  // host memory this import page-locked, to unregister
  void (*release)(void* user_data) = nullptr;
  void* release_user_data = nullptr;
  // Each stream hal queued work on the memory on, with an event recorded
  // after the latest such work (the vendor's native handles).
  struct StreamUse {
    void* stream;
    void* event;
  };
  mutable std::mutex uses_mutex;
  mutable std::vector<StreamUse> uses;
};

// Imported memory freed while work on it may still run: released (host memory
// unregistered, the owner's release called, exactly once) when its events
// have passed, as the plugin next frees, imports or synchronizes, and at
// shutdown after waiting for them.
struct PendingRelease {
  std::uint32_t device = 0;
  std::vector<void*> events;
  void* registered = nullptr;
  void (*release)(void* user_data) = nullptr;
  void* release_user_data = nullptr;
};

class PendingReleases {
 public:
  void add(PendingRelease pending) {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(pending));
    any_.store(true, std::memory_order_release);
  }
  // Takes out those for which passed(pending) holds, to be released outside
  // the lock: a release may call back into hal.
  template <typename Passed>
  std::vector<PendingRelease> take(Passed passed) {
    std::vector<PendingRelease> taken;
    if (!any_.load(std::memory_order_acquire)) return taken;
    std::lock_guard lock(mutex_);
    for (auto it = items_.begin(); it != items_.end();) {
      if (passed(*it)) {
        taken.push_back(std::move(*it));
        it = items_.erase(it);
      } else {
        ++it;
      }
    }
    any_.store(!items_.empty(), std::memory_order_release);
    return taken;
  }

 private:
  std::mutex mutex_;
  std::vector<PendingRelease> items_;
  std::atomic<bool> any_{false};
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
