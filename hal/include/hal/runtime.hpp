// Runtime: finds backend plugins, loads them, and owns the devices they offer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/config.hpp"
#include "hal/device.hpp"
#include "hal/settings.hpp"

namespace hal {

// loaded: usable. unavailable: its vendor library or plugin is missing (a
// normal state on machines without that hardware). error: it is there but
// broken. disabled: filtered out by HAL_BACKENDS or the config before opening.
enum class BackendState { loaded, unavailable, error, disabled };
std::string_view to_string(BackendState state);

struct BackendReport {
  std::string name;
  BackendState state = BackendState::unavailable;
  std::string path;     // the plugin that was used, if any
  std::string reason;   // why it is not loaded; what to do next
  // Every plugin path tried and what happened there, in search order.
  std::vector<std::string> paths_tried;
  std::string version;  // the backend's own version
  std::uint32_t abi_version = 0;
  std::uint32_t device_count = 0;
};

struct RuntimeOptions {
  // When set, used instead of loading the config file from the search path.
  std::optional<Config> config;
  // Backends to load ("host", "cuda") or to skip ("!rocm"), as HAL_BACKENDS
  // writes them; when set, outranks HAL_BACKENDS and the config's
  // backends.filter for this runtime.
  std::vector<std::string> backends;
};

class Runtime {
 public:
  // Never throws because a backend is missing or broken: that is reported in
  // backends(). Throws for a bad config file or bad HAL_* variables. Reads
  // the environment once, here (Settings); later changes to it do not
  // reach this runtime.
  static Runtime create(const RuntimeOptions& options = {});

  const std::vector<BackendReport>& backends() const;
  const BackendReport* find_backend(std::string_view name) const;
  const std::vector<Device>& devices() const;
  // By id ("host:0"), UUID or PCI bus id; throws invalid_argument listing
  // the ids there are.
  Device device(std::string_view id) const;
  std::optional<Device> find_device(std::string_view id) const;
  // The config file as read (or RuntimeOptions::config).
  const Config& config() const;
  // What is in effect: the config with the environment applied, each value
  // with its source; resolved once, here.
  const Settings& settings() const;
  // Directories searched for plugins, in order.
  const std::vector<std::string>& search_directories() const;

  struct State;

 private:
  explicit Runtime(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// The names of the backends hal knows how to find: host, cuda, ppu, rocm.
const std::vector<std::string>& known_backend_names();

}  // namespace hal
