// The result model of the conformance suite: tiers, outcomes, evidence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hal::conformance {

enum class Tier { identity, api, numerics, performance, stress };
std::string_view to_string(Tier tier);
// Throws std::invalid_argument naming the bad value and the allowed ones.
Tier parse_tier(std::string_view text);
const std::vector<Tier>& all_tiers();

// PASS/WARN: worked. FAIL: the device (or a claimed capability) did not work.
// UNSUPPORTED: the capability is not claimed. SKIPPED: a precondition was not
// met; no evidence either way. XFAIL/XPASS: a waiver applied and the case
// failed/passed. ERROR: the harness itself failed; never the device's fault.
// CRASH/TIMEOUT: the case's process died or was killed after its time limit.
// MEASURED: the case ran and its output was right, but the profile sets no
// floor for this device model, so the measurement was not judged; it meets no
// requirement.
enum class Outcome { pass, warn, fail, unsupported, skipped, xfail, xpass, error, crash, timeout, measured };
std::string_view to_string(Outcome outcome);  // "PASS", "WARN", ...
Outcome parse_outcome(std::string_view text);
const std::vector<Outcome>& all_outcomes();
// FAIL, CRASH and TIMEOUT fail a run.
bool is_failure(Outcome outcome);
// PASS, WARN, FAIL, XFAIL, XPASS, CRASH, TIMEOUT, MEASURED say something about the device.
bool is_evidence(Outcome outcome);

// One measured value, with what it was held against when there is a bound.
struct Measurement {
  std::string name;  // "max_abs_error", "bandwidth"
  double value = 0;
  std::string unit;  // "GB/s", "bytes", ""
  std::optional<double> expected;   // the reference value or the threshold
  std::optional<double> tolerance;  // allowed deviation from expected
  std::string comparison;           // ">=", "<=", "==", "" (informational); ">=": higher is better
  std::string threshold = {};       // the profile key it is judged by ("bandwidth.fill.min_gbps"), if any
};

// A curve, e.g. bandwidth over transfer size: drawn in the HTML report.
struct Series {
  std::string name;
  std::string x_unit, y_unit;
  std::vector<std::pair<double, double>> points;
};

struct Evidence {
  std::string message;  // what happened, in words; what to do next on failure
  std::vector<Measurement> measurements;
  std::vector<Series> series;
  std::string log;  // the case process's stderr tail, for crashes and errors
};

// The capability a case depends on and where its claim came from.
struct CapabilityClaim {
  std::string key;
  bool claimed = false;
  std::string source;  // "declaration" (the backend), "quirk" (data/quirks.toml), "none"
  std::string note;
};

struct WaiverReference {
  std::string pattern, reason, tracking, expires;
  bool expired = false;
};

struct CaseResult {
  std::string case_id;
  std::string device_id;  // "host:0"
  std::string tier;       // empty for profile requirement results
  Outcome outcome = Outcome::error;
  Evidence evidence;
  std::optional<CapabilityClaim> capability;
  std::optional<WaiverReference> waiver;  // applied (or expired) waiver
  std::optional<Outcome> original_outcome;  // before a waiver turned it into XFAIL/XPASS
  double duration_ms = 0;
  bool probe = false;  // the case verifies its capability for the probe cache
  std::optional<std::uint64_t> seed;  // the run's --seed, for every result that came from a case
};

nlohmann::json to_json(const CaseResult& result);
CaseResult case_result_from_json(const nlohmann::json& value);

// FNV-1a, 64 bits: the same on every platform and standard library, so a
// seed derived from a name reproduces anywhere (std::hash does not).
std::uint64_t stable_hash(std::string_view text);

// '*' matches any run of characters, '?' one character; nothing else is special.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace hal::conformance
