// AMD's GPU management libraries, resolved at run time: AMD SMI
// (libamd_smi.so, ROCm 6 and later) and, for ROCm 5, rocm_smi
// (librocm_smi64.so). Both answer the same questions through one interface,
// AmdGpuManagement; what differs between the two libraries, and between
// their releases, stays in the two readers in amd_smi.cpp.
//
// No AMD header is used. The types below are declared from the libraries'
// public headers of the releases named beside each. A struct whose layout
// changed between releases is passed as an oversized zeroed buffer and read
// only for the releases whose layout was checked; for any other release the
// reading is "not supported" and says which release it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "vendor_library.hpp"

namespace hal::shims {

// ---- library-neutral results ----------------------------------------------

// Why a reading has no value, in terms the backend maps to hal's.
enum class SmiProblem {
  not_supported,  // the device, driver or this library release has no such reading
  no_permission,  // the library said permission denied (root only)
  failed,         // the call failed for another reason (detail has the library's error)
};

template <typename T>
struct SmiResult {
  std::optional<T> value;
  SmiProblem problem = SmiProblem::failed;
  std::string detail;  // "amdsmi_get_temp_metric(vram): AMDSMI_STATUS_NOT_SUPPORTED"

  static SmiResult of(T read) {
    SmiResult result;
    result.value = std::move(read);
    return result;
  }
  static SmiResult missing(SmiProblem why, std::string detail) {
    SmiResult result;
    result.problem = why;
    result.detail = std::move(detail);
    return result;
  }
  // The same problem for a reading of another type.
  template <typename U>
  SmiResult<U> as_missing() const {
    return SmiResult<U>::missing(problem, detail);
  }
};

// major.minor.patch as the library reports it: AMD SMI's "24.6.2" (year,
// major, minor before 25.x; major, minor, release from 25.x), rocm_smi's "5.0.0".
struct SmiLibraryVersion {
  std::uint32_t major = 0, minor = 0, patch = 0;
  std::string text() const {
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  friend bool operator<(const SmiLibraryVersion& a, const SmiLibraryVersion& b) {
    if (a.major != b.major) return a.major < b.major;
    if (a.minor != b.minor) return a.minor < b.minor;
    return a.patch < b.patch;
  }
};

enum class SmiTemperatureSensor { edge, hotspot, memory };
enum class SmiTemperatureLimit { current, critical, emergency };
enum class SmiClockDomain { compute, memory };

struct SmiClock {
  std::uint64_t current_mhz = 0;
  std::uint64_t max_mhz = 0;  // the highest performance level
};

struct SmiUtilization {
  SmiResult<double> compute_percent;
  SmiResult<double> memory_percent;  // memory controller
};

struct SmiEccCounts {
  std::uint64_t corrected = 0;
  std::uint64_t uncorrected = 0;
};

// The driver's bad-page list (ras/gpu_vram_bad_pages).
struct SmiBadPages {
  std::uint64_t retired = 0;       // reserved: taken out of use
  std::uint64_t pending = 0;       // reserved at the next reset
  std::uint64_t unreservable = 0;  // bad, and could not be taken out of use
};

struct SmiPcieLink {
  SmiResult<std::uint64_t> generation, generation_max, width, width_max;
};

// A GPU event from the driver (KFD's SMI events, through AMD SMI).
enum class SmiEventKind { vm_fault, thermal_throttle, gpu_reset_starting, gpu_reset_done, ring_hang };
struct SmiEvent {
  std::size_t device = 0;   // index into device_pci_bus_ids()
  SmiEventKind kind = SmiEventKind::vm_fault;
  std::uint32_t code = 0;   // the library's event number
  std::string message;      // the driver's text
};

// One opened AMD management library and the GPUs it reports.
class AmdGpuManagement {
 public:
  virtual ~AmdGpuManagement() = default;
  // "amd-smi 24.6.2", "rocm-smi 5.0.0"
  virtual std::string description() const = 0;
  virtual const SmiLibraryVersion& version() const = 0;
  // The GPUs' PCI bus ids ("0000:c1:00.0"), in the library's order, which
  // need not be the HIP runtime's: callers match devices by these.
  virtual const std::vector<std::string>& device_pci_bus_ids() const = 0;

