// Probe cache file: JSON, schema "hal.probes/1", merged and replaced atomically.
#include "hal/probe_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <system_error>
#include <type_traits>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "hal/status.hpp"
#include "environment.hpp"

namespace hal {
namespace {

using nlohmann::json;

json to_json(const ProbeCache::DeviceEntry& entry) {
  json axes = json::object();
  for (const auto& [axis, value] : entry.version_axes) axes[axis] = value;
  json capabilities = json::object();
  for (const auto& [key, record] : entry.capabilities)
    capabilities[key] = {{"present", record.present},
                         {"evidence", record.evidence},
                         {"case", record.case_id},
                         {"timestamp", record.timestamp}};
  return {{"backend", entry.backend},
          {"name", entry.name},
          {"uuid", entry.uuid},
          {"version_axes", axes},
          {"capabilities", capabilities}};
}

ProbeCache::DeviceEntry entry_from_json(const json& value) {
  ProbeCache::DeviceEntry entry;
  entry.backend = value.at("backend").get<std::string>();
  entry.name = value.at("name").get<std::string>();
  entry.uuid = value.at("uuid").get<std::string>();
  for (const auto& [axis, version] : value.at("version_axes").items())
    entry.version_axes.emplace_back(axis, version.get<std::string>());
  for (const auto& [key, record] : value.at("capabilities").items()) {
    ProbeRecord probe;
    probe.capability = key;
    probe.present = record.at("present").get<bool>();
    probe.evidence = record.value("evidence", "");
    probe.case_id = record.value("case", "");
    probe.timestamp = record.value("timestamp", "");
    entry.capabilities.emplace(key, std::move(probe));
  }
  return entry;
}

// Holds an exclusive flock on "<cache>.lock" so concurrent savers merge in turn.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path) {
    descriptor_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (descriptor_ >= 0) ::flock(descriptor_, LOCK_EX);
  }
  ~FileLock() {
    if (descriptor_ >= 0) ::close(descriptor_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int descriptor_ = -1;
};

}  // namespace

std::string utc_timestamp_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::filesystem::path ProbeCache::default_path(const std::filesystem::path& configured_directory) {
  if (const char* explicit_path = abi::environment("HAL_PROBE_CACHE")) return explicit_path;
  if (!configured_directory.empty()) return configured_directory / "probes.json";
  if (const char* cache_home = abi::environment("XDG_CACHE_HOME"))
    return std::filesystem::path(cache_home) / "hal" / "probes.json";
  if (const char* home = abi::environment("HOME"))
    return std::filesystem::path(home) / ".cache" / "hal" / "probes.json";
  return std::filesystem::temp_directory_path() / "hal" / "probes.json";
}

std::string ProbeCache::device_key(const DeviceInfo& info) {
  // Sorted axes: the key must not depend on the order a backend lists them in.
  auto axes = info.version_axes;
  std::sort(axes.begin(), axes.end());
  std::string key = info.backend + "|" + (info.uuid.empty() ? info.name : info.uuid);
  for (const auto& [axis, value] : axes) key += "|" + axis + "=" + value;
  return key;
}

ProbeCache ProbeCache::load(const std::filesystem::path& path) {
  ProbeCache cache;
  std::ifstream file(path);
  if (!file) {
    if (!std::filesystem::exists(path)) return cache;
    throw Error(StatusCode::invalid_argument, "probe cache " + path.string() + " cannot be read: " +
                                                  std::strerror(errno) + "; fix its permissions or delete it");
  }
  try {
    const json document = json::parse(file);
    if (document.value("schema", "") != schema)
      throw Error(StatusCode::invalid_argument,
                  "probe cache " + path.string() + " has schema '" + document.value("schema", "") + "', expected '" +
                      std::string(schema) + "'; delete it and run `halconform --probe-only` to rebuild it");
    for (const auto& [key, value] : document.at("devices").items()) cache.entries_[key] = entry_from_json(value);
  } catch (const json::exception& error) {
    throw Error(StatusCode::invalid_argument, "probe cache " + path.string() + " is malformed (" + error.what() +
                                                  "); delete it and run `halconform --probe-only` to rebuild it");
  }
  return cache;
}

ProbeCache ProbeCache::load_or_empty(const std::filesystem::path& path, std::string* problem) {
  try {
    return load(path);
  } catch (const Error& error) {
    if (problem != nullptr) *problem = error.what();
    return {};
  }
}

std::optional<ProbeRecord> ProbeCache::find(const DeviceInfo& info, std::string_view capability) const {
  const auto entry = entries_.find(device_key(info));
  if (entry == entries_.end()) return std::nullopt;
  const auto record = entry->second.capabilities.find(std::string(capability));
  if (record == entry->second.capabilities.end()) return std::nullopt;
  return record->second;
}

std::vector<ProbeRecord> ProbeCache::records(const DeviceInfo& info) const {
  std::vector<ProbeRecord> result;
  const auto entry = entries_.find(device_key(info));
  if (entry != entries_.end())
    for (const auto& [key, record] : entry->second.capabilities) result.push_back(record);
  return result;
}

void ProbeCache::record(const DeviceInfo& info, ProbeRecord record) {
  if (record.capability.empty()) throw Error(StatusCode::invalid_argument, "a probe record needs a capability key");
  if (record.timestamp.empty()) record.timestamp = utc_timestamp_now();
  DeviceEntry& entry = entries_[device_key(info)];
  entry.backend = info.backend;
  entry.name = info.name;
  entry.uuid = info.uuid;
  entry.version_axes = info.version_axes;
  entry.capabilities[record.capability] = std::move(record);
}

void ProbeCache::save(const std::filesystem::path& path) const {
  std::error_code error;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), error);
  if (error)
    throw Error(StatusCode::invalid_argument, "cannot create the probe cache directory " +
                                                  path.parent_path().string() + ": " + error.message() +
                                                  "; set HAL_PROBE_CACHE to a writable file");
  FileLock lock(path.string() + ".lock");
  // What other processes wrote since we loaded stays; our records win per capability.
  ProbeCache merged = load_or_empty(path);
  for (const auto& [key, entry] : entries_) {
    DeviceEntry& target = merged.entries_[key];
    const auto kept = std::move(target.capabilities);
    target = entry;
    for (const auto& [capability, record] : kept) target.capabilities.emplace(capability, record);
  }
  json devices = json::object();
  for (const auto& [key, entry] : merged.entries_) devices[key] = to_json(entry);
  const json document = {{"schema", schema}, {"devices", devices}};

  const std::filesystem::path temporary = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << document.dump(2) << '\n';
    if (!file)
      throw Error(StatusCode::invalid_argument, "cannot write the probe cache " + temporary.string() +
                                                    "; set HAL_PROBE_CACHE to a writable file");
  }
  std::filesystem::rename(temporary, path, error);
  if (error)
    throw Error(StatusCode::invalid_argument, "cannot replace the probe cache " + path.string() + ": " +
                                                  error.message() + "; set HAL_PROBE_CACHE to a writable file");
}

}  // namespace hal
