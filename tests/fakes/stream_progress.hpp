// How far a fake stream's work has got (fake_cuda_driver, fake_hip_runtime):
// enqueued and completed operations. Shared, so work on another stream that
// waits for it (the legacy null stream's implicit ordering) outlives a
// destroyed stream.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace hal_fakes {

struct Progress {
  std::mutex mutex;
  std::condition_variable advanced;
  std::uint64_t enqueued = 0, completed = 0;
  // The ticket of the next operation.
  std::uint64_t enqueue() {
    std::lock_guard lock(mutex);
    return ++enqueued;
  }
  std::uint64_t enqueued_so_far() {
    std::lock_guard lock(mutex);
    return enqueued;
  }
  void complete_one() {
    {
      std::lock_guard lock(mutex);
      ++completed;
    }
    advanced.notify_all();
  }
  void wait_for(std::uint64_t ticket) {
    std::unique_lock lock(mutex);
    advanced.wait(lock, [&] { return completed >= ticket; });
  }
};

}  // namespace hal_fakes
