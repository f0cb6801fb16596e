// Profiles: what a qualification requires (data/profiles/*.toml).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hal/conformance/case.hpp"
#include "hal/conformance/model.hpp"
#include "hal/device.hpp"

namespace hal::conformance {

// Thresholds for the devices whose vendor, name, backend and driver version
// (the "driver" version axis) match the globs.
// Every matching set applies in file order; a later one overrides a value.
struct ThresholdSet {
  std::string vendor = "*", name = "*", backend = "*", driver = "*";
  std::map<std::string, double> values;
  std::map<std::string, std::string> minimum_versions;
  bool matches(const DeviceInfo& info) const;
};

// Met on a device when any case matching any of the patterns passes there.
struct Requirement {
  std::string name;
  std::string description;
  std::vector<std::string> any_of;
};

struct Profile {
  std::string name;
  std::string description;
  std::filesystem::path source;
  std::vector<Tier> tiers;
  // Case id globs to run; a glob that matches no registered case is reported
  // as SKIPPED "not implemented in this build".
  std::vector<std::string> cases = {"*"};
  std::vector<std::string> exclude;
  std::vector<Requirement> requirements;
  bool quick = true;
  double stress_seconds = 10;
  double timeout_seconds = 60;  // per case, unless --timeout says otherwise
  std::vector<ThresholdSet> thresholds;

  bool selects(const Case& test_case) const;
  CaseSettings settings_for(const DeviceInfo& info) const;
};

// Reads a profile; errors name the file, the line and what is allowed.
Profile load_profile(const std::filesystem::path& path);

// Directories searched for "<name>.toml", in order: $HAL_PROFILE_PATH (':'
// separated), <prefix>/share/hal/profiles beside the running executable, and
// the source tree's data/profiles.
std::vector<std::filesystem::path> profile_directories();
// A name ("smoke") or a path to a .toml file; throws std::invalid_argument
// listing the directories searched and the profiles found there.
Profile find_profile(const std::string& name_or_path);
std::vector<std::string> available_profiles();

}  // namespace hal::conformance
