// Timing and judging shared by the measuring cases (cases/case_support.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../cases/case_support.hpp"

namespace hal::conformance::cases {

std::string with_precision(double value, int digits) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

void require_plausible_seconds(CaseContext& context, double seconds, std::string_view what) {
  if (std::isfinite(seconds) && seconds > 0) return;
  context.error(std::string(what) + ": the timer read " + std::to_string(seconds) +
                " s for work that took time; a zero, negative or non-finite reading cannot be judged "
                "(the backend's event timing is broken)");
}

SpanTimer::SpanTimer(CaseContext& context, Stream stream)
    : context_(context), stream_(std::move(stream)), events_(context.device().supports("events.timing")) {
  if (events_) {
    start_ = context.device().create_event();
    end_ = context.device().create_event();
  }
}

void SpanTimer::start() {
  wall_start_ = std::chrono::steady_clock::now();
  if (events_) stream_.record(start_);
}

double SpanTimer::stop(std::string_view what) {
  if (events_) stream_.record(end_);
  stream_.synchronize();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count();
  const double seconds = events_ ? Event::elapsed_milliseconds(start_, end_) / 1000.0 : wall;
  require_plausible_seconds(context_, seconds, what);
  // Events inside the span cannot see more time than the host clock around
  // it (1 ms of slack for clock granularity).
  if (seconds > wall + 1e-3)
    context_.error(std::string(what) + ": event timing says " + std::to_string(seconds * 1e3) +
                   " ms for work the host clock saw complete in " + std::to_string(wall * 1e3) + " ms");
  return seconds;
}

Spread spread_of(const std::vector<double>& samples) {
  Spread spread;
  spread.runs = samples.size();
  if (samples.empty()) return spread;
  spread.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  double squares = 0;
  for (const double sample : samples) squares += (sample - spread.mean) * (sample - spread.mean);
  spread.stddev = samples.size() > 1 ? std::sqrt(squares / static_cast<double>(samples.size() - 1)) : 0;
  const auto [low, high] = std::minmax_element(samples.begin(), samples.end());
  spread.min = *low;
  spread.max = *high;
  return spread;
}

void judge_minimum(CaseContext& context, const std::string& name, const Spread& runs, const std::string& unit,
                   const std::string& key, const std::string& what) {
  const auto minimum = context.threshold(key);
  context.measure({name, runs.mean, unit, minimum, {}, ">=", key});
  context.measure({name + "_stddev", runs.stddev, unit, {}, {}, "", ""});
  context.measure({name + "_min", runs.min, unit, {}, {}, "", ""});
  context.measure({name + "_max", runs.max, unit, {}, {}, "", ""});
  context.measure({name + "_runs", static_cast<double>(runs.runs), "", {}, {}, "", ""});
  const std::string measured = what + " " + with_precision(runs.mean, 3) + " " + unit + " (mean of " +
                               std::to_string(runs.runs) + " runs, stddev " + with_precision(runs.stddev, 3) +
                               ", range " + with_precision(runs.min, 3) + " to " + with_precision(runs.max, 3) + ")";
  if (runs.relative() > 0.25)
    context.warn(what + " scatters by " + with_precision(100 * runs.relative(), 0) +
                 "% of its mean between runs: the device or the machine is not in a steady state");
  if (!minimum) {
    context.not_judged(measured + "; measured, not judged: the profile sets no " + key + " for this device model");
    return;
  }
  if (runs.mean < *minimum)
    context.fail(measured + " is below the profile minimum " + with_precision(*minimum, 3) + " " + unit +
                 " for this device model");
  context.note(measured + " >= minimum " + with_precision(*minimum, 3) + " " + unit);
}

}  // namespace hal::conformance::cases
