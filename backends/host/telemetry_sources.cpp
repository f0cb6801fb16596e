#include "telemetry_sources.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <system_error>
#include <utility>

#include "telemetry_writer.hpp"

namespace hal::host {
namespace {

using backend::set_flag;
using backend::set_integer;
using backend::set_real;
using backend::set_unavailable;
namespace fs = std::filesystem;

struct FileText {
  std::string text;
  int error = 0;  // errno of the failed open or read; 0 when text holds the file
};

// Plain open/read: sysfs files are small and ifstream costs more than the read.
FileText read_file(const fs::path& path, std::size_t limit = 1 << 20) {
  FileText result;
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) {
    result.error = errno;
    return result;
  }
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(descriptor, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      result.error = errno;
      break;
    }
    if (got == 0) break;
    result.text.append(buffer, static_cast<std::size_t>(got));
    if (result.text.size() >= limit) break;
  }
  ::close(descriptor);
  return result;
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A number read from a sysfs file, or the reason there is none.
struct Number {
  std::optional<std::uint64_t> value;
  hal_telemetry_availability why = HAL_TELEMETRY_NOT_SUPPORTED;
  std::string detail;
};

Number read_number(const fs::path& path) {
  const FileText file = read_file(path, 256);
  if (file.error != 0)
    return {std::nullopt, availability_for_errno(file.error), path.string() + ": " + std::strerror(file.error)};
  if (auto value = parse_unsigned(file.text)) return {value, HAL_TELEMETRY_AVAILABLE, {}};
  return {std::nullopt, HAL_TELEMETRY_READ_FAILED, path.string() + " holds '" + trimmed(file.text) + "', not a number"};
}

void set_from(hal_telemetry_reading_v1& field, const Number& number, double scale) {
  if (number.value)
    set_real(field, static_cast<double>(*number.value) * scale);
  else
    set_unavailable(field, number.why, number.detail);
}

std::vector<fs::path> sorted_entries(const fs::path& directory, std::string_view prefix) {
  std::vector<fs::path> entries;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error))
    if (it->path().filename().string().rfind(prefix, 0) == 0) entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

bool path_exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(path, error);
}

int package_of(const fs::path& sys, int cpu) {
  const Number id = read_number(sys / ("devices/system/cpu/cpu" + std::to_string(cpu)) / "topology/physical_package_id");
  return id.value ? static_cast<int>(*id.value) : 0;
}

}  // namespace

hal_telemetry_availability availability_for_errno(int error) {
  switch (error) {
    case EACCES:
    case EPERM: return HAL_TELEMETRY_NEEDS_ROOT;
    case ENOENT:
    case ENODEV:
    case ENXIO:
    case EOPNOTSUPP: return HAL_TELEMETRY_NOT_SUPPORTED;
    default: return HAL_TELEMETRY_READ_FAILED;
  }
}

fs::path HostTelemetry::under_root(const std::string& absolute) const { return root_ / absolute.substr(1); }

HostTelemetry::HostTelemetry(fs::path root) : root_(std::move(root)) {
  std::map<std::string, int> order;  // per hwmon kind without package labels
  for (const fs::path& hwmon : sorted_entries(under_root("/sys/class/hwmon"), "hwmon")) {
    const std::string kind = trimmed(read_file(hwmon / "name", 256).text);
    if (kind == "jc42" || kind == "spd5118") {
      memory_sensors_.push_back(hwmon / "temp1_input");
      continue;
    }
    if (kind != "coretemp" && kind != "k10temp" && kind != "zenpower") continue;
    auto sensor_of = [&](const std::string& prefix, int package) {
      CpuSensor sensor{kind, hwmon, package, prefix + "_input", {}, {}};
      if (path_exists(hwmon / (prefix + "_max"))) sensor.max = prefix + "_max";
      if (path_exists(hwmon / (prefix + "_crit"))) sensor.critical = prefix + "_crit";
      return sensor;
    };
    if (kind == "coretemp") {
      // One hwmon per package; its package sensor is labelled "Package id N".
      for (const fs::path& label : sorted_entries(hwmon, "temp")) {
        const std::string name = label.filename().string();
        if (name.size() < 6 || name.substr(name.size() - 6) != "_label") continue;
        const std::string text = trimmed(read_file(label, 256).text);
        if (text.rfind("Package id ", 0) != 0) continue;
        const auto package = parse_unsigned(std::string_view(text).substr(11));
        if (package) cpu_sensors_.push_back(sensor_of(name.substr(0, name.size() - 6), static_cast<int>(*package)));
      }
    } else {
      // k10temp and zenpower: one per package, in PCI order; Tctl is temp1.
      cpu_sensors_.push_back(sensor_of("temp1", order[kind]++));
    }
  }
  memory_controllers_ = sorted_entries(under_root("/sys/devices/system/edac/mc"), "mc");
}

