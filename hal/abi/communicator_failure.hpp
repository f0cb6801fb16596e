// A communicator's first failure, which every later operation repeats (as
// NCCL's communicators do): the one bookkeeping of the host engines (Gloo,
// MPI, shared memory) and the GPU backends' NCCL-compatible engine.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include "hal/backend_abi.h"

namespace hal::abi {

class FirstFailure {
 public:
  // Keeps the failure unless one came before; true when it was the first.
  bool record(hal_status status, const std::string& message) {
    std::lock_guard lock(mutex_);
    if (status_ != HAL_OK) return false;
    status_ = status;
    message_ = message;
    failed_.store(true, std::memory_order_release);
    return true;
  }
  // Whether a failure was recorded; without the lock.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void replace_message(const std::string& message) {
    std::lock_guard lock(mutex_);
    message_ = message;
  }
  std::pair<hal_status, std::string> get() {
    std::lock_guard lock(mutex_);
    return {status_, message_};
  }
  // Before an operation: HAL_OK, or why an aborted or broken communicator
  // refuses it, in message after what() ("rank 1: all_reduce #3 (...)").
  template <typename What>
  hal_status refuse(bool aborted, What&& what, std::string& message) {
    if (aborted) {
      message = what() + ": the communicator was aborted";
      return HAL_ERROR_ABORTED;
    }
    if (!failed()) return HAL_OK;
    const auto [status, earlier] = get();
    message = what() + ": the communicator failed earlier and cannot be used: " + earlier;
    return status;
  }

 private:
  std::mutex mutex_;
  hal_status status_ = HAL_OK;
  std::string message_;
  std::atomic<bool> failed_{false};  // status_ != HAL_OK, readable without the lock
};

}  // namespace hal::abi
