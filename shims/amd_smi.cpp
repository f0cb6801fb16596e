#include "amd_smi.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <variant>

namespace hal::shims {

std::string pci_bus_id_from_bdf_id(std::uint64_t bdf_id) {
  const auto domain = static_cast<unsigned>(bdf_id >> 32);
  const auto bus = static_cast<unsigned>((bdf_id >> 8) & 0xff);
  const auto device = static_cast<unsigned>((bdf_id >> 3) & 0x1f);
  const auto function = static_cast<unsigned>(bdf_id & 0x7);
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%u", domain, bus, device, function);
  return text;
}

std::uint64_t pcie_generation_of_rate(std::uint64_t megatransfers_per_second) {
  // PCIe 1.0 to 6.0 signal at 2.5, 5, 8, 16, 32 and 64 GT/s.
  constexpr std::uint64_t rates[] = {2500, 5000, 8000, 16000, 32000, 64000};
  for (std::size_t index = 0; index < std::size(rates); ++index)
    if (megatransfers_per_second == rates[index]) return index + 1;
  return 0;
}

namespace {

using Empty = SmiResult<std::monostate>;

// A reading the library left at its "unsupported" mark (0xFFFF in the 16-bit
// metrics it copies, UINT32_MAX or UINT64_MAX in its own fields).
bool is_unset_mark(std::uint64_t value) {
  return value == 0xffff || value == 0xffffffffu || value == ~std::uint64_t{0};
}

const char* sensor_name(SmiTemperatureSensor sensor) {
  switch (sensor) {
    case SmiTemperatureSensor::edge: return "edge";
    case SmiTemperatureSensor::hotspot: return "hotspot";
    case SmiTemperatureSensor::memory: return "vram";
  }
  return "?";
}

const char* limit_name(SmiTemperatureLimit limit) {
  switch (limit) {
    case SmiTemperatureLimit::current: return "current";
    case SmiTemperatureLimit::critical: return "critical";
    case SmiTemperatureLimit::emergency: return "emergency";
  }
  return "?";
}

// What both readers share: the library, its status codes, how a failed call
// becomes a reading's reason, and the devices by PCI bus id.
class SmiReader : public AmdGpuManagement, public VendorLibrary {
 public:
  struct StatusCodes {
    std::uint32_t success, not_supported, not_yet_implemented, permission;
  };

  std::string description() const override { return name_ + " " + version_.text(); }
  const SmiLibraryVersion& version() const override { return version_; }
  const std::vector<std::string>& device_pci_bus_ids() const override { return pci_bus_ids_; }

 protected:
  SmiReader(StatusCodes codes, std::string name) : codes_(codes), name_(std::move(name)) {}

  // The library's own words for a status: "AMDSMI_STATUS_NO_PERM - Permission denied".
  virtual std::string status_text(std::uint32_t status) const = 0;

  // The one place a library's status becomes a reason.
  SmiProblem problem_of(std::uint32_t status) const {
    if (status == codes_.not_supported || status == codes_.not_yet_implemented) return SmiProblem::not_supported;
    if (status == codes_.permission) return SmiProblem::no_permission;
    return SmiProblem::failed;
  }

  // Calls symbol through function, or says why there is no reading.
  // what: the call's arguments that matter to a reader ("vram, current").
  template <typename Function, typename... Arguments>
  Empty invoke(const char* symbol, const std::string& what, Function* function, Arguments... arguments) const {
    const std::string call = std::string(symbol) + (what.empty() ? "" : "(" + what + ")");
    if (function == nullptr)
      return Empty::missing(SmiProblem::not_supported,
                            description() + " at " + path() + " has no " + symbol);
    const std::uint32_t status = function(arguments...);
    if (status == codes_.success) return Empty::of({});
    return Empty::missing(problem_of(status), call + ": " + status_text(status));
  }

  template <typename T>
  SmiResult<T> not_supported(std::string why) const {
    return SmiResult<T>::missing(SmiProblem::not_supported, std::move(why));
  }

  // The devices, one per PCI address: a partitioned GPU lists each partition
  // at its address; they share its sensors, so the first one listed is read.
  template <typename Handle>
  void add_device(std::uint64_t bdf_id, Handle handle, std::vector<Handle>& handles) {
    const std::string pci_bus_id = pci_bus_id_from_bdf_id(bdf_id);
    if (std::find(pci_bus_ids_.begin(), pci_bus_ids_.end(), pci_bus_id) != pci_bus_ids_.end()) return;
    pci_bus_ids_.push_back(pci_bus_id);
    handles.push_back(handle);
  }

