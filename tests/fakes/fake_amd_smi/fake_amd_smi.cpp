// A fake AMD SMI (libamd_smi.so) or, built with FAKE_ROCM_SMI, a fake
// rocm_smi (librocm_smi64.so.5): GPUs and their readings scripted by
// HAL_FAKE_AMD_SMI_* variables, read again at each init (see README.md).
//
// The structs are declared here as AMD's headers declare them, on purpose
// not shared with shims/amd_smi.hpp: the fake plays the vendor, so a layout
// the shim gets wrong shows up as a wrong reading instead of agreeing with
// itself. Each release-dependent layout is written as that release writes it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::string environment(const char* name, const std::string& fallback = {}) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, separator);) items.push_back(item);
  return items;
}

// The index-th entry of a comma-separated list; the last one past its end.
std::string pick(const std::string& list, std::size_t index) {
  const std::vector<std::string> items = split(list, ',');
  if (items.empty()) return {};
  return items[std::min(index, items.size() - 1)];
}

double number(const char* name, std::size_t index, double fallback) {
  const std::string text = pick(environment(name), index);
  return text.empty() ? fallback : std::strtod(text.c_str(), nullptr);
}

std::uint64_t integer(const char* name, std::size_t index, std::uint64_t fallback) {
  const std::string text = pick(environment(name), index);
  return text.empty() ? fallback : std::strtoull(text.c_str(), nullptr, 0);
}

// "current/max" in MHz.
std::pair<std::uint64_t, std::uint64_t> clock_pair(const char* name, std::size_t index, const char* fallback) {
  const std::vector<std::string> parts = split(pick(environment(name, fallback), index), '/');
  const std::uint64_t current = std::strtoull(parts.at(0).c_str(), nullptr, 10);
  const std::uint64_t max = parts.size() > 1 ? std::strtoull(parts[1].c_str(), nullptr, 10) : current;
  return {current, max};
}

// "0000:c1:00.0" packed as both libraries pack a PCI address.
std::uint64_t bdf_id_of(const std::string& text) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    std::fprintf(stderr, "fake amd smi: HAL_FAKE_AMD_SMI_BDF entry '%s' is not a PCI address\n", text.c_str());
    std::abort();
  }
  return std::uint64_t{domain} << 32 | std::uint64_t{bus & 0xff} << 8 | std::uint64_t{device & 0x1f} << 3 |
         (function & 0x7);
}

struct FakeGpu {
  std::uint64_t bdf_id = 0;
  double edge = 0, hotspot = 0, vram = 0, edge_critical = 0, edge_emergency = 0;
  std::uint64_t power_watts = 0, power_cap_watts = 0;
  std::uint64_t energy_counter = 0, energy_step = 0;
  std::pair<std::uint64_t, std::uint64_t> gfx_mhz, mem_mhz;
  std::uint64_t gfx_busy = 0, mem_busy = 0;
  std::uint64_t ecc_blocks = 0, corrected = 0, uncorrected = 0, uncorrected_rise = 0;
  std::string bad_pages;  // one letter a page: R reserved, P pending, F unreservable
  std::uint64_t pcie_speed = 0, pcie_width = 0, pcie_max_speed = 0, pcie_max_width = 0, replay = 0;
  unsigned energy_reads = 0, ecc_reads = 0;
  bool events_registered = false;
  std::uint64_t event_mask = 0;
};

// A scripted driver event: HAL_FAKE_AMD_SMI_EVENTS="<gpu>:<event>:<message>;...".
struct FakeEvent {
  std::size_t gpu = 0;
  std::uint32_t event = 0;
  std::string message;
};

struct Version {
  std::uint32_t first = 0, second = 0, third = 0;
  bool at_least(std::uint32_t a, std::uint32_t b, std::uint32_t c) const {
    if (first != a) return first > a;
    if (second != b) return second > b;
    return third >= c;
  }
};

struct State {
  std::mutex mutex;
  int init_calls = 0;
  Version version;
  std::vector<FakeGpu> gpus;
  std::map<std::string, std::uint32_t> statuses;  // "amdsmi_get_temp_metric.vram" -> code
  std::vector<FakeEvent> events;                  // not yet delivered
};

State& state() {
  static State* instance = new State();  // never destroyed: the library is never unloaded
  return *instance;
}

