#include "hal/runtime.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <type_traits>
#include <variant>

#include <boost/dll/runtime_symbol_info.hpp>

#include "abi.hpp"
#include "environment.hpp"
#include "hal/capabilities.hpp"
#include "hal/topology.hpp"
#include "loader.hpp"
#include "text.hpp"

namespace hal {

std::string_view to_string(BackendState state) {
  switch (state) {
    case BackendState::loaded: return "loaded";
    case BackendState::unavailable: return "unavailable";
    case BackendState::error: return "error";
    case BackendState::disabled: return "disabled";
  }
  return "unknown";
}

const std::vector<std::string>& known_backend_names() {
  static const std::vector<std::string> names = {"host", "cuda", "ppu", "rocm"};
  return names;
}

struct Runtime::State {
  Config config;
  Settings settings;  // config with the environment applied, resolved once
  std::vector<BackendReport> reports;
  std::vector<Device> devices;
  std::vector<std::string> search_directories;
};

namespace {

// The items of a list, blanks around them trimmed; empty ones ("host,,cuda",
// a trailing ':') dropped.
std::vector<std::string> list_items(std::string_view text, char separator) {
  std::vector<std::string> items;
  for (const std::string& part : detail::split(text, separator))
    if (const std::string_view item = detail::trim(part); !item.empty()) items.emplace_back(item);
  return items;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string joined;
  for (const auto& item : items) {
    if (!joined.empty()) joined += separator;
    joined += item;
  }
  return joined;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

using abi::environment;

// Which backends may be opened: "host,cuda" keeps those, "!rocm" drops those.
struct BackendFilter {
  std::string source;  // "HAL_BACKENDS=..." or "config backends.filter (file:line)"
  std::set<std::string> names;
  bool exclude = false;
  bool active = false;

  bool allows(const std::string& name) const { return !active || (names.count(name) > 0) != exclude; }

  // items are already validated (by Config or parse_backend_filter).
  static BackendFilter from_items(const std::vector<std::string>& items, std::string source) {
    BackendFilter filter;
    filter.source = std::move(source);
    filter.active = !items.empty();
    for (const auto& item : items) {
      filter.exclude = item.starts_with('!');
      filter.names.insert(filter.exclude ? item.substr(1) : item);
    }
    return filter;
  }
};

struct Candidate {
  std::string name;
  std::filesystem::path path;
  std::vector<std::string> paths_tried;
};

std::string libhal_directory() {
  try {
    return boost::dll::this_line_location().parent_path().string();
  } catch (const std::exception&) {
    return {};
  }
}

// HAL_BACKEND_PATH's directories are already first in backends.search_paths.
std::vector<std::string> plugin_directories(const Config& settings) {
  std::vector<std::string> directories;
  for (const auto& directory : settings.backends_search_paths) directories.push_back(directory.string());
  if (const std::string own = libhal_directory(); !own.empty()) directories.push_back(own + "/hal/backends");
  for (const char* system : {"/usr/local/lib/hal/backends", "/usr/lib/hal/backends",
                             "/usr/lib/x86_64-linux-gnu/hal/backends", "/usr/lib/aarch64-linux-gnu/hal/backends"})
    directories.push_back(system);
  // The same directory twice would only repeat work and clutter reports.
  std::vector<std::string> unique;
  for (auto& directory : directories)
    if (std::find(unique.begin(), unique.end(), directory) == unique.end()) unique.push_back(directory);
  return unique;
}

// The first directory that has a backend's plugin wins; later copies are
// noted in paths_tried so a stale install is visible.
std::vector<Candidate> scan_directories(const std::vector<std::string>& directories) {
  std::vector<Candidate> candidates;
  for (const auto& directory : directories) {
    std::error_code error;
    std::vector<std::filesystem::path> plugins;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (!detail::backend_name_from_filename(entry.path()).empty()) plugins.push_back(entry.path());
    }
    std::sort(plugins.begin(), plugins.end());
    for (const auto& plugin : plugins) {
      const std::string name = detail::backend_name_from_filename(plugin);
      auto existing = std::find_if(candidates.begin(), candidates.end(),
                                   [&](const Candidate& candidate) { return candidate.name == name; });
      if (existing == candidates.end()) {
        candidates.push_back({name, plugin, {}});
      } else {
        existing->paths_tried.push_back(plugin.string() + ": not used, shadowed by " + existing->path.string());
      }
    }
  }
  return candidates;
}

std::vector<Candidate> forced_candidates(const std::vector<std::string>& paths) {
  std::vector<Candidate> candidates;
  for (const auto& path : paths) {
    std::string name = detail::backend_name_from_filename(path);
    if (name.empty()) name = std::filesystem::path(path).stem().string();
    candidates.push_back({name, path, {}});
  }
  return candidates;
}

// Known backends first, in a fixed order, then others by name.
std::pair<std::size_t, std::string> backend_rank(const std::string& name) {
  const auto& known = known_backend_names();
  return {static_cast<std::size_t>(std::find(known.begin(), known.end(), name) - known.begin()), name};
}

void order_candidates(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return backend_rank(a.name) < backend_rank(b.name);
  });
}

