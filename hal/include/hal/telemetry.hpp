// Device health and telemetry: one snapshot per device, whatever the vendor
// library (NVML, HGML, AMD SMI, the host's sysfs and procfs). Every field is
// a Reading: a value, or the reason there is none. Never a made-up zero.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/status.hpp"

namespace hal {

class Device;

// Why a reading has no value. The values are the plugin ABI's codes.
enum class Unavailable : std::uint32_t {
  not_reported = 0,     // the backend does not report this field at all
  not_supported = 2,    // this device, SKU, driver or machine has no such reading
  needs_root = 3,       // the source exists but only root may read it
  library_missing = 4,  // the vendor management library could not be opened
  mig_mode = 5,         // not readable while the GPU is partitioned (MIG)
  read_failed = 6,      // the source exists, reading it failed (detail says how)
  needs_interval = 7,   // a rate (utilization, power from energy): read again after a while
};

std::string_view to_string(Unavailable reason);

// A value, or why there is none (with a detail: the path, the vendor error).
template <typename T>
class Reading {
 public:
  Reading() = default;
  static Reading of(T value) {
    Reading reading;
    reading.value_ = std::move(value);
    return reading;
  }
  static Reading unavailable(Unavailable reason, std::string detail = {}) {
    Reading reading;
    reading.reason_ = reason;
    reading.detail_ = std::move(detail);
    return reading;
  }

  bool available() const { return value_.has_value(); }
  // Throws unsupported, naming the reason, when there is no value.
  const T& value() const {
    if (!value_) throw Error(StatusCode::unsupported, "telemetry reading not available: " + reason_text());
    return *value_;
  }
  const std::optional<T>& optional() const { return value_; }
  Unavailable reason() const { return reason_; }
  const std::string& detail() const { return detail_; }
  // "needs root (/sys/class/powercap/intel-rapl:0/energy_uj)"; "" when available.
  std::string reason_text() const {
    if (available()) return {};
    std::string text(to_string(reason_));
    if (!detail_.empty()) text += " (" + detail_ + ")";
    return text;
  }