#ifdef FAKE_ROCM_SMI
constexpr const char* default_version = "5.0.0";
#else
constexpr const char* default_version = "24.6.2";
#endif

// Reads the script; called by init, so each test can set its own.
void load(State& fake) {
  const std::vector<std::string> version = split(environment("HAL_FAKE_AMD_SMI_VERSION", default_version), '.');
  fake.version = {static_cast<std::uint32_t>(std::stoul(version.at(0))),
                  static_cast<std::uint32_t>(version.size() > 1 ? std::stoul(version[1]) : 0),
                  static_cast<std::uint32_t>(version.size() > 2 ? std::stoul(version[2]) : 0)};
  fake.statuses.clear();
  for (const std::string& entry : split(environment("HAL_FAKE_AMD_SMI_STATUS"), ',')) {
    const std::size_t equals = entry.find('=');
    if (equals != std::string::npos)
      fake.statuses[entry.substr(0, equals)] = static_cast<std::uint32_t>(std::stoul(entry.substr(equals + 1)));
  }
  fake.gpus.clear();
  const std::vector<std::string> addresses = split(environment("HAL_FAKE_AMD_SMI_BDF", "0000:c1:00.0"), ',');
  for (std::size_t index = 0; index < addresses.size(); ++index) {
    FakeGpu gpu;
    gpu.bdf_id = bdf_id_of(addresses[index]);
    gpu.edge = number("HAL_FAKE_AMD_SMI_EDGE", index, 45);
    gpu.hotspot = number("HAL_FAKE_AMD_SMI_HOTSPOT", index, 60);
    gpu.vram = number("HAL_FAKE_AMD_SMI_VRAM", index, 50);
    gpu.edge_critical = number("HAL_FAKE_AMD_SMI_EDGE_CRITICAL", index, 90);
    gpu.edge_emergency = number("HAL_FAKE_AMD_SMI_EDGE_EMERGENCY", index, 105);
    gpu.power_watts = integer("HAL_FAKE_AMD_SMI_POWER", index, 300);
    gpu.power_cap_watts = integer("HAL_FAKE_AMD_SMI_POWER_CAP", index, 500);
    gpu.energy_counter = integer("HAL_FAKE_AMD_SMI_ENERGY", index, 1000000);
    gpu.energy_step = integer("HAL_FAKE_AMD_SMI_ENERGY_STEP", index, 65536);
    gpu.gfx_mhz = clock_pair("HAL_FAKE_AMD_SMI_GFX_MHZ", index, "1700/2100");
    gpu.mem_mhz = clock_pair("HAL_FAKE_AMD_SMI_MEM_MHZ", index, "1600/1600");
    gpu.gfx_busy = integer("HAL_FAKE_AMD_SMI_GFX_BUSY", index, 37);
    gpu.mem_busy = integer("HAL_FAKE_AMD_SMI_MEM_BUSY", index, 12);
    gpu.ecc_blocks = integer("HAL_FAKE_AMD_SMI_ECC_BLOCKS", index, 0x3);
    gpu.corrected = integer("HAL_FAKE_AMD_SMI_CORRECTED", index, 3);
    gpu.uncorrected = integer("HAL_FAKE_AMD_SMI_UNCORRECTED", index, 0);
    gpu.uncorrected_rise = integer("HAL_FAKE_AMD_SMI_UNCORRECTED_RISE", index, 0);
    gpu.bad_pages = pick(environment("HAL_FAKE_AMD_SMI_BAD_PAGES", "-"), index);
    if (gpu.bad_pages == "-") gpu.bad_pages.clear();
    gpu.pcie_speed = integer("HAL_FAKE_AMD_SMI_PCIE_SPEED", index, 16000);
    gpu.pcie_width = integer("HAL_FAKE_AMD_SMI_PCIE_WIDTH", index, 16);
    gpu.pcie_max_speed = integer("HAL_FAKE_AMD_SMI_PCIE_MAX_SPEED", index, 32000);
    gpu.pcie_max_width = integer("HAL_FAKE_AMD_SMI_PCIE_MAX_WIDTH", index, 16);
    gpu.replay = integer("HAL_FAKE_AMD_SMI_REPLAY", index, 0);
    fake.gpus.push_back(gpu);
  }
  fake.events.clear();
  for (const std::string& entry : split(environment("HAL_FAKE_AMD_SMI_EVENTS"), ';')) {
    const std::size_t first = entry.find(':'), second = entry.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    fake.events.push_back({std::stoul(entry.substr(0, first)),
                           static_cast<std::uint32_t>(std::stoul(entry.substr(first + 1, second - first - 1))),
                           entry.substr(second + 1)});
  }
}

