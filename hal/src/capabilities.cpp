#include "hal/capabilities.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string_view>
#include <system_error>
#include <utility>

#include "loaded_backend.hpp"
#include "quirks.hpp"
#include "hal/probe_cache.hpp"
#include "attention_internal.hpp"
#include "environment.hpp"

namespace hal {
namespace {

// "attention.fused=false" items as capabilities.overrides holds them (blanks
// around the key and the value do not count), each with where it was set.
struct Override {
  std::string key, value, source;
};

void add_overrides(std::vector<Override>& overrides, const std::vector<std::string>& items, const std::string& source) {
  auto trimmed = [](std::string_view text) {
    const auto first = text.find_first_not_of(' ');
    return first == std::string_view::npos ? std::string() : std::string(text.substr(first, text.find_last_not_of(' ') - first + 1));
  };
  for (const std::string& item : items) {
    const auto equals = item.find('=');  // validated when the settings were resolved
    overrides.push_back({trimmed(item.substr(0, equals)), trimmed(item.substr(equals + 1)), source});
  }
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
      ProbeCache::default_path(detail::Access::backend(device) ? detail::Access::backend(device)->settings->values().probes_cache_dir
                                                              : std::filesystem::path());
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

EffectiveCapability detail::effective_capability(const Device& device, const std::string& key,
                                                 const std::vector<std::string>& per_call_overrides) {
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
  std::vector<Override> overrides;
  // A device made from an info alone (reports, tests) has no backend and so no settings.
  if (const auto& backend = detail::Access::backend(device)) {
    add_overrides(overrides, backend->settings->values().capability_overrides,
                  backend->settings->at("capabilities.overrides").origin());
  }
  add_overrides(overrides, per_call_overrides, "AttentionOptions::capability_overrides");
  for (const Override& entry : overrides)
    if (entry.key == key) speak({"override", entry.value, entry.source, "set by the user"});
  return result;
}

EffectiveCapability effective_capability(const Device& device, const std::string& key) {
  return detail::effective_capability(device, key, {});
}

std::vector<Hazard> environment_hazards(const Device& device) {
  std::vector<Hazard> hazards;
  for (const detail::Quirk* quirk : quirks_with_warning().matching(device.info())) {
    if (quirk->hazard_env.empty() || abi::environment(quirk->hazard_env.c_str()) == nullptr) continue;
    std::string message = quirk->hazard_env + " is set on " + device.id() + ": " + quirk->reason;
    if (!quirk->fix.empty()) message += "; fix: " + quirk->fix;
    hazards.push_back({quirk->id, std::move(message)});
  }
  return hazards;
}

}  // namespace hal
