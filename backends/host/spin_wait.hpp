// Short busy-waits for the host backend's threads (stream workers, the
// attention pool): handing work to a sleeping thread costs a wake-up of tens
// of microseconds, more than many host operations take.
#pragma once

#include <chrono>
#include <thread>

namespace hal::host {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Looks at done() until it holds or `limit` has passed; false when it did
// not hold. Busy-waits for the first `busy` of it, then yields the CPU
// between looks, so that a waiter never keeps a runnable thread off its CPU
// for long.
template <typename Done>
bool spin_until(Done done, std::chrono::microseconds limit,
                std::chrono::microseconds busy = std::chrono::microseconds{5}) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (unsigned looks = 1;; ++looks) {
    if (done()) return true;
    if (looks % 64 != 0) {
      cpu_relax();
      continue;
    }
    const Clock::duration waited = Clock::now() - start;
    if (waited >= limit) return false;
    if (waited >= busy) std::this_thread::yield();
  }
}

}  // namespace hal::host
