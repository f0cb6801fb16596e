// Helpers shared by the built-in cases: reference data and sizes.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "hal/conformance/case.hpp"
#include "hal/hal.hpp"

namespace hal::conformance::cases {

// Deterministic bytes, so a failure reproduces with the same data.
// splitmix64, eight bytes per step: fast enough for hundreds of MiB.
inline std::vector<std::uint8_t> reference_bytes(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (std::size_t i = 0; i < size; i += 8) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (std::size_t k = 0; k < 8 && i + k < size; ++k) bytes[i + k] = static_cast<std::uint8_t>(z >> (8 * k));
  }
  return bytes;
}

// The host reference of Buffer::fill: the pattern's low pattern_size bytes repeated.
inline std::vector<std::uint8_t> reference_fill(std::size_t size, std::uint32_t pattern, std::uint32_t pattern_size) {
  std::vector<std::uint8_t> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(pattern >> (8 * (i % pattern_size)));
  return bytes;
}

inline std::string byte_count(std::uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string with_precision(double value, int digits);

// Times work enqueued on a stream between start() and stop(): by events when
// the device claims event timing, else by the host clock. A reading that
// cannot be true ends the case as ERROR naming it: zero or negative, not
// finite, or an event span longer than the wall-clock span around it.
class SpanTimer {
 public:
  SpanTimer(CaseContext& context, Stream stream);
  void start();
  // Synchronizes the stream; returns the seconds the work took.
  double stop(std::string_view what);

 private:
  CaseContext& context_;
  Stream stream_;
  bool events_;
  Event start_, end_;
  std::chrono::steady_clock::time_point wall_start_;
};

// Ends the case as ERROR unless `seconds` is a positive, finite time.
void require_plausible_seconds(CaseContext& context, double seconds, std::string_view what);

// Mean and spread of repeated runs of one measurement.
struct Spread {
  double mean = 0, stddev = 0, min = 0, max = 0;
  std::size_t runs = 0;
  double relative() const { return mean > 0 ? stddev / mean : 0; }
};
Spread spread_of(const std::vector<double>& samples);

// Records a higher-is-better measurement (the mean of `runs`, with its
// spread) and judges it by the profile's floor `key`: FAIL below it, MEASURED
// (not judged) when the profile sets no floor for this device model, WARN
// when the runs scatter by more than a quarter of the mean.
void judge_minimum(CaseContext& context, const std::string& name, const Spread& runs, const std::string& unit,
                   const std::string& key, const std::string& what);

}  // namespace hal::conformance::cases
