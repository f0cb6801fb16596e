#include "hal/conformance/health.hpp"

#include <algorithm>
#include <utility>

#include "hal/conformance/case.hpp"

namespace hal::conformance {
namespace {

// Clock reasons that mean the device could not hold its clocks under load.
constexpr std::uint64_t held_down_reasons = static_cast<std::uint64_t>(ClockEventReason::hardware_slowdown) |
                                            static_cast<std::uint64_t>(ClockEventReason::software_thermal) |
                                            static_cast<std::uint64_t>(ClockEventReason::hardware_thermal) |
                                            static_cast<std::uint64_t>(ClockEventReason::power_brake);

bool memory_health(HealthEventKind kind) {
  return kind == HealthEventKind::uncorrected_ecc || kind == HealthEventKind::memory_retirement;
}

std::optional<TelemetrySnapshot> try_telemetry(const Device& device) {
  try {
    return telemetry(device);
  } catch (const Error&) {
    return std::nullopt;  // no telemetry: nothing to compare
  }
}

}  // namespace

HealthGate::HealthGate(const Device& device) : device_(device), before_(try_telemetry(device)) {}

std::vector<std::string> HealthGate::changes() const {
  if (!before_) return {};
  const std::optional<TelemetrySnapshot> after = try_telemetry(device_);
  if (!after) return {};
  std::vector<std::string> lines;
  for (const HealthEvent& event : health_events_between(*before_, *after))
    if (memory_health(event.kind)) lines.push_back(event.description);
  return lines;
}

StressWatch::StressWatch(CaseContext& context, std::chrono::milliseconds interval)
    : context_(context), interval_(interval), started_(std::chrono::steady_clock::now()), next_(started_) {
  temperature_ = {"core temperature under load", "s", "C", {}};
  power_ = {"power under load", "s", "W", {}};
  clock_ = {"compute clock under load", "s", "MHz", {}};
  try {
    monitor_.emplace(context.device(), interval);
  } catch (const Error& error) {
    not_watched_ = error.what();
  }
  sample();
}

void StressWatch::poll() {
  if (std::chrono::steady_clock::now() >= next_) sample();
}

void StressWatch::sample() {
  if (!monitor_) return;
  const auto now = std::chrono::steady_clock::now();
  next_ = now + interval_;
  const double at = std::chrono::duration<double>(now - started_).count();
  try {
    // The wait that finds nothing pending takes this sample's snapshot.
    while (std::optional<HealthEvent> event = monitor_->wait(std::chrono::milliseconds(0)))
      if (std::find(events_.begin(), events_.end(), event->description) == events_.end())
        events_.push_back(event->description);
  } catch (const Error& error) {
    not_watched_ = std::string("telemetry failed during the run: ") + error.what();
    monitor_.reset();
    return;
  }
  const TelemetrySnapshot& snapshot = monitor_->latest();
  ++samples_;
  if (snapshot.temperature.core_celsius.available())
    temperature_.points.emplace_back(at, snapshot.temperature.core_celsius.value());
  if (snapshot.power.draw_watts.available()) power_.points.emplace_back(at, snapshot.power.draw_watts.value());
  if (snapshot.clocks.compute_mhz.available())
    clock_.points.emplace_back(at, static_cast<double>(snapshot.clocks.compute_mhz.value()));
  if (snapshot.clock_events.reasons.available()) held_down_ |= snapshot.clock_events.reasons.value() & held_down_reasons;
}

void StressWatch::finish() {
  sample();
  if (samples_ == 0) {
    context_.note("telemetry not watched: " + (not_watched_.empty() ? std::string("no sample taken") : not_watched_));
    return;
  }
  context_.measure({"telemetry samples", static_cast<double>(samples_), "", {}, {}, "", ""});
  auto extreme = [&](const Series& series, bool highest, const std::string& name) {
    if (series.points.empty()) return;
    const auto found = std::minmax_element(series.points.begin(), series.points.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
    context_.measure({name, highest ? found.second->second : found.first->second, series.y_unit, {}, {}, "", ""});
    context_.add_series(series);
  };
  extreme(temperature_, true, "max core temperature");
  extreme(power_, true, "max power");
  extreme(clock_, false, "min compute clock");
  std::string problems;
  if (held_down_ != 0) problems += "clocks held down by " + describe_clock_event_reasons(held_down_);
  for (const std::string& event : events_) problems += (problems.empty() ? "" : "; ") + event;
  if (!not_watched_.empty()) context_.note(not_watched_);
  if (!problems.empty()) context_.fail("under load: " + problems);
  context_.note("telemetry watched in " + std::to_string(samples_) + " samples: no clock held down, no health event");
}

}  // namespace hal::conformance
