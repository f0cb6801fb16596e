// Names, JSON forms and helpers of the result model.
#include "hal/conformance/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace hal::conformance {
namespace {

using nlohmann::json;

template <typename Enum>
std::string allowed_names(const std::vector<Enum>& values) {
  std::string names;
  for (const Enum value : values) names += (names.empty() ? "" : ", ") + std::string(to_string(value));
  return names;
}

}  // namespace

const std::vector<Tier>& all_tiers() {
  static const std::vector<Tier> tiers = {Tier::identity, Tier::api, Tier::numerics, Tier::performance, Tier::stress};
  return tiers;
}

std::string_view to_string(Tier tier) {
  switch (tier) {
    case Tier::identity: return "identity";
    case Tier::api: return "api";
    case Tier::numerics: return "numerics";
    case Tier::performance: return "performance";
    case Tier::stress: return "stress";
  }
  return "unknown";
}

Tier parse_tier(std::string_view text) {
  for (const Tier tier : all_tiers())
    if (to_string(tier) == text) return tier;
  throw std::invalid_argument("unknown tier '" + std::string(text) + "'; tiers are " + allowed_names(all_tiers()));
}

const std::vector<Outcome>& all_outcomes() {
  static const std::vector<Outcome> outcomes = {Outcome::pass,  Outcome::warn,  Outcome::fail,  Outcome::unsupported,
                                                Outcome::skipped, Outcome::xfail, Outcome::xpass, Outcome::error,
                                                Outcome::crash, Outcome::timeout, Outcome::measured};
  return outcomes;
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::pass: return "PASS";
    case Outcome::warn: return "WARN";
    case Outcome::fail: return "FAIL";
    case Outcome::unsupported: return "UNSUPPORTED";
    case Outcome::skipped: return "SKIPPED";
    case Outcome::xfail: return "XFAIL";
    case Outcome::xpass: return "XPASS";
    case Outcome::error: return "ERROR";
    case Outcome::crash: return "CRASH";
    case Outcome::timeout: return "TIMEOUT";
    case Outcome::measured: return "MEASURED";
  }
  return "ERROR";
}

Outcome parse_outcome(std::string_view text) {
  for (const Outcome outcome : all_outcomes())
    if (to_string(outcome) == text) return outcome;
  throw std::invalid_argument("unknown outcome '" + std::string(text) + "'; outcomes are " +
                              allowed_names(all_outcomes()));
}

bool is_failure(Outcome outcome) {
  return outcome == Outcome::fail || outcome == Outcome::crash || outcome == Outcome::timeout;
}

bool is_evidence(Outcome outcome) {
  return outcome != Outcome::unsupported && outcome != Outcome::skipped && outcome != Outcome::error;
}

std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point: linear for the patterns used here.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

json to_json(const CaseResult& result) {
  json measurements = json::array();
  for (const auto& m : result.evidence.measurements) {
    json entry = {{"name", m.name}, {"value", m.value}, {"unit", m.unit}};
    if (m.expected) entry["expected"] = *m.expected;
    if (m.tolerance) entry["tolerance"] = *m.tolerance;
    if (!m.comparison.empty()) entry["comparison"] = m.comparison;
    if (!m.threshold.empty()) entry["threshold"] = m.threshold;
    measurements.push_back(entry);
  }
  json series = json::array();
  for (const auto& s : result.evidence.series) {
    json points = json::array();
    for (const auto& [x, y] : s.points) points.push_back({x, y});
    series.push_back({{"name", s.name}, {"x_unit", s.x_unit}, {"y_unit", s.y_unit}, {"points", points}});
  }
  json value = {{"case", result.case_id},
                {"device", result.device_id},
                {"tier", result.tier},
                {"outcome", to_string(result.outcome)},
                {"duration_ms", result.duration_ms},
                {"probe", result.probe},
                {"evidence",
                 {{"message", result.evidence.message},
                  {"measurements", measurements},
                  {"series", series},
                  {"log", result.evidence.log}}}};
  if (result.capability)
    value["capability"] = {{"key", result.capability->key},
                           {"claimed", result.capability->claimed},
                           {"source", result.capability->source},
                           {"note", result.capability->note}};
  if (result.waiver)
    value["waiver"] = {{"pattern", result.waiver->pattern},
                       {"reason", result.waiver->reason},
                       {"tracking", result.waiver->tracking},
                       {"expires", result.waiver->expires},
                       {"expired", result.waiver->expired}};
  if (result.original_outcome) value["original_outcome"] = to_string(*result.original_outcome);
  if (result.seed) value["seed"] = *result.seed;
  return value;
}

CaseResult case_result_from_json(const json& value) {
  CaseResult result;
  result.case_id = value.at("case").get<std::string>();
  result.device_id = value.at("device").get<std::string>();
  result.tier = value.value("tier", "");
  result.outcome = parse_outcome(value.at("outcome").get<std::string>());
  result.duration_ms = value.value("duration_ms", 0.0);
  result.probe = value.value("probe", false);
  const json& evidence = value.at("evidence");
  result.evidence.message = evidence.value("message", "");
  result.evidence.log = evidence.value("log", "");
  for (const auto& m : evidence.value("measurements", json::array())) {
    Measurement measurement;
    measurement.name = m.at("name").get<std::string>();
    // JSON has no NaN or infinity: they are written as null (a tensor of NaN
    // has a NaN error) and read back as NaN.
    measurement.value = m.at("value").is_null() ? std::nan("") : m.at("value").get<double>();
    measurement.unit = m.value("unit", "");
    if (m.contains("expected")) measurement.expected = m["expected"].get<double>();
    if (m.contains("tolerance")) measurement.tolerance = m["tolerance"].get<double>();
    measurement.comparison = m.value("comparison", "");
    measurement.threshold = m.value("threshold", "");
    result.evidence.measurements.push_back(std::move(measurement));
  }
  for (const auto& s : evidence.value("series", json::array())) {
    Series series{s.at("name").get<std::string>(), s.value("x_unit", ""), s.value("y_unit", ""), {}};
    for (const auto& point : s.at("points")) series.points.emplace_back(point.at(0).get<double>(), point.at(1).get<double>());
    result.evidence.series.push_back(std::move(series));
  }
  if (value.contains("capability")) {
    const json& c = value["capability"];
    result.capability = CapabilityClaim{c.at("key").get<std::string>(), c.value("claimed", false),
                                        c.value("source", ""), c.value("note", "")};
  }
  if (value.contains("waiver")) {
    const json& w = value["waiver"];
    result.waiver = WaiverReference{w.value("pattern", ""), w.value("reason", ""), w.value("tracking", ""),
                                    w.value("expires", ""), w.value("expired", false)};
  }
  if (value.contains("original_outcome"))
    result.original_outcome = parse_outcome(value["original_outcome"].get<std::string>());
  if (value.contains("seed")) result.seed = value["seed"].get<std::uint64_t>();
  return result;
}

}  // namespace hal::conformance
