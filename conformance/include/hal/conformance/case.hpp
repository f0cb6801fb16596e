// A conformance case, the context its body runs in, and the case registry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hal/conformance/model.hpp"
#include "hal/device.hpp"

namespace hal::conformance {

// What a case may depend on beyond the device: chosen by the profile and the
// device model, passed to the case process as JSON.
struct CaseSettings {
  bool quick = true;            // smaller sizes and fewer repetitions
  double stress_seconds = 10;   // how long a soak runs
  std::uint64_t seed = 1;       // --seed: every random input of a case derives from it
  // The memory test covers this fraction of the device's free memory, at most
  // memtest_max_bytes (0: no cap; the levels bound it so a quick run is brief).
  double memtest_fraction = 0.9;
  std::uint64_t memtest_max_bytes = 0;
  std::map<std::string, double> thresholds;             // "bandwidth.host_to_device.min_gbps" -> 5
  std::map<std::string, std::string> minimum_versions;  // version axis -> minimum version
  // Set only in a helper process that a case started for itself (one rank of
  // a collective case): the part it plays, e.g. {"rank": "1", "world_size": "2"}.
  std::map<std::string, std::string> helper;

  nlohmann::json to_json() const;
  static CaseSettings from_json(const nlohmann::json& value);
};

// Thrown by a body for a fault of the harness itself (bad settings, a
// reference that cannot be built): the result is ERROR, never blamed on the device.
class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CaseContext {
 public:
  CaseContext(Device device, CaseSettings settings, std::vector<std::string> case_command = {})
      : device_(std::move(device)), settings_(std::move(settings)), case_command_(std::move(case_command)) {}

  const Device& device() const { return device_; }
  // The command that runs one case in a new process (the program this case
  // process is), for a case that needs helper processes, such as the ranks of
  // a collective. Empty when the body runs in-process (unit tests).
  const std::vector<std::string>& case_command() const { return case_command_; }
  const CaseSettings& settings() const { return settings_; }
  bool quick() const { return settings_.quick; }
  std::optional<double> threshold(std::string_view name) const;
  // The seed of one random input of this case: the run's --seed mixed with a
  // stable hash of `purpose`, so each input differs and all reproduce.
  std::uint32_t seed(std::string_view purpose) const;

  void measure(Measurement measurement) { evidence_.measurements.push_back(std::move(measurement)); }
  void add_series(Series series) { evidence_.series.push_back(std::move(series)); }
  // Adds a line to the result message (kept for every outcome).
  void note(std::string_view text);

  // End the case now with FAIL / SKIPPED (precondition not met).
  [[noreturn]] void fail(std::string_view message);
  [[noreturn]] void skip(std::string_view reason);
  // End the case now with ERROR: the measurement itself cannot be trusted
  // (a timer that reads zero, a rate beyond the device's physical limit).
  [[noreturn]] void error(std::string_view message);
  // The case still completes; the outcome is WARN instead of PASS.
  void warn(std::string_view message);
  // The case still completes; the outcome is MEASURED instead of PASS: the
  // profile has no floor to judge its measurement by.
  void not_judged(std::string_view message);
  // fail(message) unless condition holds.
  void require(bool condition, std::string_view message);
  // Compares bytes; on a mismatch fails naming the first differing offset,
  // both values and how many bytes differ.
  void require_equal_bytes(const void* actual, const void* expected, std::size_t size, std::string_view what);

  Evidence& evidence() { return evidence_; }
  bool warned() const { return warned_; }
  bool judged() const { return judged_; }

  // Thrown by fail/skip to end the body; caught by the case process.
  struct Verdict {
    Outcome outcome;
  };

 private:
  Device device_;
  CaseSettings settings_;
  std::vector<std::string> case_command_;
  Evidence evidence_;
  bool warned_ = false;
  bool judged_ = true;
};

struct Case {
  std::string id;  // "<tier>.<area>.<name>", lowercase, e.g. "api.memory.copy_roundtrip"
  Tier tier = Tier::api;
  std::string description;
  // The capability the case exercises; a device that does not claim it gets
  // UNSUPPORTED without running. Empty: every device must pass.
  std::string capability;
  // A probe verifies `capability`; its result is written to the probe cache.
  bool probe = false;
  // 0: the runner's default (--timeout). Soaks set their own.
  double timeout_seconds = 0;
  std::function<void(CaseContext&)> body;
  // Seconds the case takes on a typical device at these settings, for --list
  // and the level's time budget. Empty: about a second.
  std::function<double(const CaseSettings&)> estimate = {};
};

// The estimate of a case at these settings (Case::estimate, or one second).
double estimated_seconds(const Case& test_case, const CaseSettings& settings);

class Registry {
 public:
  // Throws std::invalid_argument for a malformed id, an id whose first part
  // is not its tier, a probe without capability, a missing body, or a duplicate.
  void add(Case test_case);
  const std::vector<Case>& cases() const { return cases_; }
  const Case* find(std::string_view id) const;
  std::vector<const Case*> matching(std::string_view pattern) const;

 private:
  std::vector<Case> cases_;
};

// Every case built into this library (conformance/cases/*.cpp).
const Registry& builtin_registry();

// Whether a device claims a capability and which layer says so: the backend's
// declaration ("declaration"), data/quirks.toml ("quirk") or the user's
// HAL_CAPABILITY_OVERRIDES ("override"); "none" when nobody does. The probe
// layer is ignored here: conformance is what verifies the claim.
CapabilityClaim resolve_claim(const Device& device, std::string_view capability);

// Runs one case body on a device in this process and returns its result.
// Used by the case process (halconform --run-case); exceptions are mapped:
// hal::Error -> FAIL, HarnessError and anything else -> ERROR. case_command
// is what CaseContext::case_command() returns.
CaseResult run_case_body(const Case& test_case, const Device& device, const CaseSettings& settings,
                         const std::vector<std::string>& case_command = {});

}  // namespace hal::conformance