  StatusCodes codes_;
  std::string name_;  // "amd-smi", "rocm-smi"
  SmiLibraryVersion version_;
  std::vector<std::string> pci_bus_ids_;
};

// A busy percent as the library reports it, or why not.
SmiResult<double> busy_percent(std::uint64_t value, const std::string& call) {
  if (is_unset_mark(value))
    return SmiResult<double>::missing(SmiProblem::not_supported, call + " reports no value for this device");
  if (value > 100)
    return SmiResult<double>::missing(SmiProblem::failed, call + " reported " + std::to_string(value) + " %");
  return SmiResult<double>::of(static_cast<double>(value));
}

// Current and highest level of a frequency table (Hz), in MHz, whichever
// release's layout it has.
template <typename Levels>
SmiResult<SmiClock> clock_from_levels(const Levels& levels, const std::string& call) {
  const std::uint32_t count = levels.num_supported, current = levels.current;
  if (count == 0 || count > std::size(levels.frequency) || current >= count)
    return SmiResult<SmiClock>::missing(SmiProblem::failed, call + " reported level " + std::to_string(current) +
                                                                " of " + std::to_string(count) + " levels");
  SmiClock clock;
  clock.current_mhz = levels.frequency[current] / 1000000;
  clock.max_mhz = *std::max_element(levels.frequency, levels.frequency + count) / 1000000;
  return SmiResult<SmiClock>::of(clock);
}

// The generation of a link rate in MT/s, or why not.
SmiResult<std::uint64_t> generation_of(std::uint64_t megatransfers, const std::string& call) {
  if (is_unset_mark(megatransfers) || megatransfers == 0)
    return SmiResult<std::uint64_t>::missing(SmiProblem::not_supported, call + " reports no link speed");
  if (const std::uint64_t generation = pcie_generation_of_rate(megatransfers); generation != 0)
    return SmiResult<std::uint64_t>::of(generation);
  return SmiResult<std::uint64_t>::missing(SmiProblem::failed, call + " reported a link speed of " +
                                                                   std::to_string(megatransfers) +
                                                                   " MT/s, which is no PCIe generation's");
}

SmiResult<std::uint64_t> width_of(std::uint64_t lanes, const std::string& call) {
  if (is_unset_mark(lanes) || lanes == 0)
    return SmiResult<std::uint64_t>::missing(SmiProblem::not_supported, call + " reports no link width");
  return SmiResult<std::uint64_t>::of(lanes);
}

// The current entry of rocm_smi's table of transfer rates (T/s) and lanes,
// in either release's layout.
template <typename Bandwidth>
void current_link(const Bandwidth& bandwidth, SmiPcieLink& link) {
  const std::string call = "rsmi_dev_pci_bandwidth_get";
  const std::uint32_t count = bandwidth.transfer_rate.num_supported, current = bandwidth.transfer_rate.current;
  if (count == 0 || count > std::size(bandwidth.lanes) || current >= count) {
    link.generation = link.width = SmiResult<std::uint64_t>::missing(
        SmiProblem::failed, call + " reported level " + std::to_string(current) + " of " + std::to_string(count));
    return;
  }
  link.generation = generation_of(bandwidth.transfer_rate.frequency[current] / 1000000, call + " (transfer rate)");
  link.width = width_of(bandwidth.lanes[current], call + " (lanes)");
}

template <typename Record>
SmiBadPages count_pages(const std::vector<Record>& records, std::uint32_t count, std::uint32_t reserved,
                        std::uint32_t pending, std::uint32_t unreservable) {
  SmiBadPages pages;
  for (std::uint32_t index = 0; index < count && index < records.size(); ++index) {
    const std::uint32_t status = records[index].status;
    if (status == reserved) ++pages.retired;
    else if (status == pending) ++pages.pending;
    else if (status == unreservable) ++pages.unreservable;
  }
  return pages;
}

// ---- AMD SMI ---------------------------------------------------------------

// One event record, whichever release's layout it came in.
struct EventRecord {
  amdsmi::ProcessorHandle handle = nullptr;
  std::uint32_t event = 0;
  std::string message;
};

template <typename Layout>
EventRecord event_record(const unsigned char* records, std::size_t index) {
  Layout record;
  std::memcpy(&record, records + index * sizeof(Layout), sizeof(record));
  return {record.processor_handle, record.event,
          std::string(record.message, strnlen(record.message, sizeof(record.message)))};
}

#define HAL_AMD_SMI_FUNCTIONS(X)                                                                                       \
  X(init, amdsmi::Status (*)(std::uint64_t flags), required, "amdsmi_init")                                            \
  X(shut_down, amdsmi::Status (*)(), required, "amdsmi_shut_down")                                                     \
  /* version: a Version24 or a Version25 */                                                                            \
  X(get_lib_version, amdsmi::Status (*)(void* version), required, "amdsmi_get_lib_version")                            \
  X(get_socket_handles, amdsmi::Status (*)(std::uint32_t* count, amdsmi::SocketHandle* sockets), required,             \
    "amdsmi_get_socket_handles")                                                                                       \
  X(get_processor_handles,                                                                                             \
    amdsmi::Status (*)(amdsmi::SocketHandle socket, std::uint32_t* count, amdsmi::ProcessorHandle* processors),        \
    required, "amdsmi_get_processor_handles")                                                                          \
  X(get_gpu_bdf_id, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint64_t* bdf_id), required,            \
    "amdsmi_get_gpu_bdf_id")                                                                                           \
  X(status_code_to_string, amdsmi::Status (*)(amdsmi::Status status, const char** text), optional,                     \
    "amdsmi_status_code_to_string")                                                                                    \
  X(get_temp_metric,                                                                                                   \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint32_t sensor, std::uint32_t metric,                  \
                       std::int64_t* celsius),                                                                         \
    optional, "amdsmi_get_temp_metric")                                                                                \
  /* info: a PowerInfo24 or a PowerInfo26 */                                                                           \
  X(get_power_info, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, void* info), optional,                       \
    "amdsmi_get_power_info")                                                                                           \
  X(get_power_cap_info,                                                                                                \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint32_t sensor, amdsmi::PowerCapInfo* info),           \
    optional, "amdsmi_get_power_cap_info")                                                                             \
  X(get_energy_count,                                                                                                  \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint64_t* counter, float* resolution_uj,                \
                       std::uint64_t* timestamp_ns),                                                                   \
    optional, "amdsmi_get_energy_count")                                                                               \
  X(get_clk_freq,                                                                                                      \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint32_t clock, amdsmi::Frequencies* frequencies),      \
    optional, "amdsmi_get_clk_freq")                                                                                   \
  X(get_gpu_activity, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, amdsmi::EngineUsage* usage), optional,     \
    "amdsmi_get_gpu_activity")                                                                                         \
  X(get_gpu_ecc_enabled, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint64_t* blocks), optional,       \
    "amdsmi_get_gpu_ecc_enabled")                                                                                      \
  X(get_gpu_total_ecc_count,                                                                                           \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, amdsmi::ErrorCount* count),                                  \
    optional, "amdsmi_get_gpu_total_ecc_count")                                                                        \
  X(get_gpu_bad_page_info,                                                                                             \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint32_t* count, amdsmi::RetiredPageRecord* records),   \
    optional, "amdsmi_get_gpu_bad_page_info")                                                                          \
  X(get_pcie_info, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, amdsmi::PcieInfo* info), optional,            \
    "amdsmi_get_pcie_info")                                                                                            \
  X(get_gpu_pci_replay_counter, amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint64_t* count), optional, \
    "amdsmi_get_gpu_pci_replay_counter")                                                                               \
  X(init_gpu_event_notification, amdsmi::Status (*)(amdsmi::ProcessorHandle processor), optional,                      \
    "amdsmi_init_gpu_event_notification")                                                                              \
  X(set_gpu_event_notification_mask,                                                                                   \
    amdsmi::Status (*)(amdsmi::ProcessorHandle processor, std::uint64_t mask),                                         \
    optional, "amdsmi_set_gpu_event_notification_mask")                                                                \
  /* records: EventRecord24 or EventRecord26, *count of them */                                                        \
  X(get_gpu_event_notification, amdsmi::Status (*)(int timeout_ms, std::uint32_t* count, void* records), optional,     \
    "amdsmi_get_gpu_event_notification")                                                                               \
  X(stop_gpu_event_notification, amdsmi::Status (*)(amdsmi::ProcessorHandle processor), optional,                      \
    "amdsmi_stop_gpu_event_notification")