DeviceInfo convert_device_info(const std::string& backend, std::uint32_t index, const hal_device_info_v1& raw) {
  auto text = [](const char* value) { return value != nullptr ? std::string(value) : std::string(); };
  DeviceInfo info;
  info.backend = backend;
  info.index = index;
  info.type = detail::from_abi(raw.type);
  info.name = text(raw.name);
  info.vendor = text(raw.vendor);
  info.uuid = text(raw.uuid);
  info.pci_bus_id = text(raw.pci_bus_id);
  info.numa_node = raw.numa_node;
  info.total_memory = raw.total_memory;
  info.free_memory = raw.free_memory;
  info.compute_units = raw.compute_units;
  info.clock_mhz = raw.clock_mhz;
  info.memory_clock_mhz = raw.memory_clock_mhz;
  for (std::uint32_t i = 0; i < raw.version_axis_count; ++i)
    info.version_axes.emplace_back(text(raw.version_axes[i].key), text(raw.version_axes[i].value));
  for (std::uint32_t i = 0; i < raw.capability_count; ++i) {
    const hal_capability_v1& source = raw.capabilities[i];
    Capability capability;
    capability.key = text(source.key);
    capability.note = text(source.note);
    switch (source.type) {
      case HAL_CAPABILITY_BOOL: capability.value = source.int_value != 0; break;
      case HAL_CAPABILITY_INT: capability.value = source.int_value; break;
      case HAL_CAPABILITY_FLOAT: capability.value = source.float_value; break;
      case HAL_CAPABILITY_STRING: capability.value = text(source.string_value); break;
    }
    info.capabilities.push_back(std::move(capability));
  }
  if (HAL_DEVICE_INFO_HAS(&raw, supersedes) && raw.supersedes != nullptr)
    info.supersedes = list_items(raw.supersedes, ',');
  return info;
}

// Reads the devices of a loaded backend; a failure marks the backend broken.
bool enumerate_devices(const std::shared_ptr<detail::LoadedBackend>& backend, BackendReport& report,
                       std::vector<Device>& devices) {
  std::uint32_t count = 0;
  hal_status code = backend->table->device_count(backend->context, &count);
  if (code != HAL_OK) {
    report.state = BackendState::error;
    report.reason = backend->error(code, "counting devices").message();
    return false;
  }
  std::vector<Device> found;
  for (std::uint32_t index = 0; index < count; ++index) {
    hal_device_info_v1 raw{};
    raw.struct_size = sizeof(raw);
    code = backend->table->device_info(backend->context, index, &raw);
    if (code != HAL_OK) {
      report.state = BackendState::error;
      report.reason = backend->error(code, "reading device " + std::to_string(index)).message();
      return false;
    }
    found.push_back(detail::Access::device(backend, index, convert_device_info(report.name, index, raw)));
  }
  report.device_count = count;
  backend->attention_device_slots = std::make_unique<std::atomic<const detail::AttentionDeviceFacts*>[]>(count);
  devices.insert(devices.end(), found.begin(), found.end());
  return true;
}

// "00000000:E1:00.0" and "0000:e1:00.0" name the same PCI function; an id
// that is not a PCI bus id stays as it is.
std::string comparable_pci_bus_id(const std::string& id) { return normalize_pci_bus_id(id).value_or(id); }

