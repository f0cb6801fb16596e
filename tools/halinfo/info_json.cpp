#include "info_json.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "hal/collectives.hpp"
#include "telemetry_view.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace halinfo {

nlohmann::json backend_to_json(const hal::BackendReport& report) {
  return {{"name", report.name},
          {"state", std::string(hal::to_string(report.state))},
          {"version", report.version},
          {"abi_version", report.abi_version},
          {"path", report.path},
          {"reason", report.reason},
          {"device_count", report.device_count},
          {"paths_tried", report.paths_tried}};
}

nlohmann::json device_to_json(const hal::Device& device) {
  const hal::DeviceInfo& info = device.info();
  nlohmann::json versions = nlohmann::json::object();
  for (const auto& [axis, value] : info.version_axes) versions[axis] = value;
  nlohmann::json capabilities = nlohmann::json::object();
  for (const auto& capability : info.capabilities) {
    nlohmann::json value;
    std::visit([&](const auto& typed) { value = typed; }, capability.value);
    capabilities[capability.key] = {{"value", value}, {"note", capability.note}};
  }
  nlohmann::json hazards = nlohmann::json::array();
  for (const auto& hazard : hal::environment_hazards(device))
    hazards.push_back({{"quirk", hazard.quirk_id}, {"message", hazard.message}});
  nlohmann::json collectives = nullptr;
  if (device.supports("collectives")) {
    try {
      const hal::CollectivesEngineChoice choice = hal::collectives_engine(device);
      collectives = {{"engine", choice.engine.empty() ? nlohmann::json(nullptr) : nlohmann::json(choice.engine)},
                     {"reason", choice.reason},
                     {"requested", choice.requested},
                     {"requested_by", choice.requested_by},
                     {"engines", choice.engines}};
    } catch (const hal::Error& error) {
      collectives = {{"error", error.what()}};
    }
  }
  return {{"id", device.id()},
          {"backend", info.backend},
          {"index", info.index},
          {"type", std::string(hal::to_string(info.type))},
          {"name", info.name},
          {"vendor", info.vendor},
          {"uuid", info.uuid},
          {"pci_bus_id", info.pci_bus_id},
          {"numa_node", info.numa_node},
          {"total_memory_bytes", info.total_memory},
          {"free_memory_bytes", device.free_memory()},
          {"compute_units", info.compute_units},
          {"clock_mhz", info.clock_mhz},
          {"memory_clock_mhz", info.memory_clock_mhz},
          {"versions", versions},
          {"capabilities", capabilities},
          {"hazards", hazards},
          {"collectives", collectives},
          {"telemetry", telemetry_to_json(device)}};
}

nlohmann::json info_document(const hal::Runtime& runtime, const std::vector<hal::Device>& devices) {
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& report : runtime.backends()) backends.push_back(backend_to_json(report));
  nlohmann::json device_list = nlohmann::json::array();
  for (const auto& device : devices) device_list.push_back(device_to_json(device));
  const auto& source = runtime.config().source;
  return {{"schema", "hal.info/2"},
          {"hal_version", HAL_VERSION_STRING},
          {"config_file", source ? nlohmann::json(source->string()) : nlohmann::json(nullptr)},
          {"search_directories", runtime.search_directories()},
          {"backends", backends},
          {"devices", device_list}};
}

}  // namespace halinfo
