#include "telemetry_view.hpp"

#include <algorithm>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

namespace halinfo {
namespace {

// One reading, whatever its type, as halinfo shows it.
struct FieldValue {
  bool available = false;
  nlohmann::json json;   // the value
  std::string bare;      // the value for people
  std::string text;      // the same with its unit
  std::string reason;    // hal::to_string(Unavailable), when not available
  std::string detail;
};

std::string number_text(double value, int decimals) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(decimals) << value;
  return text.str();
}

std::string hex(std::uint64_t value) {
  std::ostringstream text;
  text << "0x" << std::hex << value;
  return text.str();
}

enum class Style { plain, decimal, clock_events, mask };

template <typename T>
FieldValue view(const hal::Reading<T>& reading, const std::string& unit, Style style) {
  FieldValue field;
  if (!reading.available()) {
    field.reason = std::string(hal::to_string(reading.reason()));
    field.detail = reading.detail();
    return field;
  }
  field.available = true;
  const T& value = reading.value();
  field.json = value;
  if constexpr (std::is_same_v<T, bool>) {
    field.bare = value ? "yes" : "no";
  } else if constexpr (std::is_same_v<T, double>) {
    field.bare = number_text(value, style == Style::decimal ? 2 : 1);
  } else if (style == Style::clock_events) {
    field.bare = hal::describe_clock_event_reasons(value);
    field.json = nlohmann::json::array();
    for (const hal::ClockEventReason reason : hal::all_clock_event_reasons)
      if ((value & static_cast<std::uint64_t>(reason)) != 0) field.json.push_back(std::string(hal::to_string(reason)));
  } else if (style == Style::mask) {
    field.bare = hex(value);
  } else {
    field.bare = std::to_string(value);
  }
  field.text = unit.empty() ? field.bare : field.bare + " " + unit;
  return field;
}

// Every field once: its group and name (as in --json), its unit, and how to read it.
struct Field {
  const char* group;
  const char* name;
  std::function<FieldValue(const hal::TelemetrySnapshot&)> read;
};

template <typename Group, typename T>
Field field(const char* group, const char* name, Group hal::TelemetrySnapshot::*part, hal::Reading<T> Group::*member,
            const char* unit = "", Style style = Style::plain) {
  return {group, name, [=](const hal::TelemetrySnapshot& snapshot) {
            return view(snapshot.*part.*member, unit, style);
          }};
}

const std::vector<Field>& fields() {
  using S = hal::TelemetrySnapshot;
  static const std::vector<Field> all = {
      field("temperature", "core_celsius", &S::temperature, &hal::TemperatureTelemetry::core_celsius, "C"),
      field("temperature", "hotspot_celsius", &S::temperature, &hal::TemperatureTelemetry::hotspot_celsius, "C"),
      field("temperature", "memory_celsius", &S::temperature, &hal::TemperatureTelemetry::memory_celsius, "C"),
      field("temperature", "slowdown_limit_celsius", &S::temperature,
            &hal::TemperatureTelemetry::slowdown_limit_celsius, "C"),
      field("temperature", "shutdown_limit_celsius", &S::temperature,
            &hal::TemperatureTelemetry::shutdown_limit_celsius, "C"),
      field("power", "draw_watts", &S::power, &hal::PowerTelemetry::draw_watts, "W"),
      field("power", "limit_watts", &S::power, &hal::PowerTelemetry::limit_watts, "W"),
      field("power", "energy_joules", &S::power, &hal::PowerTelemetry::energy_joules, "J", Style::decimal),
      field("clocks", "compute_mhz", &S::clocks, &hal::ClockTelemetry::compute_mhz, "MHz"),
      field("clocks", "compute_max_mhz", &S::clocks, &hal::ClockTelemetry::compute_max_mhz, "MHz"),
      field("clocks", "memory_mhz", &S::clocks, &hal::ClockTelemetry::memory_mhz, "MHz"),
      field("clocks", "memory_max_mhz", &S::clocks, &hal::ClockTelemetry::memory_max_mhz, "MHz"),
      field("utilization", "compute_percent", &S::utilization, &hal::UtilizationTelemetry::compute_percent, "%"),
      field("utilization", "memory_percent", &S::utilization, &hal::UtilizationTelemetry::memory_percent, "%"),
      field("utilization", "steal_percent", &S::utilization, &hal::UtilizationTelemetry::steal_percent, "%"),
      field("clock_events", "reasons", &S::clock_events, &hal::ClockEventTelemetry::reasons, "", Style::clock_events),
      field("clock_events", "vendor_mask", &S::clock_events, &hal::ClockEventTelemetry::vendor_mask, "", Style::mask),
      field("ecc", "enabled", &S::ecc, &hal::EccTelemetry::enabled),
      field("ecc", "corrected_volatile", &S::ecc, &hal::EccTelemetry::corrected_volatile),
      field("ecc", "uncorrected_volatile", &S::ecc, &hal::EccTelemetry::uncorrected_volatile),
      field("ecc", "corrected_aggregate", &S::ecc, &hal::EccTelemetry::corrected_aggregate),
      field("ecc", "uncorrected_aggregate", &S::ecc, &hal::EccTelemetry::uncorrected_aggregate),
      field("retired_pages", "single_bit", &S::retired_pages, &hal::RetiredPageTelemetry::single_bit),
      field("retired_pages", "double_bit", &S::retired_pages, &hal::RetiredPageTelemetry::double_bit),
      field("retired_pages", "pending", &S::retired_pages, &hal::RetiredPageTelemetry::pending),
      field("retired_pages", "pending_pages", &S::retired_pages, &hal::RetiredPageTelemetry::pending_pages),
      field("row_remapping", "corrected", &S::row_remapping, &hal::RowRemapTelemetry::corrected),
      field("row_remapping", "uncorrected", &S::row_remapping, &hal::RowRemapTelemetry::uncorrected),
      field("row_remapping", "pending", &S::row_remapping, &hal::RowRemapTelemetry::pending),
      field("row_remapping", "failed", &S::row_remapping, &hal::RowRemapTelemetry::failed),
      field("pcie", "generation", &S::pcie, &hal::PcieTelemetry::generation),
      field("pcie", "generation_max", &S::pcie, &hal::PcieTelemetry::generation_max),
      field("pcie", "width", &S::pcie, &hal::PcieTelemetry::width),
      field("pcie", "width_max", &S::pcie, &hal::PcieTelemetry::width_max),
      field("pcie", "replay_count", &S::pcie, &hal::PcieTelemetry::replay_count),
      field("interconnect", "links_active", &S::interconnect, &hal::InterconnectTelemetry::links_active),
      field("interconnect", "links_total", &S::interconnect, &hal::InterconnectTelemetry::links_total),
      field("interconnect", "error_count", &S::interconnect, &hal::InterconnectTelemetry::error_count),
  };
  return all;
}

const Field& find_field(std::string_view group, std::string_view name) {
  for (const Field& candidate : fields())
    if (candidate.group == group && candidate.name == name) return candidate;
  throw std::logic_error("halinfo has no telemetry field " + std::string(group) + "." + std::string(name));
}

std::string pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

// "ok", the first problem, or, when nothing could be read, why not: a device
// with no readings is not known to be healthy.
std::string word_for(const hal::TelemetrySnapshot& snapshot) {
  const std::vector<hal::HealthProblem> problems = hal::health_problems(snapshot);
  if (!problems.empty()) return problems.front().message;
  std::string first_reason;
  for (const Field& entry : fields()) {
    const FieldValue value = entry.read(snapshot);
    if (value.available) return "ok";
    if (first_reason.empty()) first_reason = value.reason;
  }
  return "unknown (" + first_reason + ")";
}

std::string utc_time(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  const auto milliseconds =
      std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count() % 1000;
  char text[96];  // room for any int the format could print
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1,
                parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec, static_cast<int>(milliseconds));
  return text;
}

}  // namespace