struct AmdSmiApi {
  HAL_SYMBOL_FIELDS(HAL_AMD_SMI_FUNCTIONS)
};

// Which struct layouts a release has. The layouts were read from AMD SMI's
// amdsmi.h at ROCm 6.0.0 (23.4.0), 6.1.0/6.1.2 (24.5.x), 6.2.0/6.2.2
// (24.6.x), 24.7.0 and 26.1.0.
enum class AmdSmiLayouts {
  release_23_24,  // 23.4 (ROCm 6.0) to 24.x (ROCm 6.3)
  release_25,     // ROCm 6.4: structs unchanged from 24.x to 26.x are known; the others were not checked
  release_26,     // ROCm 7
  newer,          // no layout known
};

constexpr SmiLibraryVersion oldest_amd_smi{23, 4, 0};    // ROCm 6.0's
constexpr SmiLibraryVersion power_cap_in_microwatts{24, 5, 2};  // ROCm 6.1.2: hwmon's uW, no longer W
constexpr SmiLibraryVersion first_pcie_info{24, 5, 0};  // ROCm 6.1
constexpr SmiLibraryVersion first_ring_hang_event{24, 6, 0};  // ROCm 6.2

AmdSmiLayouts layouts_of(const SmiLibraryVersion& version) {
  if (version.major <= 24) return AmdSmiLayouts::release_23_24;
  if (version.major == 25) return AmdSmiLayouts::release_25;
  if (version.major == 26) return AmdSmiLayouts::release_26;
  return AmdSmiLayouts::newer;
}

class AmdSmiReader final : public SmiReader {
 public:
  AmdSmiReader()
      : SmiReader({amdsmi::success, amdsmi::not_supported, amdsmi::not_yet_implemented, amdsmi::no_permission},
                  "amd-smi") {}
  ~AmdSmiReader() override {
    if (initialized_) api_.shut_down();
  }

  std::vector<SymbolSpec> symbols() { return HAL_SYMBOL_SPECS(HAL_AMD_SMI_FUNCTIONS, api_, ""); }

  // Initializes the library and lists its GPUs; "" or why it cannot be used.
  std::string start() {
    if (const amdsmi::Status status = api_.init(amdsmi::init_amd_gpus); status != amdsmi::success)
      return "amdsmi_init(AMDSMI_INIT_AMD_GPUS) at " + path() + " failed: " + status_text(status);
    initialized_ = true;
    if (std::string error = read_version(); !error.empty()) return error;
    if (version_ < oldest_amd_smi)
      return "AMD SMI " + version_.text() + " at " + path() + " predates " + oldest_amd_smi.text() +
             " (ROCm 6.0), the oldest release whose struct layouts hal knows";
    return list_devices();
  }

  SmiResult<double> temperature_celsius(std::size_t device, SmiTemperatureSensor sensor,
                                        SmiTemperatureLimit limit) override {
    const std::uint32_t sensors[] = {amdsmi::temperature_edge, amdsmi::temperature_hotspot, amdsmi::temperature_vram};
    const std::uint32_t metrics[] = {amdsmi::temperature_current, amdsmi::temperature_critical,
                                     amdsmi::temperature_emergency};
    std::int64_t celsius = 0;
    const Empty called = invoke("amdsmi_get_temp_metric", std::string(sensor_name(sensor)) + ", " + limit_name(limit),
                                api_.get_temp_metric, handles_[device], sensors[static_cast<int>(sensor)],
                                metrics[static_cast<int>(limit)], &celsius);
    if (!called.value) return called.as_missing<double>();
    return SmiResult<double>::of(static_cast<double>(celsius));
  }

  SmiResult<double> power_watts(std::size_t device) override {
    const AmdSmiLayouts layouts = layouts_of(version_);
    if (layouts == AmdSmiLayouts::release_25 || layouts == AmdSmiLayouts::newer)
      return not_supported<double>(layout_unknown("amdsmi_power_info_t", "23.4-24.x and 26.x"));
    union {
      amdsmi::PowerInfo24 release_24;
      amdsmi::PowerInfo26 release_26;
      unsigned char room[1024];  // larger than any release's layout
    } info{};
    const Empty called = invoke("amdsmi_get_power_info", "", api_.get_power_info, handles_[device],
                                static_cast<void*>(&info));
    if (!called.value) return called.as_missing<double>();
    // MI300 reports current socket power, earlier GPUs an average over a window.
    const std::vector<std::uint64_t> candidates =
        layouts == AmdSmiLayouts::release_26
            ? std::vector<std::uint64_t>{info.release_26.socket_power, info.release_26.current_socket_power,
                                         info.release_26.average_socket_power}
            : std::vector<std::uint64_t>{info.release_24.current_socket_power, info.release_24.average_socket_power};
    for (const std::uint64_t watts : candidates)
      if (!is_unset_mark(watts)) return SmiResult<double>::of(static_cast<double>(watts));
    return not_supported<double>("amdsmi_get_power_info reports no socket power for this device");
  }

  SmiResult<double> power_limit_watts(std::size_t device) override {
    if (layouts_of(version_) == AmdSmiLayouts::newer)
      return not_supported<double>(layout_unknown("amdsmi_power_cap_info_t", "23.4-26.x"));
    amdsmi::PowerCapInfo info{};
    const Empty called =
        invoke("amdsmi_get_power_cap_info", "sensor 0", api_.get_power_cap_info, handles_[device], 0u, &info);
    if (!called.value) return called.as_missing<double>();
    if (version_ < power_cap_in_microwatts) return SmiResult<double>::of(static_cast<double>(info.power_cap));
    return SmiResult<double>::of(static_cast<double>(info.power_cap) / 1e6);
  }

