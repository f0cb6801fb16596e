// Host device discovery: NUMA nodes, CPUs and identity from sysfs and procfs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <gnu/libc-version.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "host_backend.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::host {
namespace {

std::string read_first_line(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream stream(text);
  std::string range;
  while (std::getline(stream, range, ',')) {
    if (range.empty()) continue;
    const auto dash = range.find('-');
    try {
      const int first = std::stoi(range.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
      for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    } catch (const std::exception&) {
      // A malformed entry only loses that entry.
    }
  }
  return cpus;
}

std::string cpuinfo_field(const std::string& field) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind(field, 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        return value;
      }
    }
  }
  return {};
}

std::uint64_t meminfo_kib(const std::filesystem::path& path, const std::string& key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    const auto position = line.find(key + ":");
    if (position != std::string::npos) {
      std::stringstream rest(line.substr(position + key.size() + 1));
      std::uint64_t kib = 0;
      rest >> kib;
      return kib;
    }
  }
  return 0;
}

std::string vendor_name(const std::string& vendor_id) {
  if (vendor_id == "AuthenticAMD") return "AMD";
  if (vendor_id == "GenuineIntel") return "Intel";
  return vendor_id.empty() ? "unknown" : vendor_id;
}

// A stable per-machine, per-node identifier shaped like a UUID.
std::string host_uuid(int numa_node) {
  std::string seed = read_first_line("/etc/machine-id");
  if (seed.size() < 32) {
    char hostname[256] = {};
    gethostname(hostname, sizeof(hostname) - 1);
    std::ostringstream hashed;
    hashed << std::hex;
    hashed.width(16);
    hashed.fill('0');
    hashed << std::hash<std::string>{}(hostname);
    seed = hashed.str() + hashed.str();
  }
  std::string digits = seed.substr(0, 32);
  // The node goes into the last digits so each node's device differs.
  const std::string node = std::to_string(std::max(numa_node, 0));
  digits.replace(32 - node.size(), node.size(), node);
  return "host-" + digits.substr(0, 8) + "-" + digits.substr(8, 4) + "-" + digits.substr(12, 4) + "-" +
         digits.substr(16, 4) + "-" + digits.substr(20, 12);
}

std::uint32_t max_clock_mhz() {
  const std::string khz = read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  if (!khz.empty()) {
    try {
      return static_cast<std::uint32_t>(std::stoull(khz) / 1000);
    } catch (const std::exception&) {
    }
  }
  const std::string mhz = cpuinfo_field("cpu MHz");
  try {
    return mhz.empty() ? 0 : static_cast<std::uint32_t>(std::stod(mhz));
  } catch (const std::exception&) {
    return 0;
  }
}

void add_capability(HostDevice& device, std::string key, bool value, std::string note = {}) {
  device.capability_strings.push_back({std::move(key), std::move(note)});
  hal_capability_v1 capability{};
  capability.type = HAL_CAPABILITY_BOOL;
  capability.int_value = value ? 1 : 0;
  device.capabilities.push_back(capability);
}

void add_cpu_features(HostDevice& device) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  add_capability(device, "cpu.avx2", __builtin_cpu_supports("avx2"));
  add_capability(device, "cpu.fma", __builtin_cpu_supports("fma"));
  add_capability(device, "cpu.avx512f", __builtin_cpu_supports("avx512f"));
  add_capability(device, "cpu.avx512bf16", cpuinfo_field("flags").find("avx512_bf16") != std::string::npos);
#endif
}

// Pointers into the string vectors are taken once they stop growing.
void finalize_views(HostDevice& device) {
  device.version_axes.clear();
  for (const auto& [key, value] : device.version_strings) device.version_axes.push_back({key.c_str(), value.c_str()});
  for (std::size_t i = 0; i < device.capabilities.size(); ++i) {
    device.capabilities[i].key = device.capability_strings[i].key.c_str();
    const auto& note = device.capability_strings[i].note;
    device.capabilities[i].note = note.empty() ? nullptr : note.c_str();
  }
}

}  // namespace