// The status scripted for a call, or success (0).
std::uint32_t scripted(const State& fake, const std::string& function, const std::string& qualifier = {}) {
  if (!qualifier.empty())
    if (auto found = fake.statuses.find(function + "." + qualifier); found != fake.statuses.end()) return found->second;
  if (auto found = fake.statuses.find(function); found != fake.statuses.end()) return found->second;
  return 0;
}

// Three performance levels in Hz with the current one in the middle.
void fill_levels(std::pair<std::uint64_t, std::uint64_t> mhz, std::uint32_t& count, std::uint32_t& current,
                 std::uint64_t* hertz) {
  count = 3;
  current = 1;
  hertz[0] = std::min<std::uint64_t>(500, mhz.first) * 1000000;
  hertz[1] = mhz.first * 1000000;
  hertz[2] = mhz.second * 1000000;
}

const char* sensor_name(std::uint32_t sensor) {
  switch (sensor) {
    case 0: return "edge";
    case 1: return "hotspot";
    case 2: return "vram";
    default: return "other";
  }
}

// The temperature (Celsius) a sensor and metric read, or -1 for none.
double temperature(const FakeGpu& gpu, std::uint32_t sensor, std::uint32_t metric) {
  if (metric == 0) return sensor == 0 ? gpu.edge : sensor == 1 ? gpu.hotspot : sensor == 2 ? gpu.vram : -1;
  if (sensor != 0) return -1;
  return metric == 5 ? gpu.edge_critical : metric == 7 ? gpu.edge_emergency : -1;
}

std::vector<std::uint32_t> page_statuses(const FakeGpu& gpu) {
  std::vector<std::uint32_t> statuses;
  for (const char letter : gpu.bad_pages) statuses.push_back(letter == 'P' ? 1u : letter == 'F' ? 2u : 0u);
  return statuses;
}

}  // namespace

// Test hook: how many times init ran (hal must not open the library before a snapshot).
FAKE_EXPORT int hal_fake_amd_smi_init_calls() {
  std::lock_guard lock(state().mutex);
  return state().init_calls;
}

// Test hook: how many GPUs are registered for events now.
FAKE_EXPORT int hal_fake_amd_smi_event_registrations() {
  std::lock_guard lock(state().mutex);
  return static_cast<int>(std::count_if(state().gpus.begin(), state().gpus.end(),
                                        [](const FakeGpu& gpu) { return gpu.events_registered; }));
}

#ifndef FAKE_ROCM_SMI

// ---- AMD SMI (amdsmi.h of ROCm 6.0 to 7) ----------------------------------

