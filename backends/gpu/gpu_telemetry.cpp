#include "gpu_telemetry.hpp"

#include <cstddef>
#include <cstdio>
#include <exception>

#include "last_error.hpp"
#include "telemetry_writer.hpp"

struct hal_health_watch {
  std::unique_ptr<hal::backend::HealthWatch> watch;
};

namespace hal::backend {
namespace {

// The readings are the snapshot's members from core_temperature to the end.
constexpr std::size_t first_reading = offsetof(hal_telemetry_snapshot_v1, core_temperature);
constexpr std::size_t reading_count =
    (sizeof(hal_telemetry_snapshot_v1) - first_reading) / sizeof(hal_telemetry_reading_v1);
static_assert(first_reading + reading_count * sizeof(hal_telemetry_reading_v1) == sizeof(hal_telemetry_snapshot_v1),
              "hal_telemetry_snapshot_v1 must end with its readings");

}  // namespace

void mark_all_unavailable(hal_telemetry_snapshot_v1& out, hal_telemetry_availability why, const std::string& detail) {
  auto* readings = reinterpret_cast<hal_telemetry_reading_v1*>(reinterpret_cast<char*>(&out) + first_reading);
  const char* kept = detail.empty() ? nullptr : keep_telemetry_text(detail);
  for (std::size_t index = 0; index < reading_count; ++index) {
    readings[index] = {};
    readings[index].availability = why;
    readings[index].detail = kept;
  }
}

TelemetrySource* LazyTelemetry::source() {
  std::call_once(opened_, [&] {
    try {
      opening_ = open_();
    } catch (const std::exception& error) {
      opening_ = {nullptr, std::string("opening the telemetry library failed: ") + error.what(), false};
    }
  });
  return opening_.source.get();
}

hal_status LazyTelemetry::snapshot(const TelemetryDevice& device, hal_telemetry_snapshot_v1& out) {
  if (out.struct_size < sizeof(hal_telemetry_snapshot_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot struct_size " + std::to_string(out.struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  out.struct_size = sizeof(hal_telemetry_snapshot_v1);
  begin_telemetry_call();
  try {
    std::lock_guard lock(mutex_);
    TelemetrySource* opened = source();
    if (opened == nullptr) {
      mark_all_unavailable(out, opening_.library_missing ? HAL_TELEMETRY_LIBRARY_MISSING : HAL_TELEMETRY_READ_FAILED,
                           opening_.error);
      out.source = keep_telemetry_text("none: " + opening_.error);
      return succeed();
    }
    return opened->read(device, out);
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, "reading telemetry of " + device.id + " failed: " + error.what());
  }
}

hal_status LazyTelemetry::watch_create(const TelemetryDevice& device, hal_health_watch** out) {
  if (out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "watch_create needs out");
  *out = nullptr;
  begin_telemetry_call();
  try {
    std::lock_guard lock(mutex_);
    TelemetrySource* opened = source();
    if (opened == nullptr) return succeed();  // snapshots say why; there are no events to wait for
    std::unique_ptr<HealthWatch> watch;
    if (hal_status status = opened->watch(device, watch); status != HAL_OK) return status;
    if (watch != nullptr) *out = new hal_health_watch{std::move(watch)};
    return succeed();
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, "registering for health events of " + device.id + " failed: " + error.what());
  }
}

hal_status LazyTelemetry::links(const TelemetryDevice& device, hal_device_link_v1* out, std::uint32_t capacity,
                                std::uint32_t* count) {
  if (capacity > 0 && out == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_links needs out for its capacity");
  for (std::uint32_t i = 0; i < capacity; ++i)
    if (out[i].struct_size < sizeof(hal_device_link_v1))
      return fail(HAL_ERROR_INVALID_ARGUMENT, "device_links: entry " + std::to_string(i) + "'s struct_size " +
                                                  std::to_string(out[i].struct_size) + " is below the v1 struct");
  begin_telemetry_call();
  try {
    std::lock_guard lock(mutex_);
    TelemetrySource* opened = source();
    if (opened == nullptr)
      return fail(HAL_ERROR_UNSUPPORTED, "the links of " + device.id + " are unknown: " + opening_.error);
    std::vector<DeviceLinkInfo> links;
    if (hal_status status = opened->links(device, links); status != HAL_OK) return status;
    *count = static_cast<std::uint32_t>(links.size());
    for (std::uint32_t i = 0; i < capacity && i < links.size(); ++i) {
      out[i].kind = links[i].kind;
      out[i].active = links[i].active ? 1 : 0;
      std::snprintf(out[i].peer_pci_bus_id, sizeof(out[i].peer_pci_bus_id), "%s", links[i].peer_pci_bus_id.c_str());
    }
    return succeed();
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, "reading the links of " + device.id + " failed: " + error.what());
  }
}

hal_status health_watch_wait(hal_health_watch* watch, std::int64_t timeout_ms, hal_health_event_v1* out) {
  if (watch == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "watch_wait needs a watch and out");
  if (timeout_ms < 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "watch_wait timeout " + std::to_string(timeout_ms) + " ms must be >= 0");
  begin_telemetry_call();
  try {
    return watch->watch->wait(timeout_ms, *out);
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("waiting for health events failed: ") + error.what());
  }
}

void health_watch_destroy(hal_health_watch* watch) { delete watch; }

}  // namespace hal::backend