 private:
  std::optional<T> value_;
  Unavailable reason_ = Unavailable::not_reported;
  std::string detail_;
};

// Why clocks are held down, one set for every vendor (NVML's clock-event
// reasons, AMD SMI's throttle status). Bits of ClockEvents::reasons.
enum class ClockEventReason : std::uint32_t {
  idle = 1u << 0,
  power_cap = 1u << 1,
  hardware_slowdown = 1u << 2,
  software_thermal = 1u << 3,
  hardware_thermal = 1u << 4,
  power_brake = 1u << 5,
  sync_boost = 1u << 6,
  other = 1u << 7,
};
inline constexpr ClockEventReason all_clock_event_reasons[] = {
    ClockEventReason::idle,          ClockEventReason::power_cap,        ClockEventReason::hardware_slowdown,
    ClockEventReason::software_thermal, ClockEventReason::hardware_thermal, ClockEventReason::power_brake,
    ClockEventReason::sync_boost,    ClockEventReason::other};
std::string_view to_string(ClockEventReason reason);
// "power_cap,hardware_thermal"; "none" for 0.
std::string describe_clock_event_reasons(std::uint64_t reasons);

struct TemperatureTelemetry {
  Reading<double> core_celsius;      // GPU core / AMD edge / CPU package
  Reading<double> hotspot_celsius;   // junction
  Reading<double> memory_celsius;
  Reading<double> slowdown_limit_celsius;
  Reading<double> shutdown_limit_celsius;
};

struct PowerTelemetry {
  Reading<double> draw_watts;
  Reading<double> limit_watts;
  Reading<double> energy_joules;  // a counter since an arbitrary origin (driver load, boot)
};

struct ClockTelemetry {
  Reading<std::uint64_t> compute_mhz;
  Reading<std::uint64_t> compute_max_mhz;
  Reading<std::uint64_t> memory_mhz;
  Reading<std::uint64_t> memory_max_mhz;
};

struct UtilizationTelemetry {
  Reading<double> compute_percent;  // busy share since the previous snapshot (host) or the vendor's window
  Reading<double> memory_percent;   // memory controller busy share
  Reading<double> steal_percent;    // a VM's CPU time taken by the hypervisor (host only)
};

struct ClockEventTelemetry {
  Reading<std::uint64_t> reasons;      // ClockEventReason bits
  Reading<std::uint64_t> vendor_mask;  // the vendor's own bits, unchanged
};

struct EccTelemetry {
  Reading<bool> enabled;
  Reading<std::uint64_t> corrected_volatile;    // since the driver loaded
  Reading<std::uint64_t> uncorrected_volatile;
  Reading<std::uint64_t> corrected_aggregate;   // over the device's life
  Reading<std::uint64_t> uncorrected_aggregate;
};

// NVIDIA's retired pages, AMD's bad pages.
struct RetiredPageTelemetry {
  Reading<std::uint64_t> single_bit;     // retired for repeated correctable errors
  Reading<std::uint64_t> double_bit;     // retired for uncorrectable errors
  Reading<bool> pending;                 // a retirement waits for the next reset
  Reading<std::uint64_t> pending_pages;  // how many (where the vendor counts them)
};

struct RowRemapTelemetry {
  Reading<std::uint64_t> corrected;
  Reading<std::uint64_t> uncorrected;
  Reading<bool> pending;  // a remap waits for the next reset
  Reading<bool> failed;   // a remap was needed and could not be made
};

struct PcieTelemetry {
  Reading<std::uint64_t> generation;
  Reading<std::uint64_t> generation_max;
  Reading<std::uint64_t> width;
  Reading<std::uint64_t> width_max;
  Reading<std::uint64_t> replay_count;
};

// NVLink or xGMI.
struct InterconnectTelemetry {
  Reading<std::uint64_t> links_active;
  Reading<std::uint64_t> links_total;
  Reading<std::uint64_t> error_count;  // replay, recovery and CRC errors summed over the links
};

struct TelemetrySnapshot {
  std::string device_id;  // "cuda:0"
  std::string source;     // where the readings came from: "nvml 12.550.54", "sysfs /"
  std::chrono::system_clock::time_point taken;
  TemperatureTelemetry temperature;
  PowerTelemetry power;
  ClockTelemetry clocks;
  UtilizationTelemetry utilization;
  ClockEventTelemetry clock_events;
  EccTelemetry ecc;
  RetiredPageTelemetry retired_pages;
  RowRemapTelemetry row_remapping;
  PcieTelemetry pcie;
  InterconnectTelemetry interconnect;
};

// Reads the device now. Throws unsupported when its backend offers no
// telemetry (fields the backend cannot read are Readings without a value).
TelemetrySnapshot telemetry(const Device& device);

enum class Severity : std::uint32_t { warning = 0, critical = 1 };
std::string_view to_string(Severity severity);

// Something wrong in a snapshot, as a person says it ("2 pages pending retirement").
struct HealthProblem {
  Severity severity = Severity::warning;
  std::string message;
};
// Critical problems first; empty when nothing is wrong.
std::vector<HealthProblem> health_problems(const TelemetrySnapshot& snapshot);

// The values are the plugin ABI's codes.
enum class HealthEventKind : std::uint32_t {
  xid = 0,              // a critical driver event (NVIDIA XID and its kin); code is the event number
  uncorrected_ecc = 1,  // double-bit / uncorrectable memory errors; code is how many more
  thermal = 2,          // thermal clock event or temperature at the slowdown limit
  power_brake = 3,      // hardware power brake or slowdown asserted
  memory_retirement = 4 // a page retirement or row remap became pending or failed
};
std::string_view to_string(HealthEventKind kind);

struct HealthEvent {
  HealthEventKind kind = HealthEventKind::xid;
  std::int64_t code = 0;
  std::string device_id;
  std::string description;
  std::chrono::system_clock::time_point time;
};

// What got worse from `before` to `after` (both of one device): more
// uncorrected ECC errors, retired pages or remapped rows, a thermal or power
// clock event that appeared, the core reaching its slowdown limit, a
// retirement or remap that became pending or failed. Empty when nothing did.
std::vector<HealthEvent> health_events_between(const TelemetrySnapshot& before, const TelemetrySnapshot& after);

namespace detail {
struct HealthMonitorState;
}

// Watches one device for critical events from the moment it is made, so
// nothing that happens between two waits is lost. Events come from the
// vendor's event API where the backend has one (XID) and from comparing
// snapshots (ECC counts rising, thermal and power-brake clock events,
// pending retirements).
class HealthMonitor {
 public:
  // poll_interval: how often snapshots are compared, > 0.
  explicit HealthMonitor(const Device& device,
                         std::chrono::milliseconds poll_interval = std::chrono::milliseconds(100));
  ~HealthMonitor();
  HealthMonitor(HealthMonitor&&) noexcept;
  HealthMonitor& operator=(HealthMonitor&&) noexcept;

  // The next event, or nullopt when none came within timeout (>= 0).
  std::optional<HealthEvent> wait(std::chrono::milliseconds timeout);
  // The snapshot the monitor compared last: taken when it was made, then by
  // every wait that found no event pending.
  const TelemetrySnapshot& latest() const;

 private:
  std::unique_ptr<detail::HealthMonitorState> state_;
};

}  // namespace hal