void HostTelemetry::read(const TelemetryTarget& target, TelemetryBaseline& baseline,
                         hal_telemetry_snapshot_v1& out) const {
  out.source = backend::keep_telemetry_text("sysfs " + root_.string());
  const int package = target.cpus.empty() ? 0 : package_of(under_root("/sys"), target.cpus.front());
  read_temperatures(package, out);
  read_power(package, baseline, out);
  read_clocks(target, out);
  read_utilization(target, baseline, out);
  read_memory_errors(target, out);

  set_unavailable(out.clock_event_reasons, HAL_TELEMETRY_NOT_SUPPORTED, "the host reports no clock-event reasons");
  set_unavailable(out.clock_event_vendor_mask, HAL_TELEMETRY_NOT_SUPPORTED, "the host reports no clock-event reasons");
  for (hal_telemetry_reading_v1* field : {&out.retired_single_bit, &out.retired_double_bit, &out.retirement_pending,
                                          &out.retirement_pending_pages, &out.remap_corrected, &out.remap_uncorrected,
                                          &out.remap_pending, &out.remap_failed})
    set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, "host memory has no page retirement or row remapping");
  for (hal_telemetry_reading_v1* field : {&out.pcie_generation, &out.pcie_generation_max, &out.pcie_width,
                                          &out.pcie_width_max, &out.pcie_replay_count})
    set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, "the CPU is not a PCIe device");
  for (hal_telemetry_reading_v1* field : {&out.links_active, &out.links_total, &out.link_errors})
    set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, "the CPU has no NVLink or xGMI links");
}

void HostTelemetry::read_temperatures(int package, hal_telemetry_snapshot_v1& out) const {
  set_unavailable(out.hotspot_temperature, HAL_TELEMETRY_NOT_SUPPORTED, "CPUs have no separate hotspot sensor");
  const auto sensor = std::find_if(cpu_sensors_.begin(), cpu_sensors_.end(),
                                   [&](const CpuSensor& candidate) { return candidate.package == package; });
  if (sensor == cpu_sensors_.end()) {
    const std::string detail = "no CPU temperature sensor (coretemp, k10temp, zenpower) for package " +
                               std::to_string(package) + " in " + under_root("/sys/class/hwmon").string();
    for (hal_telemetry_reading_v1* field : {&out.core_temperature, &out.slowdown_temperature, &out.shutdown_temperature})
      set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, detail);
  } else {
    constexpr double millidegrees = 1e-3;
    set_from(out.core_temperature, read_number(sensor->directory / sensor->input), millidegrees);
    auto limit = [&](hal_telemetry_reading_v1& field, const std::string& file, const char* what) {
      if (file.empty())
        set_unavailable(field, HAL_TELEMETRY_NOT_SUPPORTED, sensor->kind + " has no " + what + " in " +
                                                                sensor->directory.string());
      else
        set_from(field, read_number(sensor->directory / file), millidegrees);
    };
    limit(out.slowdown_temperature, sensor->max, "_max limit");
    limit(out.shutdown_temperature, sensor->critical, "_crit limit");
  }

  std::optional<double> hottest;
  std::string failure;
  for (const fs::path& input : memory_sensors_) {
    const Number reading = read_number(input);
    if (reading.value)
      hottest = std::max(hottest.value_or(-1e9), static_cast<double>(*reading.value) * 1e-3);
    else
      failure = reading.detail;
  }
  if (hottest)
    set_real(out.memory_temperature, *hottest);
  else if (!failure.empty())
    set_unavailable(out.memory_temperature, HAL_TELEMETRY_READ_FAILED, failure);
  else
    set_unavailable(out.memory_temperature, HAL_TELEMETRY_NOT_SUPPORTED,
                    "no DIMM temperature sensor (jc42, spd5118) in " + under_root("/sys/class/hwmon").string());
}

