#include "hal/capabilities.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <mutex>

#include "loaded_backend.hpp"
#include "quirks.hpp"
#include "hal/probe_cache.hpp"
#include "environment.hpp"

namespace hal {
namespace {

// "attention.fused=false,attention.flash=true"
std::vector<std::pair<std::string, std::string>> user_overrides() {
  std::vector<std::pair<std::string, std::string>> overrides;
  const char* text = detail::environment("HAL_CAPABILITY_OVERRIDES");
  if (text == nullptr) return overrides;
  std::string current;
  auto flush = [&] {
    if (current.empty()) return;
    const auto equals = current.find('=');
    if (equals == std::string::npos || equals == 0)
      throw Error(StatusCode::invalid_argument, "HAL_CAPABILITY_OVERRIDES entry '" + current +
                                                    "' is not key=value, e.g. attention.fused=false");
    overrides.emplace_back(current.substr(0, equals), current.substr(equals + 1));
    current.clear();
  };
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == ',') flush();
    else if (*c != ' ') current += *c;
  }
  flush();
  return overrides;
}

const detail::QuirkDatabase& quirks_with_warning() {
  const detail::QuirkDatabase& database = detail::QuirkDatabase::shipped();
  static std::once_flag warned;
  if (!database.error.empty())
    std::call_once(warned, [&] { detail::log_message(HAL_LOG_WARNING, database.error); });
  return database;
}

// The probe cache, reread only when the file changes: selection asks often.
std::optional<ProbeRecord> probed(const Device& device, const std::string& key, std::string& path_text) {
  static std::mutex mutex;
  static std::filesystem::path loaded_path;
  static std::filesystem::file_time_type loaded_time;
  static ProbeCache cache;
  // A device made from an info alone (reports, tests) has no backend and so no config.
  const std::filesystem::path path =
      ProbeCache::default_path(detail::Access::backend(device) ? detail::Access::backend(device)->config->probes_cache_dir : std::filesystem::path());
  path_text = path.string();
  std::error_code error;
  const auto modified = std::filesystem::last_write_time(path, error);
  if (error) return std::nullopt;  // no cache yet
  std::lock_guard lock(mutex);
  if (path != loaded_path || modified != loaded_time) {
    std::string problem;
    cache = ProbeCache::load_or_empty(path, &problem);
    if (!problem.empty()) detail::log_message(HAL_LOG_WARNING, problem);
    loaded_path = path;
    loaded_time = modified;
  }
  return cache.find(device.info(), key);
}

}  // namespace

EffectiveCapability effective_capability(const Device& device, const std::string& key) {
  EffectiveCapability result;
  result.key = key;
  auto speak = [&](CapabilityLayer layer) {
    result.value = layer.value;
    result.decided_by = layer.layer;
    result.layers.push_back(std::move(layer));
  };
  if (const Capability* declared = device.info().find_capability(key))
    speak({"declared", declared->value_string(), "the " + device.backend_name() + " backend", declared->note});
  for (const detail::Quirk* quirk : quirks_with_warning().matching(device.info()))
    if (auto value = quirk->capability_values.find(key); value != quirk->capability_values.end())
      speak({"quirk", value->second,
             quirk->id + " (" + quirk->location + (quirk->source.empty() ? "" : "; source: " + quirk->source) + ")",
             quirk->reason});
  // Verified by running it on this device with these exact versions: outranks declarations and quirks.
  std::string cache_path;
  if (const auto record = probed(device, key, cache_path))
    speak({"probe", record->present ? "true" : "false",
           "probe cache " + cache_path + ", " + record->case_id + " at " + record->timestamp, record->evidence});
  for (const auto& [override_key, value] : user_overrides())
    if (override_key == key) speak({"override", value, "HAL_CAPABILITY_OVERRIDES", "set by the user"});
  return result;
}

std::vector<Hazard> environment_hazards(const Device& device) {
  std::vector<Hazard> hazards;
  for (const detail::Quirk* quirk : quirks_with_warning().matching(device.info())) {
    if (quirk->hazard_env.empty() || detail::environment(quirk->hazard_env.c_str()) == nullptr) continue;
    std::string message = quirk->hazard_env + " is set on " + device.id() + ": " + quirk->reason;
    if (!quirk->fix.empty()) message += "; fix: " + quirk->fix;
    hazards.push_back({quirk->id, std::move(message)});
  }
  return hazards;
}

}  // namespace hal