std::vector<HostDevice> discover_devices() {
  std::vector<HostDevice> devices;
  const std::filesystem::path node_root = "/sys/devices/system/node";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(node_root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    HostDevice device;
    device.numa_node = std::stoi(name.substr(4));
    device.cpus = parse_cpu_list(read_first_line(entry.path() / "cpulist"));
    device.total_memory = meminfo_kib(entry.path() / "meminfo", "MemTotal") * 1024;
    if (!device.cpus.empty()) devices.push_back(std::move(device));  // memory-only nodes hold no CPU to run on
  }
  if (devices.empty()) {  // no NUMA information: one device for the whole machine
    HostDevice device;
    device.numa_node = -1;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (int cpu = 0; cpu < std::max(online, 1L); ++cpu) device.cpus.push_back(cpu);
    devices.push_back(std::move(device));
  }
  std::sort(devices.begin(), devices.end(), [](auto& a, auto& b) { return a.numa_node < b.numa_node; });
  // With one node the whole machine's figures are the truth: some virtual
  // machines report only part of their memory in the node's meminfo.
  if (devices.size() == 1) devices.front().total_memory = meminfo_kib("/proc/meminfo", "MemTotal") * 1024;

  utsname system{};
  uname(&system);
  const std::string model = cpuinfo_field("model name");
  const std::string vendor = vendor_name(cpuinfo_field("vendor_id"));
  const std::uint32_t clock = max_clock_mhz();
  for (auto& device : devices) {
    device.name = model.empty() ? "CPU" : model;
    device.vendor = vendor;
    device.uuid = host_uuid(device.numa_node);
    device.clock_mhz = clock;
    device.version_strings = {{"backend", HAL_VERSION_STRING},
                              {"kernel", system.release},
                              {"libc", gnu_get_libc_version()},
                              {"compiler", __VERSION__}};
    add_capability(device, "memory.device", true);
    add_capability(device, "memory.host_pinned", true, "page-locked with mlock");
    add_capability(device, "memory.managed", true, "host memory is visible to host and device alike");
    add_capability(device, "streams", true);
    add_capability(device, "events.timing", true);
    add_capability(device, "p2p", true, "all host devices share one address space");
    add_capability(
        device, "collectives", true,
        "Gloo over TCP, or MPI under mpirun/srun, with shared memory beside either on one host (HAL_COLL_ENGINE)");
    add_capability(device, "attention.math", true, "materialized scores, f32 accumulation: the reference");
    add_capability(device, "attention.flash", true, "tiled online softmax on the CPU");
    add_capability(device, "attention.fused", false, "the host backend has no fused attention kernel");
    add_capability(device, "attention.borrowed_addresses", true, "attention takes host addresses it did not allocate");
    add_capability(device, "attention.key_ranges", true,
                   "per-query key ranges (padding, packed sequences) in the flash and math kernels");
    add_cpu_features(device);
    finalize_views(device);
  }
  return devices;
}

std::uint64_t free_memory_of_node(int numa_node, bool multiple_nodes) {
  if (multiple_nodes && numa_node >= 0)
    return meminfo_kib("/sys/devices/system/node/node" + std::to_string(numa_node) + "/meminfo", "MemFree") * 1024;
  return meminfo_kib("/proc/meminfo", "MemAvailable") * 1024;
}

void fill_device_info(const HostDevice& device, bool multiple_nodes, hal_device_info_v1& info) {
  info.type = HAL_DEVICE_TYPE_CPU;
  info.name = device.name.c_str();
  info.vendor = device.vendor.c_str();
  info.uuid = device.uuid.c_str();
  info.pci_bus_id = "";
  info.numa_node = device.numa_node;
  info.total_memory = device.total_memory;
  info.free_memory = free_memory_of_node(device.numa_node, multiple_nodes);
  info.compute_units = static_cast<std::uint32_t>(device.cpus.size());
  info.clock_mhz = device.clock_mhz;
  info.memory_clock_mhz = 0;
  info.version_axes = device.version_axes.data();
  info.version_axis_count = static_cast<std::uint32_t>(device.version_axes.size());
  info.capabilities = device.capabilities.data();
  info.capability_count = static_cast<std::uint32_t>(device.capabilities.size());
}

}  // namespace hal::host
