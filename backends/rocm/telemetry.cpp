// The ROCm backend's telemetry: AMD SMI (or rocm_smi on ROCm 5) through
// shims/amd_smi, opened on the first snapshot. Devices are matched to the
// library's by PCI address, never by index: the library lists GPUs in its
// own order, and HIP_VISIBLE_DEVICES renumbers the runtime's.
//
// Health events come from comparing snapshots (libhal does that when a
// backend has no event stream). AMD SMI's event API
// (amdsmi_get_gpu_event_notification) delivers one process-wide queue for
// every registered GPU, so a faithful per-device watch needs a dispatcher
// shared by all watches; until that exists no watch is offered.
#include <algorithm>

#include "amd_smi.hpp"
#include "rocm_backend.hpp"
#include "telemetry_writer.hpp"

namespace hal::rocm {
namespace {

using backend::set_flag;
using backend::set_integer;
using backend::set_real;
using backend::set_unavailable;
using shims::SmiProblem;
using shims::SmiResult;

hal_telemetry_availability availability_of(SmiProblem problem) {
  switch (problem) {
    case SmiProblem::not_supported: return HAL_TELEMETRY_NOT_SUPPORTED;
    case SmiProblem::no_permission: return HAL_TELEMETRY_NEEDS_ROOT;
    case SmiProblem::failed: return HAL_TELEMETRY_READ_FAILED;
  }
  return HAL_TELEMETRY_READ_FAILED;
}

template <typename T>
void set_missing(hal_telemetry_reading_v1& field, const SmiResult<T>& result) {
  set_unavailable(field, availability_of(result.problem), result.detail);
}

void set_from(hal_telemetry_reading_v1& field, const SmiResult<double>& result) {
  if (result.value) set_real(field, *result.value);
  else set_missing(field, result);
}

void set_from(hal_telemetry_reading_v1& field, const SmiResult<std::uint64_t>& result) {
  if (result.value) set_integer(field, *result.value);
  else set_missing(field, result);
}

void set_from(hal_telemetry_reading_v1& field, const SmiResult<bool>& result) {
  if (result.value) set_flag(field, *result.value);
  else set_missing(field, result);
}

void set_not_supported(hal_telemetry_reading_v1& field, const std::string& why) {
  set_unavailable(field, HAL_TELEMETRY_NOT_SUPPORTED, why);
}

class AmdSmiTelemetry final : public backend::TelemetrySource {
 public:
  explicit AmdSmiTelemetry(std::unique_ptr<shims::AmdGpuManagement> library) : library_(std::move(library)) {}

  hal_status read(const backend::TelemetryDevice& device, hal_telemetry_snapshot_v1& out) override {
    const std::string source = library_->description();
    out.source = backend::keep_telemetry_text(source);
    const std::vector<std::string>& listed = library_->device_pci_bus_ids();
    const auto found = std::find(listed.begin(), listed.end(), device.pci_bus_id);
    if (device.pci_bus_id.empty() || found == listed.end()) {
      std::string known;
      for (const std::string& id : listed) known += (known.empty() ? "" : ", ") + id;
      return fail(HAL_ERROR_NOT_PRESENT,
                  device.id + " (PCI " + (device.pci_bus_id.empty() ? "address unknown" : device.pci_bus_id) +
                      ") is not among the GPUs " + source + " reports (" + (known.empty() ? "none" : known) +
                      "), so its telemetry cannot be read");
    }
    read_device(static_cast<std::size_t>(found - listed.begin()), out);
    return succeed();
  }

