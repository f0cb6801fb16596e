// Profile files: strict TOML (an unknown key is an error, since a typo would
// silently weaken a qualification).
#include "hal/conformance/profile.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "toml_file.hpp"
#include "environment.hpp"

namespace hal::conformance {
namespace {

using detail::origin_of;

[[noreturn]] void bad(const std::filesystem::path& path, const toml::node& node, const std::string& message) {
  throw std::invalid_argument(origin_of(path, node) + ": " + message);
}

void check_keys(const std::filesystem::path& path, const toml::table& table, const std::set<std::string>& allowed,
                const std::string& context) {
  for (const auto& [key, node] : table) {
    if (allowed.count(std::string(key.str())) != 0) continue;
    std::string list;
    for (const auto& name : allowed) list += (list.empty() ? "" : ", ") + name;
    bad(path, node, "unknown key '" + std::string(key.str()) + "' in " + context + "; allowed: " + list);
  }
}

std::string string_of(const std::filesystem::path& path, const toml::node& node, const std::string& key) {
  if (const auto value = node.value<std::string>()) return *value;
  bad(path, node, "'" + key + "' must be a string");
}

std::vector<std::string> strings_of(const std::filesystem::path& path, const toml::node& node, const std::string& key) {
  const toml::array* array = node.as_array();
  if (array == nullptr) bad(path, node, "'" + key + "' must be an array of strings");
  std::vector<std::string> result;
  for (const auto& item : *array) result.push_back(string_of(path, item, key + "[]"));
  return result;
}

double number_of(const std::filesystem::path& path, const toml::node& node, const std::string& key) {
  if (const auto value = node.value<double>()) return *value;  // integers convert too
  bad(path, node, "'" + key + "' must be a number");
}

const toml::table& table_of(const std::filesystem::path& path, const toml::node& node, const std::string& key) {
  const toml::table* table = node.as_table();
  if (table == nullptr) bad(path, node, "'" + key + "' must be a table");
  return *table;
}

ThresholdSet parse_threshold_set(const std::filesystem::path& path, const toml::table& table) {
  check_keys(path, table, {"vendor", "name", "backend", "driver", "values", "minimum_versions"}, "[[thresholds]]");
  ThresholdSet set;
  if (const auto* node = table.get("vendor")) set.vendor = string_of(path, *node, "vendor");
  if (const auto* node = table.get("name")) set.name = string_of(path, *node, "name");
  if (const auto* node = table.get("backend")) set.backend = string_of(path, *node, "backend");
  if (const auto* node = table.get("driver")) set.driver = string_of(path, *node, "driver");
  if (const auto* node = table.get("values"))
    for (const auto& [key, value] : table_of(path, *node, "values"))
      set.values[std::string(key.str())] = number_of(path, value, std::string(key.str()));
  if (const auto* node = table.get("minimum_versions"))
    for (const auto& [key, value] : table_of(path, *node, "minimum_versions"))
      set.minimum_versions[std::string(key.str())] = string_of(path, value, std::string(key.str()));
  return set;
}

Requirement parse_requirement(const std::filesystem::path& path, const toml::table& table) {
  check_keys(path, table, {"name", "description", "any_of"}, "[[requirement]]");
  Requirement requirement;
  const auto* name = table.get("name");
  const auto* any_of = table.get("any_of");
  if (name == nullptr || any_of == nullptr) bad(path, table, "a [[requirement]] needs 'name' and 'any_of'");
  requirement.name = string_of(path, *name, "name");
  requirement.any_of = strings_of(path, *any_of, "any_of");
  if (requirement.any_of.empty()) bad(path, *any_of, "'any_of' of requirement '" + requirement.name + "' is empty");
  if (const auto* node = table.get("description")) requirement.description = string_of(path, *node, "description");
  return requirement;
}

std::filesystem::path executable_directory() {
  std::error_code error;
  const auto executable = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path() : executable.parent_path();
}

}  // namespace

bool ThresholdSet::matches(const DeviceInfo& info) const {
  std::string device_driver;  // a device without a driver axis matches only "*"
  for (const auto& [axis, value] : info.version_axes)
    if (axis == "driver") device_driver = value;
  return glob_match(vendor, info.vendor) && glob_match(name, info.name) && glob_match(backend, info.backend) &&
         glob_match(driver, device_driver);
}

bool Profile::selects(const Case& test_case) const {
  if (std::find(tiers.begin(), tiers.end(), test_case.tier) == tiers.end()) return false;
  const auto matches = [&](const std::string& pattern) { return glob_match(pattern, test_case.id); };
  return std::any_of(cases.begin(), cases.end(), matches) && std::none_of(exclude.begin(), exclude.end(), matches);
}

CaseSettings Profile::settings_for(const DeviceInfo& info) const {
  CaseSettings settings;
  settings.quick = quick;
  settings.stress_seconds = stress_seconds;
  for (const auto& set : thresholds) {
    if (!set.matches(info)) continue;
    for (const auto& [key, value] : set.values) settings.thresholds[key] = value;
    for (const auto& [axis, version] : set.minimum_versions) settings.minimum_versions[axis] = version;
  }
  return settings;
}

Profile load_profile(const std::filesystem::path& path) {
  const toml::table document = detail::parse_toml_file(path);
  check_keys(path, document,
             {"name", "description", "tiers", "cases", "exclude", "requirement", "quick", "stress_seconds",
              "timeout_seconds", "thresholds"},
             "a profile");
  Profile profile;
  profile.source = path;
  profile.name = path.stem().string();
  if (const auto* node = document.get("name")) profile.name = string_of(path, *node, "name");
  if (const auto* node = document.get("description")) profile.description = string_of(path, *node, "description");
  if (const auto* node = document.get("tiers")) {
    for (const auto& tier : strings_of(path, *node, "tiers")) {
      try {
        profile.tiers.push_back(parse_tier(tier));
      } catch (const std::invalid_argument& error) {
        bad(path, *node, error.what());
      }
    }
  } else {
    profile.tiers = {Tier::identity, Tier::api, Tier::numerics};
  }
  if (const auto* node = document.get("cases")) profile.cases = strings_of(path, *node, "cases");
  if (const auto* node = document.get("exclude")) profile.exclude = strings_of(path, *node, "exclude");
  if (const auto* node = document.get("quick")) {
    const auto value = node->value<bool>();
    if (!value) bad(path, *node, "'quick' must be true or false");
    profile.quick = *value;
  }
  if (const auto* node = document.get("stress_seconds")) profile.stress_seconds = number_of(path, *node, "stress_seconds");
  if (const auto* node = document.get("timeout_seconds"))
    profile.timeout_seconds = number_of(path, *node, "timeout_seconds");
  if (profile.stress_seconds <= 0 || profile.timeout_seconds <= 0)
    throw std::invalid_argument(path.string() + ": stress_seconds and timeout_seconds must be positive");
  if (const auto* node = document.get("requirement")) {
    const toml::array* entries = node->as_array();
    if (entries == nullptr) bad(path, *node, "'requirement' must be an array of tables ([[requirement]])");
    for (const auto& entry : *entries) profile.requirements.push_back(parse_requirement(path, table_of(path, entry, "requirement")));
  }
  if (const auto* node = document.get("thresholds")) {
    const toml::array* entries = node->as_array();
    if (entries == nullptr) bad(path, *node, "'thresholds' must be an array of tables ([[thresholds]])");
    for (const auto& entry : *entries) profile.thresholds.push_back(parse_threshold_set(path, table_of(path, entry, "thresholds")));
  }
  return profile;
}

std::vector<std::filesystem::path> profile_directories() {
  std::vector<std::filesystem::path> directories;
  if (const char* paths = abi::environment("HAL_PROFILE_PATH")) {
    std::stringstream list(paths);
    for (std::string directory; std::getline(list, directory, ':');)
      if (!directory.empty()) directories.emplace_back(directory);
  }
  if (const auto directory = executable_directory(); !directory.empty())
    directories.push_back(directory.parent_path() / "share" / "hal" / "profiles");
#ifdef HAL_SOURCE_PROFILE_DIR
  directories.emplace_back(HAL_SOURCE_PROFILE_DIR);
#endif
  return directories;
}

std::vector<std::string> available_profiles() {
  std::set<std::string> names;
  for (const auto& directory : profile_directories()) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error))
      if (entry.path().extension() == ".toml") names.insert(entry.path().stem().string());
  }
  return {names.begin(), names.end()};
}

Profile find_profile(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml")) {
    if (!std::filesystem::exists(name_or_path))
      throw std::invalid_argument("profile file " + name_or_path + " does not exist");
    return load_profile(name_or_path);
  }
  std::string searched;
  for (const auto& directory : profile_directories()) {
    const auto candidate = directory / (name_or_path + ".toml");
    if (std::filesystem::exists(candidate)) return load_profile(candidate);
    searched += (searched.empty() ? "" : ", ") + directory.string();
  }
  std::string names;
  for (const auto& name : available_profiles()) names += (names.empty() ? "" : ", ") + name;
  throw std::invalid_argument("no profile named '" + name_or_path + "' in " + searched +
                              "; available: " + (names.empty() ? "none" : names) +
                              " (or pass a path to a .toml file)");
}

}  // namespace hal::conformance
