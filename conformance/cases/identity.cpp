// Identity tier: the device says what it is, completely and consistently.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "case_support.hpp"

namespace hal::conformance::cases {
namespace {

// Compares dotted version strings numerically ("12.4.1" vs "12.10"); a
// non-numeric part compares as text. Negative, zero, positive like strcmp.
int compare_versions(const std::string& left, const std::string& right) {
  std::istringstream a(left), b(right);
  std::string part_a, part_b;
  for (;;) {
    const bool more_a = static_cast<bool>(std::getline(a, part_a, '.'));
    const bool more_b = static_cast<bool>(std::getline(b, part_b, '.'));
    if (!more_a && !more_b) return 0;
    if (!more_a) part_a = "0";
    if (!more_b) part_b = "0";
    const bool numeric = !part_a.empty() && !part_b.empty() &&
                         part_a.find_first_not_of("0123456789") == std::string::npos &&
                         part_b.find_first_not_of("0123456789") == std::string::npos;
    if (numeric) {
      const unsigned long long x = std::stoull(part_a), y = std::stoull(part_b);
      if (x != y) return x < y ? -1 : 1;
    } else if (part_a != part_b) {
      return part_a < part_b ? -1 : 1;
    }
  }
}

void info_complete(CaseContext& context) {
  const DeviceInfo& info = context.device().info();
  std::vector<std::string> missing;
  if (info.name.empty()) missing.push_back("name");
  if (info.vendor.empty()) missing.push_back("vendor");
  if (info.total_memory == 0) missing.push_back("total_memory");
  if (info.compute_units == 0) missing.push_back("compute_units");
  if (!missing.empty()) {
    std::string list;
    for (const auto& field : missing) list += (list.empty() ? "" : ", ") + field;
    context.fail("device info lacks " + list + "; the backend's device_info must fill every field it can know");
  }
  context.measure({"total_memory", static_cast<double>(info.total_memory), "bytes", {}, {}, "", ""});
  context.measure({"compute_units", static_cast<double>(info.compute_units), "", {}, {}, "", ""});
  if (info.free_memory > info.total_memory)
    context.fail("free_memory " + std::to_string(info.free_memory) + " exceeds total_memory " +
                 std::to_string(info.total_memory));
  // Without a UUID probe results cannot be tied to this device across runs.
  if (info.uuid.empty()) context.warn("the device has no UUID; probe results are keyed by its name instead");
  context.note(info.name + " (" + info.vendor + "), " + byte_count(info.total_memory) + ", " +
               std::to_string(info.compute_units) + " compute units");
}

void version_axes(CaseContext& context) {
  const DeviceInfo& info = context.device().info();
  context.require(!info.version_axes.empty(),
                  "the device reports no version axes; a backend must report its own version and each vendor "
                  "library's");
  std::set<std::string> seen;
  for (const auto& [axis, value] : info.version_axes) {
    context.require(!axis.empty() && !value.empty(), "version axis '" + axis + "' has an empty name or value");
    context.require(seen.insert(axis).second, "version axis '" + axis + "' is reported twice");
  }
  context.require(seen.count("backend") == 1, "the version axes lack 'backend', the backend's own version");
  for (const auto& [axis, minimum] : context.settings().minimum_versions) {
    const auto actual = info.version(axis);
    if (!actual)
      context.fail("the profile requires " + axis + " >= " + minimum + " but the device reports no '" + axis +
                   "' version axis");
    if (compare_versions(*actual, minimum) < 0)
      context.fail(axis + " " + *actual + " is older than the profile's minimum " + minimum +
                   "; update it or use a profile for this version");
    context.note(axis + " " + *actual + " >= " + minimum);
  }
  context.note(std::to_string(info.version_axes.size()) + " version axes");
}

void capabilities_well_formed(CaseContext& context) {
  const DeviceInfo& info = context.device().info();
  std::set<std::string> seen;
  for (const auto& capability : info.capabilities) {
    const std::string& key = capability.key;
    const bool good = !key.empty() && key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") ==
                                          std::string::npos && key.front() != '.' && key.back() != '.';
    context.require(good, "capability key '" + key + "' is not a lowercase dotted name");
    context.require(seen.insert(key).second, "capability '" + key + "' is declared twice");
  }
  context.note(std::to_string(seen.size()) + " capabilities declared");
}

}  // namespace

void register_cases_identity(Registry& registry) {
  registry.add({"identity.device.info_complete", Tier::identity,
                "name, vendor, memory size and compute units are reported; free memory is plausible", "", false, 0,
                info_complete});
  registry.add({"identity.device.version_axes", Tier::identity,
                "every version axis is named and non-empty; profile minimum versions are met", "", false, 0,
                version_axes});
  registry.add({"identity.device.capabilities_well_formed", Tier::identity,
                "capability keys are lowercase dotted names, each declared once", "", false, 0,
                capabilities_well_formed});
}

}  // namespace hal::conformance::cases
