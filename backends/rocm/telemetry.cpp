// The ROCm backend's telemetry: AMD SMI (or rocm_smi on ROCm 5) through
// shims/amd_smi, opened on the first snapshot. Devices are matched to the
// library's by PCI address, never by index: the library lists GPUs in its
// own order, and HIP_VISIBLE_DEVICES renumbers the runtime's.
//
// Health events: AMD SMI's event stream (VM faults, thermal throttling, GPU
// resets, ring hangs) where the library has one hal reads; libhal adds what
// it finds by comparing snapshots (ECC counts, retirements).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "amd_smi.hpp"
#include "telemetry_writer.hpp"
#include "vendor.hpp"

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

// AMD SMI keeps one event queue for the whole process, whichever GPUs are
// registered: whoever waits polls it and files each event under every watch
// of its device, so a watch never takes another device's events.
class SmiEventDispatcher {
 public:
  explicit SmiEventDispatcher(std::shared_ptr<shims::AmdGpuManagement> library) : library_(std::move(library)) {}

  // A new queue for the device's events, registering the device with the
  // library for its first watch; the queue's id, or why not.
  SmiResult<std::uint64_t> subscribe(std::size_t device) {
    std::lock_guard lock(mutex_);
    if (watches_of_[device] == 0) {
      const SmiResult<std::monostate> started = library_->start_events(device);
      if (!started.value) return started.as_missing<std::uint64_t>();
    }
    ++watches_of_[device];
    const std::uint64_t id = next_id_++;
    queues_[id] = Queue{device, {}};
    return SmiResult<std::uint64_t>::of(id);
  }

  void unsubscribe(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto queue = queues_.find(id);
    if (queue == queues_.end()) return;
    const std::size_t device = queue->second.device;
    queues_.erase(queue);
    if (--watches_of_[device] == 0) library_->stop_events(device);
  }

  hal_status wait(std::uint64_t id, std::int64_t timeout_ms, hal_health_event_v1& out) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::lock_guard lock(mutex_);
    for (bool polled = false;; polled = true) {
      Queue& queue = queues_.at(id);
      if (!queue.events.empty()) {
        fill(queue.events.front(), out);
        queue.events.pop_front();
        return HAL_OK;
      }
      const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (polled && remaining.count() <= 0) return HAL_ERROR_TIMEOUT;
      // Short slices: a waiter for another device may be queued behind this one.
      const auto slice = std::clamp<std::int64_t>(remaining.count(), 0, 50);
      const SmiResult<std::vector<shims::SmiEvent>> events = library_->wait_events(static_cast<int>(slice));
      if (!events.value)
        return fail(HAL_ERROR_INTERNAL, "waiting for AMD SMI events failed: " + events.detail);
      for (const shims::SmiEvent& event : *events.value)
        for (auto& [other_id, other] : queues_)
          if (other.device == event.device) other.events.push_back(event);
    }
  }

 private:
  struct Queue {
    std::size_t device;
    std::deque<shims::SmiEvent> events;
  };

  static void fill(const shims::SmiEvent& event, hal_health_event_v1& out) {
    using shims::SmiEventKind;
    std::string what;
    out.kind = HAL_HEALTH_EVENT_XID;  // a critical driver event, as NVIDIA's XIDs are
    switch (event.kind) {
      case SmiEventKind::vm_fault: what = "GPU VM fault"; break;
      case SmiEventKind::thermal_throttle:
        what = "thermal throttling";
        out.kind = HAL_HEALTH_EVENT_THERMAL;
        break;
      case SmiEventKind::gpu_reset_starting: what = "GPU reset starting"; break;
      case SmiEventKind::gpu_reset_done: what = "GPU reset done"; break;
      case SmiEventKind::ring_hang: what = "ring hang"; break;
    }
    out.code = event.code;
    out.description = backend::keep_telemetry_text("AMD SMI event " + std::to_string(event.code) + ", " + what +
                                                   (event.message.empty() ? "" : ": " + event.message));
  }

  std::shared_ptr<shims::AmdGpuManagement> library_;
  std::mutex mutex_;
  std::map<std::size_t, int> watches_of_;  // by device
  std::map<std::uint64_t, Queue> queues_;  // by watch
  std::uint64_t next_id_ = 1;
};