// One device reached through two backends (a PPU through ppu and cuda) is
// listed once, by the backend that declares it supersedes the other: the
// same PCI bus id, or the same UUID when either has no bus id.
void drop_superseded_devices(std::vector<Device>& devices, std::vector<BackendReport>& reports) {
  const auto same_device = [](const DeviceInfo& a, const DeviceInfo& b) {
    if (!a.pci_bus_id.empty() && !b.pci_bus_id.empty())
      return comparable_pci_bus_id(a.pci_bus_id) == comparable_pci_bus_id(b.pci_bus_id);
    return !a.uuid.empty() && a.uuid == b.uuid;
  };
  const auto superseded = [&](const Device& device) {
    const DeviceInfo& info = device.info();
    for (const Device& other : devices) {
      const auto& names = other.info().supersedes;
      if (std::find(names.begin(), names.end(), info.backend) == names.end() || !same_device(info, other.info()))
        continue;
      detail::log_message(HAL_LOG_INFO, device.id() + " (" + info.name + ", " + info.pci_bus_id + ") is " +
                                            other.id() + ", whose backend supersedes " + info.backend +
                                            "; it is listed once, as " + other.id());
      return true;
    }
    return false;
  };
  std::vector<Device> kept;
  for (const Device& device : devices) {
    if (!superseded(device)) {
      kept.push_back(device);
      continue;
    }
    for (auto& report : reports)
      if (report.name == device.info().backend && report.device_count > 0) --report.device_count;
  }
  devices = std::move(kept);
}

BackendReport load_candidate(const Candidate& candidate, const std::shared_ptr<const Settings>& settings,
                             std::vector<Device>& devices) {
  BackendReport report;
  report.name = candidate.name;
  report.paths_tried = candidate.paths_tried;
  std::vector<detail::PluginOption> options;
  const Config& config = settings->values();
  if (auto found = config.backend_options.find(candidate.name); found != config.backend_options.end())
    for (const auto& [key, value] : found->second) {
      const Setting& setting = settings->at("backend." + candidate.name + "." + key);
      options.push_back(
          {key, value, setting.from(SettingSource::Kind::environment) ? setting.environment_variable : "config"});
    }
  detail::PluginLoad load = detail::load_plugin(candidate.path, options);
  report.paths_tried.insert(report.paths_tried.begin(),
                            candidate.path.string() + ": " +
                                (load.state == BackendState::loaded ? std::string("loaded") : load.reason));
  report.state = load.state;
  report.path = candidate.path.string();
  if (load.state != BackendState::loaded) {
    report.reason = load.reason;
    return report;
  }
  load.backend->settings = settings;
  report.version = load.backend->table->version != nullptr ? load.backend->table->version : "";
  report.abi_version = load.backend->table->abi_version;
  if (load.backend->name != candidate.name)
    detail::log_message(HAL_LOG_WARNING, "plugin " + report.path + " calls itself '" + load.backend->name +
                                             "'; it is listed as '" + candidate.name + "'");
  enumerate_devices(load.backend, report, devices);
  return report;
}

}  // namespace

