// Waiver files and how waivers turn outcomes into XFAIL / XPASS.
#include "hal/conformance/waiver.hpp"

#include <cstdio>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

#include "hal/probe_cache.hpp"
#include "toml_file.hpp"

namespace hal::conformance {
namespace {

using detail::origin_of;

std::string date_text(const toml::date& date) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04d-%02u-%02u", static_cast<int>(date.year), static_cast<unsigned>(date.month),
                static_cast<unsigned>(date.day));
  return text;
}

const DeviceInfo* device_of(const std::vector<DeviceInfo>& devices, const std::string& id) {
  for (const auto& device : devices)
    if (device.backend + ":" + std::to_string(device.index) == id) return &device;
  return nullptr;
}

}  // namespace

// The date part of "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_date_today() { return utc_timestamp_now().substr(0, 10); }

bool Waiver::matches(const CaseResult& result, const DeviceInfo& info) const {
  if (!glob_match(cases, result.case_id)) return false;
  return glob_match(device, result.device_id) || glob_match(device, info.name) || glob_match(device, info.vendor) ||
         glob_match(device, info.backend);
}

std::vector<Waiver> load_waivers(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw std::invalid_argument("waiver file " + path.string() + " does not exist");
  const toml::table document = detail::parse_toml_file(path);
  for (const auto& [key, node] : document)
    if (key.str() != "waiver")
      throw std::invalid_argument(origin_of(path, node) + ": unknown key '" + std::string(key.str()) +
                                  "'; a waiver file holds only [[waiver]] tables");
  std::vector<Waiver> waivers;
  const toml::array* entries = document["waiver"].as_array();
  if (entries == nullptr) return waivers;
  static const std::regex date_pattern(R"(\d{4}-\d{2}-\d{2})");
  for (const auto& entry : *entries) {
    const toml::table* table = entry.as_table();
    if (table == nullptr) throw std::invalid_argument(origin_of(path, entry) + ": each waiver must be a [[waiver]] table");
    Waiver waiver;
    waiver.origin = origin_of(path, entry);
    for (const auto& [key, node] : *table) {
      const std::string name(key.str());
      std::string* field = name == "cases"      ? &waiver.cases
                           : name == "device"   ? &waiver.device
                           : name == "reason"   ? &waiver.reason
                           : name == "tracking" ? &waiver.tracking
                           : name == "expires"  ? &waiver.expires
                                                : nullptr;
      if (field == nullptr)
        throw std::invalid_argument(origin_of(path, node) + ": unknown waiver key '" + name +
                                    "'; allowed: cases, device, reason, tracking, expires");
      if (name == "expires" && node.is_date()) {
        *field = date_text(*node.value<toml::date>());
      } else if (const auto text = node.value<std::string>()) {
        *field = *text;
      } else {
        throw std::invalid_argument(origin_of(path, node) + ": waiver key '" + name + "' must be a string" +
                                    (name == "expires" ? " or a date (2025-12-31)" : ""));
      }
    }
    for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"cases", &waiver.cases},
                                      {"reason", &waiver.reason},
                                      {"tracking", &waiver.tracking},
                                      {"expires", &waiver.expires}})
      if (value->empty())
        throw std::invalid_argument(waiver.origin + ": the waiver lacks '" + name +
                                    "'; every waiver needs cases, reason, tracking and expires");
    if (!std::regex_match(waiver.expires, date_pattern))
      throw std::invalid_argument(waiver.origin + ": expires '" + waiver.expires + "' is not a date like 2025-12-31");
    waivers.push_back(std::move(waiver));
  }
  return waivers;
}

std::vector<Waiver> apply_waivers(std::vector<CaseResult>& results, const std::vector<Waiver>& waivers,
                                  const std::vector<DeviceInfo>& devices, const std::string& today) {
  std::vector<Waiver> expired;
  for (const auto& waiver : waivers)
    if (waiver.expired(today)) expired.push_back(waiver);
  for (auto& result : results) {
    const DeviceInfo* device = device_of(devices, result.device_id);
    if (device == nullptr) continue;
    const Waiver* live = nullptr;
    const Waiver* stale = nullptr;
    for (const auto& waiver : waivers) {
      if (!waiver.matches(result, *device)) continue;
      if (!waiver.expired(today)) {
        live = &waiver;
        break;
      }
      if (stale == nullptr) stale = &waiver;
    }
    const Waiver* cited = live != nullptr ? live : stale;
    if (cited == nullptr) continue;
    result.waiver = WaiverReference{cited->cases, cited->reason, cited->tracking, cited->expires, live == nullptr};
    if (live == nullptr) {
      result.evidence.message += (result.evidence.message.empty() ? "" : "\n") + std::string("waiver ") +
                                 cited->origin + " expired on " + cited->expires + " and no longer applies";
      continue;
    }
    if (is_failure(result.outcome)) {
      result.original_outcome = result.outcome;
      result.outcome = Outcome::xfail;
    } else if (result.outcome == Outcome::pass || result.outcome == Outcome::warn) {
      result.original_outcome = result.outcome;
      result.outcome = Outcome::xpass;
      result.evidence.message += (result.evidence.message.empty() ? "" : "\n") + std::string("passed despite waiver ") +
                                 live->origin + "; remove the waiver";
    }
  }
  return expired;
}

}  // namespace hal::conformance
