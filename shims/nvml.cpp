#include "nvml.hpp"

#include <deque>

namespace hal::shims {
namespace {

// Symbol names built from the prefix, kept alive while they are resolved.
class PrefixedNames {
 public:
  explicit PrefixedNames(std::string prefix) : prefix_(std::move(prefix)) {}
  // Each suffix is an alternative, in order: {"Init_v2", "Init"}.
  template <typename Function>
  SymbolSpec operator()(Function*& field, std::initializer_list<const char*> suffixes, bool required) {
    SymbolSpec spec = symbol(field, {}, required);
    for (const char* suffix : suffixes) spec.names.push_back(names_.emplace_back(prefix_ + suffix).c_str());
    return spec;
  }

 private:
  std::string prefix_;
  std::deque<std::string> names_;  // a deque: c_str() pointers stay valid as names are added
};

std::vector<SymbolSpec> nvml_symbols(NvmlApi& api, PrefixedNames& name) {
  return {
      name(api.Init, {"Init_v2", "Init"}, true),
      name(api.Shutdown, {"Shutdown"}, true),
      name(api.ErrorString, {"ErrorString"}, true),
      name(api.DeviceGetCount, {"DeviceGetCount_v2", "DeviceGetCount"}, true),
      name(api.DeviceGetHandleByIndex, {"DeviceGetHandleByIndex_v2", "DeviceGetHandleByIndex"}, true),
      name(api.DeviceGetPciInfo, {"DeviceGetPciInfo_v3", "DeviceGetPciInfo_v2"}, true),
      name(api.SystemGetDriverVersion, {"SystemGetDriverVersion"}, false),
      name(api.DeviceGetUUID, {"DeviceGetUUID"}, false),
      name(api.DeviceGetMigMode, {"DeviceGetMigMode"}, false),
      name(api.DeviceGetTemperature, {"DeviceGetTemperature"}, false),
      name(api.DeviceGetTemperatureThreshold, {"DeviceGetTemperatureThreshold"}, false),
      name(api.DeviceGetFieldValues, {"DeviceGetFieldValues"}, false),
      name(api.DeviceGetPowerUsage, {"DeviceGetPowerUsage"}, false),
      name(api.DeviceGetEnforcedPowerLimit, {"DeviceGetEnforcedPowerLimit"}, false),
      name(api.DeviceGetTotalEnergyConsumption, {"DeviceGetTotalEnergyConsumption"}, false),
      name(api.DeviceGetClockInfo, {"DeviceGetClockInfo"}, false),
      name(api.DeviceGetMaxClockInfo, {"DeviceGetMaxClockInfo"}, false),
      name(api.DeviceGetUtilizationRates, {"DeviceGetUtilizationRates"}, false),
      // Renamed in NVML 12.2; the old name stays exported, and is all older drivers have.
      name(api.DeviceGetCurrentClocksEventReasons,
           {"DeviceGetCurrentClocksEventReasons", "DeviceGetCurrentClocksThrottleReasons"}, false),
      name(api.DeviceGetEccMode, {"DeviceGetEccMode"}, false),
      name(api.DeviceGetTotalEccErrors, {"DeviceGetTotalEccErrors"}, false),
      name(api.DeviceGetRetiredPages, {"DeviceGetRetiredPages"}, false),
      name(api.DeviceGetRetiredPagesPendingStatus, {"DeviceGetRetiredPagesPendingStatus"}, false),
      name(api.DeviceGetRemappedRows, {"DeviceGetRemappedRows"}, false),
      name(api.DeviceGetCurrPcieLinkGeneration, {"DeviceGetCurrPcieLinkGeneration"}, false),
      name(api.DeviceGetMaxPcieLinkGeneration, {"DeviceGetMaxPcieLinkGeneration"}, false),
      name(api.DeviceGetCurrPcieLinkWidth, {"DeviceGetCurrPcieLinkWidth"}, false),
      name(api.DeviceGetMaxPcieLinkWidth, {"DeviceGetMaxPcieLinkWidth"}, false),
      name(api.DeviceGetPcieReplayCounter, {"DeviceGetPcieReplayCounter"}, false),
      name(api.DeviceGetNvLinkState, {"DeviceGetNvLinkState"}, false),
      name(api.DeviceGetNvLinkErrorCounter, {"DeviceGetNvLinkErrorCounter"}, false),
      name(api.EventSetCreate, {"EventSetCreate"}, false),
      name(api.DeviceRegisterEvents, {"DeviceRegisterEvents"}, false),
      name(api.DeviceGetSupportedEventTypes, {"DeviceGetSupportedEventTypes"}, false),
      // _v2 only changed the timeout's meaning for MIG; the data layout is the same.
      name(api.EventSetWait, {"EventSetWait_v2", "EventSetWait"}, false),
      name(api.EventSetFree, {"EventSetFree"}, false),
  };
}

}  // namespace

LibraryRequest Nvml::nvidia_request(const std::string& configured_path) {
  LibraryRequest request;
  request.display_name = "NVML (libnvidia-ml.so.1)";
  request.sonames = {"libnvidia-ml.so.1"};
  request.environment_variable = "HAL_NVML";
  request.configured_path = configured_path;
  // The driver installs it; a toolkit's stubs/libnvidia-ml.so only links.
  request.search_toolkit = false;
  request.search_python_packages = false;
  request.never_unload = true;  // it starts threads of its own
  return request;
}

LibraryRequest Nvml::hgml_request(const std::string& configured_path, const std::string& sdk_root) {
  LibraryRequest request;
  request.display_name = "HGML (libhgml.so), the PPU SDK's management library";
  request.sonames = {"libhgml.so", "libhgml.so.1"};
  request.environment_variable = "HAL_HGML";
  request.configured_path = configured_path;
  request.search_toolkit = false;
  request.search_python_packages = false;
  if (!sdk_root.empty()) {
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib64");
    request.install_directories.emplace_back("PPU SDK", sdk_root + "/lib");
  }
  request.never_unload = true;
  return request;
}

Nvml::LoadResult Nvml::load(const LibraryRequest& request, const std::string& prefix) {
  auto nvml = std::unique_ptr<Nvml>(new Nvml());
  PrefixedNames names(prefix);
  VendorLibraryLoad load = open_vendor_library(request, nvml_symbols(nvml->api_, names));
  if (!load.ok()) return {nullptr, load.error, load.library_missing};
  nvml->library_ = std::move(load.library);
  nvml->prefix_ = prefix;
  if (const NvmlReturn result = nvml->api_.Init(); result != nvml_success) {
    std::string message = request.display_name + " at " + nvml->library_.path() + ": " + prefix + "Init failed: " +
                          nvml->error_text(result) + " (is the driver loaded?)";
    nvml->api_.Shutdown = nullptr;  // nothing to shut down
    return {nullptr, std::move(message), false};
  }
  return {std::move(nvml), {}, false};
}

Nvml::~Nvml() {
  if (api_.Shutdown != nullptr) api_.Shutdown();
}

std::string Nvml::describe() const {
  char version[96] = {};
  if (api_.SystemGetDriverVersion != nullptr &&
      api_.SystemGetDriverVersion(version, sizeof(version)) == nvml_success && version[0] != '\0')
    return prefix_ + " " + version;
  return prefix_;
}

std::string Nvml::error_text(NvmlReturn result) const {
  const char* text = api_.ErrorString != nullptr ? api_.ErrorString(result) : nullptr;
  return (text != nullptr ? std::string(text) : std::string("error")) + " (" + std::to_string(result) + ")";
}

}  // namespace hal::shims
