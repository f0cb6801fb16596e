// NVIDIA's management library (NVML) and the T-Head PPU SDK's HGML, whose
// API follows NVML's with an `hgml` prefix: one table, the prefix chosen when
// the library is loaded. Only what hal's telemetry reads is declared.
//
// The types are declared here, not taken from nvml.h: the CUDA toolkit does
// not ship it, HGML has its own header, and these layouts have not changed
// since NVML 11 (nvmlPciInfo_t v3, nvmlEventData_t, nvmlFieldValue_t).
// nvml.h's unversioned names are macros for _v2/_v3 symbols, so those are
// resolved first; deprecated names are the fallbacks older drivers export.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vendor_library.hpp"

namespace hal::shims {

using NvmlReturn = int;  // nvmlReturn_t
struct NvmlDeviceTag;
using NvmlDevice = NvmlDeviceTag*;
struct NvmlEventSetTag;
using NvmlEventSet = NvmlEventSetTag*;

// nvmlReturn_t values the callers act on.
constexpr NvmlReturn nvml_success = 0;
constexpr NvmlReturn nvml_invalid_argument = 2;
constexpr NvmlReturn nvml_not_supported = 3;
constexpr NvmlReturn nvml_no_permission = 4;
constexpr NvmlReturn nvml_not_found = 6;
constexpr NvmlReturn nvml_insufficient_size = 7;
constexpr NvmlReturn nvml_timeout = 10;
constexpr NvmlReturn nvml_function_not_found = 13;

// Sensor, threshold, clock and counter selectors (nvml.h enum values).
constexpr int nvml_temperature_gpu = 0;
constexpr int nvml_threshold_shutdown = 0;
constexpr int nvml_threshold_slowdown = 1;
constexpr int nvml_clock_sm = 1;
constexpr int nvml_clock_memory = 2;
constexpr int nvml_error_corrected = 0;
constexpr int nvml_error_uncorrected = 1;
constexpr int nvml_counter_volatile = 0;
constexpr int nvml_counter_aggregate = 1;
constexpr int nvml_retired_multiple_single_bit = 0;
constexpr int nvml_retired_double_bit = 1;
constexpr int nvml_nvlink_error_replay = 0;
constexpr int nvml_nvlink_error_recovery = 1;
constexpr int nvml_nvlink_error_crc_flit = 2;
constexpr int nvml_nvlink_error_crc_data = 3;
constexpr unsigned nvml_nvlink_max_links = 18;  // NVML_NVLINK_MAX_LINKS
constexpr unsigned nvml_field_memory_temperature = 82;  // NVML_FI_DEV_MEMORY_TEMP

// nvmlClocksEventReason* bits.
constexpr std::uint64_t nvml_clock_event_idle = 0x1;
constexpr std::uint64_t nvml_clock_event_applications_clocks = 0x2;
constexpr std::uint64_t nvml_clock_event_power_cap = 0x4;
constexpr std::uint64_t nvml_clock_event_hardware_slowdown = 0x8;
constexpr std::uint64_t nvml_clock_event_sync_boost = 0x10;
constexpr std::uint64_t nvml_clock_event_software_thermal = 0x20;
constexpr std::uint64_t nvml_clock_event_hardware_thermal = 0x40;
constexpr std::uint64_t nvml_clock_event_power_brake = 0x80;
constexpr std::uint64_t nvml_clock_event_display_clock = 0x100;

// nvmlEventType* bits.
constexpr std::uint64_t nvml_event_single_bit_ecc = 0x1;
constexpr std::uint64_t nvml_event_double_bit_ecc = 0x2;
constexpr std::uint64_t nvml_event_xid_critical = 0x8;

// nvmlPciInfo_t (the v3 layout; v2's is the same).
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];  // "00000000:3B:00.0"
};
static_assert(sizeof(NvmlPciInfo) == 68, "nvmlPciInfo_t is 68 bytes");

struct NvmlUtilization {
  unsigned gpu, memory;
};

// nvmlEventData_t; older drivers write only the first three fields.
struct NvmlEventData {
  NvmlDevice device;
  unsigned long long type;
  unsigned long long data;  // the XID for nvmlEventTypeXidCriticalError
  unsigned gpu_instance, compute_instance;
};
static_assert(sizeof(NvmlEventData) == 32, "nvmlEventData_t is 32 bytes");

