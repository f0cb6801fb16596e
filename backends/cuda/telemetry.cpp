// Telemetry of the CUDA core's devices through an NVML-family library: NVML
// for the cuda plugin, the PPU SDK's HGML for ppu (the profile says which).
// Devices are matched by PCI bus id, then UUID, never by index: NVML orders
// devices by PCI bus while CUDA puts the fastest first unless
// CUDA_DEVICE_ORDER=PCI_BUS_ID.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_telemetry.hpp"
#include "nvml.hpp"
#include "pci_bus_id.hpp"
#include "telemetry_writer.hpp"
#include "vendor.hpp"

namespace hal::cuda {
namespace {

using backend::set_flag;
using backend::set_integer;
using backend::set_real;
using backend::set_unavailable;
using shims::NvmlDevice;
using shims::NvmlReturn;

// NVML's clock-event bits in hal's one set; the rest (application or
// display clock settings, bits newer than hal) count as other.
std::uint64_t clock_event_reasons(std::uint64_t vendor) {
  static constexpr std::pair<std::uint64_t, std::uint32_t> mapping[] = {
      {shims::nvml_clock_event_idle, HAL_CLOCK_EVENT_IDLE},
      {shims::nvml_clock_event_power_cap, HAL_CLOCK_EVENT_POWER_CAP},
      {shims::nvml_clock_event_hardware_slowdown, HAL_CLOCK_EVENT_HARDWARE_SLOWDOWN},
      {shims::nvml_clock_event_sync_boost, HAL_CLOCK_EVENT_SYNC_BOOST},
      {shims::nvml_clock_event_software_thermal, HAL_CLOCK_EVENT_SOFTWARE_THERMAL},
      {shims::nvml_clock_event_hardware_thermal, HAL_CLOCK_EVENT_HARDWARE_THERMAL},
      {shims::nvml_clock_event_power_brake, HAL_CLOCK_EVENT_POWER_BRAKE},
  };
  std::uint64_t reasons = 0, known = 0;
  for (const auto& [nvml_bit, hal_bit] : mapping) {
    known |= nvml_bit;
    if ((vendor & nvml_bit) != 0) reasons |= hal_bit;
  }
  if ((vendor & ~known) != 0) reasons |= HAL_CLOCK_EVENT_OTHER;
  return reasons;
}

// A number from a field value, whatever its declared type; nullopt for an unknown type.
std::optional<double> field_number(const shims::NvmlFieldValue& field) {
  switch (field.value_type) {
    case 0: return field.value.real;
    case 1: return field.value.unsigned_int;
    case 2: return static_cast<double>(field.value.unsigned_long);
    case 3: return static_cast<double>(field.value.unsigned_long_long);
    case 4: return static_cast<double>(field.value.signed_long_long);
    case 5: return field.value.signed_int;
    case 6: return field.value.unsigned_short;
  }
  return std::nullopt;
}

// Reads one device's fields, each a value or the library's reason.
class DeviceReader {
 public:
  DeviceReader(const shims::Nvml& nvml, NvmlDevice handle, hal_telemetry_snapshot_v1& out)
      : nvml_(nvml), api_(nvml.api()), handle_(handle), out_(out) {}

  void read_all() {
    unsigned mig_current = 0, mig_pending = 0;
    mig_mode_ = api_.DeviceGetMigMode != nullptr &&
                api_.DeviceGetMigMode(handle_, &mig_current, &mig_pending) == shims::nvml_success && mig_current == 1;
    read_temperatures();
    read_power();
    read_clocks();
    read_utilization();
    read_clock_events();
    read_ecc();
    read_retired_pages();
    read_row_remapping();
    read_pcie();
    read_links();
  }

