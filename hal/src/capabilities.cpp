#include "hal/capabilities.hpp"

#include <cstdlib>
#include <mutex>

#include "loaded_backend.hpp"
#include "quirks.hpp"

namespace hal {
namespace {

// "attention.fused=false,attention.flash=true"
std::vector<std::pair<std::string, std::string>> user_overrides() {
  std::vector<std::pair<std::string, std::string>> overrides;
  const char* text = std::getenv("HAL_CAPABILITY_OVERRIDES");
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
      speak({"quirk", value->second, quirk->id + " (" + quirk->location + ")", quirk->reason});
  for (const auto& [override_key, value] : user_overrides())
    if (override_key == key) speak({"override", value, "HAL_CAPABILITY_OVERRIDES", "set by the user"});
  return result;
}

std::vector<Hazard> environment_hazards(const Device& device) {
  std::vector<Hazard> hazards;
  for (const detail::Quirk* quirk : quirks_with_warning().matching(device.info())) {
    if (quirk->hazard_env.empty() || std::getenv(quirk->hazard_env.c_str()) == nullptr) continue;
    std::string message = quirk->hazard_env + " is set on " + device.id() + ": " + quirk->reason;
    if (!quirk->fix.empty()) message += "; fix: " + quirk->fix;
    hazards.push_back({quirk->id, std::move(message)});
  }
  return hazards;
}

}  // namespace hal