  SmiResult<double> energy_joules(std::size_t device) override {
    std::uint64_t counter = 0, timestamp = 0;
    float resolution_uj = 0;
    const Empty called = invoke("amdsmi_get_energy_count", "", api_.get_energy_count, handles_[device], &counter,
                                &resolution_uj, &timestamp);
    if (!called.value) return called.as_missing<double>();
    return SmiResult<double>::of(static_cast<double>(counter) * static_cast<double>(resolution_uj) / 1e6);
  }

  SmiResult<SmiClock> clock(std::size_t device, SmiClockDomain domain) override {
    if (layouts_of(version_) == AmdSmiLayouts::newer)
      return not_supported<SmiClock>(layout_unknown("amdsmi_frequencies_t", "23.4-26.x"));
    const bool compute = domain == SmiClockDomain::compute;
    amdsmi::Frequencies levels{};
    const std::string what = compute ? "gfx" : "mem";
    const Empty called = invoke("amdsmi_get_clk_freq", what, api_.get_clk_freq, handles_[device],
                                compute ? amdsmi::clock_gfx : amdsmi::clock_mem, &levels);
    if (!called.value) return called.as_missing<SmiClock>();
    return clock_from_levels(levels, "amdsmi_get_clk_freq(" + what + ")");
  }

  SmiUtilization utilization(std::size_t device) override {
    if (layouts_of(version_) == AmdSmiLayouts::newer) {
      const std::string why = layout_unknown("amdsmi_engine_usage_t", "23.4-26.x");
      return {not_supported<double>(why), not_supported<double>(why)};
    }
    amdsmi::EngineUsage usage{};
    const Empty called = invoke("amdsmi_get_gpu_activity", "", api_.get_gpu_activity, handles_[device], &usage);
    if (!called.value) return {called.as_missing<double>(), called.as_missing<double>()};
    return {busy_percent(usage.gfx_activity, "amdsmi_get_gpu_activity (gfx_activity)"),
            busy_percent(usage.umc_activity, "amdsmi_get_gpu_activity (umc_activity)")};
  }

  SmiResult<bool> ecc_enabled(std::size_t device) override {
    std::uint64_t blocks = 0;
    const Empty called = invoke("amdsmi_get_gpu_ecc_enabled", "", api_.get_gpu_ecc_enabled, handles_[device], &blocks);
    if (!called.value) return called.as_missing<bool>();
    return SmiResult<bool>::of(blocks != 0);
  }

  SmiResult<SmiEccCounts> ecc_counts(std::size_t device) override {
    if (layouts_of(version_) == AmdSmiLayouts::newer)
      return not_supported<SmiEccCounts>(layout_unknown("amdsmi_error_count_t", "23.4-26.x"));
    amdsmi::ErrorCount count{};  // 64 bytes: room for 23.x's 32 and 24.5's 64
    const Empty called =
        invoke("amdsmi_get_gpu_total_ecc_count", "", api_.get_gpu_total_ecc_count, handles_[device], &count);
    if (!called.value) return called.as_missing<SmiEccCounts>();
    return SmiResult<SmiEccCounts>::of({count.correctable_count, count.uncorrectable_count});
  }

  SmiResult<SmiBadPages> bad_pages(std::size_t device) override {
    if (layouts_of(version_) == AmdSmiLayouts::newer)
      return not_supported<SmiBadPages>(layout_unknown("amdsmi_retired_page_record_t", "23.4-26.x"));
    // AMD SMI leaves the count untouched when the list is empty, and writes
    // as many records as the list holds whatever the count passed in: start
    // at 0 (as amd-smi itself does) and leave room for pages that appear
    // between the two calls.
    std::uint32_t count = 0;
    Empty called = invoke("amdsmi_get_gpu_bad_page_info", "count", api_.get_gpu_bad_page_info, handles_[device],
                          &count, static_cast<amdsmi::RetiredPageRecord*>(nullptr));
    if (!called.value) return called.as_missing<SmiBadPages>();
    if (count == 0) return SmiResult<SmiBadPages>::of({});
    std::vector<amdsmi::RetiredPageRecord> records(std::size_t{count} + 256);
    called = invoke("amdsmi_get_gpu_bad_page_info", "records", api_.get_gpu_bad_page_info, handles_[device], &count,
                    records.data());
    if (!called.value) return called.as_missing<SmiBadPages>();
    return SmiResult<SmiBadPages>::of(count_pages(records, count, amdsmi::page_reserved, amdsmi::page_pending,
                                                  amdsmi::page_unreservable));
  }

  SmiPcieLink pcie_link(std::size_t device) override {
    const auto unknown = [](const std::string& why) {
      const auto missing = SmiResult<std::uint64_t>::missing(SmiProblem::not_supported, why);
      return SmiPcieLink{missing, missing, missing, missing};
    };
    const AmdSmiLayouts layouts = layouts_of(version_);
    if (version_ < first_pcie_info)
      return unknown("AMD SMI " + version_.text() + " predates amdsmi_get_pcie_info (" + first_pcie_info.text() +
                     ", ROCm 6.1), the only source of the PCIe link hal reads from AMD SMI");
    if (layouts == AmdSmiLayouts::release_25 || layouts == AmdSmiLayouts::newer)
      return unknown(layout_unknown("amdsmi_pcie_info_t", "24.5-24.x and 26.x"));
    union {
      amdsmi::PcieInfo info;
      unsigned char room[2048];
    } buffer{};
    const Empty called = invoke("amdsmi_get_pcie_info", "", api_.get_pcie_info, handles_[device], &buffer.info);
    if (!called.value) {
      const auto missing = called.as_missing<std::uint64_t>();
      return {missing, missing, missing, missing};
    }
    const amdsmi::PcieInfo& info = buffer.info;
    const std::string call = "amdsmi_get_pcie_info";
    SmiPcieLink link;
    link.generation = generation_of(info.pcie_metric.pcie_speed, call + " (pcie_metric.pcie_speed)");
    link.width = width_of(info.pcie_metric.pcie_width, call + " (pcie_metric.pcie_width)");
    link.width_max = width_of(info.pcie_static.max_pcie_width, call + " (pcie_static.max_pcie_width)");
    const std::uint32_t generation_max = layouts == AmdSmiLayouts::release_26
                                             ? info.pcie_static.max_pcie_interface_version
                                             : info.pcie_static.pcie_interface_version;
    if (generation_max >= 1 && generation_max <= 6)
      link.generation_max = SmiResult<std::uint64_t>::of(generation_max);
    else
      link.generation_max = not_supported<std::uint64_t>(call + " reports no maximum PCIe generation");
    return link;
  }