 private:
  // Why the call gave nothing, on every field it would have filled.
  void unavailable(std::initializer_list<hal_telemetry_reading_v1*> fields, NvmlReturn result, const char* function,
                   bool mig_sensitive = false) {
    hal_telemetry_availability why = HAL_TELEMETRY_READ_FAILED;
    if (result == shims::nvml_not_supported || result == shims::nvml_function_not_found)
      why = mig_sensitive && mig_mode_ ? HAL_TELEMETRY_MIG_MODE : HAL_TELEMETRY_NOT_SUPPORTED;
    else if (result == shims::nvml_no_permission)
      why = HAL_TELEMETRY_NEEDS_ROOT;
    const std::string detail = nvml_.function_name(function) + ": " + nvml_.error_text(result);
    for (hal_telemetry_reading_v1* field : fields) set_unavailable(*field, why, detail);
  }
  // False (with the reason on the fields) when the library lacks the function.
  template <typename Function>
  bool present(Function* function, const char* name, std::initializer_list<hal_telemetry_reading_v1*> fields) {
    if (function != nullptr) return true;
    for (hal_telemetry_reading_v1* field : fields)
      set_unavailable(*field, HAL_TELEMETRY_NOT_SUPPORTED, nvml_.function_name(name) + " is not in " + nvml_.path());
    return false;
  }
  // Calls function(handle, leading..., &value); nullopt (the field marked) when it fails.
  template <typename Value, typename Function, typename... Leading>
  std::optional<Value> get(hal_telemetry_reading_v1& field, Function* function, const char* name,
                           Leading... leading) {
    if (!present(function, name, {&field})) return std::nullopt;
    Value value{};
    if (const NvmlReturn result = function(handle_, leading..., &value); result != shims::nvml_success) {
      unavailable({&field}, result, name);
      return std::nullopt;
    }
    return value;
  }
  void get_real(hal_telemetry_reading_v1& field, auto function, const char* name, double scale, auto... leading) {
    if (auto value = get<unsigned>(field, function, name, leading...)) set_real(field, *value * scale);
  }
  void get_integer(hal_telemetry_reading_v1& field, auto function, const char* name, auto... leading) {
    if (auto value = get<unsigned>(field, function, name, leading...)) set_integer(field, *value);
  }

  void read_temperatures() {
    get_real(out_.core_temperature, api_.DeviceGetTemperature, "DeviceGetTemperature", 1.0,
             shims::nvml_temperature_gpu);
    get_real(out_.slowdown_temperature, api_.DeviceGetTemperatureThreshold, "DeviceGetTemperatureThreshold", 1.0,
             shims::nvml_threshold_slowdown);
    get_real(out_.shutdown_temperature, api_.DeviceGetTemperatureThreshold, "DeviceGetTemperatureThreshold", 1.0,
             shims::nvml_threshold_shutdown);
    set_unavailable(out_.hotspot_temperature, HAL_TELEMETRY_NOT_SUPPORTED,
                    nvml_.prefix() + " reports no hotspot (junction) temperature");
    if (!present(api_.DeviceGetFieldValues, "DeviceGetFieldValues", {&out_.memory_temperature})) return;
    shims::NvmlFieldValue field{};
    field.field_id = shims::nvml_field_memory_temperature;
    NvmlReturn result = api_.DeviceGetFieldValues(handle_, 1, &field);
    if (result == shims::nvml_success) result = field.result;
    const std::optional<double> celsius = result == shims::nvml_success ? field_number(field) : std::nullopt;
    if (celsius)
      set_real(out_.memory_temperature, *celsius);
    else if (result != shims::nvml_success)
      unavailable({&out_.memory_temperature}, result, "DeviceGetFieldValues");
    else
      set_unavailable(out_.memory_temperature, HAL_TELEMETRY_READ_FAILED,
                      "memory temperature field has value type " + std::to_string(field.value_type) +
                          ", unknown to hal");
  }

  void read_power() {
    get_real(out_.power_draw, api_.DeviceGetPowerUsage, "DeviceGetPowerUsage", 1e-3);
    get_real(out_.power_limit, api_.DeviceGetEnforcedPowerLimit, "DeviceGetEnforcedPowerLimit", 1e-3);
    if (auto millijoules = get<unsigned long long>(out_.energy, api_.DeviceGetTotalEnergyConsumption,
                                                   "DeviceGetTotalEnergyConsumption"))
      set_real(out_.energy, static_cast<double>(*millijoules) * 1e-3);
  }

