// Event: a point in a stream, for ordering across streams and timing.
#pragma once

#include <memory>
#include <utility>

#include "hal/device.hpp"

namespace hal {

namespace detail {
struct EventState;
struct Access;
}

class Event {
 public:
  Event() = default;

  Device device() const;
  // True when the latest record has been reached (or the event was never recorded).
  bool is_complete() const;
  void synchronize() const;
  // The vendor's event (CUevent, hipEvent_t); hal keeps owning it. Throws
  // unsupported on the host backend.
  void* native_handle() const;

  // Time between two completed records on the same device, in milliseconds.
  static double elapsed_milliseconds(const Event& start, const Event& end);

 private:
  friend struct detail::Access;
  explicit Event(std::shared_ptr<detail::EventState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::EventState> state_;
};

}  // namespace hal