namespace {

constexpr std::uint32_t status_success = 0, status_not_supported = 2, status_inval = 1, status_not_found = 31,
                        status_not_init = 32;

struct Version24 {  // amdsmi_version_t up to 24.x
  std::uint32_t year, major, minor, release;
  const char* build;
};
struct Version25 {  // amdsmi_version_t from 25.x
  std::uint32_t major, minor, release;
  const char* build;
};
struct PowerInfo24 {  // amdsmi_power_info_t, 23.x-24.x
  std::uint32_t current_socket_power, average_socket_power, gfx_voltage, soc_voltage, mem_voltage, power_limit;
  std::uint32_t reserved[11];
};
struct PowerInfo26 {  // amdsmi_power_info_t, 26.x
  std::uint64_t socket_power;
  std::uint32_t current_socket_power, average_socket_power;
  std::uint64_t gfx_voltage, soc_voltage, mem_voltage;
  std::uint32_t power_limit;
  std::uint64_t reserved[18];
};
struct PowerCapInfo {
  std::uint64_t power_cap, default_power_cap, dpm_cap, min_power_cap, max_power_cap, reserved[3];
};
struct Frequencies {
  bool has_deep_sleep;
  std::uint32_t num_supported, current;
  std::uint64_t frequency[33];
};
struct EngineUsage {
  std::uint32_t gfx_activity, umc_activity, mm_activity, reserved[13];
};
struct ErrorCount23 {  // amdsmi_error_count_t of 23.x: 32 bytes
  std::uint64_t correctable_count, uncorrectable_count, reserved[2];
};
struct ErrorCount24 {  // from 24.5: deferred_count, 64 bytes
  std::uint64_t correctable_count, uncorrectable_count, deferred_count, reserved[5];
};
struct RetiredPageRecord {
  std::uint64_t page_address, page_size;
  std::uint32_t status;
};
struct PcieInfo {  // amdsmi_pcie_info_t, 24.5 and later
  struct {
    std::uint16_t max_pcie_width;
    std::uint32_t max_pcie_speed, pcie_interface_version, slot_type, max_pcie_interface_version;
    std::uint64_t reserved[9];
  } pcie_static;
  struct {
    std::uint16_t pcie_width;
    std::uint32_t pcie_speed, pcie_bandwidth;
    std::uint64_t pcie_replay_count, pcie_l0_to_recovery_count, pcie_replay_roll_over_count, pcie_nak_sent_count,
        pcie_nak_received_count;
    std::uint32_t pcie_lc_perf_other_end_recovery_count;
    std::uint64_t reserved[12];
  } pcie_metric;
  std::uint64_t reserved[32];
};

std::uint32_t generation_of(std::uint64_t megatransfers) {
  const std::uint64_t rates[] = {2500, 5000, 8000, 16000, 32000, 64000};
  for (std::uint32_t index = 0; index < 6; ++index)
    if (rates[index] == megatransfers) return index + 1;
  return 0;
}

char socket_handle;            // the one socket's handle is its address
FakeGpu* gpu_of(void* handle) {  // a processor handle is its FakeGpu's address
  for (FakeGpu& gpu : state().gpus)
    if (&gpu == handle) return &gpu;
  return nullptr;
}

bool initialized = false;

}  // namespace

#define FAKE_GPU_OR_RETURN(handle, name, qualifier)                          \
  std::lock_guard lock(state().mutex);                                       \
  if (!initialized) return status_not_init;                                  \
  FakeGpu* gpu = gpu_of(handle);                                             \
  if (gpu == nullptr) return status_not_found;                               \
  if (const std::uint32_t code = scripted(state(), name, qualifier)) return code

