#include "quirks.hpp"

#include <algorithm>
#include <cstdlib>
#include <fnmatch.h>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

#include <boost/dll/runtime_symbol_info.hpp>
#include <toml++/toml.h>

#include "environment.hpp"
#include "text.hpp"

#include "hal/status.hpp"

namespace hal::detail {
namespace {

// text cut at each separator, every space dropped; empty parts are kept.
std::vector<std::string> split_parts(std::string_view text, char separator) {
  std::vector<std::string> parts = split(text, separator);
  for (std::string& part : parts) std::erase(part, ' ');
  return parts;
}

std::string location_of(const toml::node& node, const std::string& source) {
  return source + ":" + std::to_string(node.source().begin.line);
}

std::string required_string(const toml::table& table, const char* key, const std::string& where) {
  const auto* value = table.get_as<std::string>(key);
  if (value == nullptr)
    throw Error(StatusCode::invalid_argument, where + ": quirk needs a string '" + key + "'");
  return value->get();
}

std::string optional_string(const toml::table& table, const char* key) {
  const auto* value = table.get_as<std::string>(key);
  return value != nullptr ? value->get() : std::string();
}

Quirk parse_quirk(const toml::table& table, const std::string& source) {
  Quirk quirk;
  quirk.location = location_of(table, source);
  quirk.id = required_string(table, "id", quirk.location);
  quirk.reason = required_string(table, "reason", quirk.location);
  quirk.fix = optional_string(table, "fix");
  quirk.link = optional_string(table, "link");
  quirk.source = optional_string(table, "source");
  quirk.hazard_env = optional_string(table, "hazard_env");
  if (const auto* match = table.get_as<toml::table>("match")) {
    quirk.backend = optional_string(*match, "backend");
    quirk.vendor = optional_string(*match, "vendor");
    quirk.device_name = optional_string(*match, "device_name");
    if (const auto* versions = match->get_as<toml::table>("versions"))
      for (const auto& [axis, range] : *versions) {
        if (!range.is_string())
          throw Error(StatusCode::invalid_argument,
                      location_of(range, source) + ": version range for '" + std::string(axis.str()) +
                          "' must be a string like \">=1.0,<1.4.1\"");
        quirk.version_ranges.emplace_back(std::string(axis.str()), range.as_string()->get());
      }
  }
  if (const auto* capabilities = table.get_as<toml::table>("capabilities"))
    for (const auto& [key, value] : *capabilities) {
      std::string text;
      if (const auto* flag = value.as_boolean()) text = flag->get() ? "true" : "false";
      else if (const auto* number = value.as_integer()) text = std::to_string(number->get());
      else if (const auto* string = value.as_string()) text = string->get();
      else
        throw Error(StatusCode::invalid_argument, location_of(value, source) + ": capability '" +
                                                      std::string(key.str()) + "' must be a bool, integer or string");
      quirk.capability_values[std::string(key.str())] = text;
    }
  if (quirk.capability_values.empty() && quirk.hazard_env.empty())
    throw Error(StatusCode::invalid_argument,
                quirk.location + ": quirk '" + quirk.id + "' sets no capability and names no hazard_env");
  return quirk;
}

std::string data_directory() {
  if (const char* directory = abi::environment("HAL_DATA_DIR"); directory != nullptr)
    return directory;
  try {
    return (boost::dll::this_line_location().parent_path().parent_path() / "share" / "hal").string();
  } catch (const std::exception&) {
    return {};
  }
}

QuirkDatabase load_shipped() {
  std::string path;
  if (const char* file = abi::environment("HAL_QUIRKS_FILE"); file != nullptr)
    path = file;
  else
    path = data_directory() + "/quirks.toml";
  std::ifstream stream(path);
  if (!stream) {
    QuirkDatabase empty;
    empty.path = path;
    empty.error = "cannot read " + path + "; known device gaps will not be applied (set HAL_DATA_DIR)";
    return empty;
  }
  std::stringstream text;
  text << stream.rdbuf();
  try {
    return QuirkDatabase::parse(text.str(), path);
  } catch (const Error& error) {
    QuirkDatabase broken;
    broken.path = path;
    broken.error = error.status().message();
    return broken;
  }
}

}  // namespace

int compare_versions(std::string_view a, std::string_view b) {
  const auto left = split_parts(a, '.'), right = split_parts(b, '.');
  for (std::size_t i = 0; i < std::max(left.size(), right.size()); ++i) {
    const std::string x = i < left.size() ? left[i] : "0", y = i < right.size() ? right[i] : "0";
    char* x_end = nullptr;
    char* y_end = nullptr;
    const long long x_number = std::strtoll(x.c_str(), &x_end, 10), y_number = std::strtoll(y.c_str(), &y_end, 10);
    if (x_number != y_number) return x_number < y_number ? -1 : 1;
    if (const int rest = std::string_view(x_end).compare(y_end); rest != 0) return rest < 0 ? -1 : 1;
  }
  return 0;
}

bool version_in_range(std::string_view version, std::string_view range) {
  for (const std::string& condition : split_parts(range, ',')) {
    if (condition.empty()) continue;
    std::string_view operation = "==";
    std::string_view bound = condition;
    for (std::string_view candidate : {">=", "<=", "==", ">", "<"})
      if (bound.starts_with(candidate)) {
        operation = candidate;
        bound.remove_prefix(candidate.size());
        break;
      }
    const int order = compare_versions(version, bound);
    const bool holds = operation == ">=" ? order >= 0
                       : operation == "<=" ? order <= 0
                       : operation == ">"  ? order > 0
                       : operation == "<"  ? order < 0
                                           : order == 0;
    if (!holds) return false;
  }
  return true;
}

bool Quirk::matches(const DeviceInfo& device) const {
  if (!backend.empty() && backend != device.backend) return false;
  if (!vendor.empty() && vendor != device.vendor) return false;
  if (!device_name.empty() && fnmatch(device_name.c_str(), device.name.c_str(), 0) != 0) return false;
  for (const auto& [axis, range] : version_ranges) {
    const auto version = device.version(axis);
    if (!version || !version_in_range(*version, range)) return false;  // unknown version: no claim
  }
  return true;
}

QuirkDatabase QuirkDatabase::parse(std::string_view text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    throw Error(StatusCode::invalid_argument, source_name + ":" + std::to_string(error.source().begin.line) + ":" +
                                                  std::to_string(error.source().begin.column) + ": " +
                                                  std::string(error.description()));
  }
  QuirkDatabase database;
  database.path = source_name;
  if (const auto* quirks = root.get_as<toml::array>("quirk")) {
    for (const auto& entry : *quirks) {
      if (!entry.is_table())
        throw Error(StatusCode::invalid_argument, location_of(entry, source_name) + ": each [[quirk]] is a table");
      database.quirks.push_back(parse_quirk(*entry.as_table(), source_name));
    }
  }
  return database;
}

const QuirkDatabase& QuirkDatabase::shipped() {
  // Read once per process: the data ships with the library and does not change.
  static const QuirkDatabase database = load_shipped();
  return database;
}

std::vector<const Quirk*> QuirkDatabase::matching(const DeviceInfo& device) const {
  std::vector<const Quirk*> found;
  for (const auto& quirk : quirks)
    if (quirk.matches(device)) found.push_back(&quirk);
  return found;
}

}  // namespace hal::detail