  SmiResult<std::uint64_t> pcie_replay_count(std::size_t device) override {
    std::uint64_t count = 0;
    const Empty called =
        invoke("amdsmi_get_gpu_pci_replay_counter", "", api_.get_gpu_pci_replay_counter, handles_[device], &count);
    if (!called.value) return called.as_missing<std::uint64_t>();
    return SmiResult<std::uint64_t>::of(count);
  }

  Empty start_events(std::size_t device) override {
    const AmdSmiLayouts layouts = layouts_of(version_);
    if (layouts == AmdSmiLayouts::release_25 || layouts == AmdSmiLayouts::newer)
      return Empty::missing(SmiProblem::not_supported,
                            layout_unknown("amdsmi_evt_notification_data_t", "23.4-24.x and 26.x"));
    // VM faults, thermal throttling and GPU resets; ring hangs where 5 means that.
    std::uint64_t mask = 0;
    for (const std::uint32_t event : {amdsmi::event_vm_fault, amdsmi::event_thermal_throttle,
                                      amdsmi::event_gpu_pre_reset, amdsmi::event_gpu_post_reset})
      mask |= std::uint64_t{1} << (event - 1);
    if (layouts == AmdSmiLayouts::release_23_24 && !(version_ < first_ring_hang_event))
      mask |= std::uint64_t{1} << (amdsmi::event_ring_hang_24 - 1);
    Empty called = invoke("amdsmi_init_gpu_event_notification", "", api_.init_gpu_event_notification,
                          handles_[device]);
    if (!called.value) return called;
    called = invoke("amdsmi_set_gpu_event_notification_mask", "", api_.set_gpu_event_notification_mask,
                    handles_[device], mask);
    if (!called.value) stop_events(device);
    return called;
  }

  void stop_events(std::size_t device) override {
    if (api_.stop_gpu_event_notification != nullptr) api_.stop_gpu_event_notification(handles_[device]);
  }

  SmiResult<std::vector<SmiEvent>> wait_events(int timeout_ms) override {
    const bool release_26 = layouts_of(version_) == AmdSmiLayouts::release_26;
    const std::size_t record_size = release_26 ? sizeof(amdsmi::EventRecord26) : sizeof(amdsmi::EventRecord24);
    // The library writes at most count records of its own size.
    std::vector<std::uint64_t> room(16 * sizeof(amdsmi::EventRecord26) / sizeof(std::uint64_t));
    auto count = static_cast<std::uint32_t>(room.size() * sizeof(std::uint64_t) / record_size);
    std::vector<SmiEvent> events;
    if (api_.get_gpu_event_notification == nullptr)
      return not_supported<std::vector<SmiEvent>>(description() + " has no amdsmi_get_gpu_event_notification");
    const amdsmi::Status status = api_.get_gpu_event_notification(timeout_ms, &count, room.data());
    if (status == amdsmi::no_data) return SmiResult<std::vector<SmiEvent>>::of(std::move(events));  // none came
    if (status != amdsmi::success)
      return SmiResult<std::vector<SmiEvent>>::missing(problem_of(status), "amdsmi_get_gpu_event_notification: " +
                                                                            status_text(status));
    const auto* bytes = reinterpret_cast<const unsigned char*>(room.data());
    const std::size_t written = std::min<std::size_t>(count, room.size() * sizeof(std::uint64_t) / record_size);
    for (std::size_t index = 0; index < written; ++index) {
      const EventRecord record = release_26 ? event_record<amdsmi::EventRecord26>(bytes, index)
                                            : event_record<amdsmi::EventRecord24>(bytes, index);
      const auto found = std::find(handles_.begin(), handles_.end(), record.handle);
      const std::optional<SmiEventKind> kind = event_kind(record.event);
      if (found == handles_.end() || !kind) continue;  // a partition hal does not list, an event it did not ask for
      events.push_back({static_cast<std::size_t>(found - handles_.begin()), *kind, record.event, record.message});
    }
    return SmiResult<std::vector<SmiEvent>>::of(std::move(events));
  }

 private:
  std::optional<SmiEventKind> event_kind(std::uint32_t event) const {
    switch (event) {
      case amdsmi::event_vm_fault: return SmiEventKind::vm_fault;
      case amdsmi::event_thermal_throttle: return SmiEventKind::thermal_throttle;
      case amdsmi::event_gpu_pre_reset: return SmiEventKind::gpu_reset_starting;
      case amdsmi::event_gpu_post_reset: return SmiEventKind::gpu_reset_done;
      default: break;
    }
    if (event == amdsmi::event_ring_hang_24 && layouts_of(version_) == AmdSmiLayouts::release_23_24)
      return SmiEventKind::ring_hang;
    return std::nullopt;
  }

  std::string status_text(std::uint32_t status) const override {
    const char* text = nullptr;
    if (api_.status_code_to_string != nullptr) api_.status_code_to_string(status, &text);
    return text != nullptr && *text != '\0' ? std::string(text) : "AMD SMI status " + std::to_string(status);
  }

  std::string layout_unknown(const char* type, const char* known) const {
    return "AMD SMI " + version_.text() + " is a release whose " + type + " layout hal has not checked (it knows " +
           known + "), so the field is not read";
  }

  std::string read_version() {
    union {
      amdsmi::Version24 release_24;
      amdsmi::Version25 release_25;
      unsigned char room[256];
    } version{};
    if (const amdsmi::Status status = api_.get_lib_version(&version); status != amdsmi::success)
      return "amdsmi_get_lib_version at " + path() + " failed: " + status_text(status);
    // 25.x dropped the year: a first word of 25 or more is a major version,
    // 24 or less a year (23.4.0 is ROCm 6.0's, 24.6.2 ROCm 6.2's).
    if (version.release_24.year >= 25)
      version_ = {version.release_25.major, version.release_25.minor, version.release_25.release};
    else
      version_ = {version.release_24.year, version.release_24.major, version.release_24.minor};
    return {};
  }