FAKE_EXPORT std::uint32_t amdsmi_init(std::uint64_t flags) {
  std::lock_guard lock(state().mutex);
  ++state().init_calls;
  load(state());
  if (const std::uint32_t code = scripted(state(), "amdsmi_init")) return code;
  if ((flags & 2u) == 0) return status_inval;  // AMDSMI_INIT_AMD_GPUS
  initialized = true;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_shut_down() {
  std::lock_guard lock(state().mutex);
  initialized = false;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_lib_version(void* out) {
  std::lock_guard lock(state().mutex);
  const Version& version = state().version;
  if (version.first >= 25) {
    Version25 written{version.first, version.second, version.third, "fake"};
    std::memcpy(out, &written, sizeof(written));
  } else {
    Version24 written{version.first, version.second, version.third, 0, "fake"};
    std::memcpy(out, &written, sizeof(written));
  }
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_status_code_to_string(std::uint32_t status, const char** text) {
  switch (status) {
    case 0: *text = "AMDSMI_STATUS_SUCCESS - Call succeeded"; break;
    case 1: *text = "AMDSMI_STATUS_INVAL - Invalid parameters"; break;
    case 2: *text = "AMDSMI_STATUS_NOT_SUPPORTED - Command not supported"; break;
    case 10: *text = "AMDSMI_STATUS_NO_PERM - Permission Denied"; break;
    case 12: *text = "AMDSMI_STATUS_IO - I/O Error"; break;
    case 32: *text = "AMDSMI_STATUS_NOT_INIT - Processor not initialized"; break;
    default: *text = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"; break;
  }
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_socket_handles(std::uint32_t* count, void** sockets) {
  std::lock_guard lock(state().mutex);
  if (!initialized) return status_not_init;
  if (sockets != nullptr && *count >= 1) sockets[0] = &socket_handle;
  *count = 1;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_processor_handles(void* socket, std::uint32_t* count, void** processors) {
  std::lock_guard lock(state().mutex);
  if (!initialized) return status_not_init;
  if (socket != &socket_handle) return status_inval;
  std::vector<FakeGpu>& gpus = state().gpus;
  if (processors != nullptr)
    for (std::uint32_t index = 0; index < *count && index < gpus.size(); ++index) processors[index] = &gpus[index];
  *count = static_cast<std::uint32_t>(processors == nullptr ? gpus.size() : std::min<std::size_t>(*count, gpus.size()));
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_gpu_bdf_id(void* handle, std::uint64_t* bdf_id) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_bdf_id", "");
  *bdf_id = gpu->bdf_id;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_temp_metric(void* handle, std::uint32_t sensor, std::uint32_t metric,
                                                 std::int64_t* celsius) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_temp_metric", sensor_name(sensor));
  const double value = temperature(*gpu, sensor, metric);
  if (value < 0) return status_not_supported;
  *celsius = static_cast<std::int64_t>(value);
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_power_info(void* handle, void* out) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_power_info", "");
  if (state().version.first >= 25) {
    // Only the current socket power, 8 bytes in: read with 24.x's layout
    // this would be no current and 0 W average.
    PowerInfo26 info{};
    info.socket_power = 0xffffffffu;
    info.current_socket_power = static_cast<std::uint32_t>(gpu->power_watts);
    info.average_socket_power = 0xffffffffu;
    info.gfx_voltage = info.soc_voltage = info.mem_voltage = 0xffffffffu;
    info.power_limit = static_cast<std::uint32_t>(gpu->power_cap_watts);
    std::memcpy(out, &info, sizeof(info));
  } else {
    // As an MI200 reports it: no current socket power, an average one.
    PowerInfo24 info{};
    info.current_socket_power = 0xffff;
    info.average_socket_power = static_cast<std::uint32_t>(gpu->power_watts);
    info.gfx_voltage = info.soc_voltage = info.mem_voltage = 0xffff;
    info.power_limit = static_cast<std::uint32_t>(gpu->power_cap_watts);
    std::memcpy(out, &info, sizeof(info));
  }
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_power_cap_info(void* handle, std::uint32_t sensor, PowerCapInfo* info) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_power_cap_info", "");
  if (sensor != 0) return status_inval;
  *info = {};
  // Watts before 24.5.2, then microwatts, as hwmon gives them.
  const std::uint64_t unit = state().version.at_least(24, 5, 2) ? 1000000 : 1;
  info->power_cap = info->default_power_cap = info->max_power_cap = gpu->power_cap_watts * unit;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_energy_count(void* handle, std::uint64_t* counter, float* resolution_uj,
                                                  std::uint64_t* timestamp) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_energy_count", "");
  *counter = gpu->energy_counter + gpu->energy_step * gpu->energy_reads++;
  *resolution_uj = 15.25f;
  *timestamp = 1000000ull * gpu->energy_reads;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_clk_freq(void* handle, std::uint32_t clock, Frequencies* frequencies) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_clk_freq", clock == 0 ? "gfx" : clock == 4 ? "mem" : "other");
  if (clock != 0 && clock != 4) return status_not_supported;
  *frequencies = {};
  fill_levels(clock == 0 ? gpu->gfx_mhz : gpu->mem_mhz, frequencies->num_supported, frequencies->current,
              frequencies->frequency);
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_gpu_activity(void* handle, EngineUsage* usage) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_activity", "");
  *usage = {};
  usage->gfx_activity = static_cast<std::uint32_t>(gpu->gfx_busy);
  usage->umc_activity = static_cast<std::uint32_t>(gpu->mem_busy);
  usage->mm_activity = 0xffff;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_gpu_ecc_enabled(void* handle, std::uint64_t* blocks) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_ecc_enabled", "");
  *blocks = gpu->ecc_blocks;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_gpu_total_ecc_count(void* handle, void* out) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_total_ecc_count", "");
  const std::uint64_t uncorrected = gpu->uncorrected + gpu->uncorrected_rise * gpu->ecc_reads++;
  if (state().version.at_least(24, 5, 0)) {
    ErrorCount24 count{gpu->corrected, uncorrected, 0, {}};
    std::memcpy(out, &count, sizeof(count));
  } else {
    ErrorCount23 count{gpu->corrected, uncorrected, {}};
    std::memcpy(out, &count, sizeof(count));
  }
  return status_success;
}

// As AMD SMI does: an empty list leaves *count as it was, and as many
// records are written as there are pages.
FAKE_EXPORT std::uint32_t amdsmi_get_gpu_bad_page_info(void* handle, std::uint32_t* count,
                                                       RetiredPageRecord* records) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_bad_page_info", "");
  const std::vector<std::uint32_t> statuses = page_statuses(*gpu);
  if (statuses.empty()) return status_success;
  *count = static_cast<std::uint32_t>(statuses.size());
  if (records == nullptr) return status_success;
  for (std::size_t index = 0; index < statuses.size(); ++index)
    records[index] = {0x100000ull * (index + 1), 4096, statuses[index]};
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_pcie_info(void* handle, PcieInfo* info) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_pcie_info", "");
  std::memset(info, 0, sizeof(*info));
  const bool release_26 = state().version.first >= 26;
  info->pcie_static.max_pcie_width = static_cast<std::uint16_t>(gpu->pcie_max_width);
  // 26.x documents the maximum speed in GT/s and gives the maximum
  // generation its own member; 24.x gives MT/s and the generation as the
  // interface version.
  info->pcie_static.max_pcie_speed =
      static_cast<std::uint32_t>(release_26 ? gpu->pcie_max_speed / 1000 : gpu->pcie_max_speed);
  info->pcie_static.pcie_interface_version =
      generation_of(release_26 ? gpu->pcie_speed : gpu->pcie_max_speed);
  if (release_26) info->pcie_static.max_pcie_interface_version = generation_of(gpu->pcie_max_speed);
  info->pcie_metric.pcie_width = static_cast<std::uint16_t>(gpu->pcie_width);
  info->pcie_metric.pcie_speed = static_cast<std::uint32_t>(gpu->pcie_speed);
  info->pcie_metric.pcie_replay_count = gpu->replay;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_get_gpu_pci_replay_counter(void* handle, std::uint64_t* count) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_get_gpu_pci_replay_counter", "");
  *count = gpu->replay;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_init_gpu_event_notification(void* handle) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_init_gpu_event_notification", "");
  gpu->events_registered = true;
  gpu->event_mask = 0;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_set_gpu_event_notification_mask(void* handle, std::uint64_t mask) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_set_gpu_event_notification_mask", "");
  if (!gpu->events_registered) return 18;  // AMDSMI_STATUS_INIT_ERROR, as the header says
  gpu->event_mask = mask;
  return status_success;
}

FAKE_EXPORT std::uint32_t amdsmi_stop_gpu_event_notification(void* handle) {
  FAKE_GPU_OR_RETURN(handle, "amdsmi_stop_gpu_event_notification", "");
  gpu->events_registered = false;
  gpu->event_mask = 0;
  return status_success;
}

namespace {

struct EventRecord24 {  // amdsmi_evt_notification_data_t up to 24.x
  void* processor_handle;
  std::uint32_t event;
  char message[64];
};
struct EventRecord26 {  // 26.x: AMDSMI_MAX_STRING_LENGTH (256) characters
  void* processor_handle;
  std::uint32_t event;
  char message[256];
};

template <typename Record>
void write_record(void* records, std::size_t index, void* handle, const FakeEvent& event) {
  Record record{};
  record.processor_handle = handle;
  record.event = event.event;
  std::strncpy(record.message, event.message.c_str(), sizeof(record.message) - 1);
  std::memcpy(static_cast<char*>(records) + index * sizeof(Record), &record, sizeof(record));
}

}  // namespace

// The scripted events of registered GPUs whose mask asks for them, in
// order; AMDSMI_STATUS_NO_DATA after the timeout when there are none.
FAKE_EXPORT std::uint32_t amdsmi_get_gpu_event_notification(int timeout_ms, std::uint32_t* count, void* records) {
  std::uint32_t written = 0;
  {
    std::lock_guard lock(state().mutex);
    if (!initialized) return status_not_init;
    if (count == nullptr || records == nullptr || *count == 0) return status_inval;
    if (const std::uint32_t code = scripted(state(), "amdsmi_get_gpu_event_notification")) return code;
    std::vector<FakeEvent>& events = state().events;
    for (auto event = events.begin(); event != events.end() && written < *count;) {
      FakeGpu* gpu = event->gpu < state().gpus.size() ? &state().gpus[event->gpu] : nullptr;
      const bool wanted = gpu != nullptr && gpu->events_registered &&
                          (gpu->event_mask & (std::uint64_t{1} << (event->event - 1))) != 0;
      if (!wanted) {
        ++event;
        continue;
      }
      if (state().version.first >= 26) write_record<EventRecord26>(records, written, gpu, *event);
      else write_record<EventRecord24>(records, written, gpu, *event);
      ++written;
      event = events.erase(event);
    }
  }
  *count = written;
  if (written > 0) return status_success;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(timeout_ms, 0, 50)));
  return 40;  // AMDSMI_STATUS_NO_DATA
}

#else  // FAKE_ROCM_SMI

// ---- rocm_smi (rocm_smi.h of ROCm 5, or of ROCm 6 with version 7.x) -------

namespace {

constexpr std::uint32_t status_success = 0, status_invalid_args = 1, status_not_supported = 2,
                        status_insufficient_size = 11, status_init_error = 8;

struct RsmiVersion {
  std::uint32_t major, minor, patch;
  const char* build;
};
struct Frequencies5 {  // rsmi_frequencies_t, ROCm 5
  std::uint32_t num_supported, current;
  std::uint64_t frequency[32];
};
struct Frequencies7 {  // rsmi_frequencies_t, rocm_smi 7.x (ROCm 6)
  bool has_deep_sleep;
  std::uint32_t num_supported, current;
  std::uint64_t frequency[33];
};
struct PcieBandwidth5 {
  Frequencies5 transfer_rate;
  std::uint32_t lanes[32];
};
struct PcieBandwidth7 {
  Frequencies7 transfer_rate;
  std::uint32_t lanes[33];
};
struct ErrorCount {
  std::uint64_t correctable_err, uncorrectable_err;
};
struct RetiredPageRecord {
  std::uint64_t page_address, page_size;
  std::uint32_t status;
};

bool initialized = false;

}  // namespace

#define FAKE_GPU_OR_RETURN(index, name, qualifier)                          \
  std::lock_guard lock(state().mutex);                                      \
  if (!initialized) return status_init_error;                               \
  if (index >= state().gpus.size()) return status_invalid_args;             \
  FakeGpu* gpu = &state().gpus[index];                                      \
  if (const std::uint32_t code = scripted(state(), name, qualifier)) return code

FAKE_EXPORT std::uint32_t rsmi_init(std::uint64_t) {
  std::lock_guard lock(state().mutex);
  ++state().init_calls;
  load(state());
  if (const std::uint32_t code = scripted(state(), "rsmi_init")) return code;
  initialized = true;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_shut_down() {
  std::lock_guard lock(state().mutex);
  initialized = false;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_version_get(RsmiVersion* version) {
  std::lock_guard lock(state().mutex);
  *version = {state().version.first, state().version.second, state().version.third, "fake"};
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_status_string(std::uint32_t status, const char** text) {
  switch (status) {
    case 0: *text = "RSMI_STATUS_SUCCESS: The function has been executed successfully."; break;
    case 2: *text = "RSMI_STATUS_NOT_SUPPORTED: The requested information or action is not available"; break;
    case 4: *text = "RSMI_STATUS_PERMISSION: The user does not have permission"; break;
    default: *text = "RSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred"; break;
  }
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_num_monitor_devices(std::uint32_t* count) {
  std::lock_guard lock(state().mutex);
  if (!initialized) return status_init_error;
  *count = static_cast<std::uint32_t>(state().gpus.size());
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_pci_id_get(std::uint32_t index, std::uint64_t* bdf_id) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_pci_id_get", "");
  *bdf_id = gpu->bdf_id;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_temp_metric_get(std::uint32_t index, std::uint32_t sensor, std::uint32_t metric,
                                                   std::int64_t* millicelsius) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_temp_metric_get", sensor_name(sensor));
  const double value = temperature(*gpu, sensor, metric);
  if (value < 0) return status_not_supported;
  *millicelsius = static_cast<std::int64_t>(value * 1000);
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_power_ave_get(std::uint32_t index, std::uint32_t, std::uint64_t* microwatts) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_power_ave_get", "");
  *microwatts = gpu->power_watts * 1000000;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_power_cap_get(std::uint32_t index, std::uint32_t, std::uint64_t* microwatts) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_power_cap_get", "");
  *microwatts = gpu->power_cap_watts * 1000000;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_energy_count_get(std::uint32_t index, std::uint64_t* counter, float* resolution_uj,
                                                    std::uint64_t* timestamp) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_energy_count_get", "");
  *counter = gpu->energy_counter + gpu->energy_step * gpu->energy_reads++;
  *resolution_uj = 15.25f;
  *timestamp = 1000000ull * gpu->energy_reads;
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_busy_percent_get(std::uint32_t index, std::uint32_t* percent) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_busy_percent_get", "");
  *percent = static_cast<std::uint32_t>(gpu->gfx_busy);
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_memory_busy_percent_get(std::uint32_t index, std::uint32_t* percent) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_memory_busy_percent_get", "");
  *percent = static_cast<std::uint32_t>(gpu->mem_busy);
  return status_success;
}

// rocm_smi 7.x (ROCm 6) put has_deep_sleep first; 5.x did not have it.
FAKE_EXPORT std::uint32_t rsmi_dev_gpu_clk_freq_get(std::uint32_t index, std::uint32_t clock, void* out) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_gpu_clk_freq_get", clock == 0 ? "gfx" : clock == 4 ? "mem" : "other");
  if (clock != 0 && clock != 4) return status_not_supported;
  const auto mhz = clock == 0 ? gpu->gfx_mhz : gpu->mem_mhz;
  if (state().version.first >= 7) {
    Frequencies7 levels{};
    fill_levels(mhz, levels.num_supported, levels.current, levels.frequency);
    std::memcpy(out, &levels, sizeof(levels));
  } else {
    Frequencies5 levels{};
    fill_levels(mhz, levels.num_supported, levels.current, levels.frequency);
    std::memcpy(out, &levels, sizeof(levels));
  }
  return status_success;
}

// The link's power states: 2.5 GT/s x1 and the current rate and width.
FAKE_EXPORT std::uint32_t rsmi_dev_pci_bandwidth_get(std::uint32_t index, void* out) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_pci_bandwidth_get", "");
  const std::uint64_t rates[2] = {2500000000ull, gpu->pcie_speed * 1000000};
  const std::uint32_t lanes[2] = {1, static_cast<std::uint32_t>(gpu->pcie_width)};
  if (state().version.first >= 7) {
    PcieBandwidth7 bandwidth{};
    bandwidth.transfer_rate.num_supported = 2;
    bandwidth.transfer_rate.current = 1;
    std::copy(rates, rates + 2, bandwidth.transfer_rate.frequency);
    std::copy(lanes, lanes + 2, bandwidth.lanes);
    std::memcpy(out, &bandwidth, sizeof(bandwidth));
  } else {
    PcieBandwidth5 bandwidth{};
    bandwidth.transfer_rate.num_supported = 2;
    bandwidth.transfer_rate.current = 1;
    std::copy(rates, rates + 2, bandwidth.transfer_rate.frequency);
    std::copy(lanes, lanes + 2, bandwidth.lanes);
    std::memcpy(out, &bandwidth, sizeof(bandwidth));
  }
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_ecc_enabled_get(std::uint32_t index, std::uint64_t* blocks) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_ecc_enabled_get", "");
  *blocks = gpu->ecc_blocks;
  return status_success;
}

// Every error is in the UMC (memory) block; other enabled blocks count none.
FAKE_EXPORT std::uint32_t rsmi_dev_ecc_count_get(std::uint32_t index, std::uint64_t block, ErrorCount* count) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_ecc_count_get", "");
  if ((gpu->ecc_blocks & block) == 0) return status_not_supported;
  if (block == 1) *count = {gpu->corrected, gpu->uncorrected + gpu->uncorrected_rise * gpu->ecc_reads++};
  else *count = {0, 0};
  return status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_memory_reserved_pages_get(std::uint32_t index, std::uint32_t* count,
                                                             RetiredPageRecord* records) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_memory_reserved_pages_get", "");
  const std::vector<std::uint32_t> statuses = page_statuses(*gpu);
  if (records == nullptr || *count > statuses.size()) *count = static_cast<std::uint32_t>(statuses.size());
  if (records == nullptr) return status_success;
  for (std::uint32_t page = 0; page < *count; ++page) records[page] = {0x100000ull * (page + 1), 4096, statuses[page]};
  return *count < statuses.size() ? status_insufficient_size : status_success;
}

FAKE_EXPORT std::uint32_t rsmi_dev_pci_replay_counter_get(std::uint32_t index, std::uint64_t* count) {
  FAKE_GPU_OR_RETURN(index, "rsmi_dev_pci_replay_counter_get", "");
  *count = gpu->replay;
  return status_success;
}

#endif  // FAKE_ROCM_SMI