void HostTelemetry::read_power(int package, TelemetryBaseline& baseline, hal_telemetry_snapshot_v1& out) const {
  const fs::path zone = under_root("/sys/class/powercap") / ("intel-rapl:" + std::to_string(package));
  if (!path_exists(zone)) {
    const std::string detail = "no RAPL zone " + zone.string() + " (no powercap driver, or a VM)";
    for (hal_telemetry_reading_v1* field : {&out.power_draw, &out.power_limit, &out.energy})
      set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, detail);
    return;
  }
  set_from(out.power_limit, read_number(zone / "constraint_0_power_limit_uw"), 1e-6);
  const Number energy = read_number(zone / "energy_uj");
  const auto now = std::chrono::steady_clock::now();
  if (!energy.value) {
    set_unavailable(out.energy, energy.why, energy.detail);
    set_unavailable(out.power_draw, energy.why, "power is measured from the energy counter: " + energy.detail);
    return;
  }
  set_real(out.energy, static_cast<double>(*energy.value) * 1e-6);
  const double seconds = std::chrono::duration<double>(now - baseline.energy_time).count();
  if (baseline.energy_microjoules && seconds >= 0.01) {
    std::uint64_t used = *energy.value - *baseline.energy_microjoules;
    if (*energy.value < *baseline.energy_microjoules) {  // the counter wrapped
      const Number range = read_number(zone / "max_energy_range_uj");
      used = range.value ? *range.value - *baseline.energy_microjoules + *energy.value : 0;
    }
    set_real(out.power_draw, static_cast<double>(used) * 1e-6 / seconds);
  } else {
    set_unavailable(out.power_draw, HAL_TELEMETRY_NEEDS_INTERVAL,
                    "power is the energy counter's rate: read again after at least 10 ms");
  }
  if (!baseline.energy_microjoules || seconds >= 0.01) {
    baseline.energy_microjoules = energy.value;
    baseline.energy_time = now;
  }
}

void HostTelemetry::read_clocks(const TelemetryTarget& target, hal_telemetry_snapshot_v1& out) const {
  const std::string memory_detail = "the host does not expose its memory clock";
  set_unavailable(out.memory_clock, HAL_TELEMETRY_NOT_SUPPORTED, memory_detail);
  set_unavailable(out.memory_clock_max, HAL_TELEMETRY_NOT_SUPPORTED, memory_detail);
  if (target.cpus.empty()) {
    set_unavailable(out.compute_clock, HAL_TELEMETRY_NOT_SUPPORTED, "the device has no CPUs");
    set_unavailable(out.compute_clock_max, HAL_TELEMETRY_NOT_SUPPORTED, "the device has no CPUs");
    return;
  }
  const fs::path cpus = under_root("/sys/devices/system/cpu");
  const fs::path first = cpus / ("cpu" + std::to_string(target.cpus.front())) / "cpufreq";
  if (path_exists(first)) {
    std::uint64_t sum_khz = 0, max_khz = 0, counted = 0;
    Number failed;
    for (const int cpu : target.cpus) {
      const fs::path cpufreq = cpus / ("cpu" + std::to_string(cpu)) / "cpufreq";
      const Number current = read_number(cpufreq / "scaling_cur_freq");
      const Number maximum = read_number(cpufreq / "cpuinfo_max_freq");
      if (!current.value || !maximum.value) {
        failed = current.value ? maximum : current;
        continue;
      }
      sum_khz += *current.value;
      max_khz = std::max(max_khz, *maximum.value);
      ++counted;
    }
    if (counted == 0) {
      set_unavailable(out.compute_clock, failed.why, failed.detail);
      set_unavailable(out.compute_clock_max, failed.why, failed.detail);
    } else {
      set_integer(out.compute_clock, sum_khz / counted / 1000);
      set_integer(out.compute_clock_max, max_khz / 1000);
    }
    return;
  }
  set_unavailable(out.compute_clock_max, HAL_TELEMETRY_NOT_SUPPORTED,
                  "no cpufreq (" + first.string() + "); /proc/cpuinfo has no maximum");
  // Without cpufreq the kernel's own estimate per CPU is all there is.
  const fs::path cpuinfo_path = under_root("/proc/cpuinfo");
  const FileText cpuinfo = read_file(cpuinfo_path, 16 << 20);
  if (cpuinfo.error != 0) {
    set_unavailable(out.compute_clock, availability_for_errno(cpuinfo.error),
                    cpuinfo_path.string() + ": " + std::strerror(cpuinfo.error));
    return;
  }
  double sum_mhz = 0;
  std::uint64_t counted = 0;
  long processor = -1;
  std::string_view text = cpuinfo.text;
  while (!text.empty()) {
    const auto newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, line.find_first_of(" \t"));
    const std::string value(line.substr(colon + 1));
    if (key == "processor") {
      processor = static_cast<long>(parse_unsigned(value).value_or(-1));
    } else if (line.rfind("cpu MHz", 0) == 0 &&
               std::find(target.cpus.begin(), target.cpus.end(), processor) != target.cpus.end()) {
      char* end = nullptr;
      const double mhz = std::strtod(value.c_str(), &end);
      if (end != value.c_str()) {
        sum_mhz += mhz;
        ++counted;
      }
    }
  }
  if (counted == 0)
    set_unavailable(out.compute_clock, HAL_TELEMETRY_NOT_SUPPORTED,
                    "no cpufreq and no 'cpu MHz' for this device's CPUs in " + cpuinfo_path.string());
  else
    set_integer(out.compute_clock, static_cast<std::uint64_t>(sum_mhz / static_cast<double>(counted) + 0.5));
}