  std::string list_devices() {
    std::uint32_t socket_count = 0;
    if (const amdsmi::Status status = api_.get_socket_handles(&socket_count, nullptr); status != amdsmi::success)
      return "amdsmi_get_socket_handles failed: " + status_text(status);
    std::vector<amdsmi::SocketHandle> sockets(socket_count);
    if (const amdsmi::Status status = api_.get_socket_handles(&socket_count, sockets.data());
        status != amdsmi::success)
      return "amdsmi_get_socket_handles failed: " + status_text(status);
    sockets.resize(std::min<std::size_t>(socket_count, sockets.size()));
    for (amdsmi::SocketHandle socket : sockets) {
      std::uint32_t count = 0;
      if (const amdsmi::Status status = api_.get_processor_handles(socket, &count, nullptr); status != amdsmi::success)
        return "amdsmi_get_processor_handles failed: " + status_text(status);
      std::vector<amdsmi::ProcessorHandle> processors(count);
      if (const amdsmi::Status status = api_.get_processor_handles(socket, &count, processors.data());
          status != amdsmi::success)
        return "amdsmi_get_processor_handles failed: " + status_text(status);
      processors.resize(std::min<std::size_t>(count, processors.size()));
      for (amdsmi::ProcessorHandle processor : processors) {
        std::uint64_t bdf_id = 0;
        if (const amdsmi::Status status = api_.get_gpu_bdf_id(processor, &bdf_id); status != amdsmi::success)
          return "amdsmi_get_gpu_bdf_id failed: " + status_text(status);
        add_device(bdf_id, processor, handles_);
      }
    }
    return {};
  }

  AmdSmiApi api_;
  bool initialized_ = false;
  std::vector<amdsmi::ProcessorHandle> handles_;
};

// ---- rocm_smi --------------------------------------------------------------

#define HAL_ROCM_SMI_FUNCTIONS(X)                                                                                      \
  X(init, rsmi::Status (*)(std::uint64_t flags), required, "rsmi_init")                                                \
  X(shut_down, rsmi::Status (*)(), required, "rsmi_shut_down")                                                         \
  X(version_get, rsmi::Status (*)(rsmi::Version* version), required, "rsmi_version_get")                               \
  X(num_monitor_devices, rsmi::Status (*)(std::uint32_t* count), required, "rsmi_num_monitor_devices")                 \
  X(dev_pci_id_get, rsmi::Status (*)(std::uint32_t device, std::uint64_t* bdf_id), required, "rsmi_dev_pci_id_get")    \
  X(status_string, rsmi::Status (*)(rsmi::Status status, const char** text), optional, "rsmi_status_string")           \
  X(dev_temp_metric_get,                                                                                               \
    rsmi::Status (*)(std::uint32_t device, std::uint32_t sensor, std::uint32_t metric, std::int64_t* millicelsius),    \
    optional, "rsmi_dev_temp_metric_get")                                                                              \
  X(dev_power_ave_get,                                                                                                 \
    rsmi::Status (*)(std::uint32_t device, std::uint32_t sensor, std::uint64_t* microwatts),                           \
    optional, "rsmi_dev_power_ave_get")                                                                                \
  X(dev_power_cap_get,                                                                                                 \
    rsmi::Status (*)(std::uint32_t device, std::uint32_t sensor, std::uint64_t* microwatts),                           \
    optional, "rsmi_dev_power_cap_get")                                                                                \
  X(dev_energy_count_get,                                                                                              \
    rsmi::Status (*)(std::uint32_t device, std::uint64_t* counter, float* resolution_uj, std::uint64_t* timestamp_ns), \
    optional, "rsmi_dev_energy_count_get")                                                                             \
  X(dev_busy_percent_get, rsmi::Status (*)(std::uint32_t device, std::uint32_t* percent), optional,                    \
    "rsmi_dev_busy_percent_get")                                                                                       \
  X(dev_memory_busy_percent_get, rsmi::Status (*)(std::uint32_t device, std::uint32_t* percent), optional,             \
    "rsmi_dev_memory_busy_percent_get")                                                                                \
  X(dev_gpu_clk_freq_get, rsmi::Status (*)(std::uint32_t device, std::uint32_t clock, void* frequencies), optional,    \
    "rsmi_dev_gpu_clk_freq_get")                                                                                       \
  X(dev_pci_bandwidth_get, rsmi::Status (*)(std::uint32_t device, void* bandwidth), optional,                          \
    "rsmi_dev_pci_bandwidth_get")                                                                                      \
  X(dev_ecc_enabled_get, rsmi::Status (*)(std::uint32_t device, std::uint64_t* blocks), optional,                      \
    "rsmi_dev_ecc_enabled_get")                                                                                        \
  X(dev_ecc_count_get, rsmi::Status (*)(std::uint32_t device, std::uint64_t block, rsmi::ErrorCount* count), optional, \
    "rsmi_dev_ecc_count_get")                                                                                          \
  X(dev_memory_reserved_pages_get,                                                                                     \
    rsmi::Status (*)(std::uint32_t device, std::uint32_t* count, rsmi::RetiredPageRecord* records),                    \
    optional, "rsmi_dev_memory_reserved_pages_get")                                                                    \
  X(dev_pci_replay_counter_get, rsmi::Status (*)(std::uint32_t device, std::uint64_t* count), optional,                \
    "rsmi_dev_pci_replay_counter_get")

struct RocmSmiApi {
  HAL_SYMBOL_FIELDS(HAL_ROCM_SMI_FUNCTIONS)
};

// rsmi_frequencies_t gained has_deep_sleep (shifting every member) between
// rocm_smi 5.x (ROCm 5) and 7.0 (ROCm 6.0); 6.x was never released. Read
// from rocm_smi.h at ROCm 5.0.0, 5.7.0 and 6.0.0.
enum class RocmSmiLayouts { release_5, release_7, unknown };

RocmSmiLayouts layouts_of_rocm_smi(const SmiLibraryVersion& version) {
  if (version.major <= 5) return RocmSmiLayouts::release_5;
  if (version.major == 7) return RocmSmiLayouts::release_7;
  return RocmSmiLayouts::unknown;
}

class RocmSmiReader final : public SmiReader {
 public:
  RocmSmiReader()
      : SmiReader({rsmi::success, rsmi::not_supported, rsmi::not_yet_implemented, rsmi::permission}, "rocm-smi") {}
  ~RocmSmiReader() override {
    if (initialized_) api_.shut_down();
  }

  std::vector<SymbolSpec> symbols() { return HAL_SYMBOL_SPECS(HAL_ROCM_SMI_FUNCTIONS, api_, ""); }