  void read_clocks() {
    get_integer(out_.compute_clock, api_.DeviceGetClockInfo, "DeviceGetClockInfo", shims::nvml_clock_sm);
    get_integer(out_.compute_clock_max, api_.DeviceGetMaxClockInfo, "DeviceGetMaxClockInfo", shims::nvml_clock_sm);
    get_integer(out_.memory_clock, api_.DeviceGetClockInfo, "DeviceGetClockInfo", shims::nvml_clock_memory);
    get_integer(out_.memory_clock_max, api_.DeviceGetMaxClockInfo, "DeviceGetMaxClockInfo",
                shims::nvml_clock_memory);
  }

  void read_utilization() {
    set_unavailable(out_.steal, HAL_TELEMETRY_NOT_SUPPORTED, "steal time is a host (VM) reading");
    if (!present(api_.DeviceGetUtilizationRates, "DeviceGetUtilizationRates",
                 {&out_.compute_utilization, &out_.memory_utilization}))
      return;
    shims::NvmlUtilization utilization{};
    if (const NvmlReturn result = api_.DeviceGetUtilizationRates(handle_, &utilization); result != shims::nvml_success)
      return unavailable({&out_.compute_utilization, &out_.memory_utilization}, result, "DeviceGetUtilizationRates",
                         true);
    set_real(out_.compute_utilization, utilization.gpu);
    set_real(out_.memory_utilization, utilization.memory);
  }

  void read_clock_events() {
    auto vendor = get<unsigned long long>(out_.clock_event_vendor_mask, api_.DeviceGetCurrentClocksEventReasons,
                                          "DeviceGetCurrentClocksEventReasons");
    if (!vendor) {
      out_.clock_event_reasons = out_.clock_event_vendor_mask;
      return;
    }
    set_integer(out_.clock_event_vendor_mask, *vendor);
    set_integer(out_.clock_event_reasons, clock_event_reasons(*vendor));
  }

  void read_ecc() {
    if (present(api_.DeviceGetEccMode, "DeviceGetEccMode", {&out_.ecc_enabled})) {
      unsigned current = 0, pending = 0;
      if (const NvmlReturn result = api_.DeviceGetEccMode(handle_, &current, &pending); result == shims::nvml_success)
        set_flag(out_.ecc_enabled, current == 1);
      else
        unavailable({&out_.ecc_enabled}, result, "DeviceGetEccMode");
    }
    const struct {
      hal_telemetry_reading_v1* field;
      int error_type, counter_type;
    } counters[] = {{&out_.ecc_corrected_volatile, shims::nvml_error_corrected, shims::nvml_counter_volatile},
                    {&out_.ecc_uncorrected_volatile, shims::nvml_error_uncorrected, shims::nvml_counter_volatile},
                    {&out_.ecc_corrected_aggregate, shims::nvml_error_corrected, shims::nvml_counter_aggregate},
                    {&out_.ecc_uncorrected_aggregate, shims::nvml_error_uncorrected, shims::nvml_counter_aggregate}};
    for (const auto& counter : counters)
      if (auto count = get<unsigned long long>(*counter.field, api_.DeviceGetTotalEccErrors, "DeviceGetTotalEccErrors",
                                               counter.error_type, counter.counter_type))
        set_integer(*counter.field, *count);
  }

  void read_retired_pages() {
    const std::pair<hal_telemetry_reading_v1*, int> causes[] = {
        {&out_.retired_single_bit, shims::nvml_retired_multiple_single_bit},
        {&out_.retired_double_bit, shims::nvml_retired_double_bit}};
    for (const auto& [field, cause] : causes) {
      if (!present(api_.DeviceGetRetiredPages, "DeviceGetRetiredPages", {field})) continue;
      unsigned count = 0;  // 0 with no buffer asks only for the count
      const NvmlReturn result = api_.DeviceGetRetiredPages(handle_, cause, &count, nullptr);
      if (result == shims::nvml_success || result == shims::nvml_insufficient_size)
        set_integer(*field, count);
      else
        unavailable({field}, result, "DeviceGetRetiredPages");
    }
    if (auto pending = get<unsigned>(out_.retirement_pending, api_.DeviceGetRetiredPagesPendingStatus,
                                     "DeviceGetRetiredPagesPendingStatus"))
      set_flag(out_.retirement_pending, *pending == 1);
    set_unavailable(out_.retirement_pending_pages, HAL_TELEMETRY_NOT_SUPPORTED,
                    nvml_.prefix() + " says whether a retirement is pending, not how many pages");
  }

