// halconform diff and calibrate on hal.conformance/1 reports.
#include "hal/conformance/fleet.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "hal/conformance/model.hpp"
#include "hal/conformance/report.hpp"

namespace hal::conformance {
namespace {

using nlohmann::json;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

std::string key_of(const json& result) {
  return result["case"].get<std::string>() + " on " + result["device"].get<std::string>();
}

bool clean(Outcome outcome) {
  return outcome == Outcome::pass || outcome == Outcome::warn || outcome == Outcome::xpass ||
         outcome == Outcome::measured;
}

// A TOML basic string.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

json load_report(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) throw std::invalid_argument("cannot read report " + path.string());
  json report;
  try {
    report = json::parse(file);
  } catch (const json::exception& error) {
    throw std::invalid_argument(path.string() + " is not JSON: " + error.what());
  }
  const std::string schema = report.is_object() && report.contains("schema") && report["schema"].is_string()
                                 ? report["schema"].get<std::string>()
                                 : "(none)";
  if (schema != report_schema)
    throw std::invalid_argument(path.string() + " has schema '" + schema + "'; halconform reads " + report_schema);
  if (!report.contains("results") || !report["results"].is_array())
    throw std::invalid_argument(path.string() + " has no results array");
  for (const auto& result : report["results"]) {
    for (const char* field : {"case", "device", "outcome"})
      if (!result.is_object() || !result.contains(field) || !result[field].is_string())
        throw std::invalid_argument(path.string() + ": a result has no string '" + field + "'");
    try {
      parse_outcome(result["outcome"].get<std::string>());
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(path.string() + ": " + key_of(result) + ": " + error.what());
    }
  }
  return report;
}

std::vector<DiffLine> diff_reports(const json& before, const json& after, double tolerance) {
  std::map<std::string, const json*> old_results, new_results;
  for (const auto& result : before["results"]) old_results[key_of(result)] = &result;
  for (const auto& result : after["results"]) new_results[key_of(result)] = &result;
  std::vector<DiffLine> lines;
  for (const auto& [key, old_result] : old_results) {
    const Outcome was = parse_outcome((*old_result)["outcome"].get<std::string>());
    const auto found = new_results.find(key);
    if (found == new_results.end()) {
      lines.push_back({key, std::string(to_string(was)) + " -> missing", clean(was)});
      continue;
    }
    const json& new_result = *found->second;
    const Outcome now = parse_outcome(new_result["outcome"].get<std::string>());
    if (now != was) {
      const bool lost = clean(was) && (now == Outcome::unsupported || now == Outcome::skipped);
      const bool worse = (is_failure(now) && !is_failure(was)) || (now == Outcome::error && was != Outcome::error);
      lines.push_back({key, std::string(to_string(was)) + " -> " + std::string(to_string(now)), lost || worse});
    }
    const auto measurements = [](const json& result) {
      std::map<std::string, const json*> by_name;
      if (result.contains("evidence") && result["evidence"].contains("measurements"))
        for (const auto& m : result["evidence"]["measurements"]) by_name[m.value("name", "")] = &m;
      return by_name;
    };
    const auto new_measurements = measurements(new_result);
    for (const auto& [name, old_m] : measurements(*old_result)) {
      const std::string comparison = old_m->value("comparison", "");
      const auto other = new_measurements.find(name);
      if ((comparison != ">=" && comparison != "<=") || other == new_measurements.end()) continue;
      const double a = old_m->value("value", 0.0), b = other->second->value("value", 0.0);
      const double moved = a != 0 ? (b - a) / std::fabs(a) : (b != 0 ? INFINITY : 0);
      if (std::fabs(moved) <= tolerance) continue;
      const bool worse = comparison == ">=" ? b < a : b > a;
      const std::string unit = old_m->value("unit", "");
      lines.push_back({key + ": " + name,
                       number(a) + " -> " + number(b) + (unit.empty() ? "" : " " + unit) + " (" +
                           (std::isfinite(moved) ? (moved > 0 ? "+" : "") + number(100 * moved) + "%" : "new non-zero") +
                           ")",
                       worse});
    }
  }
  for (const auto& [key, new_result] : new_results)
    if (old_results.count(key) == 0)
      lines.push_back({key, "new -> " + (*new_result)["outcome"].get<std::string>(),
                       is_failure(parse_outcome((*new_result)["outcome"].get<std::string>()))});
  return lines;
}

std::string calibrated_thresholds(const json& report, double fraction) {
  if (!(fraction > 0 && fraction <= 1))
    throw std::invalid_argument("the calibration fraction " + number(fraction) + " is not in (0, 1]");
  // Device model: vendor, name, backend, driver; per model the weakest value of each floor.
  using Model = std::tuple<std::string, std::string, std::string, std::string>;
  std::map<std::string, Model> model_of;
  for (const auto& device : report.value("devices", json::array())) {
    const json axes = device.value("version_axes", json::object());
    model_of[device.value("id", "")] = {device.value("vendor", ""), device.value("name", ""),
                                         device.value("backend", ""), axes.value("driver", "*")};
  }
  std::map<Model, std::map<std::string, double>> floors;
  std::map<Model, std::set<std::string>> devices;
  for (const auto& result : report["results"]) {
    const auto model = model_of.find(result["device"].get<std::string>());
    if (model == model_of.end() || !clean(parse_outcome(result["outcome"].get<std::string>()))) continue;
    for (const auto& m : result["evidence"].value("measurements", json::array())) {
      const std::string key = m.value("threshold", "");
      if (key.empty()) continue;
      auto& floor = floors[model->second];
      const double value = m.value("value", 0.0);
      floor[key] = floor.count(key) != 0 ? std::min(floor[key], value) : value;
      devices[model->second].insert(result["device"].get<std::string>());
    }
  }
  if (floors.empty())
    throw std::invalid_argument("the run measured nothing a profile floor judges (no performance case ran clean)");
  std::ostringstream toml;
  toml << "# Floors at " << number(100 * fraction) << "% of what " << report["manifest"]["host"].value("hostname", "?")
       << " measured (" << report.value("finished_at", "") << ", seed " << report.value("seed", 1) << ").\n"
       << "# Generated by halconform calibrate; add it to a profile to judge machines like it.\n";
  for (const auto& [model, values] : floors) {
    const auto& [vendor, name, backend, driver] = model;
    std::string measured_on;
    for (const auto& id : devices[model]) measured_on += (measured_on.empty() ? "" : ", ") + id;
    toml << "\n# measured on " << measured_on << "\n[[thresholds]]\nvendor = " << quoted(vendor)
         << "\nname = " << quoted(name) << "\nbackend = " << quoted(backend) << "\ndriver = " << quoted(driver)
         << "\n[thresholds.values]\n";
    for (const auto& [key, value] : values) toml << quoted(key) << " = " << number(value * fraction) << "\n";
  }
  return toml.str();
}

}  // namespace hal::conformance