nlohmann::json telemetry_to_json(const hal::Device& device) {
  hal::TelemetrySnapshot snapshot;
  try {
    snapshot = hal::telemetry(device);
  } catch (const hal::Error& error) {
    return {{"error", error.what()}};
  }
  nlohmann::json document = {{"source", snapshot.source}};
  for (const Field& entry : fields()) {
    const FieldValue value = entry.read(snapshot);
    document[entry.group][entry.name] =
        value.available ? nlohmann::json{{"value", value.json}}
                        : nlohmann::json{{"reason", value.reason}, {"detail", value.detail}};
  }
  nlohmann::json problems = nlohmann::json::array();
  for (const hal::HealthProblem& problem : hal::health_problems(snapshot))
    problems.push_back({{"severity", std::string(hal::to_string(problem.severity))}, {"message", problem.message}});
  document["problems"] = problems;
  document["health"] = word_for(snapshot);
  return document;
}

std::string health_word(const hal::Device& device) {
  try {
    return word_for(hal::telemetry(device));
  } catch (const hal::Error& error) {
    return error.code() == hal::StatusCode::unsupported ? "unknown (no telemetry)" : "unknown (telemetry failed)";
  }
}

bool print_health(const std::vector<hal::Device>& devices, std::ostream& out) {
  std::vector<std::optional<hal::TelemetrySnapshot>> snapshots(devices.size());
  std::vector<std::string> failures(devices.size());
  bool needs_interval = false;
  auto read_all = [&] {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      try {
        snapshots[i] = hal::telemetry(devices[i]);
        for (const Field& entry : fields())
          needs_interval = needs_interval || entry.read(*snapshots[i]).reason ==
                                                 hal::to_string(hal::Unavailable::needs_interval);
      } catch (const hal::Error& error) {
        failures[i] = error.what();
      }
    }
  };
  read_all();
  // Rates (utilization, power from an energy counter) need a second reading.
  if (needs_interval) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    read_all();
  }
  bool critical = false;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const hal::Device& device = devices[i];
    if (!snapshots[i]) {
      out << device.id() << "  health unknown\n  " << failures[i] << "\n\n";
      continue;
    }
    const hal::TelemetrySnapshot& snapshot = *snapshots[i];
    const std::vector<hal::HealthProblem> problems = hal::health_problems(snapshot);
    std::ostringstream readings, missing;
    std::size_t shown = 0;
    // Fields that share a reason (a missing library: all of them) are listed once under it.
    std::vector<std::pair<std::string, std::vector<std::string>>> missing_by_reason;
    for (const Field& entry : fields()) {
      const FieldValue value = entry.read(snapshot);
      const std::string name = std::string(entry.group) + "." + entry.name;
      if (value.available) {
        readings << "    " << pad(name, 36) << value.text << "\n";
        ++shown;
        continue;
      }
      const std::string why = value.reason + (value.detail.empty() ? "" : ": " + value.detail);
      auto same = std::find_if(missing_by_reason.begin(), missing_by_reason.end(),
                               [&](const auto& group) { return group.first == why; });
      if (same == missing_by_reason.end()) same = missing_by_reason.insert(missing_by_reason.end(), {why, {}});
      same->second.push_back(name);
    }
    for (const auto& [why, names] : missing_by_reason) {
      if (names.size() == 1) {
        missing << "    " << pad(names.front(), 36) << why << "\n";
        continue;
      }
      std::string listed;
      for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
      missing << "    " << names.size() << " fields: " << why << "\n      " << listed << "\n";
    }
    out << device.id() << "  " << word_for(snapshot) << "  (" << device.info().name << "; " << shown << " of "
        << fields().size() << " readings, from " << snapshot.source << ")\n";
    if (!problems.empty()) {
      out << "  problems\n";
      for (const hal::HealthProblem& problem : problems) {
        out << "    " << pad(std::string(hal::to_string(problem.severity)), 10) << problem.message << "\n";
        critical = critical || problem.severity == hal::Severity::critical;
      }
    }
    out << "  readings\n" << (shown == 0 ? "    none\n" : readings.str());
    if (!missing.str().empty()) out << "  not available\n" << missing.str();
    out << "\n";
  }
  return critical;
}