  void read_row_remapping() {
    const auto fields = {&out_.remap_corrected, &out_.remap_uncorrected, &out_.remap_pending, &out_.remap_failed};
    if (!present(api_.DeviceGetRemappedRows, "DeviceGetRemappedRows", fields)) return;
    unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
    if (const NvmlReturn result = api_.DeviceGetRemappedRows(handle_, &corrected, &uncorrected, &pending, &failed);
        result != shims::nvml_success)
      return unavailable(fields, result, "DeviceGetRemappedRows");
    set_integer(out_.remap_corrected, corrected);
    set_integer(out_.remap_uncorrected, uncorrected);
    set_flag(out_.remap_pending, pending != 0);
    set_flag(out_.remap_failed, failed != 0);
  }

  void read_pcie() {
    get_integer(out_.pcie_generation, api_.DeviceGetCurrPcieLinkGeneration, "DeviceGetCurrPcieLinkGeneration");
    get_integer(out_.pcie_generation_max, api_.DeviceGetMaxPcieLinkGeneration, "DeviceGetMaxPcieLinkGeneration");
    get_integer(out_.pcie_width, api_.DeviceGetCurrPcieLinkWidth, "DeviceGetCurrPcieLinkWidth");
    get_integer(out_.pcie_width_max, api_.DeviceGetMaxPcieLinkWidth, "DeviceGetMaxPcieLinkWidth");
    get_integer(out_.pcie_replay_count, api_.DeviceGetPcieReplayCounter, "DeviceGetPcieReplayCounter");
  }

  // Links are numbered from 0; the first that is not supported ends them.
  void read_links() {
    const auto fields = {&out_.links_active, &out_.links_total, &out_.link_errors};
    if (!present(api_.DeviceGetNvLinkState, "DeviceGetNvLinkState", fields)) return;
    std::uint64_t total = 0, active = 0, errors = 0;
    NvmlReturn ended = shims::nvml_success;
    bool errors_read = false;
    NvmlReturn error_failure = shims::nvml_success;
    for (unsigned link = 0; link < shims::nvml_nvlink_max_links; ++link) {
      unsigned is_active = 0;
      ended = api_.DeviceGetNvLinkState(handle_, link, &is_active);
      if (ended != shims::nvml_success) break;
      ++total;
      if (is_active != 1) continue;
      ++active;
      if (api_.DeviceGetNvLinkErrorCounter == nullptr) continue;
      for (int counter : {shims::nvml_nvlink_error_replay, shims::nvml_nvlink_error_recovery,
                          shims::nvml_nvlink_error_crc_flit, shims::nvml_nvlink_error_crc_data}) {
        unsigned long long count = 0;
        const NvmlReturn result = api_.DeviceGetNvLinkErrorCounter(handle_, link, counter, &count);
        if (result == shims::nvml_success) {
          errors += count;
          errors_read = true;
        } else {
          error_failure = result;
        }
      }
    }
    if (total == 0) return unavailable(fields, ended, "DeviceGetNvLinkState");
    set_integer(out_.links_total, total);
    set_integer(out_.links_active, active);
    if (errors_read && error_failure == shims::nvml_success)
      set_integer(out_.link_errors, errors);
    else if (active == 0)
      set_unavailable(out_.link_errors, HAL_TELEMETRY_NOT_SUPPORTED, "no NVLink is active");
    else if (!present(api_.DeviceGetNvLinkErrorCounter, "DeviceGetNvLinkErrorCounter", {&out_.link_errors}))
      return;
    else
      unavailable({&out_.link_errors}, error_failure, "DeviceGetNvLinkErrorCounter");
  }

