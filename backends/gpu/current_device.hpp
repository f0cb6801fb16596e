// The device an entry point works on, current on the calling thread for as
// long as the entry point runs. The thread belongs to the caller (a framework
// keeps its own current device/context on it), so whatever it had before is
// put back when the scope ends. Both GPU backends' Context::current_device()
// return one; the shared templates take it from there.
#pragma once

#include <functional>
#include <utility>

#include "hal/backend_abi.h"

namespace hal::backend {

class [[nodiscard]] CurrentDevice {
 public:
  // Nothing to put back: the device was current already, or making it so
  // failed with `status` (the backend's last error says why).
  explicit CurrentDevice(hal_status status) : status_(status) {}
  // The device was made current; `restore` gives the thread back what it had.
  explicit CurrentDevice(std::function<void()> restore) : restore_(std::move(restore)) {}
  CurrentDevice(CurrentDevice&& other) noexcept
      : status_(other.status_), restore_(std::exchange(other.restore_, nullptr)) {}
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  CurrentDevice& operator=(CurrentDevice&&) = delete;
  ~CurrentDevice() {
    if (restore_) restore_();
  }

  explicit operator bool() const { return status_ == HAL_OK; }
  hal_status status() const { return status_; }

 private:
  hal_status status_ = HAL_OK;
  std::function<void()> restore_;  // two words captured: fits std::function's inline storage
};

}  // namespace hal::backend
