#include "text_report.hpp"

#include "hal/collectives.hpp"
#include "telemetry_view.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace halinfo {
namespace {

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream text;
  text << std::fixed << std::setprecision(unit == 0 ? 0 : 1) << value << " " << units[unit];
  return text.str();
}

std::string pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

// The reason in one sentence: what is missing and what to do. The rest
// (every path tried or searched) is for -v and --json.
std::string short_reason(const hal::BackendReport& report) {
  std::string reason = report.reason;
  const std::string prefix = "initializing the backend failed in the " + report.name + " backend: ";
  if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
  const auto sentence_end = reason.find(". ");
  return sentence_end == std::string::npos ? reason : reason.substr(0, sentence_end);
}

void print_backends(const hal::Runtime& runtime, bool verbose, std::ostream& out) {
  out << "Backends\n";
  for (const auto& report : runtime.backends()) {
    out << "  " << pad(report.name, 8) << pad(std::string(hal::to_string(report.state)), 12);
    if (report.state == hal::BackendState::loaded) {
      out << "v" << report.version << ", " << report.device_count
          << (report.device_count == 1 ? " device" : " devices");
      if (verbose) out << ", ABI " << report.abi_version << ", " << report.path;
    } else {
      out << (verbose ? report.reason : short_reason(report));
    }
    out << "\n";
    if (verbose)
      for (const auto& tried : report.paths_tried) out << "            tried " << tried << "\n";
  }
}

void print_device_details(const hal::Device& device, std::ostream& out) {
  const hal::DeviceInfo& info = device.info();
  auto field = [&](const char* name, const std::string& value) {
    out << "      " << pad(name, 18) << (value.empty() ? "-" : value) << "\n";
  };
  field("vendor", info.vendor);
  field("uuid", info.uuid);
  field("pci bus id", info.pci_bus_id);
  field("numa node", info.numa_node < 0 ? "unknown" : std::to_string(info.numa_node));
  field("memory", format_bytes(info.total_memory) + " total, " + format_bytes(device.free_memory()) + " free");
  field("compute units", std::to_string(info.compute_units));
  field("clock", info.clock_mhz ? std::to_string(info.clock_mhz) + " MHz" : "unknown");
  if (info.memory_clock_mhz) field("memory clock", std::to_string(info.memory_clock_mhz) + " MHz");
  out << "      versions\n";
  for (const auto& [axis, value] : info.version_axes) out << "        " << pad(axis, 16) << value << "\n";
  out << "      capabilities\n";
  for (const auto& capability : info.capabilities) {
    out << "        " << pad(capability.key, 24) << capability.value_string();
    if (!capability.note.empty()) out << "  (" << capability.note << ")";
    out << "\n";
  }
  if (device.supports("collectives")) {
    try {
      const hal::CollectivesEngineChoice choice = hal::collectives_engine(device);
      field("collectives", (choice.engine.empty() ? std::string("no engine") : choice.engine) + ": " + choice.reason);
      field("engines", choice.engines);
    } catch (const hal::Error& error) {
      field("collectives", error.what());
    }
  }
}

}  // namespace

void print_summary(const hal::Runtime& runtime, const std::vector<hal::Device>& devices, bool verbose,
                   std::ostream& out) {
  if (verbose && runtime.config().source) out << "Config: " << runtime.config().source->string() << "\n";
  print_backends(runtime, verbose, out);
  out << "Devices\n";
  if (devices.empty()) out << "  none\n";
  for (const auto& device : devices) {
    const hal::DeviceInfo& info = device.info();
    out << "  " << pad(device.id(), 8) << pad(std::string(hal::to_string(info.type)), 5) << info.name << ", "
        << format_bytes(info.total_memory) << ", " << info.compute_units << " compute units";
    if (info.numa_node >= 0) out << ", NUMA node " << info.numa_node;
    out << "; health: " << health_word(device) << "\n";
    for (const auto& hazard : hal::environment_hazards(device)) out << "          HAZARD " << hazard.message << "\n";
    if (verbose) print_device_details(device, out);
  }
}

}  // namespace halinfo