  const shims::Nvml& nvml_;
  const shims::NvmlApi& api_;
  NvmlDevice handle_;
  hal_telemetry_snapshot_v1& out_;
  bool mig_mode_ = false;
};

// XID and double-bit ECC events of one device, from the library's event set.
class NvmlHealthWatch : public backend::HealthWatch {
 public:
  NvmlHealthWatch(const shims::Nvml& nvml, shims::NvmlEventSet set) : nvml_(nvml), set_(set) {}
  ~NvmlHealthWatch() override { nvml_.api().EventSetFree(set_); }
  hal_status wait(std::int64_t timeout_ms, hal_health_event_v1& out) override {
    shims::NvmlEventData data{};
    // Not under LazyTelemetry's lock: a wait blocks, and NVML's event calls are thread-safe.
    const NvmlReturn result =
        nvml_.api().EventSetWait(set_, &data, static_cast<unsigned>(std::min<std::int64_t>(timeout_ms, 0xffffffff)));
    if (result == shims::nvml_timeout) return HAL_ERROR_TIMEOUT;
    if (result != shims::nvml_success)
      return backend::fail(HAL_ERROR_INTERNAL,
                           nvml_.function_name("EventSetWait") + " failed: " + nvml_.error_text(result));
    if ((data.type & shims::nvml_event_xid_critical) != 0) {
      out.kind = HAL_HEALTH_EVENT_XID;
      out.code = static_cast<std::int64_t>(data.data);
      out.description = backend::keep_telemetry_text("XID " + std::to_string(data.data) +
                                                     (data.data == 999 ? " (unknown to the driver)" : ""));
    } else {
      out.kind = HAL_HEALTH_EVENT_UNCORRECTED_ECC;
      out.code = 1;
      out.description = backend::keep_telemetry_text("a double-bit ECC error");
    }
    return backend::succeed();
  }

 private:
  const shims::Nvml& nvml_;
  shims::NvmlEventSet set_;
};

class NvmlTelemetry : public backend::TelemetrySource {
 public:
  explicit NvmlTelemetry(std::unique_ptr<shims::Nvml> nvml) : nvml_(std::move(nvml)) {
    const shims::NvmlApi& api = nvml_->api();
    unsigned count = 0;
    if (const NvmlReturn result = api.DeviceGetCount(&count); result != shims::nvml_success) {
      enumeration_error_ = nvml_->function_name("DeviceGetCount") + " failed: " + nvml_->error_text(result);
      return;
    }
    for (unsigned index = 0; index < count; ++index) {
      NvmlDevice handle = nullptr;
      shims::NvmlPciInfo pci{};
      if (api.DeviceGetHandleByIndex(index, &handle) != shims::nvml_success ||
          api.DeviceGetPciInfo(handle, &pci) != shims::nvml_success)
        continue;  // a GPU NVML cannot open (lost, no permission) is reported as not found below
      const std::string bus_id = abi::normalize_pci_bus_id(pci.bus_id).value_or("");
      listed_ += (listed_.empty() ? "" : ", ") + bus_id;
      by_pci_bus_id_[bus_id] = handle;
      char uuid[96] = {};
      if (api.DeviceGetUUID != nullptr && api.DeviceGetUUID(handle, uuid, sizeof(uuid)) == shims::nvml_success)
        by_uuid_[uuid] = handle;
    }
  }

  // Every NVLink of the device, numbered from 0 until the library says there
  // are no more, with the PCI bus id of the device each active one reaches.
  hal_status links(const backend::TelemetryDevice& device, std::vector<backend::DeviceLinkInfo>& out) override {
    const shims::NvmlApi& api = nvml_->api();
    const NvmlDevice handle = find(device);
    if (handle == nullptr) return backend::fail(HAL_ERROR_UNSUPPORTED, not_found(device));
    if (api.DeviceGetNvLinkState == nullptr)
      return backend::fail(HAL_ERROR_UNSUPPORTED, nvml_->prefix() + " at " + nvml_->path() + " lacks " +
                                                      nvml_->function_name("DeviceGetNvLinkState"));
    for (unsigned link = 0; link < shims::nvml_nvlink_max_links; ++link) {
      unsigned active = 0;
      if (api.DeviceGetNvLinkState(handle, link, &active) != shims::nvml_success) break;
      backend::DeviceLinkInfo info;
      info.active = active == 1;
      shims::NvmlPciInfo peer{};
      if (info.active && api.DeviceGetNvLinkRemotePciInfo != nullptr &&
          api.DeviceGetNvLinkRemotePciInfo(handle, link, &peer) == shims::nvml_success)
        info.peer_pci_bus_id = abi::normalize_pci_bus_id(peer.bus_id).value_or("");
      out.push_back(std::move(info));
    }
    return backend::succeed();
  }