  virtual SmiResult<double> temperature_celsius(std::size_t device, SmiTemperatureSensor sensor,
                                                SmiTemperatureLimit limit) = 0;
  virtual SmiResult<double> power_watts(std::size_t device) = 0;
  virtual SmiResult<double> power_limit_watts(std::size_t device) = 0;
  virtual SmiResult<double> energy_joules(std::size_t device) = 0;  // a counter since the driver loaded
  virtual SmiResult<SmiClock> clock(std::size_t device, SmiClockDomain domain) = 0;
  virtual SmiUtilization utilization(std::size_t device) = 0;
  virtual SmiResult<bool> ecc_enabled(std::size_t device) = 0;
  virtual SmiResult<SmiEccCounts> ecc_counts(std::size_t device) = 0;  // since the driver loaded
  virtual SmiResult<SmiBadPages> bad_pages(std::size_t device) = 0;
  virtual SmiPcieLink pcie_link(std::size_t device) = 0;
  virtual SmiResult<std::uint64_t> pcie_replay_count(std::size_t device) = 0;

  // The event stream. start_events registers the device (not_supported
  // where the library or release has no stream hal reads); wait_events
  // waits up to timeout_ms for events of every registered device, one queue
  // for the whole process, and returns an empty list when none came.
  virtual SmiResult<std::monostate> start_events(std::size_t device) = 0;
  virtual void stop_events(std::size_t device) = 0;
  virtual SmiResult<std::vector<SmiEvent>> wait_events(int timeout_ms) = 0;
};

// AMD SMI from its configured path (the rocm backend's `amd_smi` option,
// which HAL_AMD_SMI sets), else $ROCM_PATH/lib, /opt/rocm/lib and the system's
// search path.
LibraryRequest amd_smi_request(const ConfiguredPath& configured);
// rocm_smi from its configured path (`rocm_smi`, HAL_ROCM_SMI), else the same directories.
LibraryRequest rocm_smi_request(const ConfiguredPath& configured);
// AMD SMI first; rocm_smi when AMD SMI is missing or will not initialize.
// Neither: the message has every path tried and each init failure, and
// library_missing says whether both were missing.
LoadResult<AmdGpuManagement> open_amd_gpu_management(const ConfiguredPath& amd_smi, const ConfiguredPath& rocm_smi);

// ---- the libraries' own types, for the readers and the fakes ---------------

// A PCI address packed as both libraries' *_bdf_id / *_pci_id_get return it:
// domain << 32 | bus << 8 | device << 3 | function (AMD SMI 24.x and later put
// a partition id in bits 28-31). "0000:3b:00.0", as hal writes PCI bus ids.
std::string pci_bus_id_from_bdf_id(std::uint64_t bdf_id);

// The partition bits of a BDF id (0 on GPUs that are not partitioned).
inline std::uint32_t partition_from_bdf_id(std::uint64_t bdf_id) {
  return static_cast<std::uint32_t>((bdf_id >> 28) & 0xf);
}

// PCIe generation of a link's transfer rate in MT/s (2500 -> 1 ... 64000 -> 6); 0 when unknown.
std::uint64_t pcie_generation_of_rate(std::uint64_t megatransfers_per_second);

namespace amdsmi {

using Status = std::uint32_t;  // amdsmi_status_t
inline constexpr Status success = 0, not_supported = 2, not_yet_implemented = 3, no_permission = 10;
inline constexpr std::uint64_t init_amd_gpus = 1u << 1;  // AMDSMI_INIT_AMD_GPUS

using SocketHandle = void*;
using ProcessorHandle = void*;

// amdsmi_temperature_type_t and amdsmi_temperature_metric_t: the same values
// from 23.x (ROCm 6.0) to 26.x.
inline constexpr std::uint32_t temperature_edge = 0, temperature_hotspot = 1, temperature_vram = 2;
inline constexpr std::uint32_t temperature_current = 0, temperature_critical = 5, temperature_emergency = 7;
// amdsmi_clk_type_t
inline constexpr std::uint32_t clock_gfx = 0, clock_mem = 4;
// amdsmi_memory_page_status_t
inline constexpr std::uint32_t page_reserved = 0, page_pending = 1, page_unreservable = 2;

// amdsmi_version_t through 24.x: {year, major, minor, release, build}; from
// 25.x (ROCm 6.4) {major, minor, release, build}. Both are 24 bytes with the
// build string at offset 16, so one buffer holds either.
struct Version24 {
  std::uint32_t year, major, minor, release;
  const char* build;
};
struct Version25 {
  std::uint32_t major, minor, release;
  const char* build;
};
static_assert(sizeof(Version24) == 24 && sizeof(Version25) == 24);

// amdsmi_power_info_t of 23.x-24.x (ROCm 6.0-6.3). Powers in W; a member the
// device lacks reads 0xFFFF.
struct PowerInfo24 {
  std::uint32_t current_socket_power, average_socket_power;
  std::uint32_t gfx_voltage, soc_voltage, mem_voltage;
  std::uint32_t power_limit;
  std::uint32_t reserved[11];
};
static_assert(sizeof(PowerInfo24) == 68);
// amdsmi_power_info_t of 26.x (ROCm 7). Powers in W; unsupported members UINT32_MAX.
struct PowerInfo26 {
  std::uint64_t socket_power;
  std::uint32_t current_socket_power, average_socket_power;
  std::uint64_t gfx_voltage, soc_voltage, mem_voltage;
  std::uint32_t power_limit;
  std::uint64_t reserved[18];
};
static_assert(sizeof(PowerInfo26) == 192);

// amdsmi_power_cap_info_t, 23.x-26.x. power_cap is in W before 24.5.2 (ROCm
// 6.1.2) and in uW from then on, as the library reads it from hwmon.
struct PowerCapInfo {
  std::uint64_t power_cap, default_power_cap, dpm_cap, min_power_cap, max_power_cap;
  std::uint64_t reserved[3];
};

// amdsmi_frequencies_t, 23.x-26.x: frequencies in Hz, current an index.
inline constexpr std::size_t max_frequencies = 33;
struct Frequencies {
  bool has_deep_sleep;
  std::uint32_t num_supported;
  std::uint32_t current;
  std::uint64_t frequency[max_frequencies];
};
static_assert(sizeof(Frequencies) == 280);

// amdsmi_engine_usage_t, 23.x-26.x: percents; 0xFFFF where unsupported.
struct EngineUsage {
  std::uint32_t gfx_activity, umc_activity, mm_activity;
  std::uint32_t reserved[13];
};

// amdsmi_error_count_t: 23.x is {correctable, uncorrectable, reserved[2]}
// (32 bytes); 24.5 (ROCm 6.1) added deferred_count and grew to 64 bytes. The
// first two counts are where they were.
struct ErrorCount {
  std::uint64_t correctable_count, uncorrectable_count, deferred_count;
  std::uint64_t reserved[5];
};
static_assert(sizeof(ErrorCount) == 64);

// amdsmi_retired_page_record_t, 23.x-26.x.
struct RetiredPageRecord {
  std::uint64_t page_address, page_size;
  std::uint32_t status;  // amdsmi_memory_page_status_t
};

// amdsmi_pcie_info_t of 24.5-24.x (ROCm 6.1-6.3) and 26.x. 26.x filled the
// first reserved word of pcie_static with max_pcie_interface_version and
// documents max_pcie_speed in GT/s; 24.x zeroes that word, gives
// max_pcie_speed in MT/s and pcie_interface_version as the link's maximum
// generation. 23.x (ROCm 6.0) has no amdsmi_get_pcie_info.
struct PcieInfo {
  struct Static {
    std::uint16_t max_pcie_width;
    std::uint32_t max_pcie_speed;
    std::uint32_t pcie_interface_version;
    std::uint32_t slot_type;
    std::uint32_t max_pcie_interface_version;  // 26.x
    std::uint64_t reserved[9];
  } pcie_static;
  struct Metric {
    std::uint16_t pcie_width;
    std::uint32_t pcie_speed;  // MT/s
    std::uint32_t pcie_bandwidth;
    std::uint64_t pcie_replay_count, pcie_l0_to_recovery_count, pcie_replay_roll_over_count;
    std::uint64_t pcie_nak_sent_count, pcie_nak_received_count;
    std::uint32_t pcie_lc_perf_other_end_recovery_count;  // 24.7
    std::uint64_t reserved[12];
  } pcie_metric;
  std::uint64_t reserved[32];
};
static_assert(sizeof(PcieInfo::Static) == 96 && sizeof(PcieInfo::Metric) == 160 && sizeof(PcieInfo) == 512);

// amdsmi_evt_notification_type_t: 1-4 are the same from 23.4 to 26.x; 5 is
// RING_HANG from 24.6 (ROCm 6.2) to 24.x, and 26.x follows KFD's numbering,
// where 5 is MIGRATE_START. The mask bit of event e is 1 << (e - 1).
inline constexpr std::uint32_t event_vm_fault = 1, event_thermal_throttle = 2, event_gpu_pre_reset = 3,
                               event_gpu_post_reset = 4, event_ring_hang_24 = 5;
inline constexpr std::uint32_t no_data = 40;  // AMDSMI_STATUS_NO_DATA: no event within the timeout
// amdsmi_evt_notification_data_t up to 24.x: a 64-character message.
struct EventRecord24 {
  ProcessorHandle processor_handle;
  std::uint32_t event;
  char message[64];
};
static_assert(sizeof(EventRecord24) == 80);
// 26.x: the message is AMDSMI_MAX_STRING_LENGTH (256) characters.
struct EventRecord26 {
  ProcessorHandle processor_handle;
  std::uint32_t event;
  char message[256];
};
static_assert(sizeof(EventRecord26) == 272);

}  // namespace amdsmi

namespace rsmi {

using Status = std::uint32_t;  // rsmi_status_t
inline constexpr Status success = 0, not_supported = 2, permission = 4, not_yet_implemented = 9;
inline constexpr Status insufficient_size = 11;

// rsmi_temperature_type_t (sensor) and rsmi_temperature_metric_t, ROCm 5.0-6.x.
inline constexpr std::uint32_t temperature_edge = 0, temperature_junction = 1, temperature_memory = 2;
inline constexpr std::uint32_t temperature_current = 0, temperature_critical = 5, temperature_emergency = 7;
// rsmi_clk_type_t
inline constexpr std::uint32_t clock_sys = 0, clock_mem = 4;
// rsmi_gpu_block_t: one bit per block, UMC (1) to FUSE (0x2000).
inline constexpr std::uint64_t first_block = 0x1, last_block = 0x2000;
// rsmi_memory_page_status_t
inline constexpr std::uint32_t page_reserved = 0, page_pending = 1, page_unreservable = 2;

// rsmi_version_t, ROCm 5.0-6.x.
struct Version {
  std::uint32_t major, minor, patch;
  const char* build;
};

// rsmi_frequencies_t of rocm_smi up to 5.x (ROCm 5): 32 levels in Hz.
struct Frequencies5 {
  std::uint32_t num_supported;
  std::uint32_t current;
  std::uint64_t frequency[32];
};
static_assert(sizeof(Frequencies5) == 264);
// rsmi_frequencies_t of rocm_smi 7.x (ROCm 6): has_deep_sleep first, 33 levels.
struct Frequencies7 {
  bool has_deep_sleep;
  std::uint32_t num_supported;
  std::uint32_t current;
  std::uint64_t frequency[33];
};
static_assert(sizeof(Frequencies7) == 280);
// rsmi_pcie_bandwidth_t: transfer rates (T/s) and the lanes of each.
struct PcieBandwidth5 {
  Frequencies5 transfer_rate;
  std::uint32_t lanes[32];
};
struct PcieBandwidth7 {
  Frequencies7 transfer_rate;
  std::uint32_t lanes[33];
};

// rsmi_error_count_t
struct ErrorCount {
  std::uint64_t correctable_err, uncorrectable_err;
};

// rsmi_retired_page_record_t
struct RetiredPageRecord {
  std::uint64_t page_address, page_size;
  std::uint32_t status;
};

}  // namespace rsmi

}  // namespace hal::shims
