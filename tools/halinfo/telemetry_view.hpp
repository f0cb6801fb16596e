// halinfo's telemetry: `health` (a table, what is wrong first), `watch` (one
// row per device per interval) and the `telemetry` object of --json.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hal/hal.hpp"

namespace halinfo {

enum class WatchFormat { table, csv, json_lines };

struct WatchOptions {
  std::chrono::milliseconds interval{1000};
  long count = 0;  // 0: until interrupted
  WatchFormat format = WatchFormat::table;
};

// Each field a value or {"reason", "detail"}; the health problems; or
// {"error"} when the backend offers no telemetry.
nlohmann::json telemetry_to_json(const hal::Device& device);
// "ok", the first problem, or why health is unknown.
std::string health_word(const hal::Device& device);
// Returns true when some device has a critical problem.
bool print_health(const std::vector<hal::Device>& devices, std::ostream& out);
void run_watch(const std::vector<hal::Device>& devices, const WatchOptions& options, std::ostream& out);

}  // namespace halinfo