  hal_status read(const backend::TelemetryDevice& device, hal_telemetry_snapshot_v1& out) override {
    out.source = backend::keep_telemetry_text(nvml_->describe());
    const NvmlDevice handle = find(device);
    if (handle == nullptr) {
      backend::mark_all_unavailable(out, HAL_TELEMETRY_READ_FAILED, not_found(device));
      return backend::succeed();
    }
    DeviceReader(*nvml_, handle, out).read_all();
    return backend::succeed();
  }

  hal_status watch(const backend::TelemetryDevice& device, std::unique_ptr<backend::HealthWatch>& out) override {
    const shims::NvmlApi& api = nvml_->api();
    const NvmlDevice handle = find(device);
    if (handle == nullptr || api.EventSetCreate == nullptr || api.DeviceRegisterEvents == nullptr ||
        api.EventSetWait == nullptr || api.EventSetFree == nullptr)
      return backend::succeed();  // no event stream: snapshots are compared
    unsigned long long types = shims::nvml_event_xid_critical | shims::nvml_event_double_bit_ecc;
    if (unsigned long long supported = 0;
        api.DeviceGetSupportedEventTypes != nullptr &&
        api.DeviceGetSupportedEventTypes(handle, &supported) == shims::nvml_success)
      types &= supported;
    if (types == 0) return backend::succeed();
    shims::NvmlEventSet set = nullptr;
    if (const NvmlReturn result = api.EventSetCreate(&set); result != shims::nvml_success)
      return backend::fail(HAL_ERROR_INTERNAL, nvml_->function_name("EventSetCreate") + " for " + device.id +
                                                   " failed: " + nvml_->error_text(result));
    if (const NvmlReturn result = api.DeviceRegisterEvents(handle, types, set); result != shims::nvml_success) {
      api.EventSetFree(set);
      if (result == shims::nvml_not_supported) return backend::succeed();
      return backend::fail(HAL_ERROR_INTERNAL, nvml_->function_name("DeviceRegisterEvents") + " for " + device.id +
                                                   " failed: " + nvml_->error_text(result));
    }
    out = std::make_unique<NvmlHealthWatch>(*nvml_, set);
    return backend::succeed();
  }

 private:
  NvmlDevice find(const backend::TelemetryDevice& device) const {
    if (const auto found = by_pci_bus_id_.find(device.pci_bus_id); found != by_pci_bus_id_.end())
      return found->second;
    if (const auto found = by_uuid_.find(device.uuid); !device.uuid.empty() && found != by_uuid_.end())
      return found->second;
    return nullptr;
  }
  std::string not_found(const backend::TelemetryDevice& device) const {
    if (!enumeration_error_.empty()) return enumeration_error_;
    return nvml_->prefix() + " at " + nvml_->path() + " lists no device at PCI " + device.pci_bus_id + " or UUID " +
           (device.uuid.empty() ? "(none)" : device.uuid) + " for " + device.id + "; it lists " +
           (listed_.empty() ? std::string("none") : listed_);
  }

  std::unique_ptr<shims::Nvml> nvml_;
  std::map<std::string, NvmlDevice> by_pci_bus_id_, by_uuid_;
  std::string listed_, enumeration_error_;
};

}  // namespace

backend::TelemetryDevice CudaVendor::telemetry_device(const Context& context, std::uint32_t device) {
  const CudaDevice& found = *context.devices[device];
  return {context.device_id(device), found.pci_bus_id, found.uuid};
}

std::unique_ptr<backend::LazyTelemetry> make_telemetry(const Profile& profile) {
  return std::make_unique<backend::LazyTelemetry>(
      [request = profile.telemetry, prefix = profile.telemetry_prefix]() -> backend::TelemetryOpening {
        shims::LoadResult<shims::Nvml> loaded = shims::Nvml::load(request, prefix);
        if (!loaded.library) return {nullptr, loaded.message, loaded.library_missing};
        return {std::make_unique<NvmlTelemetry>(std::move(loaded.library)), {}, false};
      });
}


}  // namespace hal::cuda
