// Device health around and during cases: the gate every case passes through
// (the memory's health must not change while it runs) and the watch a stress
// case keeps on temperature, power, clocks and health events.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hal/conformance/model.hpp"
#include "hal/hal.hpp"

namespace hal::conformance {

class CaseContext;

// ECC, retired pages and row remaps, read when made and compared by changes().
class HealthGate {
 public:
  explicit HealthGate(const Device& device);
  // What got worse since the gate was made, one line each ("2 more
  // uncorrected ECC errors"); empty when nothing did or the device has no telemetry.
  std::vector<std::string> changes() const;

 private:
  Device device_;
  std::optional<TelemetrySnapshot> before_;
};

// Samples a device's telemetry while a stress case runs, and the health
// events it raises. Call poll() from the case's loop; finish() records the
// samples (as series and measurements) and fails the case on a clock held
// down by heat, power brake or hardware slowdown, or on a critical event.
class StressWatch {
 public:
  StressWatch(CaseContext& context, std::chrono::milliseconds interval);
  void poll();  // samples when the interval has passed since the last sample
  void finish();

 private:
  void sample();

  CaseContext& context_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point started_, next_;
  std::optional<HealthMonitor> monitor_;
  std::string not_watched_;  // why there is no telemetry to watch
  Series temperature_, power_, clock_;
  std::uint64_t held_down_ = 0;  // ClockEventReason bits seen in any sample
  std::vector<std::string> events_;
  std::size_t samples_ = 0;
};

}  // namespace hal::conformance
