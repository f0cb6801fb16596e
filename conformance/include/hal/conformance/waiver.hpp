// Waivers: known failures accepted for a time, with a reason and a tracking link.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "hal/conformance/model.hpp"
#include "hal/device.hpp"

namespace hal::conformance {

struct Waiver {
  std::string cases;        // case id glob
  std::string device = "*"; // glob over the device id, name, vendor or backend
  std::string reason;
  std::string tracking;     // issue link
  std::string expires;      // "YYYY-MM-DD": applies through that day (UTC)
  std::string origin;       // "file:line" for messages

  bool expired(const std::string& today) const { return today > expires; }
  bool matches(const CaseResult& result, const DeviceInfo& device) const;
};

// Reads [[waiver]] entries; every field but device is required, and expires
// must be a TOML date or a "YYYY-MM-DD" string. Errors name file:line.
std::vector<Waiver> load_waivers(const std::filesystem::path& path);

// Today's date in UTC as "YYYY-MM-DD".
std::string utc_date_today();

// The first live waiver matching a result turns FAIL/CRASH/TIMEOUT into XFAIL
// and PASS/WARN into XPASS (so stale waivers are noticed). A matching expired
// waiver does not apply; it is cited on the result as expired. Returns the
// expired waivers (all of them, matched or not) for the report.
std::vector<Waiver> apply_waivers(std::vector<CaseResult>& results, const std::vector<Waiver>& waivers,
                                  const std::vector<DeviceInfo>& devices, const std::string& today);

}  // namespace hal::conformance
