// Telemetry: snapshots over each backend's optional telemetry sub-table, the
// health rules a person reads, and the monitor that turns vendor events and
// snapshot changes into health events.
#include "hal/telemetry.hpp"

#include <algorithm>
#include <deque>
#include <thread>

#include "abi.hpp"
#include "loaded_backend.hpp"

namespace hal {

std::string_view to_string(Unavailable reason) {
  switch (reason) {
    case Unavailable::not_reported: return "not reported by this backend";
    case Unavailable::not_supported: return "not supported";
    case Unavailable::needs_root: return "needs root";
    case Unavailable::library_missing: return "library missing";
    case Unavailable::mig_mode: return "not readable in MIG mode";
    case Unavailable::read_failed: return "read failed";
    case Unavailable::needs_interval: return "needs a second reading";
  }
  return "unknown reason";
}

std::string_view to_string(ClockEventReason reason) {
  switch (reason) {
    case ClockEventReason::idle: return "idle";
    case ClockEventReason::power_cap: return "power_cap";
    case ClockEventReason::hardware_slowdown: return "hardware_slowdown";
    case ClockEventReason::software_thermal: return "software_thermal";
    case ClockEventReason::hardware_thermal: return "hardware_thermal";
    case ClockEventReason::power_brake: return "power_brake";
    case ClockEventReason::sync_boost: return "sync_boost";
    case ClockEventReason::other: return "other";
  }
  return "unknown";
}

std::string describe_clock_event_reasons(std::uint64_t reasons) {
  std::string text;
  for (const ClockEventReason reason : all_clock_event_reasons) {
    if ((reasons & static_cast<std::uint64_t>(reason)) == 0) continue;
    if (!text.empty()) text += ",";
    text += to_string(reason);
  }
  return text.empty() ? "none" : text;
}

std::string_view to_string(Severity severity) { return severity == Severity::critical ? "critical" : "warning"; }

std::string_view to_string(HealthEventKind kind) {
  switch (kind) {
    case HealthEventKind::xid: return "xid";
    case HealthEventKind::uncorrected_ecc: return "uncorrected_ecc";
    case HealthEventKind::thermal: return "thermal";
    case HealthEventKind::power_brake: return "power_brake";
    case HealthEventKind::memory_retirement: return "memory_retirement";
  }
  return "unknown";
}

namespace {

constexpr std::uint32_t highest_availability_code = HAL_TELEMETRY_NEEDS_INTERVAL;

// The reason half of a reading; nullopt when it holds a value.
template <typename T>
std::optional<Reading<T>> unavailable_reading(const hal_telemetry_reading_v1& raw) {
  if (raw.availability == HAL_TELEMETRY_AVAILABLE) return std::nullopt;
  const std::string detail = raw.detail != nullptr ? raw.detail : "";
  if (raw.availability > highest_availability_code)
    return Reading<T>::unavailable(Unavailable::read_failed, "the backend sent availability code " +
                                                                 std::to_string(raw.availability) +
                                                                 ", newer than this libhal" +
                                                                 (detail.empty() ? "" : ": " + detail));
  return Reading<T>::unavailable(static_cast<Unavailable>(raw.availability), detail);
}

Reading<double> real(const hal_telemetry_reading_v1& raw) {
  if (auto missing = unavailable_reading<double>(raw)) return *missing;
  return Reading<double>::of(raw.real);
}

Reading<std::uint64_t> integer(const hal_telemetry_reading_v1& raw) {
  if (auto missing = unavailable_reading<std::uint64_t>(raw)) return *missing;
  return Reading<std::uint64_t>::of(raw.integer);
}

Reading<bool> flag(const hal_telemetry_reading_v1& raw) {
  if (auto missing = unavailable_reading<bool>(raw)) return *missing;
  return Reading<bool>::of(raw.integer != 0);
}

TelemetrySnapshot from_abi(const hal_telemetry_snapshot_v1& raw, std::string device_id) {
  TelemetrySnapshot snapshot;
  snapshot.device_id = std::move(device_id);
  snapshot.source = raw.source != nullptr ? raw.source : "";
  snapshot.taken = std::chrono::system_clock::now();
  snapshot.temperature = {real(raw.core_temperature), real(raw.hotspot_temperature), real(raw.memory_temperature),
                          real(raw.slowdown_temperature), real(raw.shutdown_temperature)};
  snapshot.power = {real(raw.power_draw), real(raw.power_limit), real(raw.energy)};
  snapshot.clocks = {integer(raw.compute_clock), integer(raw.compute_clock_max), integer(raw.memory_clock),
                     integer(raw.memory_clock_max)};
  snapshot.utilization = {real(raw.compute_utilization), real(raw.memory_utilization), real(raw.steal)};
  snapshot.clock_events = {integer(raw.clock_event_reasons), integer(raw.clock_event_vendor_mask)};
  snapshot.ecc = {flag(raw.ecc_enabled), integer(raw.ecc_corrected_volatile), integer(raw.ecc_uncorrected_volatile),
                  integer(raw.ecc_corrected_aggregate), integer(raw.ecc_uncorrected_aggregate)};
  snapshot.retired_pages = {integer(raw.retired_single_bit), integer(raw.retired_double_bit),
                            flag(raw.retirement_pending), integer(raw.retirement_pending_pages)};
  snapshot.row_remapping = {integer(raw.remap_corrected), integer(raw.remap_uncorrected), flag(raw.remap_pending),
                            flag(raw.remap_failed)};
  snapshot.pcie = {integer(raw.pcie_generation), integer(raw.pcie_generation_max), integer(raw.pcie_width),
                   integer(raw.pcie_width_max), integer(raw.pcie_replay_count)};
  snapshot.interconnect = {integer(raw.links_active), integer(raw.links_total), integer(raw.link_errors)};
  return snapshot;
}

const hal_telemetry_v1& telemetry_of(const Device& device) {
  const hal_telemetry_v1* table = detail::Access::backend(device)->telemetry();
  if (table == nullptr)
    throw Error(StatusCode::unsupported, "the " + device.backend_name() + " backend offers no telemetry for " +
                                             device.id() + ": its plugin has no telemetry sub-table");
  return *table;
}

template <typename T>
bool value_is(const Reading<T>& reading, const T& expected) {
  return reading.available() && reading.value() == expected;
}

std::uint64_t value_or_zero(const Reading<std::uint64_t>& reading) {
  return reading.available() ? reading.value() : 0;
}

std::string plural(std::uint64_t count, const std::string& one, const std::string& many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

std::string celsius(double value) { return std::to_string(static_cast<long long>(value)) + " C"; }

constexpr std::uint64_t critical_clock_events = static_cast<std::uint64_t>(ClockEventReason::hardware_slowdown) |
                                                static_cast<std::uint64_t>(ClockEventReason::hardware_thermal) |
                                                static_cast<std::uint64_t>(ClockEventReason::power_brake);
constexpr std::uint64_t thermal_clock_events = static_cast<std::uint64_t>(ClockEventReason::hardware_thermal) |
                                               static_cast<std::uint64_t>(ClockEventReason::software_thermal);
constexpr std::uint64_t power_clock_events = static_cast<std::uint64_t>(ClockEventReason::hardware_slowdown) |
                                             static_cast<std::uint64_t>(ClockEventReason::power_brake);

}  // namespace

TelemetrySnapshot telemetry(const Device& device) {
  const hal_telemetry_v1& table = telemetry_of(device);
  const auto& backend = detail::Access::backend(device);
  hal_telemetry_snapshot_v1 raw{};
  raw.struct_size = sizeof(raw);
  backend->check(table.snapshot(backend->context, device.index(), &raw),
                 [&] { return "reading the telemetry of " + device.id(); });
  return from_abi(raw, device.id());
}

// The checks DCGM's diagnostics fail a GPU on are critical; what an operator
// should look at soon is a warning.
std::vector<HealthProblem> health_problems(const TelemetrySnapshot& snapshot) {
  std::vector<HealthProblem> problems;
  auto add = [&](Severity severity, std::string message) { problems.push_back({severity, std::move(message)}); };

  const EccTelemetry& ecc = snapshot.ecc;
  if (value_or_zero(ecc.uncorrected_volatile) > 0)
    add(Severity::critical,
        plural(ecc.uncorrected_volatile.value(), "uncorrected ECC error", "uncorrected ECC errors") + " since the driver loaded");
  else if (value_or_zero(ecc.uncorrected_aggregate) > 0)
    add(Severity::warning, plural(ecc.uncorrected_aggregate.value(), "uncorrected ECC error", "uncorrected ECC errors") +
                               " over the device's life");

  const RowRemapTelemetry& remap = snapshot.row_remapping;
  if (value_is(remap.failed, true)) add(Severity::critical, "a row remap failed: the memory cannot be repaired");
  if (value_is(remap.pending, true)) add(Severity::warning, "row remap pending: reset the device");

  const RetiredPageTelemetry& pages = snapshot.retired_pages;
  if (value_or_zero(pages.pending_pages) > 0)
    add(Severity::warning, plural(pages.pending_pages.value(), "page", "pages") + " pending retirement");
  else if (value_is(pages.pending, true))
    add(Severity::warning, "page retirement pending: reset the device");

  const TemperatureTelemetry& temperature = snapshot.temperature;
  if (temperature.core_celsius.available()) {
    const double core = temperature.core_celsius.value();
    if (temperature.shutdown_limit_celsius.available() && core >= temperature.shutdown_limit_celsius.value())
      add(Severity::critical,
          "at " + celsius(core) + ", the shutdown limit (" + celsius(temperature.shutdown_limit_celsius.value()) + ")");
    else if (temperature.slowdown_limit_celsius.available() && core >= temperature.slowdown_limit_celsius.value())
      add(Severity::warning,
          "at " + celsius(core) + ", over the slowdown limit (" + celsius(temperature.slowdown_limit_celsius.value()) + ")");
  }

  if (snapshot.clock_events.reasons.available()) {
    const std::uint64_t reasons = snapshot.clock_events.reasons.value();
    if ((reasons & critical_clock_events) != 0)
      add(Severity::critical, "clocks held down: " + describe_clock_event_reasons(reasons & critical_clock_events));
    else if ((reasons & static_cast<std::uint64_t>(ClockEventReason::software_thermal)) != 0)
      add(Severity::warning, "clocks held down: software_thermal");
  }

  const PcieTelemetry& pcie = snapshot.pcie;
  if (pcie.width.available() && pcie.width_max.available() && pcie.width.value() < pcie.width_max.value())
    add(Severity::warning, "PCIe link x" + std::to_string(pcie.width.value()) + " of x" +
                               std::to_string(pcie.width_max.value()));

  if (value_or_zero(snapshot.interconnect.error_count) > 0)
    add(Severity::warning, plural(snapshot.interconnect.error_count.value(), "link error", "link errors"));

  std::stable_sort(problems.begin(), problems.end(), [](const HealthProblem& a, const HealthProblem& b) {
    return static_cast<int>(a.severity) > static_cast<int>(b.severity);
  });
  return problems;
}

// What got worse from one snapshot to the next.
std::vector<HealthEvent> health_events_between(const TelemetrySnapshot& before, const TelemetrySnapshot& after) {
  std::vector<HealthEvent> events;
  auto add = [&](HealthEventKind kind, std::int64_t code, std::string description) {
    events.push_back({kind, code, after.device_id, std::move(description), after.taken});
  };
  const auto rise = [](const Reading<std::uint64_t>& was, const Reading<std::uint64_t>& is) -> std::uint64_t {
    if (!was.available() || !is.available() || is.value() <= was.value()) return 0;
    return is.value() - was.value();
  };
  std::uint64_t more_uncorrected = rise(before.ecc.uncorrected_volatile, after.ecc.uncorrected_volatile);
  if (!after.ecc.uncorrected_volatile.available())
    more_uncorrected = rise(before.ecc.uncorrected_aggregate, after.ecc.uncorrected_aggregate);
  if (more_uncorrected > 0)
    add(HealthEventKind::uncorrected_ecc, static_cast<std::int64_t>(more_uncorrected),
        plural(more_uncorrected, "more uncorrected ECC error", "more uncorrected ECC errors"));

  if (before.clock_events.reasons.available() && after.clock_events.reasons.available()) {
    const std::uint64_t appeared = after.clock_events.reasons.value() & ~before.clock_events.reasons.value();
    if ((appeared & thermal_clock_events) != 0)
      add(HealthEventKind::thermal, static_cast<std::int64_t>(appeared & thermal_clock_events),
          "clock event: " + describe_clock_event_reasons(appeared & thermal_clock_events));
    if ((appeared & power_clock_events) != 0)
      add(HealthEventKind::power_brake, static_cast<std::int64_t>(appeared & power_clock_events),
          "clock event: " + describe_clock_event_reasons(appeared & power_clock_events));
  }

  const TemperatureTelemetry& was = before.temperature;
  const TemperatureTelemetry& is = after.temperature;
  if (was.core_celsius.available() && is.core_celsius.available() && is.slowdown_limit_celsius.available() &&
      was.core_celsius.value() < is.slowdown_limit_celsius.value() &&
      is.core_celsius.value() >= is.slowdown_limit_celsius.value())
    add(HealthEventKind::thermal, static_cast<std::int64_t>(is.core_celsius.value()),
        "reached " + celsius(is.core_celsius.value()) + ", the slowdown limit is " +
            celsius(is.slowdown_limit_celsius.value()));

  const auto became_true = [](const Reading<bool>& was_flag, const Reading<bool>& is_flag) {
    return is_flag.available() && is_flag.value() && !(was_flag.available() && was_flag.value());
  };
  const std::uint64_t more_retired = rise(before.retired_pages.single_bit, after.retired_pages.single_bit) +
                                     rise(before.retired_pages.double_bit, after.retired_pages.double_bit);
  if (more_retired > 0)
    add(HealthEventKind::memory_retirement, static_cast<std::int64_t>(more_retired),
        plural(more_retired, "more page", "more pages") + " retired");
  if (const std::uint64_t more = rise(before.retired_pages.pending_pages, after.retired_pages.pending_pages))
    add(HealthEventKind::memory_retirement, static_cast<std::int64_t>(more),
        plural(more, "more page", "more pages") + " pending retirement");
  else if (became_true(before.retired_pages.pending, after.retired_pages.pending))
    add(HealthEventKind::memory_retirement, 0, "a page retirement became pending");
  if (const std::uint64_t more = rise(before.row_remapping.uncorrected, after.row_remapping.uncorrected))
    add(HealthEventKind::memory_retirement, static_cast<std::int64_t>(more),
        plural(more, "more row", "more rows") + " remapped for uncorrectable errors");
  if (became_true(before.row_remapping.pending, after.row_remapping.pending))
    add(HealthEventKind::memory_retirement, 0, "a row remap became pending");
  if (became_true(before.row_remapping.failed, after.row_remapping.failed))
    add(HealthEventKind::memory_retirement, 0, "a row remap failed");
  return events;
}

namespace detail {

struct HealthMonitorState {
  Device device;
  std::chrono::milliseconds poll_interval;
  const hal_telemetry_v1* table = nullptr;
  hal_health_watch* watch = nullptr;  // the vendor's event stream, when the backend has one
  TelemetrySnapshot previous;
  std::deque<HealthEvent> pending;