 private:
  void read_device(std::size_t index, hal_telemetry_snapshot_v1& out) {
    using shims::SmiTemperatureLimit;
    using shims::SmiTemperatureSensor;
    shims::AmdGpuManagement& library = *library_;

    // Edge is the temperature hal calls core; its critical and emergency
    // limits are where the GPU slows down and where it shuts down.
    set_from(out.core_temperature,
             library.temperature_celsius(index, SmiTemperatureSensor::edge, SmiTemperatureLimit::current));
    set_from(out.hotspot_temperature,
             library.temperature_celsius(index, SmiTemperatureSensor::hotspot, SmiTemperatureLimit::current));
    set_from(out.memory_temperature,
             library.temperature_celsius(index, SmiTemperatureSensor::memory, SmiTemperatureLimit::current));
    set_from(out.slowdown_temperature,
             library.temperature_celsius(index, SmiTemperatureSensor::edge, SmiTemperatureLimit::critical));
    set_from(out.shutdown_temperature,
             library.temperature_celsius(index, SmiTemperatureSensor::edge, SmiTemperatureLimit::emergency));

    set_from(out.power_draw, library.power_watts(index));
    set_from(out.power_limit, library.power_limit_watts(index));
    set_from(out.energy, library.energy_joules(index));

    read_clock(library.clock(index, shims::SmiClockDomain::compute), out.compute_clock, out.compute_clock_max);
    read_clock(library.clock(index, shims::SmiClockDomain::memory), out.memory_clock, out.memory_clock_max);

    const shims::SmiUtilization utilization = library.utilization(index);
    set_from(out.compute_utilization, utilization.compute_percent);
    set_from(out.memory_utilization, utilization.memory_percent);
    set_not_supported(out.steal, "steal time is a virtual machine's CPU reading");

    const std::string throttle_why =
        "AMD SMI reports throttle status only inside amdsmi_gpu_metrics_t, whose layout and bit meanings change with "
        "each release and ASIC; hal does not decode it";
    set_not_supported(out.clock_event_reasons, throttle_why);
    set_not_supported(out.clock_event_vendor_mask, throttle_why);

    set_from(out.ecc_enabled, library.ecc_enabled(index));
    const SmiResult<shims::SmiEccCounts> ecc = library.ecc_counts(index);
    if (ecc.value) {
      set_integer(out.ecc_corrected_volatile, ecc.value->corrected);
      set_integer(out.ecc_uncorrected_volatile, ecc.value->uncorrected);
    } else {
      set_missing(out.ecc_corrected_volatile, ecc);
      set_missing(out.ecc_uncorrected_volatile, ecc);
    }
    const std::string lifetime_why =
        library.description() + " counts ECC errors since the driver loaded; the lifetime count is not exposed";
    set_not_supported(out.ecc_corrected_aggregate, lifetime_why);
    set_not_supported(out.ecc_uncorrected_aggregate, lifetime_why);

    // amdgpu retires a page for an uncorrectable error, so every retired
    // page counts as a double-bit one.
    const SmiResult<shims::SmiBadPages> pages = library.bad_pages(index);
    set_not_supported(out.retired_single_bit,
                      "amdgpu retires pages for uncorrectable errors only; they are counted as retired_double_bit");
    if (pages.value) {
      set_integer(out.retired_double_bit, pages.value->retired);
      set_flag(out.retirement_pending, pages.value->pending > 0);
      set_integer(out.retirement_pending_pages, pages.value->pending);
    } else {
      set_missing(out.retired_double_bit, pages);
      set_missing(out.retirement_pending, pages);
      set_missing(out.retirement_pending_pages, pages);
    }
    const std::string remap_why = "AMD GPUs retire bad pages (see retired pages) instead of remapping rows";
    set_not_supported(out.remap_corrected, remap_why);
    set_not_supported(out.remap_uncorrected, remap_why);
    set_not_supported(out.remap_pending, remap_why);
    set_not_supported(out.remap_failed, remap_why);

    const shims::SmiPcieLink link = library.pcie_link(index);
    set_from(out.pcie_generation, link.generation);
    set_from(out.pcie_generation_max, link.generation_max);
    set_from(out.pcie_width, link.width);
    set_from(out.pcie_width_max, link.width_max);
    set_from(out.pcie_replay_count, library.pcie_replay_count(index));

    const std::string xgmi_why =
        "xGMI links are not read: AMD SMI's xGMI error status is a flag rather than a count, and its link metrics "
        "layout changes between releases";
    set_not_supported(out.links_active, xgmi_why);
    set_not_supported(out.links_total, xgmi_why);
    set_not_supported(out.link_errors, xgmi_why);
  }

  static void read_clock(const SmiResult<shims::SmiClock>& clock, hal_telemetry_reading_v1& current,
                         hal_telemetry_reading_v1& max) {
    if (!clock.value) {
      set_missing(current, clock);
      set_missing(max, clock);
      return;
    }
    set_integer(current, clock.value->current_mhz);
    set_integer(max, clock.value->max_mhz);
  }

  std::unique_ptr<shims::AmdGpuManagement> library_;
};

backend::TelemetryDevice telemetry_device(const Context& context, std::uint32_t device) {
  const RocmDevice& rocm_device = *context.devices[device];
  return {context.device_id(device), rocm_device.pci_bus_id, rocm_device.uuid};
}

hal_status snapshot(hal_backend_context* backend, std::uint32_t device, hal_telemetry_snapshot_v1* out) {
  if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot needs out");
  const Context& context = backend->rocm;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (out->struct_size < sizeof(hal_telemetry_snapshot_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot struct_size " + std::to_string(out->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  out->struct_size = sizeof(hal_telemetry_snapshot_v1);
  return context.telemetry->snapshot(telemetry_device(context, device), *out);
}

hal_status watch_create(hal_backend_context* backend, std::uint32_t device, hal_health_watch** out) {
  if (backend == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "watch_create needs a context");
  const Context& context = backend->rocm;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  return context.telemetry->watch_create(telemetry_device(context, device), out);
}

}  // namespace

std::unique_ptr<backend::LazyTelemetry> make_telemetry() {
  return std::make_unique<backend::LazyTelemetry>([] {
    shims::AmdGpuManagementOpening opening = shims::open_amd_gpu_management();
    backend::TelemetryOpening result;
    result.error = std::move(opening.error);
    result.library_missing = opening.library_missing;
    if (opening.library) result.source = std::make_unique<AmdSmiTelemetry>(std::move(opening.library));
    return result;
  });
}

const hal_telemetry_v1 telemetry_table = {sizeof(hal_telemetry_v1), snapshot, watch_create,
                                          backend::health_watch_wait, backend::health_watch_destroy};

}  // namespace hal::rocm
