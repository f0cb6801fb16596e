// Event: a point in a stream, for ordering across streams and timing.
#pragma once

#include <memory>

#include "hal/device.hpp"

namespace hal {

namespace detail {
struct EventState;
}

class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<detail::EventState> state) : state_(std::move(state)) {}

  Device device() const;
  // True when the latest record has been reached (or the event was never recorded).
  bool is_complete() const;
  void synchronize() const;

  // Time between two completed records on the same device, in milliseconds.
  static double elapsed_milliseconds(const Event& start, const Event& end);

  const std::shared_ptr<detail::EventState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::EventState> state_;
};

}  // namespace hal
