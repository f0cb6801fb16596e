// A fake NVML (libnvidia-ml.so.1), and built with FAKE_NVML_HGML the PPU
// SDK's HGML (libhgml.so: the same API with an hgml prefix, here without the
// functions an older management library lacks). Devices and every reading
// come from environment variables read on each call, so a test can change a
// value between two snapshots (see README.md). As strict as the real one:
// calls before Init say UNINITIALIZED, unknown handles INVALID_ARGUMENT.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
#define FAKE_CAT2(a, b) a##b
#define FAKE_CAT(a, b) FAKE_CAT2(a, b)
#ifdef FAKE_NVML_HGML
#define API(name) FAKE_CAT(hgml, name)
#else
#define API(name) FAKE_CAT(nvml, name)
#endif

namespace {

enum : int {
  success = 0,
  uninitialized = 1,
  invalid_argument = 2,
  not_supported = 3,
  no_permission = 4,
  not_found = 6,
  insufficient_size = 7,
  driver_not_loaded = 9,
  timeout = 10,
  unknown = 999,
};

struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Utilization {
  unsigned gpu, memory;
};
struct EventData {
  void* device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
};
struct FieldValue {
  unsigned field_id, scope_id;
  long long timestamp, latency_us;
  int value_type;
  int result;
  union {
    double real;
    unsigned unsigned_int;
    unsigned long long unsigned_long_long;
  } value;
};

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

struct Device {
  unsigned index;
};
Device devices[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
int init_count = 0;
std::mutex state_mutex;

// The devices' bus ids, in this library's index order.
std::vector<std::string> bus_ids() {
  std::vector<std::string> ids = split(environment("HAL_FAKE_NVML_PCI_BUS_IDS"));
  if (ids.size() > 16) ids.resize(16);
  return ids;
}

bool initialized() {
  std::lock_guard lock(state_mutex);
  return init_count > 0;
}

// The device behind a handle, or nullptr.
const Device* device_of(void* handle) {
  for (const Device& device : devices)
    if (handle == &device && device.index < bus_ids().size()) return &device;
  return nullptr;
}

#define CHECK_DEVICE(handle)                                  \
  if (!initialized()) return uninitialized;                   \
  const Device* device = device_of(handle);                   \
  if (device == nullptr) return invalid_argument;

// HAL_FAKE_NVML_<key>: a comma list, one entry per device (the last repeats).
// An entry is a number, "unsupported", "denied" or "error".
int value(const char* key, const Device& device, unsigned long long fallback, unsigned long long& out) {
  const std::vector<std::string> entries = split(environment((std::string("HAL_FAKE_NVML_") + key).c_str()));
  const std::string entry =
      entries.empty() ? std::to_string(fallback) : entries[std::min<std::size_t>(device.index, entries.size() - 1)];
  if (entry == "unsupported") return not_supported;
  if (entry == "denied") return no_permission;
  if (entry == "error") return unknown;
  out = std::strtoull(entry.c_str(), nullptr, 0);
  return success;
}

template <typename Out>
int read_value(void* handle, const char* key, unsigned long long fallback, Out* out) {
  CHECK_DEVICE(handle);
  if (out == nullptr) return invalid_argument;
  unsigned long long number = 0;
  const int result = value(key, *device, fallback, number);
  if (result == success) *out = static_cast<Out>(number);
  return result;
}

bool mig_mode(const Device& device) {
  unsigned long long mig = 0;
  return value("MIG", device, 0, mig) == success && mig == 1;
}

// XIDs already delivered, per device, so each scripted one arrives once.
std::set<std::pair<unsigned, unsigned long long>> delivered;

}  // namespace

FAKE_EXPORT int API(Init_v2)() {
  if (environment("HAL_FAKE_NVML_INIT") == "fail") return driver_not_loaded;
  std::lock_guard lock(state_mutex);
  ++init_count;
  return success;
}

FAKE_EXPORT int API(Shutdown)() {
  std::lock_guard lock(state_mutex);
  if (init_count == 0) return uninitialized;
  --init_count;
  return success;
}

FAKE_EXPORT const char* API(ErrorString)(int result) {
  switch (result) {
    case success: return "Success";
    case uninitialized: return "Uninitialized";
    case invalid_argument: return "Invalid Argument";
    case not_supported: return "Not Supported";
    case no_permission: return "Insufficient Permissions";
    case not_found: return "Not Found";
    case insufficient_size: return "Insufficient Size";
    case driver_not_loaded: return "Driver Not Loaded";
    case timeout: return "Timeout";
  }
  return "Unknown Error";
}

FAKE_EXPORT int API(SystemGetDriverVersion)(char* version, unsigned length) {
  if (!initialized()) return uninitialized;
  if (version == nullptr || length < 8) return insufficient_size;
  std::snprintf(version, length, "%s", "550.54.15");
  return success;
}

FAKE_EXPORT int API(DeviceGetCount_v2)(unsigned* count) {
  if (!initialized()) return uninitialized;
  if (count == nullptr) return invalid_argument;
  *count = static_cast<unsigned>(bus_ids().size());
  return success;
}

FAKE_EXPORT int API(DeviceGetHandleByIndex_v2)(unsigned index, void** handle) {
  if (!initialized()) return uninitialized;
  if (handle == nullptr || index >= bus_ids().size()) return invalid_argument;
  *handle = &devices[index];
  return success;
}

FAKE_EXPORT int API(DeviceGetPciInfo_v3)(void* handle, PciInfo* info) {
  CHECK_DEVICE(handle);
  if (info == nullptr) return invalid_argument;
  *info = {};
  std::snprintf(info->bus_id, sizeof(info->bus_id), "%s", bus_ids()[device->index].c_str());
  return success;
}

FAKE_EXPORT int API(DeviceGetUUID)(void* handle, char* uuid, unsigned length) {
  CHECK_DEVICE(handle);
  const std::vector<std::string> uuids = split(environment("HAL_FAKE_NVML_UUIDS"));
  const std::string text = device->index < uuids.size() ? uuids[device->index]
                                                        : "GPU-fa4e0000-0000-0000-0000-00000000000" +
                                                              std::to_string(device->index);
  if (uuid == nullptr || length <= text.size()) return insufficient_size;
  std::snprintf(uuid, length, "%s", text.c_str());
  return success;
}

FAKE_EXPORT int API(DeviceGetMigMode)(void* handle, unsigned* current, unsigned* pending) {
  CHECK_DEVICE(handle);
  if (current == nullptr || pending == nullptr) return invalid_argument;
  *current = *pending = mig_mode(*device) ? 1 : 0;
  return success;
}

FAKE_EXPORT int API(DeviceGetTemperature)(void* handle, int sensor, unsigned* celsius) {
  if (sensor != 0) return invalid_argument;
  return read_value(handle, "TEMPERATURE", 45, celsius);
}

FAKE_EXPORT int API(DeviceGetTemperatureThreshold)(void* handle, int threshold, unsigned* celsius) {
  if (threshold == 0) return read_value(handle, "SHUTDOWN_TEMPERATURE", 95, celsius);
  if (threshold == 1) return read_value(handle, "SLOWDOWN_TEMPERATURE", 90, celsius);
  return not_supported;
}

FAKE_EXPORT int API(DeviceGetPowerUsage)(void* handle, unsigned* milliwatts) {
  return read_value(handle, "POWER_MW", 250000, milliwatts);
}

FAKE_EXPORT int API(DeviceGetEnforcedPowerLimit)(void* handle, unsigned* milliwatts) {
  return read_value(handle, "POWER_LIMIT_MW", 400000, milliwatts);
}

FAKE_EXPORT int API(DeviceGetTotalEnergyConsumption)(void* handle, unsigned long long* millijoules) {
  return read_value(handle, "ENERGY_MJ", 123456789, millijoules);
}

FAKE_EXPORT int API(DeviceGetClockInfo)(void* handle, int clock, unsigned* mhz) {
  if (clock == 1) return read_value(handle, "SM_CLOCK", 1410, mhz);
  if (clock == 2) return read_value(handle, "MEMORY_CLOCK", 1593, mhz);
  return not_supported;
}

FAKE_EXPORT int API(DeviceGetMaxClockInfo)(void* handle, int clock, unsigned* mhz) {
  if (clock == 1) return read_value(handle, "SM_CLOCK_MAX", 1980, mhz);
  if (clock == 2) return read_value(handle, "MEMORY_CLOCK_MAX", 1593, mhz);
  return not_supported;
}

// Not readable in MIG mode, as on real GPUs.
FAKE_EXPORT int API(DeviceGetUtilizationRates)(void* handle, Utilization* utilization) {
  CHECK_DEVICE(handle);
  if (utilization == nullptr) return invalid_argument;
  if (mig_mode(*device)) return not_supported;
  unsigned long long gpu = 0, memory = 0;
  if (int result = value("UTILIZATION_GPU", *device, 30, gpu); result != success) return result;
  if (int result = value("UTILIZATION_MEMORY", *device, 20, memory); result != success) return result;
  *utilization = {static_cast<unsigned>(gpu), static_cast<unsigned>(memory)};
  return success;
}

// HGML, like NVML before 12.2, has only the old name.
#ifdef FAKE_NVML_HGML
FAKE_EXPORT int API(DeviceGetCurrentClocksThrottleReasons)(void* handle, unsigned long long* reasons) {
#else
FAKE_EXPORT int API(DeviceGetCurrentClocksEventReasons)(void* handle, unsigned long long* reasons) {
#endif
  return read_value(handle, "CLOCK_EVENTS", 0x1, reasons);
}

FAKE_EXPORT int API(DeviceGetEccMode)(void* handle, unsigned* current, unsigned* pending) {
  const int result = read_value(handle, "ECC_MODE", 1, current);
  if (result == success && pending != nullptr) *pending = *current;
  return result;
}

FAKE_EXPORT int API(DeviceGetTotalEccErrors)(void* handle, int error_type, int counter_type,
                                             unsigned long long* count) {
  static const char* keys[2][2] = {{"ECC_CORRECTED_VOLATILE", "ECC_CORRECTED_AGGREGATE"},
                                   {"ECC_UNCORRECTED_VOLATILE", "ECC_UNCORRECTED_AGGREGATE"}};
  if (error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1) return invalid_argument;
  return read_value(handle, keys[error_type][counter_type], 0, count);
}

// With *count too small (0 asks for the count), INSUFFICIENT_SIZE and the count, as NVML does.
FAKE_EXPORT int API(DeviceGetRetiredPages)(void* handle, int cause, unsigned* count, unsigned long long* addresses) {
  if (cause < 0 || cause > 1 || count == nullptr) return invalid_argument;
  unsigned pages = 0;
  const int result = read_value(handle, cause == 0 ? "RETIRED_SINGLE_BIT" : "RETIRED_DOUBLE_BIT", 0, &pages);
  if (result != success) return result;
  const unsigned room = *count;
  *count = pages;
  if (room < pages) return insufficient_size;
  for (unsigned page = 0; page < pages && addresses != nullptr; ++page) addresses[page] = 0x1000ull * (page + 1);
  return success;
}

FAKE_EXPORT int API(DeviceGetRetiredPagesPendingStatus)(void* handle, unsigned* pending) {
  return read_value(handle, "RETIREMENT_PENDING", 0, pending);
}

FAKE_EXPORT int API(DeviceGetCurrPcieLinkGeneration)(void* handle, unsigned* generation) {
  return read_value(handle, "PCIE_GENERATION", 4, generation);
}
FAKE_EXPORT int API(DeviceGetMaxPcieLinkGeneration)(void* handle, unsigned* generation) {
  return read_value(handle, "PCIE_GENERATION_MAX", 4, generation);
}
FAKE_EXPORT int API(DeviceGetCurrPcieLinkWidth)(void* handle, unsigned* width) {
  return read_value(handle, "PCIE_WIDTH", 16, width);
}
FAKE_EXPORT int API(DeviceGetMaxPcieLinkWidth)(void* handle, unsigned* width) {
  return read_value(handle, "PCIE_WIDTH_MAX", 16, width);
}
FAKE_EXPORT int API(DeviceGetPcieReplayCounter)(void* handle, unsigned* count) {
  return read_value(handle, "PCIE_REPLAY", 0, count);
}

// HAL_FAKE_NVML_NVLINKS links, the first NVLINKS_ACTIVE of them up; each
// error counter of each active link reads NVLINK_ERRORS.
FAKE_EXPORT int API(DeviceGetNvLinkState)(void* handle, unsigned link, unsigned* active) {
  CHECK_DEVICE(handle);
  if (active == nullptr) return invalid_argument;
  unsigned long long links = 0, up = 0;
  if (int result = value("NVLINKS", *device, 0, links); result != success) return result;
  if (link >= links) return link == 0 ? not_supported : invalid_argument;
  if (int result = value("NVLINKS_ACTIVE", *device, links, up); result != success) return result;
  *active = link < up ? 1 : 0;
  return success;
}

// The device each link of a device reaches: NVLINK_PEER, the index (in this
// library's order) of the one device all its links go to; NOT_SUPPORTED when unset.
FAKE_EXPORT int API(DeviceGetNvLinkRemotePciInfo_v2)(void* handle, unsigned link, PciInfo* info) {
  CHECK_DEVICE(handle);
  unsigned long long links = 0, peer = 0;
  if (info == nullptr || value("NVLINKS", *device, 0, links) != success || link >= links) return invalid_argument;
  if (environment("HAL_FAKE_NVML_NVLINK_PEER").empty()) return not_supported;
  if (int result = value("NVLINK_PEER", *device, 0, peer); result != success) return result;
  if (peer >= bus_ids().size()) return unknown;
  *info = {};
  std::snprintf(info->bus_id, sizeof(info->bus_id), "%s", bus_ids()[peer].c_str());
  return success;
}

FAKE_EXPORT int API(DeviceGetNvLinkErrorCounter)(void* handle, unsigned link, int counter,
                                                 unsigned long long* count) {
  CHECK_DEVICE(handle);
  unsigned long long links = 0;
  if (value("NVLINKS", *device, 0, links) != success || link >= links || counter < 0 || counter > 3)
    return invalid_argument;
  return read_value(handle, "NVLINK_ERRORS", 0, count);
}

#ifndef FAKE_NVML_HGML
FAKE_EXPORT int API(DeviceGetFieldValues)(void* handle, int count, FieldValue* values) {
  CHECK_DEVICE(handle);
  if (count < 0 || (count > 0 && values == nullptr)) return invalid_argument;
  for (int index = 0; index < count; ++index) {
    FieldValue& field = values[index];
    if (field.field_id != 82) {  // NVML_FI_DEV_MEMORY_TEMP is the only field this fake knows
      field.result = not_supported;
      continue;
    }
    unsigned long long celsius = 0;
    field.result = value("MEMORY_TEMPERATURE", *device, 50, celsius);
    field.value_type = 1;
    field.value.unsigned_int = static_cast<unsigned>(celsius);
  }
  return success;
}

FAKE_EXPORT int API(DeviceGetRemappedRows)(void* handle, unsigned* corrected, unsigned* uncorrected,
                                           unsigned* pending, unsigned* failed) {
  CHECK_DEVICE(handle);
  if (corrected == nullptr || uncorrected == nullptr || pending == nullptr || failed == nullptr)
    return invalid_argument;
  unsigned long long values[4] = {};
  const char* keys[4] = {"REMAP_CORRECTED", "REMAP_UNCORRECTED", "REMAP_PENDING", "REMAP_FAILED"};
  for (int index = 0; index < 4; ++index)
    if (int result = value(keys[index], *device, 0, values[index]); result != success) return result;
  *corrected = static_cast<unsigned>(values[0]);
  *uncorrected = static_cast<unsigned>(values[1]);
  *pending = static_cast<unsigned>(values[2]);
  *failed = static_cast<unsigned>(values[3]);
  return success;
}

// Events: an event set holds registered devices; HAL_FAKE_NVML_XID="<device index>:<xid>,..."
// scripts XIDs, each delivered once to a set that registered for XIDs.
struct EventSet {
  std::vector<std::pair<const Device*, unsigned long long>> registered;
};

FAKE_EXPORT int API(EventSetCreate)(EventSet** set) {
  if (!initialized()) return uninitialized;
  if (set == nullptr) return invalid_argument;
  *set = new EventSet;
  return success;
}

FAKE_EXPORT int API(DeviceGetSupportedEventTypes)(void* handle, unsigned long long* types) {
  CHECK_DEVICE(handle);
  if (types == nullptr) return invalid_argument;
  *types = 0x1 | 0x2 | 0x8;
  return success;
}

FAKE_EXPORT int API(DeviceRegisterEvents)(void* handle, unsigned long long types, EventSet* set) {
  CHECK_DEVICE(handle);
  if (set == nullptr || (types & ~0xbull) != 0) return invalid_argument;
  set->registered.emplace_back(device, types);
  return success;
}

FAKE_EXPORT int API(EventSetWait_v2)(EventSet* set, EventData* data, unsigned timeout_ms) {
  if (!initialized()) return uninitialized;
  if (set == nullptr || data == nullptr) return invalid_argument;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    for (const std::string& entry : split(environment("HAL_FAKE_NVML_XID"))) {
      const std::size_t colon = entry.find(':');
      if (colon == std::string::npos) continue;
      const unsigned index = static_cast<unsigned>(std::strtoul(entry.c_str(), nullptr, 10));
      const unsigned long long xid = std::strtoull(entry.c_str() + colon + 1, nullptr, 10);
      for (const auto& [device, types] : set->registered) {
        if (device->index != index || (types & 0x8) == 0) continue;
        std::lock_guard lock(state_mutex);
        if (!delivered.insert({index, xid}).second) continue;
        *data = {&devices[index], 0x8, xid, 0xffffffffu, 0xffffffffu};
        return success;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return timeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

FAKE_EXPORT int API(EventSetFree)(EventSet* set) {
  if (set == nullptr) return invalid_argument;
  delete set;
  return success;
}
#endif