  HealthMonitorState(const Device& watched, std::chrono::milliseconds interval)
      : device(watched), poll_interval(interval), table(&telemetry_of(watched)), previous(telemetry(watched)) {
    const auto& backend = Access::backend(device);
    if (table->watch_create != nullptr && table->watch_wait != nullptr && table->watch_destroy != nullptr)
      backend->check(table->watch_create(backend->context, device.index(), &watch),
                     [&] { return "registering for health events of " + device.id(); });
  }
  ~HealthMonitorState() {
    if (watch != nullptr) table->watch_destroy(watch);
  }
  HealthMonitorState(const HealthMonitorState&) = delete;
  HealthMonitorState& operator=(const HealthMonitorState&) = delete;

  void compare(const TelemetrySnapshot& now) {
    for (HealthEvent& event : health_events_between(previous, now)) pending.push_back(std::move(event));
    previous = now;
  }

  // Waits up to slice on the vendor's stream (or sleeps), then compares.
  void poll(std::chrono::milliseconds slice) {
    if (watch != nullptr) {
      hal_health_event_v1 raw{};
      raw.struct_size = sizeof(raw);
      const hal_status code = table->watch_wait(watch, slice.count(), &raw);
      const std::string description = raw.description != nullptr ? raw.description : "";
      if (code == HAL_OK && raw.kind > HAL_HEALTH_EVENT_MEMORY_RETIREMENT)
        throw Error(StatusCode::internal, "the " + device.backend_name() + " backend sent health event kind " +
                                              std::to_string(raw.kind) + " (" + description +
                                              "), newer than this libhal; update libhal");
      if (code == HAL_OK)
        pending.push_back({static_cast<HealthEventKind>(raw.kind), raw.code, device.id(), description,
                           std::chrono::system_clock::now()});
      else if (code != HAL_ERROR_TIMEOUT)
        Access::backend(device)->check(code, [&] { return "waiting for health events of " + device.id(); });
    } else if (slice.count() > 0) {
      std::this_thread::sleep_for(slice);
    }
    compare(telemetry(device));
  }
};

}  // namespace detail

HealthMonitor::HealthMonitor(const Device& device, std::chrono::milliseconds poll_interval) {
  if (poll_interval.count() <= 0)
    throw Error(StatusCode::invalid_argument, "health monitor poll interval of " +
                                                  std::to_string(poll_interval.count()) +
                                                  " ms for " + device.id() + " must be at least 1 ms");
  state_ = std::make_unique<detail::HealthMonitorState>(device, poll_interval);
}

const TelemetrySnapshot& HealthMonitor::latest() const {
  if (state_ == nullptr) throw Error(StatusCode::invalid_argument, "reading a moved-from health monitor");
  return state_->previous;
}

HealthMonitor::~HealthMonitor() = default;
HealthMonitor::HealthMonitor(HealthMonitor&&) noexcept = default;
HealthMonitor& HealthMonitor::operator=(HealthMonitor&&) noexcept = default;

std::optional<HealthEvent> HealthMonitor::wait(std::chrono::milliseconds timeout) {
  if (state_ == nullptr) throw Error(StatusCode::invalid_argument, "waiting on a moved-from health monitor");
  if (timeout.count() < 0)
    throw Error(StatusCode::invalid_argument, "health event timeout of " + std::to_string(timeout.count()) +
                                                  " ms for " + state_->device.id() + " must be 0 or more");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (!state_->pending.empty()) {
      HealthEvent event = std::move(state_->pending.front());
      state_->pending.pop_front();
      return event;
    }
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0 && timeout.count() > 0) return std::nullopt;
    state_->poll(std::clamp(remaining, std::chrono::milliseconds(0), state_->poll_interval));
    if (timeout.count() == 0 && state_->pending.empty()) return std::nullopt;
  }
}

}  // namespace hal
