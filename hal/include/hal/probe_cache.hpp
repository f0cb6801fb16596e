// Probe cache: capabilities verified on a device by running them, which
// outrank what the backend declares. Written by conformance probes
// (halconform --probe-only), read by the runtime's capability layers so a later
// process picks a fallback without probing again.
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/device.hpp"

namespace hal {

// One verified fact: the capability works on this device (present) or not.
struct ProbeRecord {
  std::string capability;  // "memory.managed", "attention.fused", ...
  bool present = false;
  std::string evidence;    // what the probe saw, in words
  std::string case_id;     // the conformance case that verified it
  std::string timestamp;   // UTC, ISO 8601 ("2025-01-31T12:00:00Z")
};

// Entries are keyed by the device UUID plus every version axis: a driver or
// library update changes the key, so stale verdicts are never used.
class ProbeCache {
 public:
  static constexpr std::string_view schema = "hal.probes/1";

  // $HAL_PROBE_CACHE (a file), else <configured_directory>/probes.json
  // (config key probes.cache_dir), else $XDG_CACHE_HOME/hal/probes.json,
  // else ~/.cache/hal/probes.json.
  static std::filesystem::path default_path(const std::filesystem::path& configured_directory = {});
  // A missing file is an empty cache; an unreadable or malformed one throws
  // hal::Error (invalid_argument) naming the file and what is wrong.
  static ProbeCache load(const std::filesystem::path& path);
  // Like load, but a bad file is reported in *problem and yields an empty
  // cache: the runtime must never fail because a cache file is damaged.
  static ProbeCache load_or_empty(const std::filesystem::path& path, std::string* problem = nullptr);

  // The key for a device: backend, UUID and every version axis.
  static std::string device_key(const DeviceInfo& info);

  std::optional<ProbeRecord> find(const DeviceInfo& info, std::string_view capability) const;
  std::vector<ProbeRecord> records(const DeviceInfo& info) const;
  void record(const DeviceInfo& info, ProbeRecord record);

  // Merges into the file as it is now (other writers may have added devices),
  // then replaces it atomically; creates the directory when needed.
  void save(const std::filesystem::path& path) const;

  std::size_t device_count() const { return entries_.size(); }

  struct DeviceEntry {
    std::string backend, name, uuid;
    std::vector<std::pair<std::string, std::string>> version_axes;
    std::map<std::string, ProbeRecord> capabilities;
  };

 private:
  std::map<std::string, DeviceEntry> entries_;
};

// Now as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_timestamp_now();

}  // namespace hal