// nvmlFieldValue_t.
struct NvmlFieldValue {
  unsigned field_id, scope_id;
  long long timestamp, latency_us;
  int value_type;  // nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ull, 4 sll, 5 int, 6 ushort
  NvmlReturn result;
  union {
    double real;
    unsigned unsigned_int;
    unsigned long unsigned_long;
    unsigned long long unsigned_long_long;
    long long signed_long_long;
    int signed_int;
    unsigned short unsigned_short;
  } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

// The functions, as symbol_table.hpp lists them, each name without its
// prefix ("nvml" or "hgml", chosen at load). Versioned names first, the
// deprecated ones older drivers export as fallbacks; every function but
// init, device count, handle and PCI info is optional: a missing one makes
// its fields "not supported", never a failure.
#define HAL_NVML_FUNCTIONS(X)                                                                                          \
  X(Init, NvmlReturn (*)(), required, "Init_v2", "Init")                                                               \
  X(Shutdown, NvmlReturn (*)(), required, "Shutdown")                                                                  \
  X(ErrorString, const char* (*)(NvmlReturn result), required, "ErrorString")                                          \
  X(DeviceGetCount, NvmlReturn (*)(unsigned* count), required, "DeviceGetCount_v2", "DeviceGetCount")                  \
  X(DeviceGetHandleByIndex, NvmlReturn (*)(unsigned index, NvmlDevice* device), required,                              \
    "DeviceGetHandleByIndex_v2", "DeviceGetHandleByIndex")                                                             \
  X(DeviceGetPciInfo, NvmlReturn (*)(NvmlDevice device, NvmlPciInfo* info), required, "DeviceGetPciInfo_v3",           \
    "DeviceGetPciInfo_v2")                                                                                             \
  X(SystemGetDriverVersion, NvmlReturn (*)(char* version, unsigned length), optional, "SystemGetDriverVersion")        \
  X(DeviceGetUUID, NvmlReturn (*)(NvmlDevice device, char* uuid, unsigned length), optional, "DeviceGetUUID")          \
  X(DeviceGetMigMode, NvmlReturn (*)(NvmlDevice device, unsigned* current, unsigned* pending), optional,               \
    "DeviceGetMigMode")                                                                                                \
  X(DeviceGetTemperature, NvmlReturn (*)(NvmlDevice device, int sensor, unsigned* celsius), optional,                  \
    "DeviceGetTemperature")                                                                                            \
  X(DeviceGetTemperatureThreshold, NvmlReturn (*)(NvmlDevice device, int threshold, unsigned* celsius), optional,      \
    "DeviceGetTemperatureThreshold")                                                                                   \
  X(DeviceGetFieldValues, NvmlReturn (*)(NvmlDevice device, int count, NvmlFieldValue* values), optional,              \
    "DeviceGetFieldValues")                                                                                            \
  X(DeviceGetPowerUsage, NvmlReturn (*)(NvmlDevice device, unsigned* milliwatts), optional, "DeviceGetPowerUsage")     \
  X(DeviceGetEnforcedPowerLimit, NvmlReturn (*)(NvmlDevice device, unsigned* milliwatts), optional,                    \
    "DeviceGetEnforcedPowerLimit")                                                                                     \
  X(DeviceGetTotalEnergyConsumption, NvmlReturn (*)(NvmlDevice device, unsigned long long* millijoules), optional,     \
    "DeviceGetTotalEnergyConsumption")                                                                                 \
  X(DeviceGetClockInfo, NvmlReturn (*)(NvmlDevice device, int clock, unsigned* mhz), optional, "DeviceGetClockInfo")   \
  X(DeviceGetMaxClockInfo, NvmlReturn (*)(NvmlDevice device, int clock, unsigned* mhz), optional,                      \
    "DeviceGetMaxClockInfo")                                                                                           \
  X(DeviceGetUtilizationRates, NvmlReturn (*)(NvmlDevice device, NvmlUtilization* utilization), optional,              \
    "DeviceGetUtilizationRates")                                                                                       \
  /* Renamed in NVML 12.2; the old name stays exported, and is all older drivers have. */                              \
  X(DeviceGetCurrentClocksEventReasons, NvmlReturn (*)(NvmlDevice device, unsigned long long* reasons), optional,      \
    "DeviceGetCurrentClocksEventReasons", "DeviceGetCurrentClocksThrottleReasons")                                     \
  X(DeviceGetEccMode, NvmlReturn (*)(NvmlDevice device, unsigned* current, unsigned* pending), optional,               \
    "DeviceGetEccMode")                                                                                                \
  X(DeviceGetTotalEccErrors,                                                                                           \
    NvmlReturn (*)(NvmlDevice device, int error_type, int counter_type, unsigned long long* count), optional,          \
    "DeviceGetTotalEccErrors")                                                                                         \
  X(DeviceGetRetiredPages,                                                                                             \
    NvmlReturn (*)(NvmlDevice device, int cause, unsigned* count, unsigned long long* addresses), optional,            \
    "DeviceGetRetiredPages")                                                                                           \
  X(DeviceGetRetiredPagesPendingStatus, NvmlReturn (*)(NvmlDevice device, unsigned* pending), optional,                \
    "DeviceGetRetiredPagesPendingStatus")                                                                              \
  X(DeviceGetRemappedRows,                                                                                             \
    NvmlReturn (*)(NvmlDevice device, unsigned* corrected, unsigned* uncorrected, unsigned* pending,                   \
                   unsigned* failed),                                                                                  \
    optional, "DeviceGetRemappedRows")                                                                                 \
  X(DeviceGetCurrPcieLinkGeneration, NvmlReturn (*)(NvmlDevice device, unsigned* generation), optional,                \
    "DeviceGetCurrPcieLinkGeneration")                                                                                 \
  X(DeviceGetMaxPcieLinkGeneration, NvmlReturn (*)(NvmlDevice device, unsigned* generation), optional,                 \
    "DeviceGetMaxPcieLinkGeneration")                                                                                  \
  X(DeviceGetCurrPcieLinkWidth, NvmlReturn (*)(NvmlDevice device, unsigned* width), optional,                          \
    "DeviceGetCurrPcieLinkWidth")                                                                                      \
  X(DeviceGetMaxPcieLinkWidth, NvmlReturn (*)(NvmlDevice device, unsigned* width), optional,                           \
    "DeviceGetMaxPcieLinkWidth")                                                                                       \
  X(DeviceGetPcieReplayCounter, NvmlReturn (*)(NvmlDevice device, unsigned* count), optional,                          \
    "DeviceGetPcieReplayCounter")                                                                                      \
  X(DeviceGetNvLinkState, NvmlReturn (*)(NvmlDevice device, unsigned link, unsigned* active), optional,                \
    "DeviceGetNvLinkState")                                                                                            \
  X(DeviceGetNvLinkErrorCounter,                                                                                       \
    NvmlReturn (*)(NvmlDevice device, unsigned link, int counter, unsigned long long* count), optional,                \
    "DeviceGetNvLinkErrorCounter")                                                                                     \
  /* The device at a link's far end; NVML 11 and newer have _v2, same layout. */                                       \
  X(DeviceGetNvLinkRemotePciInfo, NvmlReturn (*)(NvmlDevice device, unsigned link, NvmlPciInfo* pci), optional,        \
    "DeviceGetNvLinkRemotePciInfo_v2", "DeviceGetNvLinkRemotePciInfo")                                                 \
  X(EventSetCreate, NvmlReturn (*)(NvmlEventSet* set), optional, "EventSetCreate")                                     \
  X(DeviceRegisterEvents, NvmlReturn (*)(NvmlDevice device, unsigned long long types, NvmlEventSet set), optional,     \
    "DeviceRegisterEvents")                                                                                            \
  X(DeviceGetSupportedEventTypes, NvmlReturn (*)(NvmlDevice device, unsigned long long* types), optional,              \
    "DeviceGetSupportedEventTypes")                                                                                    \
  /* _v2 only changed the timeout's meaning for MIG; the data layout is the same. */                                   \
  X(EventSetWait, NvmlReturn (*)(NvmlEventSet set, NvmlEventData* data, unsigned timeout_ms), optional,                \
    "EventSetWait_v2", "EventSetWait")                                                                                 \
  X(EventSetFree, NvmlReturn (*)(NvmlEventSet set), optional, "EventSetFree")

struct NvmlApi {
  HAL_SYMBOL_FIELDS(HAL_NVML_FUNCTIONS)
};

// A loaded and initialized NVML-family library; shut down when destroyed.
class Nvml : public VendorLibrary {
 public:
  // prefix: "nvml" or "hgml", the start of every exported name. Found but
  // failing its init: unusable (library_missing false).
  static LoadResult<Nvml> load(const LibraryRequest& request, const std::string& prefix);
  static LibraryRequest nvidia_request(const ConfiguredPath& configured);
  // The PPU SDK's HGML: its lib directories under sdk_root, then the system.
  static LibraryRequest hgml_request(const ConfiguredPath& configured, const std::string& sdk_root);

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml();

  const NvmlApi& api() const { return api_; }
  const std::string& prefix() const { return prefix_; }
  // "nvml 550.54.15", or "nvml" when the driver version is not readable.
  std::string describe() const;
  // "NVML_ERROR_NOT_SUPPORTED"-style text from the library, with the code.
  std::string error_text(NvmlReturn result) const;
  // "hgmlDeviceGetRemappedRows": how messages name a function.
  std::string function_name(const std::string& suffix) const { return prefix_ + suffix; }

 private:
  Nvml() = default;
  NvmlApi api_;
  std::string prefix_;
  bool initialized_ = false;  // Init succeeded: Shutdown when destroyed
};

}  // namespace hal::shims
