// Case context, registry and the in-process body runner.
#include "hal/conformance/case.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hal/capabilities.hpp"
#include "hal/conformance/health.hpp"
#include "hal/status.hpp"

namespace hal::conformance {

nlohmann::json CaseSettings::to_json() const {
  nlohmann::json value = {{"quick", quick},
                          {"stress_seconds", stress_seconds},
                          {"seed", seed},
                          {"memtest_fraction", memtest_fraction},
                          {"memtest_max_bytes", memtest_max_bytes},
                          {"thresholds", thresholds},
                          {"minimum_versions", minimum_versions}};
  if (!helper.empty()) value["helper"] = helper;
  return value;
}

CaseSettings CaseSettings::from_json(const nlohmann::json& value) {
  CaseSettings settings;
  settings.quick = value.value("quick", true);
  settings.stress_seconds = value.value("stress_seconds", 10.0);
  settings.seed = value.value("seed", std::uint64_t{1});
  settings.memtest_fraction = value.value("memtest_fraction", 0.9);
  settings.memtest_max_bytes = value.value("memtest_max_bytes", std::uint64_t{0});
  settings.thresholds = value.value("thresholds", std::map<std::string, double>{});
  settings.minimum_versions = value.value("minimum_versions", std::map<std::string, std::string>{});
  settings.helper = value.value("helper", std::map<std::string, std::string>{});
  return settings;
}

std::optional<double> CaseContext::threshold(std::string_view name) const {
  const auto found = settings_.thresholds.find(std::string(name));
  if (found == settings_.thresholds.end()) return std::nullopt;
  return found->second;
}

std::uint32_t CaseContext::seed(std::string_view purpose) const {
  // splitmix64's finalizer: nearby --seed values give unrelated streams.
  std::uint64_t z = stable_hash(purpose) ^ (settings_.seed * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

double estimated_seconds(const Case& test_case, const CaseSettings& settings) {
  return test_case.estimate ? test_case.estimate(settings) : 1.0;
}

void CaseContext::note(std::string_view text) {
  if (!evidence_.message.empty()) evidence_.message += '\n';
  evidence_.message += text;
}

void CaseContext::fail(std::string_view message) {
  note(message);
  throw Verdict{Outcome::fail};
}

void CaseContext::skip(std::string_view reason) {
  note(reason);
  throw Verdict{Outcome::skipped};
}

void CaseContext::error(std::string_view message) {
  note(message);
  throw Verdict{Outcome::error};
}

void CaseContext::warn(std::string_view message) {
  note(message);
  warned_ = true;
}

void CaseContext::not_judged(std::string_view message) {
  note(message);
  judged_ = false;
}

void CaseContext::require(bool condition, std::string_view message) {
  if (!condition) fail(message);
}

void CaseContext::require_equal_bytes(const void* actual, const void* expected, std::size_t size,
                                      std::string_view what) {
  if (std::memcmp(actual, expected, size) == 0) return;
  const auto* got = static_cast<const unsigned char*>(actual);
  const auto* want = static_cast<const unsigned char*>(expected);
  std::size_t first = size, differing = 0;
  for (std::size_t i = 0; i < size; ++i)
    if (got[i] != want[i]) {
      if (first == size) first = i;
      ++differing;
    }
  measure({"differing_bytes", static_cast<double>(differing), "bytes", 0.0, 0.0, "==", ""});
  std::ostringstream message;
  message << what << ": " << differing << " of " << size << " bytes differ from the host reference; first at offset "
          << first << ": got 0x" << std::hex << static_cast<int>(got[first]) << ", expected 0x"
          << static_cast<int>(want[first]);
  fail(message.str());
}

void Registry::add(Case test_case) {
  const std::string& id = test_case.id;
  const bool well_formed =
      !id.empty() && id.front() != '.' && id.back() != '.' && id.find("..") == std::string::npos &&
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") == std::string::npos &&
      std::count(id.begin(), id.end(), '.') >= 2;
  if (!well_formed)
    throw std::invalid_argument("case id '" + id +
                                "' is malformed; use <tier>.<area>.<name> in lowercase letters, digits and _");
  const std::string prefix = id.substr(0, id.find('.'));
  if (prefix != to_string(test_case.tier))
    throw std::invalid_argument("case id '" + id + "' must start with its tier '" +
                                std::string(to_string(test_case.tier)) + ".'");
  if (test_case.probe && test_case.capability.empty())
    throw std::invalid_argument("probe case '" + id + "' names no capability to verify");
  if (!test_case.body) throw std::invalid_argument("case '" + id + "' has no body");
  if (find(id) != nullptr) throw std::invalid_argument("case id '" + id + "' is registered twice");
  cases_.push_back(std::move(test_case));
}

const Case* Registry::find(std::string_view id) const {
  for (const auto& test_case : cases_)
    if (test_case.id == id) return &test_case;
  return nullptr;
}

std::vector<const Case*> Registry::matching(std::string_view pattern) const {
  std::vector<const Case*> result;
  for (const auto& test_case : cases_)
    if (glob_match(pattern, test_case.id)) result.push_back(&test_case);
  return result;
}

CapabilityClaim resolve_claim(const Device& device, std::string_view capability) {
  CapabilityClaim claim;
  claim.key = std::string(capability);
  claim.source = "none";
  claim.note = "the " + device.backend_name() + " backend does not declare '" + claim.key + "'";
  // The probe layer is left out: conformance is what verifies claims, so a
  // cached verdict must not decide whether the claim is tested again.
  for (const CapabilityLayer& layer : effective_capability(device, claim.key).layers) {
    if (layer.layer == "probe") continue;
    claim.source = layer.layer == "declared" ? "declaration" : layer.layer;  // declaration, quirk, override
    claim.claimed = layer.value != "false" && layer.value != "0" && !layer.value.empty();
    claim.note = layer.source + (layer.reason.empty() ? "" : ": " + layer.reason);
  }
  return claim;
}

CaseResult run_case_body(const Case& test_case, const Device& device, const CaseSettings& settings,
                         const std::vector<std::string>& case_command) {
  CaseResult result;
  result.case_id = test_case.id;
  result.device_id = device.id();
  result.tier = std::string(to_string(test_case.tier));
  result.probe = test_case.probe;
  result.seed = settings.seed;
  if (!test_case.capability.empty()) result.capability = resolve_claim(device, test_case.capability);
  CaseContext context(device, settings, case_command);
  const HealthGate gate(device);
  const auto started = std::chrono::steady_clock::now();
  try {
    test_case.body(context);
    // Not judged outranks a warning: without a floor the case claims no pass.
    result.outcome = !context.judged() ? Outcome::measured : context.warned() ? Outcome::warn : Outcome::pass;
  } catch (const CaseContext::Verdict& verdict) {
    result.outcome = verdict.outcome;
  } catch (const Error& error) {
    // The device or backend refused or failed an operation the case needs.
    context.note(std::string("hal call failed: ") + error.what());
    result.outcome = Outcome::fail;
  } catch (const HarnessError& error) {
    context.note(std::string("harness error: ") + error.what());
    result.outcome = Outcome::error;
  } catch (const std::exception& error) {
    context.note(std::string("harness error (unexpected exception): ") + error.what());
    result.outcome = Outcome::error;
  }
  result.duration_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  // Whatever the case found, memory that got worse under it fails it.
  if (const std::vector<std::string> changes = gate.changes(); !changes.empty()) {
    std::string listed;
    for (const std::string& change : changes) listed += (listed.empty() ? "" : "; ") + change;
    context.note("health gate: " + listed + " while the case ran");
    result.outcome = Outcome::fail;
  }
  result.evidence = std::move(context.evidence());
  return result;
}

}  // namespace hal::conformance