void HostTelemetry::read_utilization(const TelemetryTarget& target, TelemetryBaseline& baseline,
                                     hal_telemetry_snapshot_v1& out) const {
  set_unavailable(out.memory_utilization, HAL_TELEMETRY_NOT_SUPPORTED,
                  "the host reports no memory-controller utilization");
  const fs::path stat_path = under_root("/proc/stat");
  const FileText stat = read_file(stat_path, 16 << 20);
  if (stat.error != 0) {
    const std::string detail = stat_path.string() + ": " + std::strerror(stat.error);
    set_unavailable(out.compute_utilization, availability_for_errno(stat.error), detail);
    set_unavailable(out.steal, availability_for_errno(stat.error), detail);
    return;
  }
  // "cpuN user nice system idle iowait irq softirq steal guest guest_nice";
  // guest time is already inside user and nice.
  CpuTicks ticks;
  std::size_t found = 0;
  std::string_view text = stat.text;
  while (!text.empty()) {
    const auto newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] == ' ') continue;
    line.remove_prefix(3);
    const auto space = line.find(' ');
    const auto cpu = parse_unsigned(line.substr(0, space));
    if (!cpu || std::find(target.cpus.begin(), target.cpus.end(), static_cast<int>(*cpu)) == target.cpus.end())
      continue;
    line.remove_prefix(space == std::string_view::npos ? line.size() : space);
    std::uint64_t columns[8] = {};
    for (std::uint64_t& column : columns) {
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      const auto end = line.find(' ');
      column = parse_unsigned(line.substr(0, end)).value_or(0);
      line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    }
    std::uint64_t total = 0;
    for (const std::uint64_t column : columns) total += column;
    const std::uint64_t idle = columns[3] + columns[4];
    ticks.total += total;
    ticks.busy += total - idle - columns[7];
    ticks.steal += columns[7];
    ++found;
  }
  if (found != target.cpus.size()) {
    const std::string detail = stat_path.string() + " lists " + std::to_string(found) + " of this device's " +
                               std::to_string(target.cpus.size()) + " CPUs";
    set_unavailable(out.compute_utilization, HAL_TELEMETRY_READ_FAILED, detail);
    set_unavailable(out.steal, HAL_TELEMETRY_READ_FAILED, detail);
    return;
  }
  if (baseline.ticks && ticks.total > baseline.ticks->total) {
    const double elapsed = static_cast<double>(ticks.total - baseline.ticks->total);
    set_real(out.compute_utilization, 100.0 * static_cast<double>(ticks.busy - baseline.ticks->busy) / elapsed);
    set_real(out.steal, 100.0 * static_cast<double>(ticks.steal - baseline.ticks->steal) / elapsed);
    baseline.ticks = ticks;
    return;
  }
  const std::string detail = "utilization is a share of the time since the previous reading: read again after a clock tick";
  set_unavailable(out.compute_utilization, HAL_TELEMETRY_NEEDS_INTERVAL, detail);
  set_unavailable(out.steal, HAL_TELEMETRY_NEEDS_INTERVAL, detail);
  if (!baseline.ticks) baseline.ticks = ticks;
}

void HostTelemetry::read_memory_errors(const TelemetryTarget& target, hal_telemetry_snapshot_v1& out) const {
  const std::string aggregate_detail = "EDAC counts errors since boot only";
  set_unavailable(out.ecc_corrected_aggregate, HAL_TELEMETRY_NOT_SUPPORTED, aggregate_detail);
  set_unavailable(out.ecc_uncorrected_aggregate, HAL_TELEMETRY_NOT_SUPPORTED, aggregate_detail);
  std::vector<fs::path> controllers;
  for (const fs::path& controller : memory_controllers_)
    if (target.whole_machine || controller.filename() == "mc" + std::to_string(target.numa_node))
      controllers.push_back(controller);
  if (controllers.empty()) {
    const std::string detail = "no EDAC memory controller in " + under_root("/sys/devices/system/edac/mc").string() +
                               " (no EDAC driver, ECC off, or a VM)";
    for (hal_telemetry_reading_v1* field : {&out.ecc_enabled, &out.ecc_corrected_volatile, &out.ecc_uncorrected_volatile})
      set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, detail);
    return;
  }
  set_flag(out.ecc_enabled, true);  // EDAC registers a controller only where ECC is on
  auto sum = [&](hal_telemetry_reading_v1& field, const char* file) {
    std::uint64_t total = 0;
    for (const fs::path& controller : controllers) {
      const Number count = read_number(controller / file);
      if (!count.value) return set_unavailable(field, count.why, count.detail);
      total += *count.value;
    }
    set_integer(field, total);
  };
  sum(out.ecc_corrected_volatile, "ce_count");
  sum(out.ecc_uncorrected_volatile, "ue_count");
}

}  // namespace hal::host
