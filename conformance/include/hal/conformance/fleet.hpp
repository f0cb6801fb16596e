// For fleets: comparing two reports (halconform diff) and turning a known-good
// machine's measurements into profile floors (halconform calibrate).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hal::conformance {

// Reads a hal.conformance/1 report; throws std::invalid_argument naming the
// file and what is wrong (unreadable, not JSON, another schema, a result
// without case, device or outcome).
nlohmann::json load_report(const std::filesystem::path& path);

struct DiffLine {
  std::string subject;  // "case on device", or "case on device: measurement"
  std::string change;   // "PASS -> FAIL", "12.1 -> 9.3 GB/s (-23%)"
  bool regression = false;
};

// Outcome changes of every (case, device) in either report, and measurements
// with a direction (">=": higher is better, "<=": lower) that moved by more
// than `tolerance` (a fraction of the old value). A regression: a result that
// now fails or errs, evidence lost (a pass now unsupported, skipped or
// missing), or a measurement that moved the bad way.
std::vector<DiffLine> diff_reports(const nlohmann::json& before, const nlohmann::json& after, double tolerance);

// A profile fragment ([[thresholds]] per device model and driver) with each
// floor at `fraction` of the weakest value the report measured for it on
// devices of that model. Only results that ran clean count (PASS, WARN,
// MEASURED); throws std::invalid_argument when nothing was measured.
std::string calibrated_thresholds(const nlohmann::json& report, double fraction);

}  // namespace hal::conformance