  std::string start() {
    if (const rsmi::Status status = api_.init(0); status != rsmi::success)
      return "rsmi_init at " + path() + " failed: " + status_text(status);
    initialized_ = true;
    rsmi::Version version{};
    if (const rsmi::Status status = api_.version_get(&version); status != rsmi::success)
      return "rsmi_version_get failed: " + status_text(status);
    version_ = {version.major, version.minor, version.patch};
    std::uint32_t count = 0;
    if (const rsmi::Status status = api_.num_monitor_devices(&count); status != rsmi::success)
      return "rsmi_num_monitor_devices failed: " + status_text(status);
    for (std::uint32_t index = 0; index < count; ++index) {
      std::uint64_t bdf_id = 0;
      if (const rsmi::Status status = api_.dev_pci_id_get(index, &bdf_id); status != rsmi::success)
        return "rsmi_dev_pci_id_get(" + std::to_string(index) + ") failed: " + status_text(status);
      add_device(bdf_id, index, indexes_);
    }
    return {};
  }

  SmiResult<double> temperature_celsius(std::size_t device, SmiTemperatureSensor sensor,
                                        SmiTemperatureLimit limit) override {
    const std::uint32_t sensors[] = {rsmi::temperature_edge, rsmi::temperature_junction, rsmi::temperature_memory};
    const std::uint32_t metrics[] = {rsmi::temperature_current, rsmi::temperature_critical,
                                     rsmi::temperature_emergency};
    std::int64_t millicelsius = 0;
    const Empty called =
        invoke("rsmi_dev_temp_metric_get", std::string(sensor_name(sensor)) + ", " + limit_name(limit),
               api_.dev_temp_metric_get, indexes_[device], sensors[static_cast<int>(sensor)],
               metrics[static_cast<int>(limit)], &millicelsius);
    if (!called.value) return called.as_missing<double>();
    return SmiResult<double>::of(static_cast<double>(millicelsius) / 1000.0);
  }

  SmiResult<double> power_watts(std::size_t device) override {
    return microwatts("rsmi_dev_power_ave_get", api_.dev_power_ave_get, device);
  }
  SmiResult<double> power_limit_watts(std::size_t device) override {
    return microwatts("rsmi_dev_power_cap_get", api_.dev_power_cap_get, device);
  }

  SmiResult<double> energy_joules(std::size_t device) override {
    std::uint64_t counter = 0, timestamp = 0;
    float resolution_uj = 0;
    const Empty called = invoke("rsmi_dev_energy_count_get", "", api_.dev_energy_count_get, indexes_[device],
                                &counter, &resolution_uj, &timestamp);
    if (!called.value) return called.as_missing<double>();
    return SmiResult<double>::of(static_cast<double>(counter) * static_cast<double>(resolution_uj) / 1e6);
  }

  SmiResult<SmiClock> clock(std::size_t device, SmiClockDomain domain) override {
    const bool compute = domain == SmiClockDomain::compute;
    const std::string what = compute ? "sys" : "mem";
    const std::string call = "rsmi_dev_gpu_clk_freq_get(" + what + ")";
    union {
      rsmi::Frequencies5 release_5;
      rsmi::Frequencies7 release_7;
      unsigned char room[1024];
    } levels{};
    const RocmSmiLayouts layouts = layouts_of_rocm_smi(version_);
    if (layouts == RocmSmiLayouts::unknown) return not_supported<SmiClock>(layout_unknown("rsmi_frequencies_t"));
    const Empty called = invoke("rsmi_dev_gpu_clk_freq_get", what, api_.dev_gpu_clk_freq_get, indexes_[device],
                                compute ? rsmi::clock_sys : rsmi::clock_mem, static_cast<void*>(&levels));
    if (!called.value) return called.as_missing<SmiClock>();
    if (layouts == RocmSmiLayouts::release_5) return clock_from_levels(levels.release_5, call);
    return clock_from_levels(levels.release_7, call);
  }

  SmiUtilization utilization(std::size_t device) override {
    return {percent("rsmi_dev_busy_percent_get", api_.dev_busy_percent_get, device),
            percent("rsmi_dev_memory_busy_percent_get", api_.dev_memory_busy_percent_get, device)};
  }

  SmiResult<bool> ecc_enabled(std::size_t device) override {
    const SmiResult<std::uint64_t> blocks = enabled_blocks(device);
    if (!blocks.value) return blocks.as_missing<bool>();
    return SmiResult<bool>::of(*blocks.value != 0);
  }

  // rocm_smi counts per block: the sum over the blocks with ECC on.
  SmiResult<SmiEccCounts> ecc_counts(std::size_t device) override {
    const SmiResult<std::uint64_t> blocks = enabled_blocks(device);
    if (!blocks.value) return blocks.as_missing<SmiEccCounts>();
    if (*blocks.value == 0) return not_supported<SmiEccCounts>("ECC is off on every block (rsmi_dev_ecc_enabled_get)");
    SmiEccCounts total;
    for (std::uint64_t block = rsmi::first_block; block <= rsmi::last_block; block <<= 1) {
      if ((*blocks.value & block) == 0) continue;
      rsmi::ErrorCount count{};
      const Empty called = invoke("rsmi_dev_ecc_count_get", "block " + std::to_string(block), api_.dev_ecc_count_get,
                                  indexes_[device], block, &count);
      if (!called.value) {
        if (called.problem == SmiProblem::not_supported) continue;  // a block without counters
        return called.as_missing<SmiEccCounts>();
      }
      total.corrected += count.correctable_err;
      total.uncorrected += count.uncorrectable_err;
    }
    return SmiResult<SmiEccCounts>::of(total);
  }

  SmiResult<SmiBadPages> bad_pages(std::size_t device) override {
    std::uint32_t count = 0;
    Empty called = invoke("rsmi_dev_memory_reserved_pages_get", "count", api_.dev_memory_reserved_pages_get,
                          indexes_[device], &count, static_cast<rsmi::RetiredPageRecord*>(nullptr));
    if (!called.value) return called.as_missing<SmiBadPages>();
    if (count == 0) return SmiResult<SmiBadPages>::of({});
    // rocm_smi writes at most count records and says when there were more.
    std::vector<rsmi::RetiredPageRecord> records(count);
    called = invoke("rsmi_dev_memory_reserved_pages_get", "records", api_.dev_memory_reserved_pages_get,
                    indexes_[device], &count, records.data());
    if (!called.value) return called.as_missing<SmiBadPages>();
    return SmiResult<SmiBadPages>::of(
        count_pages(records, count, rsmi::page_reserved, rsmi::page_pending, rsmi::page_unreservable));
  }