class SmiHealthWatch final : public backend::HealthWatch {
 public:
  SmiHealthWatch(std::shared_ptr<SmiEventDispatcher> dispatcher, std::uint64_t id)
      : dispatcher_(std::move(dispatcher)), id_(id) {}
  ~SmiHealthWatch() override { dispatcher_->unsubscribe(id_); }
  hal_status wait(std::int64_t timeout_ms, hal_health_event_v1& out) override {
    return dispatcher_->wait(id_, timeout_ms, out);
  }

 private:
  std::shared_ptr<SmiEventDispatcher> dispatcher_;  // keeps the library open while a watch lives
  std::uint64_t id_;
};

class AmdSmiTelemetry final : public backend::TelemetrySource {
 public:
  explicit AmdSmiTelemetry(std::unique_ptr<shims::AmdGpuManagement> library)
      : library_(std::move(library)), events_(std::make_shared<SmiEventDispatcher>(library_)) {}

  hal_status read(const backend::TelemetryDevice& device, hal_telemetry_snapshot_v1& out) override {
    out.source = backend::keep_telemetry_text(library_->description());
    std::size_t index = 0;
    if (hal_status status = find(device, index); status != HAL_OK) return status;
    read_device(index, out);
    return succeed();
  }

  // No watch (libhal compares snapshots) where the library has no event
  // stream hal reads; an error when registering for it fails.
  hal_status watch(const backend::TelemetryDevice& device, std::unique_ptr<backend::HealthWatch>& out) override {
    out.reset();
    std::size_t index = 0;
    if (hal_status status = find(device, index); status != HAL_OK) return status;
    const SmiResult<std::uint64_t> id = events_->subscribe(index);
    if (id.value) {
      out = std::make_unique<SmiHealthWatch>(events_, *id.value);
      return succeed();
    }
    if (id.problem == SmiProblem::not_supported) return succeed();
    return fail(id.problem == SmiProblem::no_permission ? HAL_ERROR_UNSUPPORTED : HAL_ERROR_INTERNAL,
                "registering for AMD SMI events of " + device.id + " failed: " + id.detail);
  }

 private:
  hal_status find(const backend::TelemetryDevice& device, std::size_t& index) const {
    const std::vector<std::string>& listed = library_->device_pci_bus_ids();
    const auto found = std::find(listed.begin(), listed.end(), device.pci_bus_id);
    if (!device.pci_bus_id.empty() && found != listed.end()) {
      index = static_cast<std::size_t>(found - listed.begin());
      return HAL_OK;
    }
    std::string known;
    for (const std::string& id : listed) known += (known.empty() ? "" : ", ") + id;
    return fail(HAL_ERROR_NOT_PRESENT,
                device.id + " (PCI " + (device.pci_bus_id.empty() ? "address unknown" : device.pci_bus_id) +
                    ") is not among the GPUs " + library_->description() + " reports (" +
                    (known.empty() ? "none" : known) + "), so its telemetry cannot be read");
  }

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

  std::shared_ptr<shims::AmdGpuManagement> library_;
  std::shared_ptr<SmiEventDispatcher> events_;
};

}  // namespace

backend::TelemetryDevice RocmVendor::telemetry_device(const Context& context, std::uint32_t device) {
  const RocmDevice& rocm_device = *context.devices[device];
  return {context.device_id(device), rocm_device.pci_bus_id, rocm_device.uuid};
}

std::unique_ptr<backend::LazyTelemetry> make_telemetry(const shims::ConfiguredPath& amd_smi,
                                                       const shims::ConfiguredPath& rocm_smi) {
  return std::make_unique<backend::LazyTelemetry>([amd_smi, rocm_smi] {
    shims::LoadResult<shims::AmdGpuManagement> opening = shims::open_amd_gpu_management(amd_smi, rocm_smi);
    backend::TelemetryOpening result;
    result.error = std::move(opening.message);
    result.library_missing = opening.library_missing;
    if (opening.library) result.source = std::make_unique<AmdSmiTelemetry>(std::move(opening.library));
    return result;
  });
}

}  // namespace hal::rocm
