// The host's telemetry from sysfs and procfs (hwmon, powercap RAPL, EDAC,
// cpufreq, /proc/stat, /proc/cpuinfo), every path under a root so tests run
// the parsers against a fixture tree.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hal/backend_abi.h"

namespace hal::host {

// What a failed open or read means for a reading: EACCES/EPERM need root,
// ENOENT/ENODEV/ENXIO/EOPNOTSUPP mean the machine has no such source.
hal_telemetry_availability availability_for_errno(int error);

struct TelemetryTarget {
  int numa_node = -1;
  std::vector<int> cpus;
  bool whole_machine = true;  // one host device: every EDAC memory controller is its own
};

struct CpuTicks {
  std::uint64_t busy = 0, total = 0, steal = 0;
};

// Counters kept between snapshots of one device, for its rates.
struct TelemetryBaseline {
  std::optional<CpuTicks> ticks;
  std::optional<std::uint64_t> energy_microjoules;
  std::chrono::steady_clock::time_point energy_time;
};

class HostTelemetry {
 public:
  // Finds the sensors once (hwmon names, powercap zones, EDAC controllers).
  explicit HostTelemetry(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }
  // Fills out and moves the baseline on. A few small reads, no directory scans.
  void read(const TelemetryTarget& target, TelemetryBaseline& baseline, hal_telemetry_snapshot_v1& out) const;

 private:
  struct CpuSensor {
    std::string kind;                  // hwmon name: coretemp, k10temp, zenpower
    std::filesystem::path directory;   // the hwmon directory
    int package = -1;                  // coretemp: from "Package id N"; others: their order
    std::string input, max, critical;  // file names within directory ("" when absent)
  };
  std::filesystem::path root_;
  std::vector<CpuSensor> cpu_sensors_;
  std::vector<std::filesystem::path> memory_sensors_;  // jc42 / spd5118 temp1_input files
  std::vector<std::filesystem::path> memory_controllers_;  // EDAC mc directories

  void read_temperatures(int package, hal_telemetry_snapshot_v1& out) const;
  void read_power(int package, TelemetryBaseline& baseline, hal_telemetry_snapshot_v1& out) const;
  void read_clocks(const TelemetryTarget& target, hal_telemetry_snapshot_v1& out) const;
  void read_utilization(const TelemetryTarget& target, TelemetryBaseline& baseline,
                        hal_telemetry_snapshot_v1& out) const;
  void read_memory_errors(const TelemetryTarget& target, hal_telemetry_snapshot_v1& out) const;
  std::filesystem::path under_root(const std::string& absolute) const;
};

}  // namespace hal::host
