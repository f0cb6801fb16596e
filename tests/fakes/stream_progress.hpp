// How far a fake stream's work has got (fake_cuda_driver, fake_hip_runtime):
// enqueued and completed operations. Shared, so work on another stream that
// waits for it (the legacy null stream's implicit ordering) outlives a
// destroyed stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

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

// Other streams' work a stream's next operation waits for: (progress, ticket).
using WaitList = std::vector<std::pair<std::shared_ptr<Progress>, std::uint64_t>>;

// `work`, run once every entry of `before` is reached and `delay_ms` more
// have passed (a null stream's delay, so that work returning before its
// bytes land is seen to).
template <class Work>
auto after(WaitList before, int delay_ms, Work work) {
  return [before = std::move(before), delay_ms, work = std::move(work)] {
    for (const auto& [progress, ticket] : before) progress->wait_for(ticket);
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    return work();
  };
}

}  // namespace hal_fakes
