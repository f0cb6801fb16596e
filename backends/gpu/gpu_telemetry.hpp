// A GPU backend's telemetry: a vendor management library (NVML, HGML, AMD
// SMI) opened on the first snapshot rather than at start-up, so discovery and
// halinfo's summary never pay for it, and devices matched to the vendor
// library's by PCI bus id (its index order need not be the runtime's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hal/backend_abi.h"
#include "last_error.hpp"

namespace hal::backend {

// The device a backend asks about, as its runtime knows it.
struct TelemetryDevice {
  std::string id;          // "cuda:0", for messages
  std::string pci_bus_id;  // normalised, "0000:3b:00.0"
  std::string uuid;        // the runtime's, may be empty
};

// A registration with the vendor's event API for one device.
class HealthWatch {
 public:
  virtual ~HealthWatch() = default;
  // HAL_OK with out filled, or HAL_ERROR_TIMEOUT when nothing came in timeout_ms.
  virtual hal_status wait(std::int64_t timeout_ms, hal_health_event_v1& out) = 0;
};

// One link of a device to another (NVLink).
struct DeviceLinkInfo {
  hal_device_link_kind kind = HAL_DEVICE_LINK_NVLINK;
  bool active = false;
  std::string peer_pci_bus_id;  // normalised; empty when the library does not say
};

// One opened vendor management library.
class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  // Fills the device's fields and out.source. A field the library cannot
  // read gets its reason; HAL_OK unless the device itself is not found.
  virtual hal_status read(const TelemetryDevice& device, hal_telemetry_snapshot_v1& out) = 0;
  // The device's event stream; out stays null when the library has none.
  virtual hal_status watch(const TelemetryDevice& device, std::unique_ptr<HealthWatch>& out) {
    (void)device;
    out.reset();
    return HAL_OK;
  }
  // The device's links to other devices; unsupported, saying why, where the
  // library cannot tell them.
  virtual hal_status links(const TelemetryDevice& device, std::vector<DeviceLinkInfo>& out) {
    (void)device;
    (void)out;
    return fail(HAL_ERROR_UNSUPPORTED, "this backend's management library does not report links between devices");
  }
};

struct TelemetryOpening {
  std::unique_ptr<TelemetrySource> source;  // null when it could not be opened
  std::string error;                        // why not, every path tried included
  bool library_missing = true;              // false: found but unusable (too old, init failed)
};

// Opens the source on first use, once, and says why every field is missing
// when it cannot: a missing vendor library is a reported state.
class LazyTelemetry {
 public:
  explicit LazyTelemetry(std::function<TelemetryOpening()> open) : open_(std::move(open)) {}
  // Starts the ABI's telemetry call on this thread and fills out.
  hal_status snapshot(const TelemetryDevice& device, hal_telemetry_snapshot_v1& out);
  // *out is null (with HAL_OK) where the device has no event stream.
  hal_status watch_create(const TelemetryDevice& device, hal_health_watch** out);
  // The topology sub-table's device_links.
  hal_status links(const TelemetryDevice& device, hal_device_link_v1* out, std::uint32_t capacity,
                   std::uint32_t* count);

 private:
  TelemetrySource* source();
  std::function<TelemetryOpening()> open_;
  std::once_flag opened_;
  TelemetryOpening opening_;
  std::mutex mutex_;  // vendor libraries are called one thread at a time
};

// Every field of out gets why (the snapshot of a device whose library is missing).
void mark_all_unavailable(hal_telemetry_snapshot_v1& out, hal_telemetry_availability why, const std::string& detail);

// The sub-table's watch entry points over HealthWatch.
hal_status health_watch_wait(hal_health_watch* watch, std::int64_t timeout_ms, hal_health_event_v1* out);
void health_watch_destroy(hal_health_watch* watch);

// A GPU backend's telemetry and topology sub-tables over its Vendor
// (gpu_vendor.hpp): the context's LazyTelemetry, asked about the device
// V::telemetry_device names.
template <typename V>
struct GpuTelemetryTable {
  static hal_status snapshot(hal_backend_context* backend, std::uint32_t device, hal_telemetry_snapshot_v1* out) {
    if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot needs out");
    const auto& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    return context.telemetry->snapshot(V::telemetry_device(context, device), *out);
  }
  static hal_status watch_create(hal_backend_context* backend, std::uint32_t device, hal_health_watch** out) {
    if (backend == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "watch_create needs a backend");
    const auto& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    return context.telemetry->watch_create(V::telemetry_device(context, device), out);
  }
  static constexpr hal_telemetry_v1 table = {sizeof(hal_telemetry_v1), snapshot, watch_create, health_watch_wait,
                                             health_watch_destroy};
  // The topology sub-table: links between devices, from the same library.
  static hal_status device_links(hal_backend_context* backend, std::uint32_t device, hal_device_link_v1* out,
                                 std::uint32_t capacity, std::uint32_t* count) {
    if (backend == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_links needs count");
    const auto& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    return context.telemetry->links(V::telemetry_device(context, device), out, capacity, count);
  }
  static constexpr hal_topology_v1 topology = {sizeof(hal_topology_v1), device_links};
};

}  // namespace hal::backend