  // The current link from the table of transfer rates and lane counts; the
  // table lists the link's power states, not what the slot could do.
  SmiPcieLink pcie_link(std::size_t device) override {
    SmiPcieLink link;
    const std::string no_maximum =
        "rocm_smi lists the link's power states, not its capability; hal reads the maximum from AMD SMI only";
    link.generation_max = not_supported<std::uint64_t>(no_maximum);
    link.width_max = not_supported<std::uint64_t>(no_maximum);
    const RocmSmiLayouts layouts = layouts_of_rocm_smi(version_);
    if (layouts == RocmSmiLayouts::unknown) {
      link.generation = link.width = not_supported<std::uint64_t>(layout_unknown("rsmi_pcie_bandwidth_t"));
      return link;
    }
    union {
      rsmi::PcieBandwidth5 release_5;
      rsmi::PcieBandwidth7 release_7;
      unsigned char room[2048];
    } bandwidth{};
    const Empty called = invoke("rsmi_dev_pci_bandwidth_get", "", api_.dev_pci_bandwidth_get, indexes_[device],
                                static_cast<void*>(&bandwidth));
    if (!called.value) {
      link.generation = link.width = called.as_missing<std::uint64_t>();
      return link;
    }
    if (layouts == RocmSmiLayouts::release_5) current_link(bandwidth.release_5, link);
    else current_link(bandwidth.release_7, link);
    return link;
  }

  // rocm_smi has an event API of its own; hal reads events from AMD SMI only.
  Empty start_events(std::size_t) override {
    return Empty::missing(SmiProblem::not_supported, "hal reads GPU events from AMD SMI only, not from rocm_smi");
  }
  void stop_events(std::size_t) override {}
  SmiResult<std::vector<SmiEvent>> wait_events(int) override {
    return not_supported<std::vector<SmiEvent>>("hal reads GPU events from AMD SMI only, not from rocm_smi");
  }

  SmiResult<std::uint64_t> pcie_replay_count(std::size_t device) override {
    std::uint64_t count = 0;
    const Empty called = invoke("rsmi_dev_pci_replay_counter_get", "", api_.dev_pci_replay_counter_get,
                                indexes_[device], &count);
    if (!called.value) return called.as_missing<std::uint64_t>();
    return SmiResult<std::uint64_t>::of(count);
  }

 private:
  std::string status_text(std::uint32_t status) const override {
    const char* text = nullptr;
    if (api_.status_string != nullptr) api_.status_string(status, &text);
    return text != nullptr && *text != '\0' ? std::string(text) : "rocm_smi status " + std::to_string(status);
  }

  std::string layout_unknown(const char* type) const {
    return "rocm_smi " + version_.text() + " is a release whose " + type +
           " layout hal has not checked (it knows 5.x and 7.x), so the field is not read";
  }

  SmiResult<double> microwatts(const char* symbol, rsmi::Status (*function)(std::uint32_t, std::uint32_t, std::uint64_t*),
                               std::size_t device) const {
    std::uint64_t value = 0;
    const Empty called = invoke(symbol, "sensor 0", function, indexes_[device], 0u, &value);
    if (!called.value) return called.as_missing<double>();
    return SmiResult<double>::of(static_cast<double>(value) / 1e6);
  }

  SmiResult<double> percent(const char* symbol, rsmi::Status (*function)(std::uint32_t, std::uint32_t*),
                            std::size_t device) const {
    std::uint32_t value = 0;
    const Empty called = invoke(symbol, "", function, indexes_[device], &value);
    if (!called.value) return called.as_missing<double>();
    return busy_percent(value, symbol);
  }

  SmiResult<std::uint64_t> enabled_blocks(std::size_t device) const {
    std::uint64_t blocks = 0;
    const Empty called = invoke("rsmi_dev_ecc_enabled_get", "", api_.dev_ecc_enabled_get, indexes_[device], &blocks);
    if (!called.value) return called.as_missing<std::uint64_t>();
    return SmiResult<std::uint64_t>::of(blocks);
  }

  RocmSmiApi api_;
  bool initialized_ = false;
  std::vector<std::uint32_t> indexes_;
};

// Opens one library: its reader, or why not (and whether it was found at all).
template <typename Reader>
LoadResult<AmdGpuManagement> open_reader(const LibraryRequest& request) {
  auto reader = std::make_unique<Reader>();
  const std::vector<SymbolSpec> symbols = reader->symbols();
  LoadResult<Reader> load = open_vendor_library(std::move(reader), request, symbols);
  if (!load.library) return {nullptr, std::move(load.message), load.library_missing};
  if (std::string error = load.library->start(); !error.empty()) return {nullptr, error, false};
  return {std::move(load.library), {}, false};
}

}  // namespace

LibraryRequest amd_smi_request(const ConfiguredPath& configured) {
  return rocm_library_request(
      "AMD SMI (libamd_smi.so)",
      {"libamd_smi.so", "libamd_smi.so.26", "libamd_smi.so.25", "libamd_smi.so.24", "libamd_smi.so.23"}, "HAL_AMD_SMI",
      configured);
}

LibraryRequest rocm_smi_request(const ConfiguredPath& configured) {
  return rocm_library_request("rocm_smi (librocm_smi64.so)",
                              {"librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.5"}, "HAL_ROCM_SMI",
                              configured);
}

LoadResult<AmdGpuManagement> open_amd_gpu_management(const ConfiguredPath& amd_smi_path,
                                                     const ConfiguredPath& rocm_smi_path) {
  LoadResult<AmdGpuManagement> amd_smi = open_reader<AmdSmiReader>(amd_smi_request(amd_smi_path));
  if (amd_smi.library) return amd_smi;
  LoadResult<AmdGpuManagement> rocm_smi = open_reader<RocmSmiReader>(rocm_smi_request(rocm_smi_path));
  if (rocm_smi.library) return rocm_smi;
  return {nullptr, amd_smi.message + "; " + rocm_smi.message, amd_smi.library_missing && rocm_smi.library_missing};
}

}  // namespace hal::shims
