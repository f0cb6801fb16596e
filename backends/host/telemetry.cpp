// The host backend's telemetry sub-table over telemetry_sources. No vendor
// event API: libhal finds health events by comparing snapshots.
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_backend.hpp"
#include "telemetry_sources.hpp"
#include "telemetry_writer.hpp"

namespace hal::host {
namespace {

hal_status snapshot(hal_backend_context* context, std::uint32_t device, hal_telemetry_snapshot_v1* out) {
  if (context == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot needs out");
  if (device >= context->host.devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range; there are " +
                                                std::to_string(context->host.devices.size()) + " host devices");
  if (out->struct_size < sizeof(hal_telemetry_snapshot_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "telemetry snapshot struct_size " + std::to_string(out->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    backend::begin_telemetry_call();
    const HostDevice& host_device = context->host.devices[device];
    const TelemetryTarget target{host_device.numa_node, host_device.cpus, !context->host.multiple_numa_nodes};
    std::lock_guard lock(context->telemetry_mutex);
    if (context->telemetry == nullptr) {
      context->telemetry = std::make_unique<HostTelemetry>(context->telemetry_root);
      context->telemetry_baselines.resize(context->host.devices.size());
    }
    context->telemetry->read(target, context->telemetry_baselines[device], *out);
    out->struct_size = sizeof(hal_telemetry_snapshot_v1);
    return succeed();
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("reading host telemetry failed: ") + error.what());
  }
}

}  // namespace

const hal_telemetry_v1 telemetry_table = {sizeof(hal_telemetry_v1), snapshot, nullptr, nullptr, nullptr};

}  // namespace hal::host