void run_watch(const std::vector<hal::Device>& devices, const WatchOptions& options, std::ostream& out) {
  struct Column {
    const char* heading;  // the table's and the CSV's; JSON uses group_name
    const Field& source;
  };
  const std::vector<Column> columns = {
      {"temp_c", find_field("temperature", "core_celsius")},
      {"hotspot_c", find_field("temperature", "hotspot_celsius")},
      {"mem_temp_c", find_field("temperature", "memory_celsius")},
      {"power_w", find_field("power", "draw_watts")},
      {"clock_mhz", find_field("clocks", "compute_mhz")},
      {"mem_clock_mhz", find_field("clocks", "memory_mhz")},
      {"util_pct", find_field("utilization", "compute_percent")},
      {"mem_util_pct", find_field("utilization", "memory_percent")},
      {"steal_pct", find_field("utilization", "steal_percent")},
      {"clock_events", find_field("clock_events", "reasons")},
      {"ecc_uncorrected", find_field("ecc", "uncorrected_volatile")},
      {"pcie_replays", find_field("pcie", "replay_count")},
  };
  constexpr std::size_t width = 14;
  if (options.format == WatchFormat::table) {
    out << pad("time", 26) << pad("device", 10);
    for (const Column& column : columns) out << pad(column.heading, width);
    out << "health\n";
  } else if (options.format == WatchFormat::csv) {
    out << "time,device";
    for (const Column& column : columns) out << "," << column.heading;
    out << ",health\n";
  }
  out.flush();
  // A first snapshot per device, so the first row's rates cover one interval.
  for (const hal::Device& device : devices) {
    try {
      hal::telemetry(device);
    } catch (const hal::Error&) {
      // Reported on each row.
    }
  }
  for (long row = 0; options.count == 0 || row < options.count; ++row) {
    std::this_thread::sleep_for(options.interval);
    for (const hal::Device& device : devices) {
      std::optional<hal::TelemetrySnapshot> snapshot;
      std::string failure;
      try {
        snapshot = hal::telemetry(device);
      } catch (const hal::Error& error) {
        failure = error.what();
      }
      const std::string time = utc_time(snapshot ? snapshot->taken : std::chrono::system_clock::now());
      const std::string health = snapshot ? word_for(*snapshot) : "health unknown";
      if (options.format == WatchFormat::json_lines) {
        nlohmann::json line = {{"time", time}, {"device", device.id()}};
        for (const Column& column : columns) {
          const std::string key = std::string(column.source.group) + "." + column.source.name;
          line[key] = snapshot ? column.source.read(*snapshot).json : nlohmann::json(nullptr);
        }
        line["health"] = health;
        if (!failure.empty()) line["error"] = failure;
        out << line.dump() << "\n";
      } else {
        const bool csv = options.format == WatchFormat::csv;
        out << (csv ? time + "," + device.id() : pad(time, 26) + pad(device.id(), 10));
        for (const Column& column : columns) {
          std::string text = "-";
          if (snapshot) {
            const FieldValue value = column.source.read(*snapshot);
            if (value.available) text = value.bare;
          }
          if (csv && text.find(',') != std::string::npos) text = "\"" + text + "\"";
          out << (csv ? "," + text : pad(text, width));
        }
        out << (csv ? ",\"" + health + "\"" : health) << "\n";
      }
    }
    out.flush();
  }
}

}  // namespace halinfo