Runtime Runtime::create(const RuntimeOptions& options) {
  auto state = std::make_shared<State>();
  state->config = options.config ? *options.config : Config::load_default();
  for (const auto& warning : state->config.warnings) detail::log_message(HAL_LOG_WARNING, warning.to_string());
  state->settings = Settings::resolve(state->config);
  const auto settings = std::make_shared<const Settings>(state->settings);
  const Config& values = settings->values();
  if (!settings->at("log.level").from(SettingSource::Kind::built_in))
    detail::set_log_level(detail::parse_log_level(values.log_level, "log.level"));

  const BackendFilter filter =
      options.backends.empty()
          ? BackendFilter::from_items(values.backends_filter, settings->at("backends.filter").origin())
          : BackendFilter::from_items(parse_backend_filter(join(options.backends, ","), "RuntimeOptions::backends"),
                                      "RuntimeOptions::backends");

  std::vector<Candidate> candidates;
  if (const char* forced = environment("HAL_BACKENDS_FORCE")) {
    candidates = forced_candidates(list_items(forced, ':'));
    state->search_directories = {};
  } else {
    state->search_directories = plugin_directories(values);
    candidates = scan_directories(state->search_directories);
    // Known backends that have no plugin anywhere are reported, not hidden.
    for (const auto& name : known_backend_names()) {
      if (std::none_of(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.name == name; })) {
        BackendReport report;
        report.name = name;
        report.state = filter.allows(name) ? BackendState::unavailable : BackendState::disabled;
        report.reason = report.state == BackendState::disabled
                            ? "excluded by " + filter.source
                            : "plugin libhal_backend_" + name +
                                  ".so was not found; this build may not include it (CMake option HAL_WITH_" +
                                  upper(name) + ") or set HAL_BACKEND_PATH to its directory";
        for (const auto& directory : state->search_directories)
          report.paths_tried.push_back(directory + "/libhal_backend_" + name + ".so: not found");
        state->reports.push_back(std::move(report));
      }
    }
  }
  if (filter.active) {
    std::vector<std::string> unknown;
    for (const auto& name : filter.names) {
      const bool known = std::find(known_backend_names().begin(), known_backend_names().end(), name) !=
                         known_backend_names().end();
      const bool found = std::any_of(candidates.begin(), candidates.end(), [&](auto& c) { return c.name == name; });
      if (!known && !found) unknown.push_back(name);
    }
    if (!unknown.empty())
      throw Error(StatusCode::invalid_argument, filter.source + " names " + join(unknown, ", ") +
                                                    ", which no plugin provides; known backends: " +
                                                    join(known_backend_names(), ", "));
  }

  order_candidates(candidates);
  for (const auto& candidate : candidates) {
    if (!filter.allows(candidate.name)) {
      BackendReport report;
      report.name = candidate.name;
      report.state = BackendState::disabled;
      report.path = candidate.path.string();
      report.reason = "excluded by " + filter.source;
      state->reports.push_back(std::move(report));
      continue;
    }
    state->reports.push_back(load_candidate(candidate, settings, state->devices));
  }
  drop_superseded_devices(state->devices, state->reports);
  // Reports in the same fixed order as loading: known backends first.
  std::stable_sort(state->reports.begin(), state->reports.end(),
                   [](const auto& a, const auto& b) { return backend_rank(a.name) < backend_rank(b.name); });
  // Known-dangerous environment settings are said at start, not after a hang.
  for (const auto& device : state->devices)
    for (const auto& hazard : environment_hazards(device)) detail::log_message(HAL_LOG_WARNING, hazard.message);
  return Runtime(std::move(state));
}

const std::vector<BackendReport>& Runtime::backends() const { return state_->reports; }

const BackendReport* Runtime::find_backend(std::string_view name) const {
  for (const auto& report : state_->reports)
    if (report.name == name) return &report;
  return nullptr;
}

const std::vector<Device>& Runtime::devices() const { return state_->devices; }

std::optional<Device> Runtime::find_device(std::string_view id) const {
  auto lower = [](std::string_view text) {
    std::string result(text);
    std::transform(result.begin(), result.end(), result.begin(), [](unsigned char c) { return std::tolower(c); });
    return result;
  };
  const std::string wanted = lower(id);
  const std::optional<std::string> wanted_bus = normalize_pci_bus_id(id);
  const bool wanted_has_domain = std::count(id.begin(), id.end(), ':') == 2;
  for (const auto& device : state_->devices) {
    const DeviceInfo& info = device.info();
    if (device.id() == id || (!info.uuid.empty() && lower(info.uuid) == wanted)) return device;
    // PCI bus ids in any spelling, with or without the domain: "0000:3b:00.0", "3B:00.0".
    if (info.pci_bus_id.empty() || !wanted_bus) continue;
    const std::string bus = comparable_pci_bus_id(info.pci_bus_id);
    if (bus == *wanted_bus || (!wanted_has_domain && bus.ends_with(wanted_bus->substr(4)))) return device;
  }
  return std::nullopt;
}

Device Runtime::device(std::string_view id) const {
  if (auto device = find_device(id)) return *device;
  std::vector<std::string> ids;
  for (const auto& device : state_->devices) ids.push_back(device.id());
  throw Error(StatusCode::invalid_argument,
              "no device '" + std::string(id) + "'; devices here: " + (ids.empty() ? "none" : join(ids, ", ")) +
                  " (a device is named backend:index, by UUID or by PCI bus id)");
}

const Config& Runtime::config() const { return state_->config; }
const Settings& Runtime::settings() const { return state_->settings; }
const std::vector<std::string>& Runtime::search_directories() const { return state_->search_directories; }

}  // namespace hal
