// Internal: the shipped quirks data (data/quirks.toml) — known gaps and
// hazards of specific devices and library versions, as data.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/device.hpp"

namespace hal::detail {

struct Quirk {
  std::string id;
  std::string location;  // "quirks.toml:12"
  // Match: every given field must match; device_name is a glob.
  std::string backend, vendor, device_name;
  std::vector<std::pair<std::string, std::string>> version_ranges;  // axis -> ">=1.0,<1.4.1"
  std::map<std::string, std::string> capability_values;             // key -> "false"
  std::string hazard_env;  // an environment variable that is dangerous when set
  std::string reason;
  std::string fix;
  std::string link;
  std::string source;  // where the entry comes from: a release note, an issue

  bool matches(const DeviceInfo& device) const;
};

struct QuirkDatabase {
  std::vector<Quirk> quirks;
  std::string path;   // where it was read from
  std::string error;  // non-empty when it could not be read; hal runs without quirks then

  // Throws invalid_argument with file:line for a malformed file.
  static QuirkDatabase parse(std::string_view text, const std::string& source_name);
  // HAL_QUIRKS_FILE, else quirks.toml in HAL_DATA_DIR, else <libhal>/../share/hal.
  static const QuirkDatabase& shipped();

  std::vector<const Quirk*> matching(const DeviceInfo& device) const;
};

// "1.4.1" vs "1.10": numeric per dotted part; -1, 0, 1.
int compare_versions(std::string_view a, std::string_view b);
// ">=1.0,<1.4.1" (comma = and); operators >=, >, <=, <, ==, or a bare version for ==.
bool version_in_range(std::string_view version, std::string_view range);

}  // namespace hal::detail
